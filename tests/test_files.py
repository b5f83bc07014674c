import os
import stat
import threading
from pathlib import Path

import pytest

from grammar_induce.files import (
    InputError,
    Messages,
    atomic_write,
    check_output,
    progress_bar,
    read_lines,
    write_lines,
    write_text,
)


def test_a_byte_order_mark_at_the_start_of_any_line_is_dropped(tmp_path):
    path = tmp_path / "bom.txt"  # files joined together keep each one's mark at its first line
    path.write_bytes("\ufeffit rains\n\ufeffnot here\nin \ufeff the middle\n".encode())
    assert list(read_lines(path)) == [(1, "it rains"), (2, "not here"), (3, "in \ufeff the middle")]


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x1b", "\x7f"])
def test_control_characters_are_an_error_naming_the_line(tmp_path, char):
    path = tmp_path / "ctrl.txt"
    path.write_bytes(f"fine\nthe{char}dog\n".encode())
    with pytest.raises(InputError, match=rf"ctrl.txt:2: control character U\+{ord(char):04X} at column 4"):
        list(read_lines(path))


def test_tabs_and_carriage_returns_are_text(tmp_path):
    path = tmp_path / "ws.txt"
    path.write_bytes(b"a\tb\r\nc\n")
    assert list(read_lines(path)) == [(1, "a\tb"), (2, "c")]


def test_rewriting_a_file_keeps_its_permission_bits(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    write_text(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_symbolic_link_is_written_through_to_its_target(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_a_fifo_is_written_to_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    check_output(fifo)
    write_text(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert received == ["through the pipe\n"] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_outputs_that_cannot_be_written_are_refused_before_the_work(tmp_path):
    with pytest.raises(InputError, match="is a folder, not a file"):
        check_output(tmp_path)
    with pytest.raises(InputError, match="the folder .*missing does not exist"):
        check_output(tmp_path / "missing" / "out.txt")
    with pytest.raises(InputError, match="/proc/out.txt: cannot write in /proc"):
        check_output(Path("/proc/out.txt"))  # a pseudo filesystem


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")

    def fail(f):
        f.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, fail)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_lines_are_written_whole_or_not_at_all(tmp_path):
    def lines():
        yield "first"
        raise KeyboardInterrupt  # Ctrl-C in the middle of a parse

    path = tmp_path / "trees.txt"
    with pytest.raises(KeyboardInterrupt):
        write_lines(lines(), path)
    assert not path.exists() and not list(tmp_path.iterdir())
    write_lines(iter(["a", "b"]), path)
    assert path.read_text() == "a\nb\n"


def test_no_progress_bar_when_stderr_is_not_a_terminal():
    assert progress_bar(10).disable  # pytest captures stderr


def test_messages_keep_the_notes_and_pass_each_on_as_it_comes():
    said, told, counted = [], [], []
    messages = Messages(say=said.append, tell=told.append, progress=counted.append)
    messages.say("epoch 1: valid ppl 120.00")
    messages.note("--workers 4 capped at 1")
    messages.advance(3)
    messages.advance(2)
    assert said == ["epoch 1: valid ppl 120.00"] and told == messages.notes == ["--workers 4 capped at 1"]
    assert counted == [3, 2]
    quiet = Messages()  # the default: nothing said or shown, the notes kept for the caller
    quiet.say("epoch 1")
    quiet.advance(5)
    quiet.note("kept")
    assert quiet.notes == ["kept"]
