"""User-facing file handling, without torch: the one-line user error, reading text, writing outputs.

Every reader reports a user's mistake as an `InputError` naming the file and line; every
output is written whole or not at all.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO


class UserError(Exception):
    """A mistake or a stop the user can act on; the CLI prints it as one line, never as a traceback."""


class InputError(UserError):
    """A problem with a user's file or argument."""


def read_lines(source: str | Path | BinaryIO) -> Iterator[tuple[int, str]]:
    """Yield (line number, text) of a UTF-8 file (or binary stream, e.g. stdin);
    undecodable bytes are an error naming the line."""
    path = Path(source) if isinstance(source, (str, Path)) else Path("<stdin>")
    try:
        raw = path.read_bytes() if isinstance(source, (str, Path)) else source.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    lines = raw.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the final newline ends the last line; it does not start an empty one
    for lineno, line in enumerate(lines, start=1):
        try:
            yield lineno, line.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as e:
            raise InputError(f"{path}:{lineno}: not UTF-8 text (byte {e.start + 1} of the line)") from None


def check_output(path: Path | None) -> None:
    """Refuse before the work, not after it, when an output could not be written."""
    if path is None:
        return
    if not path.parent.is_dir():
        raise InputError(f"{path}: the folder {path.parent} does not exist")
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not a file")


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Call write(file_object) on a temporary file beside `path`, then rename it into place."""
    path = Path(path)
    if not path.parent.is_dir():
        raise InputError(f"{path}: the folder {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the modes a plain open would
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
