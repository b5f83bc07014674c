"""A context-free grammar whose binary rules factor through a rank (p(A -> B C) = sum_r U[A, r] V[B, r] W[C, r], as
TN-PCFG's), as a structure over a batch of sentences: `RankSpaceCFG`, with pytorch-struct's shape (`.partition`,
`.marginals`, `.argmax`, and `.labels`, each computed once). It knows no model: a model gives it the rule factors
and its words' values, and calls it.

The inside algorithm runs in the rank space (Yang et al. 2022, "Dynamic programming in rank space"): with
x[i, j] = sum_k L[i, k] * R[k, j] (elementwise over the rank) and L[i, j] = x[i, j] U^T V_NT, R[i, j] =
x[i, j] U^T W_NT, the cost is O(n^3 r + n^2 r^2), and the partition is (p_root U) . x[0, n]. Values are
probabilities with one log scale per span (the largest part of each sum divided out), so nothing
underflows and no logarithm or exponential is taken per rank entry. The scales carry no gradient: the
value a span stands for is x * exp(scale), and the gradient through x alone is the exact one.

A span bias (`span_bias`, log weights (B, n+1, n+1)) multiplies each span's value by exp(bias[i, j]) by adding it to
the span's scale: the partition becomes sum over trees of p(tree) exp(sum of its spans' biases), what parse-focusing
trains (Park and Kim 2024: each tree reweighted by its spans' teacher votes), and its marginals are that
distribution's. Being in the scale it carries no gradient of its own, and the passes keep their shape.

Chart constraints (`keep`, booleans (B, n+1, n+1): the spans a cheap parser finds likely; Roark et al. 2012) restrict
the sums to the trees whose every span is kept: a span left out weighs PRUNED in its scale, as a span bias would (so
the pruned partition is the biased one, exactly), and its work is skipped: its split points' weights are zero (the C
sums skip a zero weight), its values as children and its gradient's product are never computed (the two products of
rank r x 2r per span are most of a parse). What is skipped would have added exactly zero to every kept span.

A span's marginal probability is d log Z / d log x[i, j] = sum_r x[i, j, r] dlogZ/dx[i, j, r] (x is
homogeneous in each span's weight), so one backward pass gives every span's marginal. That pass is written out
(`_outside`, the outside pass, each split point's gradient added in place into its children's): `marginals` runs it
without autograd, and the partition's backward is it (`_Inside`); `argmax` is the minimum-Bayes-risk (MBR) tree of
those marginals by the CKY (cky.py), as the TN-PCFG paper evaluates. `labels` gives each span of a tree its most
probable nonterminal: the A with the largest inside(i, j, A) * outside(i, j, A) (the outside from the gradients at
L and R).

Both passes' sums over split points are bound by memory traffic, not arithmetic: on a CPU they run in C
(split_points.c, one pass over each span's children per width; rank_sums.py), on a GPU as tensor ops over every
split point of a width at once (strided views of the chart: a few ops a width, so it is not bound by launching an op
per split point), on a CPU without the C sums one split point at a time (SPLIT_POINTS_AT_ONCE_ON_CPU), and with
bfloat16 products the chart keeps the spans' values as children in bfloat16, as the products give them. No value is
read back to the host inside a pass (`_Whole`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .. import trees
from ..trees import Tree
from . import rank_sums as native
from .tree_crf import TreeCRF

TINY = 1e-30  # the smallest scale divided out of a span's values (an impossible span stays 0, not NaN)
PRUNED = -1e9  # the log weight of a span the chart constraints leave out (exp of it is 0 in float32)
# the tensor-op sums over split points: every split point of a width at once (a few ops a width: what a GPU, bound by
# launching ops, needs), or one split point at a time added in place (what a CPU without the C sums runs fastest:
# 2x at 16 x 40 words, the batched form's copies of every split point's children being memory traffic); the tests
# set it to run the batched form on the CPU too
SPLIT_POINTS_AT_ONCE_ON_CPU = False


def _at_once(tensor: Tensor) -> bool:
    return tensor.device.type != "cpu" or SPLIT_POINTS_AT_ONCE_ON_CPU


@dataclass(frozen=True)
class Leaves:
    """Words' values as a left and a right child in the rank space, `values` (..., 2r) divided by exp(`scale`) (...):
    where the inside pass starts. A batch's (B, n) from its words' emission; a parse's grammar keeps its whole
    vocabulary's (V) once and reads a batch's words from it (`at`): the product over the T preterminals, a
    (B n, T) x (T, 2r) product a batch, is then a row read a word."""

    scale: Tensor
    values: Tensor

    @classmethod
    def of(cls, emission: Tensor, left: Tensor, right: Tensor, products: torch.dtype | None = None) -> Leaves:
        """From `emission` (..., T) log p(T -> w) and the preterminals' rows of V and W, `left`, `right` (T, r), in
        `products` (None: float32); the values carry gradients to all three."""
        scale = emission.detach().amax(-1)
        return cls(scale, _children((emission - scale[..., None]).exp(), torch.cat([left, right], dim=1), products))

    def at(self, words: Tensor) -> Leaves:
        """A vocabulary's leaves (V, ...) read at a batch's `words` (B, n) ids."""
        ids = words.reshape(-1)
        return Leaves(self.scale.index_select(0, ids).view(words.shape),
                      self.values.index_select(0, ids).view(*words.shape, self.values.shape[-1]))


class RankSpaceCFG:
    """A batch of B sentences (`lengths`, padded to n words) under a grammar of NT nonterminals and T preterminals
    whose binary rules factor through rank r: `root` (NT,) p(S -> A); `head` (NT, r) U; `left`, `right`
    (NT + T, r) V and W; `emission` (B, n, T) log p(T -> w_i) of each word, or its words' `Leaves` made already (a
    parse's grammar keeps its vocabulary's). `products`: the dtype of the rank-space products (None: float32). The
    partition carries gradients to all of them; marginals, trees and labels are computed without. `span_bias` (B, n+1,
    n+1): each span's log weight (width 2 and more; None: none); `keep` (B, n+1, n+1) booleans: the chart constraints,
    the spans the sums may use (None: every span), see above. A sentence's kept spans must hold a binary tree of it (a
    pruner's best tree, say), else its log Z is about PRUNED."""

    def __init__(self, root: Tensor, head: Tensor, left: Tensor, right: Tensor, emission: Tensor | Leaves,
                 lengths: Sequence[int], products: torch.dtype | None = None, span_bias: Tensor | None = None,
                 keep: Tensor | None = None):
        nt = head.shape[0]
        leaves = emission if isinstance(emission, Leaves) else Leaves.of(emission, left[nt:], right[nt:], products)
        self.lengths, self.products, self.n = list(lengths), products, leaves.scale.shape[1]
        self.keep = None if keep is None else keep.to(leaves.scale.device)
        if keep is not None:  # a span left out weighs exp(PRUNED): the restricted sums, exactly
            pruned = torch.zeros_like(self.keep, dtype=leaves.scale.dtype).masked_fill_(~self.keep, PRUNED)
            span_bias = pruned if span_bias is None else span_bias.detach() + pruned
        self.span_bias = None if span_bias is None else span_bias.detach()
        self.root_rule, self.head, self.left_nt, self.right_nt = root, head, left[:nt], right[:nt]
        self.to_children = torch.cat([head.t() @ self.left_nt, head.t() @ self.right_nt], dim=1)  # (r, 2r): U^T V, U^T W
        self.root = root @ head  # (r,): p_root U
        self.leaf_scale = leaves.scale  # (B, n)
        self.leaves = leaves.values  # each word's values as a left and a right child (B, n, 2r), / exp(leaf_scale)

    @functools.cached_property
    def chart(self) -> Chart:
        """The inside pass (log Z of a sentence of one word, which no binary rule covers, is 0)."""
        chart = Chart.of_words(self.leaf_scale)
        chart.log_z = _Inside.apply(self.leaves, self.to_children, self.root, chart, self.lengths, self.products,
                                    self.span_bias, self.keep)
        return chart

    @property
    def partition(self) -> Tensor:
        """log Z of each sentence (B,), with gradients."""
        return self.chart.log_z

    @functools.cached_property
    def _outside_pass(self) -> tuple[list, list]:
        with torch.no_grad():
            return _outside(self.chart, self.lengths, self.to_children, self.root, self.products)

    @property
    def kept_spans(self) -> tuple[int, int]:
        """How many spans of two or more words the chart constraints kept, of how many (each sentence's own)."""
        total = sum(n * (n - 1) // 2 for n in self.lengths)
        if self.keep is None:
            return total, total
        return sum(int(self.keep[b, : n + 1, : n + 1].triu(2).sum()) for b, n in enumerate(self.lengths)), total

    @functools.cached_property
    def marginals(self) -> Tensor:
        """(B, n+1, n+1) the marginal probability of every span of two or more words (i < j)."""
        grad_x, chart = self._outside_pass[0], self.chart
        batch, n = len(self.lengths), self.n
        marginals = self.root.new_zeros(batch, n + 1, n + 1, dtype=torch.float)
        with torch.no_grad():
            for w in range(2, n + 1):
                starts = torch.arange(n - w + 1)
                marginals[:, starts, starts + w] = (chart.x[w] * grad_x[w]).sum(-1).float()
        return marginals

    @property
    def child_gradients(self) -> list[Tensor]:
        """The gradients of log Z at each width's values as a left and a right child, widths 2 .. n-1
        (B, n-w+1, 2r): the outside values the labels are read from."""
        return self._outside_pass[1][2 : self.n]

    def argmax(self, words: Sequence[Sequence[str]]) -> list[Tree]:
        """Each sentence's MBR tree: the most expected spans, over `words`."""
        return TreeCRF(self.marginals, self.lengths).argmax(words)

    @torch.no_grad()
    def labels(self, found: Sequence[Tree]) -> list[dict[tuple[int, int], int]]:
        """Each span of each tree of `found` (two or more words) with its most probable nonterminal's index: the
        largest inside(i, j, A) * outside(i, j, A), both up to the span's scale; the spans of a width at once."""
        as_children = torch.cat([self.left_nt, self.right_nt], dim=1).t()  # (2r, NT): U^T's way back
        spans = [(b, i, j) for b, tree in enumerate(found) for i, j in trees.spans(tree, whole=True)]
        by_width: dict[int, list[tuple[int, int, int]]] = {}
        for span in spans:
            by_width.setdefault(span[2] - span[1], []).append(span)
        labels: list[dict[tuple[int, int], int]] = [{} for _ in found]
        device = self.head.device  # every index and mask beside the chart (a CPU mask on a GPU chart is an error)
        for w, group in by_width.items():
            rows = torch.tensor([b for b, _, _ in group], device=device)
            starts = torch.tensor([i for _, i, _ in group], device=device)
            inside = self.chart.x[w][rows, starts] @ self.head.t()  # (spans, NT)
            whole = torch.tensor([w == self.lengths[b] for b, _, _ in group], device=device)[:, None]  # root outside
            if whole.all():
                outside = self.root_rule.expand_as(inside)
            else:
                outside = torch.where(whole, self.root_rule, self.child_gradients[w - 2][rows, starts] @ as_children)
            for (b, i, j), best in zip(group, (inside * outside).argmax(-1).tolist()):
                labels[b][i, j] = best
        return labels


@dataclass
class Chart:
    """The inside pass over a batch, by span width w (index w; 0 and, for x, 1 are unused): x[w] (B, n-w+1, r)
    the normalised inside values in the rank space, left[w]/right[w] (B, n-w+1, r) the spans' values as a left or
    right child (in the products' dtype); by span, scale[:, i, j] the log scale of the span i..j's values (the split
    points' views read it: `_children_views`) and keep[:, i, j] the chart constraints (every word kept; None: all)."""

    x: list[Tensor | None]
    scale: Tensor  # (B, n+1, n+1)
    left: list[Tensor | None]
    right: list[Tensor | None]
    log_z: Tensor  # (B,)
    weights: list[Tensor | None]  # (B, n-w+1, w-1): each split point's share of a span's sum (its scales', constants)
    norm: list[Tensor | None]  # (B, n-w+1): what each span's sum was divided by (a constant)
    keep: Tensor | None = None  # (B, n+1, n+1)

    @classmethod
    def of_words(cls, leaf_scale: Tensor) -> Chart:
        """A batch's chart before the inside pass: its words' log scales (B, n) and nothing wider."""
        batch, n = leaf_scale.shape
        scale = leaf_scale.new_zeros(batch, n + 1, n + 1)
        torch.diagonal(scale, 1, 1, 2).copy_(leaf_scale)
        return cls([None, None], scale, [None], [None], leaf_scale.new_zeros(batch), [None, None], [None, None])

    def kept(self, w: int) -> Tensor | None:
        """(B, n-w+1) the chart constraints of the spans of width w (a view; None: every span)."""
        return None if self.keep is None else torch.diagonal(self.keep, w, 1, 2)


def _rounded(tensor: Tensor, products: torch.dtype | None) -> Tensor:
    return tensor if products is None else tensor.to(products)


def _children(x: Tensor, weight: Tensor, products: torch.dtype | None) -> Tensor:
    """x @ weight in `products` (None: in x's dtype), left in that dtype: the chart keeps its spans' values as
    children as a bfloat16 product gives them (exactly, in half the bytes of float32)."""
    return _rounded(x, products) @ _rounded(weight, products)


def _product(x: Tensor, weight: Tensor, products: torch.dtype | None) -> Tensor:
    """x @ weight in `products`, rounded back to float32 (None: in x's dtype)."""
    return x @ weight if products is None else _children(x, weight, products).float()


def _on_kept(product: Callable[[Tensor], Tensor], x: Tensor, kept: Tensor | None, width: int, zeros: bool = True
             ) -> Tensor:
    """product(x) (B, spans, r) -> (B, spans, width) on the kept rows alone (kept None: every row): the chart
    constraints' saving, a product of the kept spans only. The other rows are zero for the tensor-op sums, which
    multiply every row (by a weight 0 here); the C sums never read them (`zeros` False: left unwritten)."""
    if kept is None:
        return product(x)
    rows = kept.nonzero(as_tuple=True)  # read back to the host: the constraints are for a CPU's parse
    found = product(x[rows])  # (kept, width)
    out = found.new_zeros(*x.shape[:2], width) if zeros else found.new_empty(*x.shape[:2], width)
    out[rows] = found
    return out


def _combine(chart: Chart, w: int, n: int, sums: native.Inside | None, kept: Tensor | None = None
             ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """x and the log scale of every span of width w: sum over split points d of L[i, i+d] * R[i+d, i+w] (in C with
    `sums`, else as a few tensor ops over every split point at once); and the split points' weights and the norm that
    x was divided by (constants, for `_outside`). Under chart constraints a split point weighs 0 where the span or
    either child is left out (the C sums skip it): x is 0 for a span left out, and its values as children are never
    computed (`_on_kept`). The split points' scales and constraints are read as views of the span tables
    (`_children_views`)."""
    starts = n - w + 1
    scales = torch.add(*_children_views(chart.scale, w, starts))
    top = scales.amax(2)
    weights = (scales - top[..., None]).exp()  # (B, starts, w-1), constants
    if kept is not None:
        weights = weights * (kept[..., None] & torch.logical_and(*_children_views(chart.keep, w, starts)))
    if sums:
        x = sums.combine(weights, w, chart.left[1].shape[2])
    elif _at_once(weights):  # (left * weight) * right, in float32 as the children's products are promoted
        x = ((_split_points(chart.left, w, starts, 1) * weights[..., None])
             * _split_points(chart.right, w, starts, 0)).sum(2)
    else:
        x = weights.new_zeros(*weights.shape[:2], chart.left[1].shape[2])
        for d in range(1, w):  # a split point at a time, added in place
            x.addcmul_(chart.left[d][:, :starts] * weights[..., d - 1, None], chart.right[w - d][:, d : d + starts])
    norm = x.amax(-1).clamp_min(TINY)
    return x / norm[..., None], top + norm.log(), weights, norm


def _children_views(table: Tensor, w: int, starts: int) -> tuple[Tensor, Tensor]:
    """(B, starts, w-1) views of a contiguous (B, n+1, n+1) table of spans (table[:, i, j]: the span i..j): for every
    span i..i+w of width w and split point d = 1 .. w-1, its left child's entry table[:, i, i+d] and its right child's
    table[:, i+d, i+w], strided views without a copy."""
    s0, s1, s2 = table.stride()
    size, at = (table.shape[0], starts, w - 1), table.storage_offset()
    return (table.as_strided(size, (s0, s1 + s2, s2), at + s2), table.as_strided(size, (s0, s1 + s2, s1), at + s1 + w * s2))


def _split_points(by_width: list, w: int, starts: int, left: int) -> Tensor:
    """(B, starts, w-1, ...): for every span of width w (by its start i) and split point d = 1 .. w-1, its left
    child's entry (`left` = 1: by_width[d] at i) or its right child's (by_width[w-d] at i+d), stacked from views of
    the chart (one copy, not an op per split point)."""
    return torch.stack([by_width[d][:, :starts] if left else by_width[w - d][:, d : d + starts] for d in range(1, w)],
                       dim=2)


def _outside(chart: Chart, lengths: Sequence[int], to_children: Tensor, root: Tensor, products: torch.dtype | None,
             whole: _Whole | None = None, words: bool = False) -> tuple[list, list]:
    """The gradients of the sum of log Z over the batch (each sentence's weighted by `whole`'s seed, where given) at every
    width's x and at its values as a left and a right child, side by side (B, n-w+1, 2r) as the chart's `both`
    (None below width 2, and at width 1 unless `words`), from the widest span down: the inside pass's backward
    written out. In C each span's gradients as a child are pulled from its parents once theirs are known (each row
    written once); as tensor ops every split point of a width at once (`_Shares`)."""
    n, rank = len(chart.x) - 1, root.shape[0]
    low = 1 if words else 2
    from_children = _rounded(to_children.t(), products)  # once, not per width
    grad_x = [None, None] + [torch.zeros_like(chart.x[w]) for w in range(2, n + 1)]
    whole = whole or _Whole(chart, lengths, root)
    for length in sorted(set(lengths) - {0, 1}):  # log Z = log(x[0, n] . root) + scale: its gradient at x[0, n]
        grad_x[length][:, 0] += whole.seeded(length)
    in_c = native.usable(root, chart.left[1])
    sums: native.Outside | _Shares | _SharesBySplitPoint
    if in_c or not _at_once(root):
        grad_children = [None] * low + [None if t is None else (root.new_empty if in_c else root.new_zeros)(
            *t.shape[:2], 2 * rank) for t in chart.left[low:]]  # C writes each row whole; the tensor ops add into it
        halves = ([None if t is None else t[..., :rank] for t in grad_children],
                  [None if t is None else t[..., rank:] for t in grad_children])
        sums = (native.Outside(chart.left, chart.right, chart.weights, *halves) if in_c
                else _SharesBySplitPoint(chart, *halves, low))
    else:
        grad_children = [None] * (n + 1)
        sums = _Shares(chart, grad_children, len(lengths), n, rank)
    for w in range(n, 1, -1):
        if w < n:  # x -> its values as a left and a right child, once every wider span has given its share
            sums.pull(w)  # a span the chart constraints left out: x 0 whatever its values, no gradient
            grad_x[w] += _on_kept(lambda g: _product(g, from_children, products), grad_children[w], chart.kept(w), rank)
        sums.keep(w, grad_x[w] / chart.norm[w][..., None])
    if low == 1:
        sums.pull(1)
    return grad_x, grad_children


class _Shares:
    """The outside pass's sums over split points as tensor ops: x[i, i+w] = sum_d weight_d L[i, i+d] R[i+d, i+w] /
    norm, so a width's gradient `spread` gives each left child d its share times R, each right child w-d its share
    times L. Every split point of a width at once: the shares are added where the children's gradients lie as
    strided views, a left child's by [width, start] and a right child's by [width, end] (for a span's split points
    the left children share its start, the right ones its end), a few ops a width on any device."""

    def __init__(self, chart: Chart, grad_children: list, batch: int, n: int, rank: int):
        self.chart, self.grad_children, self.n = chart, grad_children, n
        self.by_start = chart.weights[n].new_zeros(batch, n + 1, n + 1, rank)
        self.by_end = chart.weights[n].new_zeros(batch, n + 1, n + 1, rank)

    def keep(self, w: int, spread: Tensor) -> None:
        """Add width w's shares (spread: its gradient divided by each span's norm) into its children's."""
        starts = self.n - w + 1
        share = spread[:, :, None] * self.chart.weights[w][..., None]  # (B, starts, w-1, r): by split point d
        self.by_start[:, 1:w, :starts] += (share * _split_points(self.chart.right, w, starts, 0)).transpose(1, 2)
        self.by_end[:, 1:w, w:] += (share * _split_points(self.chart.left, w, starts, 1)).transpose(1, 2).flip(1)

    def pull(self, w: int) -> None:
        """Width w's gradients as a left and a right child, side by side (every wider span has added its share)."""
        self.grad_children[w] = torch.cat([self.by_start[:, w, : self.n - w + 1], self.by_end[:, w, w:]], dim=-1)


class _SharesBySplitPoint:
    """`_Shares`' sums one split point at a time, each parent's share added in place into its children's gradients as
    the parent goes (`grad_left`, `grad_right`: views of each width's gradients as children, from width `low`)."""

    def __init__(self, chart: Chart, grad_left: list, grad_right: list, low: int):
        self.chart, self.grad_left, self.grad_right, self.low = chart, grad_left, grad_right, low

    def keep(self, w: int, spread: Tensor) -> None:
        starts, chart = spread.shape[1], self.chart
        for d in range(1, w):
            share = spread * chart.weights[w][..., d - 1, None]
            if d >= self.low:
                self.grad_left[d][:, :starts].addcmul_(share, chart.right[w - d][:, d : d + starts])
            if w - d >= self.low:
                self.grad_right[w - d][:, d : d + starts].addcmul_(share, chart.left[d][:, :starts])

    def pull(self, w: int) -> None:
        """Nothing to gather: every share went straight into the children's gradients."""


class _Inside(torch.autograd.Function):
    """log Z of each sentence from the words' rank-space values `first` (B, n, 2r: as a left child, as a right
    child), the map of a span's values to its values as children `to_children` (r, 2r) and the root's `root`
    (r,); the chart (given empty) is filled as it goes. Its backward is the outside pass written out
    (`_outside`): each split point's gradient added in place into its children's, where autograd through the
    chart's slices filled and added a chart-sized tensor per split point (a fifth of a training step)."""

    @staticmethod
    def forward(ctx, first: Tensor, to_children: Tensor, root: Tensor, chart: Chart, lengths: Sequence[int],
                products: torch.dtype | None, span_bias: Tensor | None, keep: Tensor | None) -> Tensor:
        rank, n = root.shape[0], first.shape[1]
        rounded = _rounded(to_children, products)  # once, not per width
        sums = native.Inside(n) if native.usable(root, first) else None
        if keep is not None:
            chart.keep = keep.contiguous().clone()
            torch.diagonal(chart.keep, 1, 1, 2).fill_(True)

        def add_children(w: int, both: Tensor | None) -> None:  # width w's values as a left and a right child
            chart.left.append(None if both is None else both[..., :rank])
            chart.right.append(None if both is None else both[..., rank:])
            if sums and both is not None:
                sums.add(w, chart.left[w], chart.right[w])

        add_children(1, first)
        for w in range(2, n + 1):
            starts = torch.arange(n - w + 1, device=first.device)
            kept = chart.kept(w)
            x, scale, weights, norm = _combine(chart, w, n, sums, kept)
            if span_bias is not None:  # each span's weight, in its scale (see the module's docstring)
                scale = scale + span_bias[:, starts, starts + w].to(scale.dtype)
            chart.x.append(x)
            torch.diagonal(chart.scale, w, 1, 2).copy_(scale)
            chart.weights.append(weights)
            chart.norm.append(norm)
            add_children(w, _on_kept(lambda v: _children(v, rounded, products), x, kept, 2 * rank, zeros=sums is None)
                         if w < n else None)
        # a copy sharing the chart's lists: the chart itself will hold log Z, whose graph holds ctx (a cycle that
        # only the cyclic collector would free, chart and all, long after the step)
        ctx.chart, ctx.lengths, ctx.products = replace(chart), lengths, products
        ctx.save_for_backward(to_children, root)
        return _Whole(chart, lengths, root).log_z

    @staticmethod
    def backward(ctx, grad_log_z: Tensor):
        to_children, root = ctx.saved_tensors
        chart, lengths, products = ctx.chart, ctx.lengths, ctx.products
        whole = _Whole(chart, lengths, root, grad_log_z)
        _, grads = _outside(chart, lengths, to_children, root, products, whole, words=True)
        rank, n = root.shape[0], len(chart.x) - 1
        grad_children = torch.zeros_like(to_children)
        for w in range(2, n):
            grad_children += _product(chart.x[w].reshape(-1, rank).t(), grads[w].reshape(-1, 2 * rank), products)
        grad_root = whole.grad_root
        return grads[1], grad_children, grad_root, None, None, None, None, None


class _Whole:
    """Each sentence's whole span: its x (B, r), its total x . root and what log Z does with it, as batched tensor ops
    (no value read back to the host: a GPU never waits on a sentence). A sentence of fewer than two words has log Z 0
    and no gradient; a total at or below TINY is clamped there, without a gradient."""

    def __init__(self, chart: Chart, lengths: Sequence[int], root: Tensor, seed: Tensor | None = None):
        zero = root.new_zeros(root.shape[0])
        self.lengths = lengths
        self.x = torch.stack([chart.x[n][b, 0] if n >= 2 else zero for b, n in enumerate(lengths)])
        scale = torch.stack([chart.scale[b, 0, n] if n >= 2 else zero[0] for b, n in enumerate(lengths)])
        total = self.x @ root
        parsed = torch.tensor([n >= 2 for n in lengths]).to(root.device, non_blocking=True)
        self.log_z = torch.where(parsed, total.clamp_min(TINY).log() + scale, 0.0)
        live = parsed & (total > TINY)
        weight = seed if seed is not None else torch.ones_like(total)
        self.coefficient = torch.where(live, weight / total.clamp_min(TINY), 0.0)  # d(sum of seeded log Z) / d total
        self.root = root

    def seeded(self, length: int) -> Tensor:
        """(B, r): the gradient at x[0, n] of the sentences of `length` words (zero rows for the others)."""
        rows = torch.tensor([n == length for n in self.lengths]).to(self.root.device, non_blocking=True)
        return torch.where(rows[:, None], self.coefficient[:, None] * self.root, 0.0)

    @property
    def grad_root(self) -> Tensor:
        return (self.coefficient[:, None] * self.x).sum(0)
