"""One weight multiplied many times at one shape (a recurrence's hidden map at every time step), laid out once.

On a CPU, MKL (float32) and oneDNN (bfloat16: AMX or AVX-512 BF16) copy a plain weight into their blocked layout
inside every product. At a recurrence's shapes, 20 rows by a 1,150 x 4,830 weight seventy times a batch, that copy
is a quarter to a third of each product's time. `RepeatedProduct` lays the weight out once, with the libraries'
own packing (the ops torch's compiler uses for frozen weights), and runs each product on the packed copy; where
torch has no such op for the device or dtype it runs the plain product. Laying out costs about four products'
time and saves a quarter to a third of each, so it is done only for `uses` of PACK_FROM or more. A transposed weight
(backpropagation's products) is first copied transposed in C (transpose.c), which torch does on one thread, slowly.

In bfloat16 on a CPU's bfloat16 units, oneDNN multiplies some transposed operands slowly (on AMX some at about half
speed): `left_operand`, `linear_product` and `transposed_left_product` copy what pays to copy first (the rules and
figures are theirs).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor

from ...runtime import native, precision

PACK_FROM = 16  # products with one weight, from which laying it out once pays
# oneDNN (torch 2.13) multiplies a transposed bfloat16 right operand on AMX at about half speed from about 3,000
# columns of the result (1,400 x 1,150 by 1,150 x N: 14.8 against 15.4 ms at N = 2,560, 32.8 against 17.5 at 3,200, on
# a 2-core Intel Xeon with AMX); a contiguous copy of the weight pays from about 512 rows of input (1.3x at 700 rows
# of 400 x 4,830, 0.76x at 200 of 1,150 x 4,830).
SLOW_TRANSPOSED_RIGHT_FROM, ROWS_FOR_A_COPY = 3000, 512
COPIES_LEFT_ON = ("AMX", "AVX-512 BF16")  # the bfloat16 units where `left_operand` copies (measured on both)


class RepeatedProduct:
    """x -> x @ weight.t() (with `transposed`, x @ weight) for x of `rows` rows in weight's dtype, the weight laid out
    once for `uses` of them.

    The weight must not change while this is in use (a DropConnect mask is fixed for a batch)."""

    def __init__(self, weight: Tensor, rows: int, uses: int = PACK_FROM, transposed: bool = False):
        self.weight, self.rows = (weight.t() if transposed else weight), rows  # (out, in)
        self.packed: Tensor | None = None
        self.library = "plain"  # or "mkl", "onednn": which packed the weight (a name, not a bound method: no cycle)
        if weight.device.type != "cpu" or uses < PACK_FROM or (weight.requires_grad and torch.is_grad_enabled()):
            return  # the packed products have no gradient
        try:
            if weight.dtype == torch.float32 and torch.backends.mkl.is_available():
                self.weight = transposed_copy(weight) if transposed else weight.contiguous()  # MKL is given it too
                self.packed, self.library = torch.ops.mkl._mkl_reorder_linear_weight(self.weight, rows), "mkl"
            elif weight.dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported():
                plain = transposed_copy(weight) if transposed else weight
                self.packed, self.library = torch.ops.mkldnn._reorder_linear_weight(plain, rows), "onednn"
        except (AttributeError, RuntimeError):  # a torch without the packing ops (or without oneDNN)
            self.packed, self.library = None, "plain"

    def __call__(self, x: Tensor) -> Tensor:
        if self.packed is None or x.shape[0] != self.rows:
            return x @ self.weight.t()
        if self.library == "mkl":
            return torch.ops.mkl._mkl_linear(x, self.packed, self.weight, None, self.rows)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [None], "")


TRANSPOSE_SOURCE = Path(__file__).with_name("transpose.c")


@functools.cache
def _transpose_library() -> ctypes.CDLL | None:
    arguments = [ctypes.c_long] * 2 + [ctypes.c_void_p] * 2
    names = ("transpose16", "transpose32", "transpose_to_bf16", "transpose_from_bf16")
    return native.load_procedures(TRANSPOSE_SOURCE, dict.fromkeys(names, arguments), threads=True)


# transpose.c's copies: of 2- and 4-byte entries as they are, and of float32 into bfloat16 and back, converted
_SAME_WIDTH, _CONVERTING = {2: "transpose16", 4: "transpose32"}, {
    (torch.float32, torch.bfloat16): "transpose_to_bf16", (torch.bfloat16, torch.float32): "transpose_from_bf16"}


def left_operand(x: Tensor) -> Tensor:
    """x as the left operand of a product, where x is a transposed view (the gate gradients laid out gates by tokens,
    for a weight's gradient): a contiguous copy in bfloat16 on x86's bfloat16 units, where oneDNN multiplies a
    transposed left operand slowly (1,400 x 4,830 by 1,400 x 1,150: on a 2-core Intel Xeon with AMX 54 against 27 ms,
    the copy 15 ms; on a 2-core AMD EPYC with AVX-512 BF16 49.3 against 43.3 ms, the copy 2.6 ms); elsewhere the view
    as it is (MKL, in float32, reads either; oneDNN's bfloat16 without the units, held below them by
    ONEDNN_MAX_CPU_ISA, multiplied the contiguous copy six times slower; Arm's are unmeasured)."""
    units = _bf16_units(x)
    if not x.is_contiguous() and any(name in units for name in COPIES_LEFT_ON):
        return transposed_copy(x.t())
    return x


def linear_product(x: Tensor, weight: Tensor) -> Tensor:
    """x @ weight.t() for x (M, K) and weight (N, K) in x's dtype (the weight converted where it is in another), the
    product of a linear map, on `linear_operand`'s layout of the weight."""
    return x @ linear_operand(x, weight)


def linear_operand(x: Tensor, weight: Tensor) -> Tensor:
    """weight (N, K) as the right operand of x @ weight.t(), (K, N) in x's dtype: where oneDNN multiplies the
    transposed weight slowly (see SLOW_TRANSPOSED_RIGHT_FROM) and x has rows enough, a contiguous copy of weight.t(),
    converted in the same pass (an input map of 1,400 tokens by a 4,830 x 1,150 weight: 45.1 -> 24.3 + 5.2 ms for
    the copy; from float32, 8.1 -> 6.1 ms for the conversion and the copy), else a view of the converted weight. A
    backward product by it, g @ operand.t(), reads either at full speed (its result has K columns, 1,150 or fewer
    here)."""
    if copies_linear_weight(x, weight):
        return transposed_copy(weight, x.dtype)
    return weight.to(x.dtype).t()


def copies_linear_weight(x: Tensor, weight: Tensor) -> bool:
    """Whether linear_operand lays weight.t() out contiguous for x (in the products' dtype)."""
    return (_amx_bfloat16(x) and weight.shape[0] >= SLOW_TRANSPOSED_RIGHT_FROM
            and x.shape[0] >= ROWS_FOR_A_COPY)


def transposed_left_product(a: Tensor, b: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """a.t() @ b for a (K, M) and b (K, N), in `dtype` (None: theirs). Where a transposed left operand is slow (see
    left_operand) and N < M, the transposed copy of b.t() @ a (converted in the copy's pass), which copies K N + N M
    entries where left_operand would copy a's K M: the decoder's weight gradient (10,000 words by 400, from 1,400
    tokens) 36.1 -> 28.5 ms with both copies, on a 2-core Intel Xeon with AMX."""
    if swaps_transposed_left(a, b):
        return transposed_copy(transposed_copy(b) @ a, dtype)
    product = a.t() @ b
    return product if dtype is None else product.to(dtype)


def swaps_transposed_left(a: Tensor, b: Tensor) -> bool:
    """Whether transposed_left_product multiplies b.t() @ a (contiguous) for a.t() @ b."""
    return _amx_bfloat16(a) and b.shape[1] < a.shape[1]


def _amx_bfloat16(x: Tensor) -> bool:
    """Whether x is bfloat16 on a CPU with AMX, where oneDNN multiplies some transposed operands at about half speed."""
    return "AMX" in _bf16_units(x)


def _bf16_units(x: Tensor) -> str:
    """The CPU's bfloat16 units (precision.cpu_bf16_units) where oneDNN multiplies x on them, else ''."""
    if x.device.type != "cpu" or x.dtype != torch.bfloat16 or not _onednn_bfloat16():
        return ""
    return precision.cpu_bf16_units() or ""


@functools.cache
def _onednn_bfloat16() -> bool:
    """Whether oneDNN multiplies bfloat16 on the CPU's bfloat16 units (not where ONEDNN_MAX_CPU_ISA holds it below
    them, or where torch has no oneDNN)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def transposed_copy(x: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """x.t().contiguous() of a 2-D x, in `dtype` (None: x's): in C on a CPU (2- and 4-byte elements, and float32 <->
    bfloat16 converted as torch converts, in the same pass; strips split over threads), else torch's copy."""
    dtype = dtype or x.dtype
    name = _SAME_WIDTH.get(dtype.itemsize) if dtype == x.dtype else _CONVERTING.get((x.dtype, dtype))
    name = name if x.device.type == "cpu" and native.enabled() else None
    lib = _transpose_library() if name else None
    if lib is None:  # `to` alone returns a view where the dtype is x's
        return x.t().contiguous() if dtype == x.dtype else x.t().to(dtype, memory_format=torch.contiguous_format)
    x = x.contiguous()
    out = x.new_empty(x.shape[1], x.shape[0], dtype=dtype)
    getattr(lib, name)(x.shape[0], x.shape[1], x.data_ptr(), out.data_ptr())
    return out
