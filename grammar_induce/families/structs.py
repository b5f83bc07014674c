"""Distributions over unlabeled binary trees: the inside algorithm and CKY over span scores, batched; `TreeCRF`
holds them as one object (pytorch-struct's shape: `.partition`, `.marginals`, `.argmax`).

A tree over n words is its n - 1 spans of two or more words (the whole sentence among them); its
score is the sum of their scores. `inside` gives log Z, the log-sum-exp over all trees (or, with
`semiring="max"`, the best tree's score), vectorised over the starts of each span width and over a
batch of sentences padded to one length. Its gradient is each span's marginal probability (for
max, the best tree's spans), so training and decoding need no other code. Spans may be forbidden
(score -inf), which gives the trees that keep a set of spans (`crossing_mask`).

The best tree of given span scores (CKY, `best_splits`: one C call per batch on a CPU, cky.c; else by
width, vectorised over the starts of each width) gives its split points, read back by `trees.tree_of_splits`:
span voting (inference/voting.py) and a student's parsing share it. Past `EXACT_LIMIT` words, cubic in any form, a top-down greedy split
takes over, quadratic at worst.
"""

from __future__ import annotations

import array
import ctypes
import functools
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .. import trees
from ..runtime import native
from ..trees import Tree


def inside(scores: Tensor, lengths: Sequence[int], semiring: str = "sum") -> Tensor:
    """log Z (or the best score, semiring "max") of each sentence's trees. `scores`: (B, N+1, N+1),
    scores[b, i, j] of the span of words i..j-1 (fenceposts i < j; only j - i >= 2 is read). (B,)"""
    reduce = torch.logsumexp if semiring == "sum" else lambda x, dim: x.max(dim).values
    batch, n = scores.shape[0], scores.shape[1] - 1
    chart: list[Tensor | None] = [None, scores.new_zeros(batch, n)]  # chart[w][:, i]: the spans i..i+w
    for w in range(2, n + 1):
        starts = n - w + 1
        parts = torch.stack([chart[d][:, :starts] + chart[w - d][:, d : d + starts] for d in range(1, w)], dim=1)
        width_scores = torch.diagonal(scores, offset=w, dim1=1, dim2=2)  # (B, n + 1 - w): the spans i..i+w
        chart.append(reduce(parts, dim=1) + width_scores)
    return torch.stack([chart[length][b, 0] if length >= 2 else scores.new_zeros(())
                        for b, length in enumerate(lengths)])


@dataclass(frozen=True)
class TreeCRF:
    """The distribution over each sentence's binary trees whose score is the sum of its spans' scores: a span
    parser's (the student's) and, over span marginals, a PCFG's minimum-Bayes-risk decoding. `scores`: (B, N+1,
    N+1), scores[b, i, j] of the span of words i..j-1 (only j - i >= 2 is read); `lengths`: each sentence's words."""

    scores: Tensor
    lengths: Sequence[int]

    @property
    def partition(self) -> Tensor:
        """log Z of each sentence's trees. (B,)"""
        return inside(self.scores, self.lengths)

    @property
    def max(self) -> Tensor:
        """The best tree's score of each sentence. (B,)"""
        return inside(self.scores, self.lengths, "max")

    @property
    def marginals(self) -> Tensor:
        """Each span's probability of being in the tree (the gradient of log Z). (B, N+1, N+1)"""
        with torch.enable_grad():
            scores = self.scores.detach().requires_grad_()
            (grad,) = torch.autograd.grad(inside(scores, self.lengths).sum(), scores)
        return grad

    def argmax(self, words: Sequence[Sequence[str]]) -> list[Tree]:
        """Each sentence's highest-scoring tree over its `words` (see best_trees)."""
        return best_trees(self.scores, self.lengths, words)

    def keeping(self, kept: Sequence[Iterable[tuple[int, int]]]) -> TreeCRF:
        """The distribution over the trees that cross none of each sentence's `kept` spans."""
        forbidden = crossing_mask(kept, self.scores.shape[1] - 1).to(self.scores.device)
        return TreeCRF(self.scores.masked_fill(forbidden, -1e9), self.lengths)


EXACT_LIMIT = 1000  # words; a longer sentence's best tree is found greedily, top down


def best_trees(scores: Tensor, lengths: Sequence[int], words: Sequence[Sequence[str]]) -> list[Tree]:
    """Each sentence's highest-scoring tree: CKY up to EXACT_LIMIT words, greedy beyond. `scores`:
    (B, N+1, N+1), scores[b, i, j] of the span i..j-1, as for `inside`."""
    scores = scores.detach().double()
    exact = [b for b, length in enumerate(lengths) if length <= EXACT_LIMIT]
    out: list[Tree | None] = [None] * len(lengths)
    fenceposts = max((lengths[b] for b in exact), default=0) + 1
    for b, tree in zip(exact, exact_trees(scores[exact, :fenceposts, :fenceposts], [words[b] for b in exact])):
        out[b] = tree
    for b in sorted(set(range(len(lengths))) - set(exact)):
        rows = scores[b].tolist()
        out[b] = trees.tree_of_splits(words[b], greedy_splits(lambda i, j, rows=rows: rows[i][j], lengths[b]))
    return out


def best_splits(scores: Tensor) -> list[Splits]:
    """CKY over a batch of charts: `scores[b, i, j]` is the score of the span i..j-1, as for `inside` (sentences
    padded to N = scores.shape[1] - 1 words: a span's best split depends only on the spans inside it). Returns
    each sentence's best split point of every span; ties go to the leftmost split. On a CPU one C call (cky.c,
    compiled on first use: runtime/native.py), elsewhere or without a compiler the same by tensor ops."""
    batch, n = scores.shape[0], scores.shape[1] - 1
    library = _cky_library() if scores.device.type == "cpu" and native.enabled() else None
    table = _best_splits_in_c(library, scores) if library is not None else _best_splits_by_tensor_ops(scores)
    return [Splits(table, batch, n, b) for b in range(batch)]


def exact_trees(scores: Tensor, words: Sequence[Sequence[str]]) -> list[Tree]:
    """Each sentence's best tree by CKY (best_splits's, of `scores` as it takes them) over its words (one or more, the
    batch's padding after them). On a CPU the splits are read into trees in C too (cky.c's postorders; the trees
    built from them in Python: 35 -> about 8 us a sentence of PTB), else span by span."""
    library = _cky_library() if scores.device.type == "cpu" and native.enabled() else None
    if library is None or not words:
        return [trees.tree_of_splits(w, splits) for w, splits in zip(words, best_splits(scores))]
    table = _best_splits_in_c(library, scores)
    lengths = array.array("i", [len(w) for w in words])
    offsets = array.array("l", itertools.accumulate((2 * n - 1 for n in lengths[:-1]), initial=0))
    ops = array.array("i", bytes(4 * (offsets[-1] + 2 * lengths[-1] - 1)))
    stack = array.array("i", bytes(4 * 3 * (2 * max(lengths) + 1)))
    library.postorders(len(words), scores.shape[1] - 1, table.buffer_info()[0], lengths.buffer_info()[0],
                       offsets.buffer_info()[0], ops.buffer_info()[0], stack.buffer_info()[0])
    return [trees.tree_of_postorder(w, ops[at : at + 2 * len(w) - 1]) for w, at in zip(words, offsets)]


CKY_SOURCE = Path(__file__).with_name("cky.c")


@functools.cache
def _cky_library() -> ctypes.CDLL | None:
    return native.load_procedures(CKY_SOURCE, {"best_splits": [ctypes.c_int] * 3 + [ctypes.c_void_p] * 3,
                                               "postorders": [ctypes.c_int] * 2 + [ctypes.c_void_p] * 5})


def _best_splits_in_c(library: ctypes.CDLL, scores: Tensor) -> array.array:
    """cky.c's split table (see Splits) of `scores`; whole-number charts (span votes) are exact in float64."""
    batch, n = scores.shape[0], scores.shape[1] - 1
    chart = scores.to(torch.float64).contiguous()
    table = array.array("i", bytes(4 * max(n - 1, 0) * batch * n))
    inside_work = torch.empty((n + 1) * (n + 1), dtype=torch.float64)
    library.best_splits(batch, n, chart.shape[2], chart.data_ptr(), table.buffer_info()[0], inside_work.data_ptr())
    return table


def _best_splits_by_tensor_ops(scores: Tensor) -> list[int]:
    """The split table (see Splits) by tensor ops, vectorised over the starts of each width and the batch.

    The chart of best inside scores is kept twice, by (width, start) and by (width, end) with the
    widths reversed, so that for width w the candidates' left parts (widths 1..w-1 at start i) and right
    parts (widths w-1..1 ending at i+w) are both plain slices."""
    batch, n = scores.shape[0], scores.shape[1] - 1
    own = torch.zeros_like(scores[:, : n + 1, : n + 1])  # [b, w, i]: the score of the span i..i+w
    for w in range(2, n + 1):
        own[:, w, : n - w + 1] = torch.diagonal(scores, offset=w, dim1=1, dim2=2)[:, : n - w + 1]
    by_start = torch.zeros_like(own)  # [b, w, i]: the best total inside the span i..i+w
    by_end = torch.zeros_like(own)  # [b, n - w, j]: the same for the span j-w..j
    table = [0] * (max(n - 1, 0) * batch * n)
    for w in range(2, n + 1):
        starts = n - w + 1
        candidates = by_start[:, 1:w, :starts] + by_end[:, n - w + 1 : n, w : n + 1]  # [b, d - 1, i]: split at i + d
        best, first = candidates.max(dim=1)  # the first maximum: the leftmost split
        total = best + own[:, w, :starts]
        by_start[:, w, :starts] = total
        by_end[:, n - w, w : n + 1] = total
        for b, row in enumerate(first.tolist()):
            at = ((w - 2) * batch + b) * n
            table[at : at + starts] = row
    return table


class Splits:
    """One sentence's split points in a batch's CKY result, read as splits[i, j]: the span i..j splits at
    i + 1 + table[((j - i - 2) * batch + b) * n + i] (the table holds every sentence's, width by width)."""

    def __init__(self, table: Sequence[int], batch: int, n: int, b: int):
        self.table, self.width_stride, self.offset = table, batch * n, b * n

    def __getitem__(self, span: tuple[int, int]) -> int:
        i, j = span
        return i + 1 + self.table[(j - i - 2) * self.width_stride + self.offset + i]


def greedy_splits(score: Callable[[int, int], float], n: int) -> dict[tuple[int, int], int]:
    """Top down: split each span where its two parts score the most (leftmost on ties); a part of one
    word scores nothing."""
    def part(i: int, j: int) -> float:
        return score(i, j) if j - i >= 2 else 0

    return splits_top_down(lambda i, j: max(range(i + 1, j), key=lambda m: (part(i, m) + part(m, j), -m)), n)


def splits_top_down(best_split: Callable[[int, int], int], n: int) -> dict[tuple[int, int], int]:
    """Every span's split point, from the whole sentence down, each span split at `best_split(i, j)`."""
    splits, todo = {}, [(0, n)]
    while todo:
        i, j = todo.pop()
        if j - i < 2:
            continue
        k = best_split(i, j)
        splits[i, j] = k
        todo += [(i, k), (k, j)]
    return splits


def crossing_mask(kept: Sequence[Iterable[tuple[int, int]]], n: int) -> Tensor:
    """(B, N+1, N+1) booleans: True for the spans that cross one of a sentence's kept spans (forbid them
    to get the trees that keep every kept span; a whole tree's spans leave only that tree)."""
    i = torch.arange(n + 1).view(-1, 1)
    j = torch.arange(n + 1).view(1, -1)
    masks = []
    for spans in kept:
        mask = torch.zeros(n + 1, n + 1, dtype=torch.bool)
        for a, b in spans:
            mask |= ((i < a) & (a < j) & (j < b)) | ((a < i) & (i < b) & (b < j))
        masks.append(mask)
    return torch.stack(masks)
