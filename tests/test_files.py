
import os
import stat
import threading
from pathlib import Path

import pytest

from grammar_induce.errors import InputError
from grammar_induce.files import atomic_write, check_output, read_lines, write_lines, write_text
from grammar_induce.text import corpus

from .conftest import (
    LABELLED_GOLD,
    SYNTHETIC_GOLD,
    assert_one_line_error,
    invoke,
    no_temporary_files,
    one_line_error,
    run_limited,
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


@pytest.mark.parametrize("when", ["inside mkstemp", "after _staged"])
def test_a_signal_before_the_temporary_is_named_leaves_none(tmp_path, monkeypatch, when):
    """A SIGTERM (a SystemExit under the command line) may come after the temporary file exists but before the code
    holds its name: inside mkstemp, or between `_staged` returning and the name being kept. It is removed all the same
    (its name is this process's), and another live process's is left alone (test_parsing's SIGTERM test met the first)."""
    import tempfile

    from grammar_induce import files

    path = tmp_path / "out.txt"
    path.write_text("old")
    other = tmp_path / f".out.txt.{os.getppid()}.abc.tmp"  # a live process's, not this one's
    other.write_text("x")
    if when == "inside mkstemp":
        made = tempfile.mkstemp

        def interrupted(*args, **kwargs):
            os.close(made(*args, **kwargs)[0])
            raise SystemExit(143)

        monkeypatch.setattr(tempfile, "mkstemp", interrupted)
    else:
        staged = files._staged

        def interrupted(*args, **kwargs):
            staged(*args, **kwargs)
            raise SystemExit(143)

        monkeypatch.setattr(files, "_staged", interrupted)
    with pytest.raises(SystemExit):
        atomic_write(path, lambda f: f.write(b"new"))
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == [other.name, "out.txt"]


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


def test_an_output_that_is_one_of_the_inputs_is_refused_before_any_work(run_copy, tmp_path):
    best, metrics = (run_copy / "best.pt").read_bytes(), (run_copy / "metrics.jsonl").read_bytes()
    one_line_error(invoke("parse", "--model", run_copy / "best.pt", "--output", run_copy / "best.pt", "--force", "a b"),
                   "--output is also an input")
    (tmp_path / "link.pt").symlink_to(run_copy / "best.pt")  # the same file through a link
    one_line_error(invoke("parse", "--model", run_copy / "best.pt", "--output", tmp_path / "link.pt", "--force", "a b"),
                   "is also an input")
    one_line_error(invoke("plot", run_copy, "--output", run_copy / "metrics.jsonl", "--force"), "is also an input")
    one_line_error(invoke("plot", run_copy, "--output", run_copy / "curves.svg", "--force"), "is also an input")
    assert (run_copy / "best.pt").read_bytes() == best and (run_copy / "metrics.jsonl").read_bytes() == metrics
    sentences = tmp_path / "s.txt"
    sentences.write_text("a b c\n")
    one_line_error(invoke("parse", "--model", run_copy / "best.pt", "--input", sentences, "--output", sentences), "is also an input")
    assert sentences.read_text() == "a b c\n"
    pred = tmp_path / "pred.txt"
    assert invoke("evaluate", "--model", run_copy / "best.pt", "--save-trees", pred, "--quiet").exit_code == 0
    saved = pred.read_text()
    one_line_error(invoke("evaluate", "--pred", pred, "--save-trees", pred), "--save-trees is also an input")
    assert pred.read_text() == saved


def test_no_output_replaces_a_checkpoint_or_a_run_folders_file_without_force(run_copy, tmp_path):
    """`parse --output RUN/best.pt` turned a checkpoint into a tree (exit 0), and evaluate's outputs replaced a run's
    last.pt, metrics.jsonl and config.toml; each is refused now, naming what the file is, and --force writes."""
    kept = {name: (run_copy / name).read_bytes() for name in ("best.pt", "last.pt", "metrics.jsonl", "config.toml")}
    elsewhere = tmp_path / "model.pt"
    elsewhere.write_bytes(kept["best.pt"])
    sentences = tmp_path / "s.txt"
    sentences.write_text("the dog barked\n")
    one_line_error(invoke("parse", "--input", sentences, "--output", elsewhere),
                   f"{elsewhere}: is a checkpoint (a zip archive, as torch saves one): not written over (write "
                   "elsewhere, or add --force)")
    for flag, name in (("--json", "last.pt"), ("--save-trees", "metrics.jsonl"), ("--report", "config.toml")):
        one_line_error(invoke("evaluate", "--model", elsewhere, "--gold", SYNTHETIC_GOLD, flag, run_copy / name),
                       "not written over")
    one_line_error(invoke("evaluate", "--model", elsewhere, "--gold", SYNTHETIC_GOLD, "--json", run_copy / "config.toml"),
                   f"is a file of the training run in {run_copy.resolve()}")
    assert {name: (run_copy / name).read_bytes() for name in kept} == kept
    assert invoke("parse", "--input", sentences, "--output", tmp_path / "trees.txt").exit_code == 0
    assert invoke("parse", "--input", sentences, "--output", tmp_path / "trees.txt").exit_code == 0  # its own output
    forced = invoke("parse", "--model", elsewhere, "--input", sentences, "--output", run_copy / "config.toml", "--force")
    assert forced.exit_code == 0 and (run_copy / "config.toml").read_text().startswith("("), forced.output


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_leaves_old_files_and_no_temporary_ones(run_copy, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    old = out / "trees.txt"
    old.write_text("old\n")
    sentences = tmp_path / "s.txt"
    sentences.write_text("a b c d e f g h\n" * 400)
    model = run_copy / "best.pt"
    done = run_limited(["parse", "--model", model, "--input", sentences, "--output", old], 4096, tmp_path)
    assert_one_line_error(done, f"{old}: cannot write")
    assert old.read_text() == "old\n"
    done = run_limited(["parse", "--model", model, "--input", sentences, "--format", "svg", "--output", out / "svgs"],
                       4096, tmp_path)
    assert_one_line_error(done, "cannot write")
    assert not (out / "svgs").exists()
    done = run_limited(["evaluate", "--model", model, "--quiet", "--report", out / "r.html"], 4096, tmp_path)
    assert_one_line_error(done, "r.html: cannot write")
    assert "sent F1" not in done.stdout and not (out / "r.html").exists()
    no_temporary_files(out)
    last = (run_copy / "last.pt").read_bytes()
    limit = (run_copy / "last.pt").stat().st_size // 2
    done = run_limited(["train", "--out", run_copy, "--resume", "--epochs", "3", "--quiet"], limit, tmp_path)
    assert_one_line_error(done, "cannot write")
    assert (run_copy / "last.pt").read_bytes() == last
    no_temporary_files(run_copy)
    cache = tmp_path / "cache"
    done = run_limited(["prepare", sentences], 1000, tmp_path, {corpus.CACHE_ENV: str(cache)})
    assert_one_line_error(done, "cannot write the corpus cache")
    assert not list(cache.glob(".build-*"))


def test_what_killed_processes_left_is_removed_by_the_next_run(run_copy, tmp_path):
    dead = 2**22 + 12345  # above the default pid_max: no process has it
    stale_output = tmp_path / f".o.txt.{dead}.abcd.tmp"
    stale_output.write_text("partial")
    assert invoke("parse", "--model", run_copy / "best.pt", "--output", tmp_path / "o.txt", "a b").exit_code == 0
    assert not stale_output.exists()
    root = Path(os.environ[corpus.CACHE_ENV])
    stale_build = root / f".build-{dead}-xyz"
    stale_build.mkdir(parents=True)
    (stale_build / "provisional.bin").write_bytes(b"\0" * 100)
    text = tmp_path / "new.txt"
    text.write_text("a fresh text nobody prepared\n")
    assert invoke("prepare", text).exit_code == 0
    assert not stale_build.exists()


def test_counts_are_plural_only_when_they_are_many(tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text(LABELLED_GOLD)
    result = invoke("evaluate", "--pred", gold, "--gold", gold)
    assert "(1 sentence, 0 skipped)" in result.stdout
    one_line_error(invoke("evaluate", "--pred", gold, "--gold", SYNTHETIC_GOLD), "1 predicted tree for ")
