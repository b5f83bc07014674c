"""One weight multiplied many times at one shape (a recurrence's hidden map at every time step), laid out once.

On a CPU, MKL (float32) and oneDNN (bfloat16: AMX or AVX-512 BF16) copy a plain weight into their blocked layout
inside every product. At a recurrence's shapes, 20 rows by a 1,150 x 4,830 weight seventy times a batch, that copy
is a quarter to a third of each product's time. `RepeatedProduct` lays the weight out once, with the libraries'
own packing (the ops torch's compiler uses for frozen weights), and runs each product on the packed copy; where
torch has no such op for the device or dtype it runs the plain product. Laying out costs about four products'
time and saves a quarter to a third of each, so it is done only for `uses` of PACK_FROM or more.
"""

from __future__ import annotations

import torch
from torch import Tensor

PACK_FROM = 16  # products with one weight, from which laying it out once pays


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
                self.weight = self.weight.contiguous()  # MKL's packed product is given the plain weight too
                self.packed, self.library = torch.ops.mkl._mkl_reorder_linear_weight(self.weight, rows), "mkl"
            elif weight.dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported():
                # oneDNN lays out a transposed view directly (twice as fast as torch's copy of it, then packing)
                self.packed, self.library = torch.ops.mkldnn._reorder_linear_weight(self.weight, rows), "onednn"
        except (AttributeError, RuntimeError):  # a torch without the packing ops (or without oneDNN)
            self.packed, self.library = None, "plain"

    def __call__(self, x: Tensor) -> Tensor:
        if self.packed is None or x.shape[0] != self.rows:
            return x @ self.weight.t()
        if self.library == "mkl":
            return torch.ops.mkl._mkl_linear(x, self.packed, self.weight, None, self.rows)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [None], "")
