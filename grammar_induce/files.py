"""User-facing file handling, without torch: the one-line user error, reading text, writing outputs.

Every reader reports a user's mistake as an `InputError` naming the file and line; every
output is written whole or not at all.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

# C0 controls other than tab, newline, vertical tab, form feed and carriage return, and DEL: not text
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


class UserError(Exception):
    """A mistake or a stop the user can act on; the CLI prints it as one line, never as a traceback."""


class InputError(UserError):
    """A problem with a user's file or argument."""


def read_lines(source: str | Path | BinaryIO) -> Iterator[tuple[int, str]]:
    """Yield (line number, text) of a UTF-8 file (or binary stream, e.g. stdin) as it is read, without
    a leading byte-order mark; undecodable bytes and control characters (NUL ...) are errors naming the line."""
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
        if lineno == 1:
            text = text.removeprefix("\ufeff")
        if control := _CONTROL.search(text):
            raise InputError(f"{path}:{lineno}: control character U+{ord(control.group()):04X} at column "
                             f"{control.start() + 1} (not text)")
        yield lineno, text


def check_output(path: Path | None) -> None:
    """Refuse before the work, not after it, an output that could not be written."""
    if path is None or _is_special(path):
        return  # a device or a FIFO is written through
    path = _target(Path(path))
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not a file")
    if not path.parent.is_dir():
        raise InputError(f"{path}: the folder {path.parent} does not exist")
    try:  # the one sure test that a file can be made there (read-only and pseudo filesystems)
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise InputError(f"{path}: cannot write in {path.parent} ({e.strerror})") from None


def _is_special(path: Path) -> bool:
    """Whether `path` (after links) is something other than a regular file or folder: /dev/null,
    /dev/stdout, a FIFO."""
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
    if _is_special(path):
        with open(path, "wb") as f:
            write(f)
        return
    path = _target(Path(path))
    if not path.parent.is_dir():
        raise InputError(f"{path}: the folder {path.parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise InputError(f"{path}: cannot write in {path.parent} ({e.strerror})") from None
    try:
        os.chmod(tmp, _mode_for(path))
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, IsADirectoryError):
            raise InputError(f"{path}: is a folder, not a file") from None
        raise


def _mode_for(path: Path) -> int:
    """An existing file's permission bits, else those a plain open would give (mkstemp makes 0600)."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def progress_bar(total: int | None = None, desc: str = "", unit: str = "it", quiet: bool = False, **options):
    """A tqdm bar on stderr when stderr is a terminal; none in a redirected log (its carriage-return
    updates would fill it)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True,
                disable=quiet or not sys.stderr.isatty(), **options)


def write_lines(lines: Iterable[str], path: Path) -> None:
    """Write lines as they come, atomically: an interrupted run leaves no partial file."""
    def write(f: BinaryIO) -> None:
        f.writelines(line.encode("utf-8") + b"\n" for line in lines)

    atomic_write(path, write)


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
