"""Span voting: the binary tree holding the most spans of an ensemble's trees (minimum Bayes risk over
spans, Shayegh et al., ICLR 2024).

Exact by CKY over a chart of span counts, vectorised over the starts of each span width: cubic work
but one tensor step per width, so 800 words take well under a second. Past `EXACT_LIMIT` words
(cubic all the same) a top-down greedy split takes over, quadratic at worst.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from . import trees
from .trees import Tree

EXACT_LIMIT = 1000  # words; a longer line is voted greedily
CHART_CELLS = 1 << 22  # of a batch's chart: sentences x (words + 1)^2


def most_voted_tree(members: Sequence[Tree], weights: Sequence[float] | None = None) -> Tree:
    """The binary tree with the largest total count (or weight) of the members' spans; ties go to the
    leftmost split. Greedy (not exact) past EXACT_LIMIT words. The members must be trees over the same words."""
    return most_voted_trees([members], weights)[0]


def most_voted_trees(sentences: Sequence[Sequence[Tree]], weights: Sequence[float] | None = None) -> list[Tree]:
    """`most_voted_tree` of each sentence's members (each member's votes weighing `weights[k]`, else 1),
    the charts of sentences of similar length run as one batch (padded to the longest: a span's best
    split depends only on the spans inside it)."""
    out: list[Tree | None] = [None] * len(sentences)
    words = [trees.leaves(members[0]) for members in sentences]
    votes = [span_votes(members, weights) for members in sentences]
    order = sorted(range(len(sentences)), key=lambda k: len(words[k]))
    batch: list[int] = []
    for k in order + [-1]:
        n = len(words[batch[-1]]) if batch else 0
        if batch and (k < 0 or (len(batch) + 1) * (len(words[k]) + 1) ** 2 > CHART_CELLS):
            for b, splits in zip(batch, _cky_splits(n, [votes[b] for b in batch])):
                out[b] = _build(words[b], splits, 0, len(words[b]))
            batch = []
        if k < 0:
            break
        if len(words[k]) > EXACT_LIMIT:
            out[k] = _greedy(words[k], votes[k])
        else:
            batch.append(k)
    return out


def span_votes(members: Sequence[Tree], weights: Sequence[float] | None = None) -> dict[tuple[int, int], float]:
    """How many of the trees hold each span (of two or more words, the whole sentence aside); with
    `weights`, the sum of the weights of the trees that hold it."""
    votes: dict[tuple[int, int], float] = {}
    for k, member in enumerate(members):
        weight = 1 if weights is None else weights[k]
        for span in trees.spans(member):
            votes[span] = votes.get(span, 0) + weight
    return votes


def _cky_splits(n: int, votes: list[dict[tuple[int, int], float]]) -> list[_SplitsOf]:
    """Each sentence's best split point of every span (of at most its own length), by CKY over a batch
    of sentences padded to `n` words. The chart is kept twice, by (width, start) and by (width, end) with
    the widths reversed, so that for width w the candidates' left parts (widths 1..w-1 at start i) and
    right parts (widths w-1..1 ending at i+w) are both plain slices."""
    size = (len(votes), n + 1, n + 1)
    # whole counts stay exact integers; weighted votes are summed in float64
    dtype = torch.int64 if all(isinstance(c, int) for counts in votes for c in counts.values()) else torch.float64
    by_start = torch.zeros(size, dtype=dtype)  # [b, w, i]: most votes inside the span i..i+w
    by_end = torch.zeros(size, dtype=dtype)  # [b, n - w, j]: the same for the span j-w..j
    own = torch.zeros(size, dtype=dtype)  # [b, w, i]: the votes of the span i..i+w itself
    for b, counts in enumerate(votes):
        for (i, j), count in counts.items():
            own[b, j - i, i] = count
    firsts = []
    for w in range(2, n + 1):
        starts = n - w + 1
        candidates = by_start[:, 1:w, :starts] + by_end[:, n - w + 1 : n, w : n + 1]  # [b, d - 1, i]: split at i + d
        best, first = candidates.max(dim=1)  # the first maximum: the leftmost split
        total = best + own[:, w, :starts]
        by_start[:, w, :starts] = total
        by_end[:, n - w, w : n + 1] = total
        firsts.append(first.tolist())
    return [_SplitsOf(firsts, b) for b in range(len(votes))]


class _SplitsOf:
    """One sentence's split points in a batch's CKY result, read as splits[i, j]."""

    def __init__(self, firsts: list[list[list[int]]], b: int):
        self.firsts, self.b = firsts, b

    def __getitem__(self, span: tuple[int, int]) -> int:
        i, j = span
        return i + 1 + self.firsts[j - i - 2][self.b][i]


def _greedy(words: Sequence[str], votes: dict[tuple[int, int], float]) -> Tree:
    """Top down: split each span where its two parts hold the most votes (leftmost on ties)."""
    splits, todo = {}, [(0, len(words))]
    while todo:
        i, j = todo.pop()
        if j - i < 2:
            continue
        k = max(range(i + 1, j), key=lambda m: (votes.get((i, m), 0) + votes.get((m, j), 0), -m))
        splits[i, j] = k
        todo += [(i, k), (k, j)]
    return _build(words, splits, 0, len(words))


def _build(words: Sequence[str], splits: Mapping[tuple[int, int], int], start: int, end: int) -> Tree:
    """The tree of the split points, without recursion (a long line is deep)."""
    built: dict[tuple[int, int], Tree] = {}
    todo = [(start, end, False)]
    while todo:
        i, j, children_done = todo.pop()
        if j - i == 1:
            built[i, j] = words[i]
        elif not children_done:
            todo.append((i, j, True))
            todo.extend([(i, splits[i, j], False), (splits[i, j], j, False)])
        else:
            k = splits[i, j]
            built[i, j] = [built.pop((i, k)), built.pop((k, j))]
    return built[start, end]
