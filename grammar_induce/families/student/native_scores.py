"""The student's span scores when parsing on a CPU as one C call (span_scores.c), compiled on first use.

model.SpanParser._scores materialises every span's features, (B, N+1, N+1, H) floats, to score them with one
product; the C pass scores only the spans the CKY reads (i < j), each from its two fenceposts, with no features
in memory. The same function to float rounding (the sum over H is ordered differently). Where it cannot be built,
or GRAMMAR_INDUCE_NATIVE=0, the model scores by tensor ops.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor

from ...runtime import native

SOURCE = Path(__file__).with_name("span_scores.c")


@functools.cache
def library() -> ctypes.CDLL | None:
    arguments = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 3 + [ctypes.c_float, ctypes.c_void_p]
    return native.load_procedures(SOURCE, {"span_scores": arguments}, threads=True)


def usable(x: Tensor) -> bool:
    """Whether the C pass can score these (float32, CPU) fencepost features here."""
    return x.device.type == "cpu" and x.dtype == torch.float32 and native.enabled() and library() is not None


def scores(rows: Tensor, columns: Tensor, weight: Tensor, bias: float) -> Tensor:
    """(B, P, P) scores, bias + weight . relu(columns[b, j] - rows[b, i]) for i < j, zeros elsewhere, from (B, P, H)
    `rows` and `columns` (float32) and the scoring layer's (H,) weight and bias."""
    batch, posts, hidden = rows.shape
    out = rows.new_zeros(batch, posts, posts)
    weight = weight.detach().contiguous()
    rows, columns = rows.contiguous(), columns.contiguous()  # no copy for the model's (fresh results of ops)
    library().span_scores(batch, posts, hidden, rows.data_ptr(), columns.data_ptr(), weight.data_ptr(), bias,
                          out.data_ptr())
    return out
