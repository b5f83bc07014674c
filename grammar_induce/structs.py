"""Distributions over unlabeled binary trees: the inside algorithm and CKY over span scores, batched.

A tree over n words is its n - 1 spans of two or more words (the whole sentence among them); its
score is the sum of their scores. `inside` gives log Z, the log-sum-exp over all trees (or, with
`semiring="max"`, the best tree's score), vectorised over the starts of each span width and over a
batch of sentences padded to one length. Its gradient is each span's marginal probability (for
max, the best tree's spans), so training and decoding need no other code. Spans may be forbidden
(score -inf), which gives the trees that keep a set of spans (`crossing_mask`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from . import trees
from .trees import Tree


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


def best_trees(scores: Tensor, lengths: Sequence[int], words: Sequence[Sequence[str]]) -> list[Tree]:
    """CKY: each sentence's highest-scoring tree (the spans the max-inside gradient picks)."""
    scores = scores.detach().requires_grad_(True)
    with torch.enable_grad():
        best = inside(scores, lengths, "max")
        (chosen,) = torch.autograd.grad(best.sum(), scores)
    out = []
    for b, sentence in enumerate(words):
        spans = {(i, j) for i, j in (chosen[b] > 0.5).nonzero().tolist()}
        out.append(tree_of_spans(spans, sentence))
    return out


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


def tree_of_spans(spans: set[tuple[int, int]], words: Sequence[str]) -> Tree:
    """The binary tree whose spans of two or more words are `spans` (a whole binary tree's; the whole
    sentence may be left out). Top down, without recursion: each span splits where a part that is a
    span (or one word) ends and the rest is a span (or one word)."""
    n = len(words)

    def part(i: int, j: int) -> bool:
        return j - i == 1 or (i, j) in spans

    built: dict[tuple[int, int], Tree] = {}
    todo = [(0, n, 0)]
    while todo:
        i, j, k = todo.pop()
        if j - i == 1:
            built[i, j] = words[i]
        elif not k:
            k = next(k for k in range(i + 1, j) if part(i, k) and part(k, j))
            todo += [(i, j, k), (i, k, 0), (k, j, 0)]
        else:
            built[i, j] = [built.pop((i, k)), built.pop((k, j))]
    return built[0, n]


def spans_of(tree: Tree) -> set[tuple[int, int]]:
    """A tree's spans of two or more words, the whole sentence included."""
    n = len(trees.leaves(tree))
    return trees.spans(tree) | ({(0, n)} if n >= 2 else set())
