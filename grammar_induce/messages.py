"""How a workflow talks to its user: log lines, notes and progress, whoever called it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Messages:
    """The one way a workflow tells its user something, whoever called it (the command line, a notebook):
    `say` a line of a long run's log (an epoch's numbers, a round's), `note` what the user should know beside
    the results (a cap, a fallback, an output that could not be written), and `advance` a step's progress by
    a number of items. Notes are kept in `notes` and, with `tell`, passed on as they come; the defaults say
    nothing, show no progress and keep the notes for the caller."""

    say: Callable[[str], object] = lambda text: None
    tell: Callable[[str], object] | None = None
    progress: Callable[[int], object] | None = None
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        self.notes.append(text)
        if self.tell is not None:
            self.tell(text)

    def advance(self, count: int) -> None:
        if self.progress is not None:
            self.progress(count)


def progress_bar(total: int | None = None, desc: str = "", unit: str = "it", quiet: bool = False, **options):
    """A tqdm bar on stderr when stderr is a terminal; none in a redirected log (its carriage-return
    updates would fill it)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True,
                disable=quiet or not sys.stderr.isatty(), **options)


def clipped(text: str, limit: int) -> str:
    """The first line of `text`, at most `limit` characters: cut at the last space before the limit (never inside a
    word) and marked with an ellipsis."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    if len(line) <= limit:
        return line
    cut = line[: limit - 3].rstrip()
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut) + "..."


def plural(n: int, word: str) -> str:
    """ "1 sentence", "2 sentences", "1,000 tokens"."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"
