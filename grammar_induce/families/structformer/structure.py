"""StructFormer's structure maths (Shen et al., ACL 2021, section 4), from a sentence's syntactic distances and
heights to soft constituents and a soft dependency (parent) distribution. No parameters: model.py learns the
distances and heights and turns the parent distribution into its attention masks.

Conventions (the paper's code): for words 0..n-1, `distance[t]` scores the gap after word t (the last word's and
padding's are +BIG: a sentence ends there), `height[t]` is word t's height (padding's -BIG). A word t heads the
constituent [l, r] whose boundaries are the nearest gaps left and right of t with a distance above t's height;
the sigmoid of (height - distance) makes that soft:

    p(t's constituent reaches across gap k) = sigmoid((height[t] - distance[k]) * scale_d)
    p(left end <= l) = min_{l <= k < t} p(across k)       (a soft "and": the paper's cumulative minimum)
    p(left end = l)  = p(left end <= l) - p(left end <= l - 1)          (and the mirror for the right end)
    p(head of [l, r] = h) = softmax over h in l..r of height[h] * scale_h
    p(parent of t = h) = sum_{l, r} p(t's constituent = [l, r]) p(head of [l, r] = h)     (h != t)

The word of the greatest height is the root."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ...structures.arborescence import best_tree

BIG = 1e9  # the paper's stand-in for an infinite distance or height


def reverse_cummin(x: Tensor) -> Tensor:
    """Cumulative minimum over the last dimension, from the right."""
    return x.flip([-1]).cummin(-1)[0].flip([-1])


def calibrate(distance: Tensor, height: Tensor, words: Tensor, per_sentence: bool) -> Tensor:
    """Distances moved down by the margin the paper's code takes off: the largest, over spans [i, j], of how far
    both of the span's boundary gaps stand above the span's highest word (so that some word of every span can
    reach its boundary). `words`: (B, L) true at words (not padding). `per_sentence`: each sentence's own margin
    (parsing: the paper's evaluation reads one sentence at a time); else the batch's largest (its training)."""
    length = distance.shape[1]
    ones = torch.ones(length, length, dtype=torch.bool, device=distance.device)
    heights = height[:, None, :].expand(-1, length, -1)
    span_max = torch.cummax(heights.masked_fill(~ones.triu(0), -BIG), dim=-1)[0]  # [b, i, j]: max height[i..j]
    before = F.pad(distance[:, :-1], (1, 0), value=BIG)  # the gap before word i
    margin_left = torch.relu(before[:, :, None] - span_max)
    margin_right = torch.relu(distance[:, None, :] - span_max)
    margin = torch.minimum(margin_left, margin_right).masked_fill(~ones.triu(0), 0)
    last_gap = F.pad(words[:, 1:], (0, 1), value=False)  # a gap between two words
    spans = torch.cat([last_gap[:, None, :], words[:, None, :].expand(-1, length - 1, -1)], dim=1)
    margin = margin.masked_fill(~spans, 0)
    if per_sentence:
        return distance - margin.flatten(1).amax(1)[:, None]
    return distance - margin.max()


def boundary_probabilities(distance: Tensor, height: Tensor, scale: Tensor) -> tuple[Tensor, Tensor]:
    """(B, L, L) twice: [b, t, l] the probability that word t's constituent starts at word l, and [b, t, r] that
    it ends at word r."""
    across = torch.sigmoid((height[:, :, None] - distance[:, None, :]) * scale)  # [b, t, k]: reaches across gap k
    ones = torch.ones_like(across)
    left = reverse_cummin(across.tril(-1) + ones.triu(0))  # [b, t, l]: reaches at least to word l
    left = (left - F.pad(left[:, :, :-1], (1, 0), value=0)).tril(0)
    reach = across.triu(0) + ones.tril(-1)
    right = F.pad(reach[:, :, :-1], (1, 0), value=1).cummin(-1)[0]  # [b, t, r]: reaches at least to word r
    right = (right - F.pad(right[:, :, 1:], (0, 1), value=0)).triu(0)
    return left, right


def head_logits(height: Tensor, scale: Tensor) -> Tensor:
    return height * scale


def parents(distance: Tensor, height: Tensor, scales: Tensor) -> Tensor:
    """(B, L, L): [b, t, h] the probability that word h is word t's parent (0 on the diagonal), as the paper's
    code computes it (a (B, L, L, L) tensor of every span's head distribution: for training's short sentences)."""
    length = height.shape[1]
    left, right = boundary_probabilities(distance, height, scales[0])
    index = torch.arange(length, device=height.device)
    inside = (index[:, None, None] <= index[None, None, :]) & (index[None, None, :] <= index[None, :, None])
    logits = head_logits(height, scales[1])[:, None, None, :].expand(-1, length, length, -1)
    span_heads = torch.softmax(logits.masked_fill(~inside, -BIG), dim=-1)  # [b, l, r, h]
    parent = torch.einsum("bti,btj,bijh->bth", left, right, span_heads)
    return parent.masked_fill(torch.eye(length, dtype=torch.bool, device=height.device), 0)


@torch.no_grad()
def parents_long(distance: Tensor, height: Tensor, scales: Tensor) -> Tensor:
    """The same values as `parents` in O(L^2) memory (a line of a thousand words): the sum over each span's right
    end is a suffix sum, one left end at a time; in float64, as one softmax's weights serve every span."""
    batch, length = height.shape
    distance, height, scales = distance.double(), height.double(), scales.double()
    left, right = boundary_probabilities(distance, height, scales[0])
    logits = head_logits(height, scales[1])
    weight = (logits - logits.amax(1, keepdim=True)).exp()  # (B, L); a span's head softmax is weight / its sum
    totals = F.pad(weight.cumsum(1), (1, 0))  # totals[:, j + 1] - totals[:, i]: the weights of words i..j
    index = torch.arange(length, device=height.device)
    parent = torch.zeros(batch, length, length, dtype=weight.dtype, device=weight.device)
    for i in range(length):
        span_sums = (totals[:, i + 1 :] - totals[:, i : i + 1]).clamp(min=torch.finfo(weight.dtype).tiny)
        per_end = right[:, :, i:] / span_sums[:, None, :]  # [b, t, j] for j >= i
        suffix = per_end.flip(-1).cumsum(-1).flip(-1)  # [b, t, m]: the sum over ends j >= i + m
        ends = torch.maximum(index[:, None], index[None, i:])  # the least end of a span with t and h: max(t, h)
        reach = suffix.gather(2, (ends - i)[None].expand(batch, -1, -1))  # [b, t, h] for h >= i
        starts_here = left[:, :, i : i + 1] * (index[:, None] >= i)  # a span from i holds t only when t >= i
        parent[:, :, i:] += starts_here * reach * weight[:, None, i:]
    return parent.masked_fill(torch.eye(length, dtype=torch.bool, device=height.device), 0)


def heads_of(parent: Tensor, height: Tensor, lengths: list[int]) -> list[list[int]]:
    """Each sentence's dependency heads, 1-based, 0 for the root (its highest word), as the paper's evaluation
    reads them: every other word's most probable parent (which may make cycles: not always a tree)."""
    heads = (parent.argmax(-1) + 1).tolist()
    roots = height.argmax(-1).tolist()  # padding's heights are -BIG
    return [[0 if t == root else row[t] for t in range(n)] for row, root, n in zip(heads, roots, lengths)]


def tree_heads_of(parent: Tensor, height: Tensor, lengths: list[int]) -> list[list[int]]:
    """Each sentence's dependency tree, 1-based heads, 0 for the root (its highest word): the tree of the most
    probable parents together (Chu-Liu/Edmonds over their log-probabilities, structures/arborescence.py)."""
    scores = parent.float().clamp_min(1e-30).log().transpose(1, 2).tolist()  # [b][h][t]
    roots = height.argmax(-1).tolist()
    found = []
    for rows, root, n in zip(scores, roots, lengths):
        heads = best_tree([row[:n] for row in rows[:n]], root)
        found.append([h + 1 for h in heads])  # the root's -1 is 0
    return found
