"""The best tree of given span scores (CKY, `best_splits`: one C call per batch on a CPU, cky.c; else by width,
vectorised over the starts of each width) gives its split points, read back by `trees.tree_of_splits`: span voting
(inference/voting.py), a student's parsing and a PCFG's minimum-Bayes-risk trees share it. Past `EXACT_LIMIT` words,
cubic in any form, a top-down greedy split takes over, quadratic at worst."""

from __future__ import annotations

import array
import ctypes
import functools
import itertools
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor

from .. import trees
from ..runtime import native
from ..trees import Tree

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
                                               "postorders": [ctypes.c_int] * 2 + [ctypes.c_void_p] * 5,
                                               "best_spans": [ctypes.c_int] * 2 + [ctypes.c_void_p] * 4,
                                               "span_marginals": [ctypes.c_int] * 3 + [ctypes.c_void_p] * 4})


def span_marginals(scores: Tensor, lengths: Sequence[int]) -> Tensor | None:
    """The span CRF's marginals of `scores` (as for `best_splits`; tree_crf.TreeCRF.marginals) in one C call (cky.c:
    the inside and outside passes in log space, float64), in `scores`' dtype; None where it cannot run (not a CPU, no
    compiler): the caller differentiates the inside pass instead."""
    library = _cky_library() if scores.device.type == "cpu" and native.enabled() else None
    if library is None:
        return None
    batch, n = scores.shape[0], scores.shape[1] - 1
    chart = scores.detach().to(torch.float64).contiguous()
    out = torch.zeros_like(chart)
    work = torch.empty(2 * (n + 1) * (n + 1), dtype=torch.float64)
    lengths_c = array.array("i", lengths)
    library.span_marginals(batch, n, chart.shape[2], lengths_c.buffer_info()[0], chart.data_ptr(), out.data_ptr(),
                           work.data_ptr())
    return out.to(scores.dtype)


def best_tree_spans(scores: Tensor, lengths: Sequence[int]) -> Tensor:
    """(B, N+1, N+1) booleans on the CPU: [b, i, j] for each span of two or more words of sentence b's best tree by
    CKY (best_splits', of `scores` as it takes them; the whole sentence's too), without building the trees: in C on a
    CPU, else from the splits."""
    batch, n = scores.shape[0], scores.shape[1] - 1
    found = torch.zeros(batch, n + 1, n + 1, dtype=torch.bool)
    library = _cky_library() if scores.device.type == "cpu" and native.enabled() else None
    if library is not None:
        table, stack = _best_splits_in_c(library, scores.detach()), array.array("i", bytes(4 * 2 * (n + 1)))
        lengths_c = array.array("i", lengths)  # held here: the C call reads it
        library.best_spans(batch, n, table.buffer_info()[0], lengths_c.buffer_info()[0], found.data_ptr(),
                           stack.buffer_info()[0])
        return found
    for b, splits in enumerate(best_splits(scores.detach())):
        todo = [(0, lengths[b])] if lengths[b] >= 2 else []
        while todo:
            i, j = todo.pop()
            found[b, i, j], k = True, splits[i, j]
            todo += [(start, end) for start, end in ((i, k), (k, j)) if end - start >= 2]
    return found


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


