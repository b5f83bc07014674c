"""The distribution over unlabeled binary trees whose score is the sum of their spans' scores, batched: the inside
algorithm in a semiring (log-sum-exp: the partition; max: the best tree's score), and `TreeCRF`, one object with
pytorch-struct's shape (`.partition`, `.marginals`, `.argmax`, each computed once).

A tree over n words is its n - 1 spans of two or more words (the whole sentence among them); its score is the sum of
their scores. `inside` is vectorised over the starts of each span width and over a batch of sentences padded to one
length. Its gradient is each span's marginal probability (in MAX, the best tree's spans), so training and decoding
need no other code. Spans may be forbidden (score -inf), which gives the trees that keep a set of spans
(`crossing_mask`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import trees
from ..trees import Tree
from .cky import best_tree_spans, best_trees, span_marginals


@dataclass(frozen=True)
class Semiring:
    """How the inside algorithm adds the scores of a span's alternatives (its product is the sum of scores)."""

    name: str
    add: Callable[[Tensor, int], Tensor]  # (scores, dim) -> their sum over dim


LOG = Semiring("log", torch.logsumexp)  # the partition: log Z
MAX = Semiring("max", lambda x, dim: x.max(dim).values)  # the best tree's score


def inside(scores: Tensor, lengths: Sequence[int], semiring: Semiring = LOG) -> Tensor:
    """log Z (or, in the MAX semiring, the best tree's score) of each sentence's trees. `scores`: (B, N+1, N+1),
    scores[b, i, j] of the span of words i..j-1 (fenceposts i < j; only j - i >= 2 is read). (B,)"""
    reduce = semiring.add
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

    @functools.cached_property
    def partition(self) -> Tensor:
        """log Z of each sentence's trees. (B,)"""
        return inside(self.scores, self.lengths)

    @functools.cached_property
    def max(self) -> Tensor:
        """The best tree's score of each sentence. (B,)"""
        return inside(self.scores, self.lengths, MAX)

    @functools.cached_property
    def marginals(self) -> Tensor:
        """Each span's probability of being in the tree (the gradient of log Z). (B, N+1, N+1)
        A batch of one-word sentences has no span of two words: its chart is zeros, and there is nothing to
        differentiate. On a CPU the inside and outside passes in C (cky.span_marginals: several times faster)."""
        found = span_marginals(self.scores, self.lengths)
        if found is not None:
            return found
        with torch.enable_grad():
            scores = self.scores.detach().requires_grad_()
            log_z = inside(scores, self.lengths).sum()
            if not log_z.requires_grad:
                return torch.zeros_like(self.scores)
            (grad,) = torch.autograd.grad(log_z, scores)
        return grad

    def cross_entropy(self, marginals: Tensor) -> Tensor:
        """-sum over trees of q(tree) log p(tree) for each sentence, where q is any distribution over its trees
        whose span marginals are `marginals` (B, N+1, N+1): log Z - sum_(i, j) q(i, j) score(i, j), spans of two or
        more words (structural knowledge distillation, Wang et al. 2021: a PCFG teacher's marginals as the soft
        targets of a span-CRF student). (B,)"""
        n = self.scores.shape[1] - 1
        width = torch.arange(n + 1, device=self.scores.device)
        spans = (width[None, :] - width[:, None]) >= 2  # (N+1, N+1): i < j - 1
        inside_sentence = width[None, :] <= torch.tensor(list(self.lengths), device=self.scores.device)[:, None]
        read = spans[None] & inside_sentence[:, None, :]  # (B, N+1, N+1): a real span of two or more words
        expected = (marginals.to(self.scores.dtype) * self.scores).masked_fill(~read, 0.0).sum((1, 2))
        return self.partition - expected

    def argmax(self, words: Sequence[Sequence[str]]) -> list[Tree]:
        """Each sentence's highest-scoring tree over its `words` (cky.best_trees)."""
        return best_trees(self.scores, self.lengths, words)

    @property
    def argmax_spans(self) -> Tensor:
        """(B, N+1, N+1) booleans on the CPU: the spans of two or more words of each sentence's highest-scoring tree
        (the whole sentence's too), no tree built (cky.best_tree_spans)."""
        return best_tree_spans(self.scores, self.lengths)

    def keeping(self, kept: Sequence[Iterable[tuple[int, int]]]) -> TreeCRF:
        """The distribution over the trees that cross none of each sentence's `kept` spans."""
        forbidden = crossing_mask(kept, self.scores.shape[1] - 1).to(self.scores.device)
        return TreeCRF(self.scores.masked_fill(forbidden, -1e9), self.lengths)


def stacked(charts: Sequence[Tensor]) -> Tensor:
    """(B, N+1, N+1) square charts of sentences of several lengths, padded with zeros (False) at their ends."""
    size = max(c.shape[0] for c in charts)
    found = charts[0].new_zeros(len(charts), size, size)
    for b, c in enumerate(charts):
        found[b, : c.shape[0], : c.shape[0]] = c
    return found


def span_values(chart: Tensor, tree: Tree) -> dict[tuple[int, int], float]:
    """`chart` (N+1, N+1) read at each span of two or more words of `tree` (the whole sentence too): a chart of
    span marginals gives the tree's spans their probabilities."""
    found = sorted(trees.spans(tree, whole=True))
    if not found:
        return {}
    starts, ends = zip(*found)
    values = chart[list(starts), list(ends)].float().tolist()
    return dict(zip(found, values))


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
