"""Run directories: what may start in one, the lock a run holds on it, the metrics file. No torch.

A run directory holds config.toml, metrics.jsonl (one JSON line per epoch), curves.svg (drawn from
it by draw.write_curves), best.pt, last.pt and, with --keep-epochs, epoch-K.pt. While a run trains it holds `.lock` (an flock, so a killed
process never leaves a lock that blocks the next run), which names its process, host and start.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Self

from ..errors import InputError
from ..files import read_lines, write_text

RUN_FILES = ("metrics.jsonl", "best.pt", "last.pt")  # what makes a directory a run worth keeping
LOCK_FILE = ".lock"


def check(out_dir: Path, resume: bool, force: bool) -> None:
    """Refuse, before any work, a run directory the run could not use."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: is a file, not a run directory")
    if (holder := lock_holder(out_dir)) is not None:
        raise InputError(f"{out_dir}: in use by {holder}; wait for it or train into another --out")
    if resume:
        if not (out_dir / "last.pt").exists():
            raise InputError(f"{out_dir}: nothing to resume (no last.pt)")
        return
    existing = existing_run_files(out_dir)
    if existing and not force:
        raise InputError(f"{out_dir}: run directory exists ({', '.join(existing)}); use --resume or --force")


def lock_holder(out_dir: Path) -> str | None:
    """Who holds the directory's lock now, or None (a lock left by a killed process is free)."""
    path = out_dir / LOCK_FILE
    try:
        with open(path) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return f.read().strip() or "another process"
            return None
    except OSError:
        return None


def written_files(out_dir: Path) -> list[Path]:
    """Every file a run writes into (or removes from) its directory."""
    names = [*RUN_FILES, "config.toml", "curves.svg", "teachers.json", LOCK_FILE, *existing_run_files(out_dir)]
    return [Path(out_dir) / name for name in dict.fromkeys(names)]


def existing_run_files(out_dir: Path) -> list[str]:
    found = [name for name in RUN_FILES if (out_dir / name).exists()]
    return found + sorted(path.name for path in out_dir.glob("epoch-*.pt"))


class RunDirectory:
    """Hold a run directory for a run's life: create it, lock it, clear it for a fresh run.

    If the run fails before it has saved a model, a directory it created is removed again, so
    a failed start leaves nothing behind.
    """

    def __init__(self, out_dir: Path, resume: bool, force: bool, main: bool = True):
        self.out_dir, self.resume, self.force, self.main = Path(out_dir), resume, force, main
        self.created = False
        self.lock_file = None

    def __enter__(self) -> Self:
        if not self.main:  # in a distributed run, rank 0 holds the directory for all
            return self
        check(self.out_dir, self.resume, self.force)
        self.created = not self.out_dir.exists()
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"{self.out_dir}: cannot create the run directory ({e.strerror})") from None
        self._lock()
        if not self.resume:
            for name in existing_run_files(self.out_dir):
                (self.out_dir / name).unlink()
        return self

    def _lock(self) -> None:
        self.lock_file = take_lock(self.out_dir, "train into another --out")

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.lock_file is not None:
            release_lock(self.out_dir, self.lock_file)
        if exc_type is not None and self.created and not existing_run_files(self.out_dir):
            shutil.rmtree(self.out_dir, ignore_errors=True)


def take_lock(folder: Path, advice: str):
    """Lock `folder` for this process (an flock on its `.lock`, which names the process, host and start); a
    folder another process holds is an InputError naming the holder. Returns the open lock file."""
    path = folder / LOCK_FILE
    lock_file = open(path, "a+")  # noqa: SIM115 - held open for the lock's life
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock_file.seek(0)
        holder = lock_file.read().strip() or "another process"
        lock_file.close()
        raise InputError(f"{folder}: in use by {holder}; wait for it or {advice}") from None
    lock_file.seek(0)
    lock_file.truncate()
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    lock_file.write(f"process {os.getpid()} on {socket.gethostname()}, started {started}")
    lock_file.flush()
    return lock_file


def release_lock(folder: Path, lock_file) -> None:
    (folder / LOCK_FILE).unlink(missing_ok=True)
    lock_file.close()  # releases the flock


def append_metrics(path: Path, record: dict[str, Any]) -> None:
    """Append one whole line with a single write, so a kill never leaves half a line."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def trim_metrics(path: Path, next_epoch: int) -> None:
    """After a kill, drop lines of epochs that `last.pt` does not include (they will be redone). A partial line of
    the epoch it resumes stays: it is the validation a limit stopped the run at (maybe best.pt's), kept beside the
    whole epoch's line to come."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.endswith("\n") and _done_by(json.loads(line), next_epoch)]
    if kept != lines:
        write_text(path, "".join(kept))


def _done_by(record: dict[str, Any], next_epoch: int) -> bool:
    """Whether a metrics record is of work that a last.pt at the start (or inside) of `next_epoch` includes."""
    return record["epoch"] < next_epoch or (record["epoch"] == next_epoch and record.get("partial") is not None)


METRIC_KEYS = {"epoch": (int,), "train_loss": (int, float), "valid_ppl": (int, float, type(None)), "phase": (str,)}


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """A run's metrics records; a line that is not one is an error naming it (a value may be NaN or
    Infinity, as a diverged run writes them)."""

    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise InputError(f"{path}: cannot read (no such file)" if not path.exists() else f"{path}: not a file")
    return [_metrics_record(text, f"{path}:{lineno}") for lineno, text in read_lines(path) if text.strip()]


def _metrics_record(text: str, where: str) -> dict[str, Any]:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{where}: not a metrics record ({e.msg})") from None
    if not isinstance(record, dict):
        raise InputError(f"{where}: not a metrics record (not a JSON object)")
    for key, types in METRIC_KEYS.items():
        if key not in record:
            raise InputError(f"{where}: not a metrics record (no {key!r})")
        if not isinstance(record[key], types) or isinstance(record[key], bool):
            raise InputError(f"{where}: not a metrics record ({key!r} is {record[key]!r})")
    return record


def format_record(record: dict[str, Any]) -> str:
    valid = f"valid ppl {record['valid_ppl']:.2f}" if record["valid_ppl"] is not None else "no validation"
    return (f"epoch {record['epoch']:3d} | train loss {record['train_loss']:.3f} | {valid} | "
            f"lr {record['lr']:g} | {record['phase']} | {record['tokens_per_s']:.0f} tok/s | {record['seconds']:.1f}s")
