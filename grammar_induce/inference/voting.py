"""Span voting: the binary tree holding the most spans of an ensemble's trees (minimum Bayes risk over
spans, Shayegh et al., ICLR 2024).

Exact by CKY over a chart of span counts (cky.exact_trees: one C call on a CPU, else one tensor step per
span width; cubic work, but 800 words take well under a second). Past
`cky.EXACT_LIMIT` words a top-down greedy split takes over, quadratic at worst.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .. import trees
from ..structures import cky
from ..trees import Tree

CHART_CELLS = 1 << 22  # of a batch's chart: sentences x (words + 1)^2


def most_voted_tree(members: Sequence[Tree], weights: Sequence[float] | None = None) -> Tree:
    """The binary tree with the largest total count (or weight) of the members' spans; ties go to the
    leftmost split. Greedy (not exact) past cky.EXACT_LIMIT words. The members must be trees over the same words."""
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
            chart = _chart(n, [votes[b] for b in batch])
            for b, tree in zip(batch, cky.exact_trees(chart, [words[b] for b in batch])):
                out[b] = tree
            batch = []
        if k < 0:
            break
        if len(words[k]) > cky.EXACT_LIMIT:
            out[k] = trees.tree_of_splits(words[k], cky.greedy_splits(
                lambda i, j, counts=votes[k]: counts.get((i, j), 0), len(words[k])))
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


def _chart(n: int, votes: list[dict[tuple[int, int], float]]) -> torch.Tensor:
    """[b, i, j]: the votes of the span i..j-1 of each sentence, padded to `n` words; whole counts stay
    exact integers, weighted votes are float64."""
    whole = all(isinstance(c, int) for counts in votes for c in counts.values())
    chart = torch.zeros((len(votes), n + 1, n + 1), dtype=torch.int64 if whole else torch.float64)
    for b, counts in enumerate(votes):
        for (i, j), count in counts.items():
            chart[b, i, j] = count
    return chart
