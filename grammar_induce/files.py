"""User-facing file handling, without torch: reading text, writing outputs.

Every reader reports a user's mistake as an `InputError` naming the file and line; every
output is written whole or not at all.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import InputError

# C0 controls other than tab, newline, vertical tab, form feed and carriage return, and DEL: not text
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


def read_lines(source: str | Path | BinaryIO) -> Iterator[tuple[int, str]]:
    """Yield (line number, text) of a UTF-8 file (or binary stream, e.g. stdin) as it is read, without
    a byte-order mark at a line's start (a file's, or one of several files joined); undecodable bytes and control characters (NUL ...) are errors naming the line."""
    if not isinstance(source, (str, Path)):
        yield from _decoded_lines(source, Path("<stdin>"))
        return
    try:
        f = open(source, "rb")  # noqa: SIM115 - closed below, after the last line
    except OSError as e:
        raise InputError(f"{source}: cannot read ({e.strerror or e})") from None
    with f:
        yield from _decoded_lines(f, Path(source))


def _decoded_lines(f: BinaryIO, path: Path) -> Iterator[tuple[int, str]]:
    lineno = 0
    while True:
        try:
            line = f.readline()
        except OSError as e:
            raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
        if not line:
            return
        lineno += 1
        try:
            text = line.removesuffix(b"\n").decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as e:
            raise InputError(f"{path}:{lineno}: not UTF-8 text (byte {e.start + 1} of the line)") from None
        text = text.removeprefix("\ufeff")  # a file's byte-order mark (or one of files joined together)
        check_text(text, f"{path}:{lineno}")
        yield lineno, text


def check_text(text: str, where: str) -> None:
    """Refuse what is not text, the same for a file's line and a command-line argument: a control
    character (NUL ...), or bytes that were not UTF-8 (an argument's undecodable bytes arrive as
    lone surrogates)."""
    if control := _CONTROL.search(text):
        raise InputError(f"{where}: control character U+{ord(control.group()):04X} at column "
                         f"{control.start() + 1} (not text)")
    if surrogate := _SURROGATE.search(text):
        raise InputError(f"{where}: not UTF-8 text (column {surrogate.start() + 1})")


_SURROGATE = re.compile("[\ud800-\udfff]")


def refuse_overwriting(outputs: dict[str, Path | None], inputs: Iterable[str | Path]) -> None:
    """Refuse, before any work, an output that is one of the inputs (the same file, following links)
    or another output of the same command. `outputs`: option name -> path (None: not given)."""
    given = {name: Path(path) for name, path in outputs.items() if path is not None and not _is_special(path)}
    inputs = [Path(p) for p in inputs if Path(p).exists()]
    seen: dict[Path, str] = {}
    for name, path in given.items():
        for source in inputs:
            if _same_file(path, source):
                raise InputError(f"{path}: {name} is also an input ({source}); write the output elsewhere")
        target = _target(path).resolve()
        if target in seen:
            raise InputError(f"{path}: given to both {seen[target]} and {name}; give each its own file")
        seen[target] = name


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # `a` does not exist yet: it is the same file only by name
        return _target(a).resolve() == b.resolve()


def files_under(folder: Path) -> list[Path]:
    """Every file in a folder and its subfolders (the inputs a run or gold folder stands for)."""
    return [p for p in Path(folder).rglob("*") if p.is_file()] if Path(folder).is_dir() else []


def check_output(path: Path | None, force: bool = False) -> None:
    """Refuse before the work, not after it, an output that could not be written, and one that would replace what
    is not an output of this kind (a checkpoint, a training run's files) unless `force`."""
    if path is None or _is_special(path):
        return  # a device or a FIFO is written through
    path = _target(Path(path))
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not a file")
    if not force and (what := _kept_file(path)):
        raise InputError(f"{path}: is {what}: not written over (write elsewhere, or add --force)")
    if not path.parent.is_dir():
        raise InputError(f"{path}: the folder {path.parent} does not exist")
    try:  # the one sure test that a file can be made there (read-only and pseudo filesystems)
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise InputError(f"{path}: cannot write in {path.parent} ({e.strerror})") from None


# what marks a folder as a training run's (runtime/rundir.py writes them): its files are the run's
RUN_MARKS = (".lock", "config.toml", "metrics.jsonl", "last.pt")


def is_zip(path: str | Path) -> bool:
    """Whether the file is a zip archive, as torch.save writes a checkpoint (OSError where it cannot be read)."""
    with open(path, "rb") as f:
        return f.read(4) == b"PK\x03\x04"


def _kept_file(path: Path) -> str:
    """What an existing file is, where an output must not replace it: a checkpoint (a zip, as torch saves one), or a
    file of a training run's folder; "" for any other."""
    if not path.is_file():
        return ""
    try:
        if is_zip(path):
            return "a checkpoint (a zip archive, as torch saves one)"
    except OSError:
        return ""
    if sum((path.parent / mark).exists() for mark in RUN_MARKS) >= 2:
        return f"a file of the training run in {path.parent.resolve()}"
    return ""


_STANDARD = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_DESCRIPTOR = re.compile(r"/(?:dev|proc/self)/fd/(\d+)")


def stream_of(path: Path | str) -> int | None:
    """The open file descriptor a path names (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N), or None. Such a
    path is this process's stream, written into where it stands: opened anew it would start a file that the shell
    redirected the stream to (`>> log`) from its beginning, and a temporary renamed onto it would replace it."""
    text = os.path.abspath(path)
    return _STANDARD.get(text, int(match.group(1)) if (match := _DESCRIPTOR.fullmatch(text)) else None)


def _is_special(path: Path) -> bool:
    """Whether `path` (after links) is something other than a regular file or folder: /dev/null,
    /dev/stdout, a FIFO."""
    if stream_of(path) is not None:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _target(path: Path) -> Path:
    """Where writing `path` really goes: a symbolic link's target (the link stays)."""
    return path.resolve() if path.is_symlink() else path


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write an output whole or not at all: call write(file_object) on a temporary file beside it,
    then rename that into place, keeping an existing file's permission bits. A symbolic link's
    target is replaced (the link stays); a device or FIFO (/dev/null, /dev/stdout) is written through."""
    write_all([(path, write)])


def write_all(outputs: list[tuple[Path, Callable[[BinaryIO], object]]]) -> None:
    """Several outputs all whole or none of them: each written to a temporary file beside it, devices
    and FIFOs written through, and only then every temporary renamed into place."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, write in sorted(outputs, key=lambda item: _is_special(item[0])):  # files first, devices last
            if _is_special(path):
                _write_through(path, write)
            else:
                staged.append(_staged(Path(path), write))
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:  # every temporary of this process's by its name: the staged ones, and one made but not
        for path, _ in outputs:  # yet kept when a signal came between the two
            if not _is_special(path):
                _remove_own_temporaries(_target(Path(path)))
        raise


def _write_through(path: Path, write: Callable[[BinaryIO], object]) -> None:
    try:
        if (descriptor := stream_of(path)) is not None:  # the stream itself, after what was printed to it
            sys.stdout.flush()
            sys.stderr.flush()
            with os.fdopen(os.dup(descriptor), "wb") as f:
                write(f)
            return
        with open(path, "wb") as f:
            write(f)
    except OSError as e:
        raise InputError(f"{path}: cannot write ({e.strerror or e})") from None


def _staged(path: Path, write: Callable[[BinaryIO], object]) -> tuple[str, Path]:
    """The output written to a temporary file beside it: (temporary, where it goes)."""
    path = _target(path)
    if not path.parent.is_dir():
        raise InputError(f"{path}: the folder {path.parent} does not exist")
    remove_stale(path.parent, f".{path.name}.", TEMPORARY + r"\.tmp")
    try:
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
        except OSError as e:
            raise InputError(f"{path}: cannot write in {path.parent} ({e.strerror})") from None
        os.chmod(tmp, _mode_for(path))
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if path.is_dir():
            raise IsADirectoryError
    except BaseException as e:
        _remove_own_temporaries(path)  # by name: a signal may come before mkstemp has returned its name
        if isinstance(e, IsADirectoryError):
            raise InputError(f"{path}: is a folder, not a file") from None
        if isinstance(e, OSError):  # a full disk, a quota, a file-size limit: the old file is intact
            raise InputError(f"{path}: cannot write ({e.strerror or e}); the file is unchanged") from None
        raise
    return tmp, path


def _remove_own_temporaries(path: Path) -> None:
    """Remove this process's temporary files for `path` (`.NAME.PID.random.tmp`, as `_staged` makes them)."""
    own = f".{path.name}.{os.getpid()}"
    for tmp in glob.glob(os.path.join(glob.escape(str(path.parent)), glob.escape(own) + ".*.tmp")):
        if re.fullmatch(re.escape(own) + TEMPORARY + r"\.tmp", os.path.basename(tmp)):
            Path(tmp).unlink(missing_ok=True)


def remove_stale(folder: Path, prefix: str, tail: str) -> None:
    """Remove what a killed process left in `folder`: the files and folders named prefix, a PID, then
    what the regular expression `tail` matches, whose process is gone (on this machine). Only names of
    exactly that shape: another output's temporaries (`.a.5.PID...` beside `.a.PID...`) are not ours."""
    shape = re.compile(re.escape(prefix) + r"(\d+)" + tail)
    for leftover in glob.glob(os.path.join(glob.escape(str(folder)), glob.escape(prefix) + "*")):
        match = shape.fullmatch(os.path.basename(leftover))
        if match and not _alive(int(match.group(1))):
            if os.path.isdir(leftover):
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                Path(leftover).unlink(missing_ok=True)


TEMPORARY = r"\.[A-Za-z0-9_]+"  # the random part mkstemp and mkdtemp add


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def check_folder_output(path: Path, ours: re.Pattern) -> None:
    """Refuse before the work a folder output that could not be written, or that holds files other
    than the ones this output writes (named like `ours`): replacing it would lose them."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{path}: is a file; this output is a folder of files")
    if not path.parent.is_dir():
        raise InputError(f"{path}: the folder {path.parent} does not exist")
    if path.is_dir():
        others = sorted(p.name for p in path.iterdir() if not ours.fullmatch(p.name))
        if others:
            raise InputError(f"{path}: holds files this output did not write ({', '.join(others[:3])}"
                             f"{' ...' if len(others) > 3 else ''}); give a new or empty folder")
    check_output(path.parent / ".probe")


def replace_folder(path: Path, fill: Callable[[Path], object]) -> None:
    """Write a folder of files whole or not at all: fill(temporary folder) beside it, then put that in
    place of `path` (an earlier folder's files go, none is left stale)."""
    path = Path(path)
    remove_stale(path.parent, f".{path.name}.", rf"(?:{TEMPORARY}\.new|\.old)")
    try:
        work = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".new"))
        os.chmod(work, 0o777 & ~_umask())
    except OSError as e:
        raise InputError(f"{path}: cannot write in {path.parent} ({e.strerror})") from None
    try:
        fill(work)
        if path.exists():
            old = path.parent / f".{path.name}.{os.getpid()}.old"
            os.replace(path, old)
            os.replace(work, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(work, path)
    except BaseException as e:
        shutil.rmtree(work, ignore_errors=True)
        if isinstance(e, OSError):
            raise InputError(f"{path}: cannot write ({e.strerror or e}); the folder is unchanged") from None
        raise


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _mode_for(path: Path) -> int:
    """An existing file's permission bits, else those a plain open would give (mkstemp makes 0600)."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~_umask()


def write_lines(lines: Iterable[str], path: Path) -> None:
    """Write lines as they come, atomically: an interrupted run leaves no partial file."""
    def write(f: BinaryIO) -> None:
        f.writelines(line.encode("utf-8") + b"\n" for line in lines)

    atomic_write(path, write)


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
