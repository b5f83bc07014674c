"""Parse-focusing (Park and Kim, "Parse-focusing: ...", Findings of ACL 2024; GIST-IRR/Parse-Focusing): a grammar
trained on sentences toward the spans its teachers' trees agree on.

For a training sentence, c(i, j) is the teachers' vote for span (i, j) (width 2 or more, the whole sentence
aside): how many teacher trees contain it, each teacher counting one (`by = "teacher"`, the paper's), or each
teacher one over the number of teachers of its family (`by = "family"`, so that three PCFGs do not outvote one
ON-LSTM pair), plus an optional right-branching tree of weight `right`. Training multiplies every span's inside value
by a weight (structures/rank_cfg.py's `span_bias`, in log space), which reweights each tree by its spans':

- `soft` (the paper's default): weight exp(strength * c(i, j)). The paper's softmax of the counts over a sentence's
  spans is exp(c) up to a constant a sentence (every binary tree of a sentence has as many spans), so strength 1 is
  the paper's equation. Its code applies the mask twice (`Fastest_TDPCFG._inside_one` in GIST-IRR/Parse-Focusing: a
  span's values are multiplied by exp(mask) and the mask is added to the same span's log normaliser, which the values
  stand beside), so the runs it reports weigh a span exp(2 c): strength 2 is what the paper ran, with three teachers
  of different kinds voting one each (c from 0 to 3; configs/pcfg-ptb-focus3.toml). A larger strength focuses harder.
- `hard`: spans some teacher has weigh 1, every other span 1e-4 (the paper's hard mode; strength unused).

A sentence without a teacher tree trains as before (no bias). Parsing uses the plain grammar: no teacher is needed
at inference. A teacher is a file of trees, read aligned with the training file's lines: one given, or a model's
trees of the training text, made before the run by the parse path (inference/teachers.py) and kept in the token cache.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..config import Config
from ..errors import InputError
from ..messages import plural
from ..text import aligned, corpus
from ..text.aligned import Spans

MODES = ("soft", "hard")
COUNTS = ("teacher", "family")
HARD_FLOOR = math.log(1e-4)  # the log weight of a span no teacher has, in hard mode (the paper's 1e-4)


@dataclass(frozen=True)
class Teacher:
    """One focusing teacher: how the config names it, its family (a model kind, or a file's own), and per training
    sentence its tree's spans (None: no tree of that sentence)."""

    name: str
    family: str
    spans: Sequence[Spans | None]


class SpanVotes:
    """Every training sentence's span votes, kept compactly (a sentence's voted spans and their counts as two small
    tensors), and the span biases of a batch of them."""

    def __init__(self, teachers: Sequence[Teacher], lengths: Sequence[int], by: str = "teacher", right: float = 0.0):
        if by not in COUNTS:
            raise ValueError(f"by must be one of {', '.join(COUNTS)}, got {by!r}")
        families = [t.family for t in teachers]
        weights = [1.0 if by == "teacher" else 1.0 / families.count(f) for f in families]
        self.spans: list[Tensor | None] = []
        self.counts: list[Tensor | None] = []
        for k, n in enumerate(lengths):
            votes: dict[tuple[int, int], float] = {}
            trees = [(t.spans[k], w) for t, w in zip(teachers, weights) if t.spans[k] is not None]
            if right and trees:
                trees.append((frozenset((i, n) for i in range(1, n - 1)), right))
            for spans, weight in trees:
                for span in spans:
                    votes[span] = votes.get(span, 0.0) + weight
            self.spans.append(torch.tensor(list(votes), dtype=torch.int16).reshape(-1, 2) if trees else None)
            self.counts.append(torch.tensor(list(votes.values()), dtype=torch.float32) if trees else None)

    def __len__(self) -> int:
        return len(self.spans)

    @property
    def covered(self) -> int:
        """How many sentences have a teacher tree."""
        return sum(s is not None for s in self.spans)

    def votes(self, k: int) -> dict[tuple[int, int], float]:
        """Sentence k's vote of each span some teacher (or the right-branching voter) has."""
        if self.spans[k] is None:
            return {}
        return {(int(i), int(j)): float(c) for (i, j), c in zip(self.spans[k].tolist(), self.counts[k].tolist())}

    def bias(self, rows: Sequence[int], lengths: Sequence[int], mode: str, strength: float) -> Tensor:
        """(B, n+1, n+1) each span's log weight for the sentences `rows` (of `lengths` words, padded to the longest):
        `soft` strength * votes, `hard` 0 for a voted span (and the whole sentence) and log 1e-4 for the others; zero
        for a sentence without a teacher tree."""
        n = max(lengths)
        bias = torch.zeros(len(rows), n + 1, n + 1)
        for b, (k, length) in enumerate(zip(rows, lengths)):
            spans = self.spans[k]
            if spans is None:
                continue
            i, j = spans[:, 0].long(), spans[:, 1].long()
            if mode == "soft":
                bias[b, i, j] = strength * self.counts[k]
            else:
                bias[b, : length + 1, : length + 1] = torch.ones(length + 1, length + 1).triu(2) * HARD_FLOOR
                bias[b, i, j] = 0.0
                bias[b, 0, length] = 0.0
        return bias


def teachers_votes(config: Config, lines: list[tuple[int, list[str]]], cached: int, files: Mapping[str, Path],
                   families: Mapping[str, str]) -> SpanVotes:
    """The span votes of `train.focus`'s teachers over the training sentences (`lines`: the training file's, as
    `corpus.training_lines` reads them; only those of 2 to max_length words are trained on, `trained`; `cached`: how
    many sentences the token cache read), from each one's file of trees aligned with the training file's
    lines (`files`: a model teacher's, made before the run; a file teacher's, as given), a teacher's family from
    `families` (a model's kind; a file is its own)."""
    cfg, data = config.train, config.data
    reader = corpus.training_reader(data)
    sentences = [words for _, words in lines if words]
    if len(sentences) != cached:
        raise InputError(f"{data.train}: read as {plural(len(sentences), 'sentence')} here but "
                         f"{cached:,} by the token cache (was the file changed during the run?)")
    keep = trained(sentences, cfg.max_length)
    found = [Teacher(name, families.get(name, f"file {name}"),
                     aligned.file_spans(files[name], data.train, lines, reader, keep)) for name in cfg.focus]
    return SpanVotes(found, [len(words) for words in sentences], cfg.focus_by, cfg.focus_right)


def trained(sentences: Sequence[Sequence[str]], longest: int) -> list[bool]:
    """Which sentences a focused run trains on (2 to `longest` words): the ones its teachers' trees are read for."""
    return [2 <= len(words) <= longest for words in sentences]


def identities(config: Config, models: Mapping[str, str]) -> dict[str, str]:
    """What each teacher of `train.focus` is: a model's identity (`models`: its files' hashes, and how it parses), a
    file of trees' hash. A run records them when it starts and a resumed run must find them unchanged
    (`check_unchanged`)."""
    return {name: models[name] if name in models else corpus.file_hash(Path(name)) for name in config.train.focus}


def check_unchanged(saved: Mapping[str, str], now: Mapping[str, str], where: Path) -> None:
    """Refuse to resume a focused run whose teachers are not what they were when it started (a file of trees
    rewritten, a checkpoint replaced at its path, a shipped name that now names another model), naming the first."""
    for name, identity in now.items():
        if name in saved and saved[name] != identity:
            raise InputError(f"{where}: the focusing teacher {name} has changed since the run started (its files' hash "
                             f"was {saved[name][:12]}..., now {identity[:12]}...): a resumed run learns from the "
                             "teachers it began with; restore that teacher, or start a new run (--force)")
