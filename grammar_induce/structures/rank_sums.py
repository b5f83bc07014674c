"""The rank-space CFG's sums over split points in C (split_points.c), compiled on first use (runtime/native.py).

With tensor ops each split point of a width costs two or three ops, each a pass over every span of that width: the
sums are bound by memory traffic (and, for short sentences, by Python's loop over the split points). One C call per
width makes one pass over each span's children. On other devices and dtypes, or where the C code cannot be built
(no compiler, GRAMMAR_INDUCE_NATIVE=0), rank_cfg.py runs its tensor ops instead: the same sums, slower on a CPU.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from ..runtime import native

SOURCE = Path(__file__).with_name("split_points.c")
CHILD_FLAGS = {torch.float32: (), torch.bfloat16: ("-DBF16_CHILDREN",)}  # the dtypes of the chart's children
INT, POINTER = ctypes.c_int64, ctypes.c_void_p


class _Part(ctypes.Structure):
    """A chart tensor of one width as split_points.c reads it: its address and strides (in elements)."""

    _fields_ = [("data", POINTER), ("batch_stride", INT), ("span_stride", INT)]


def usable(values: Tensor, children: Tensor) -> bool:
    """Whether the C sums can run on these values (x, weights, gradients: float32) and the chart's children (float32
    or bfloat16) on their device (and are enabled and built)."""
    return (values.device.type == "cpu" and values.dtype == torch.float32 and children.dtype in CHILD_FLAGS
            and native.enabled() and library(children.dtype) is not None)


@functools.cache
def library(children: torch.dtype) -> ctypes.CDLL | None:
    return native.load_procedures(SOURCE, {"combine": [INT] * 4 + [POINTER] * 4,
                                           "outside": [INT] * 4 + [POINTER] * 6}, CHILD_FLAGS[children], threads=True)


def part(tensor: Tensor) -> _Part:
    """A chart tensor of one width, (B, spans, rank) with its rank entries adjacent."""
    assert tensor.dim() == 3 and tensor.stride(2) == 1
    return _Part(tensor.data_ptr(), tensor.stride(0), tensor.stride(1))


def parts(tensors: Sequence[Tensor | None]) -> ctypes.Array:
    """The chart's tensors by width (None where a width has none)."""
    found = (_Part * len(tensors))()
    for width, tensor in enumerate(tensors):
        if tensor is not None:
            found[width] = part(tensor)
    return found


class Inside:
    """The inside pass's sums in C: the chart's values as children (`add`, a width at a time as the pass makes them;
    float32 or bfloat16), and each new width's x from them (`combine`)."""

    def __init__(self, n: int):
        self.left, self.right = (_Part * (n + 1))(), (_Part * (n + 1))()
        self.children: torch.dtype | None = None

    def add(self, w: int, left: Tensor, right: Tensor) -> None:
        self.left[w], self.right[w] = part(left), part(right)
        self.children = left.dtype

    def combine(self, weights: Tensor, w: int, rank: int) -> Tensor:
        """(B, starts, rank): each span of width w's sum over its split points d of weights[..., d-1] L[i, i+d] *
        R[i+d, i+w] (`weights` (B, starts, w-1); every narrower width added)."""
        weights = weights.contiguous()  # held here: the C call reads it
        batch, starts = weights.shape[:2]
        x = weights.new_empty(batch, starts, rank)
        library(self.children).combine(batch, starts, w, rank, self.left, self.right, weights.data_ptr(),
                                       x.data_ptr())
        return x


class Outside:
    """The outside pass's sums in C: every span's gradient as a left and a right child (`grad_left`, `grad_right`:
    the chart's tensors' twins, float32), pulled from the spans it is a child of, whose gradients (`keep`) are known
    first, from the widest down."""

    def __init__(self, left: Sequence[Tensor | None], right: Sequence[Tensor | None], weights: Sequence[Tensor | None],
                 grad_left: Sequence[Tensor | None], grad_right: Sequence[Tensor | None]):
        self.batch, self.n, self.rank = left[1].shape
        self.children = left[1].dtype
        self.charts = tuple(map(parts, (left, right)))
        self.weights, self.grads = parts(weights), tuple(map(parts, (grad_left, grad_right)))
        self.spread = (_Part * (self.n + 1))()
        self.kept: list[Tensor] = []  # held while the C calls read them

    def keep(self, w: int, spread: Tensor) -> None:
        """The gradients at the spans of width w (B, n-w+1, rank), divided by their norm."""
        self.kept.append(spread := spread.contiguous())
        self.spread[w] = _Part(spread.data_ptr(), spread.stride(0), spread.stride(1))

    def pull(self, e: int) -> None:
        """Every span of width e's gradients as a left and a right child, written (every wider span's kept)."""
        library(self.children).outside(self.batch, self.n, e, self.rank, *self.charts, self.spread, self.weights,
                                       *self.grads)
