"""The CPU time step of an ON-LSTM layer in C (onlstm_step.c), compiled on first use (runtime/native.py), with
DropConnect's mask and the bf16 loss.

On a CPU the time loops spend more time on a dozen small tensor ops per step than on their
arithmetic; one C call per step does the same maths in a single pass (and the loss one pass over each row of
logits, not one per op). On other devices and dtypes, or where the C code cannot be built (no compiler,
GRAMMAR_INDUCE_NATIVE=0), the model runs its tensor ops instead: same function, slower on a CPU.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from ...runtime import native

SOURCE = Path(__file__).with_name("onlstm_step.c")
TYPE_FLAGS = {torch.float32: (), torch.float64: ("-DDOUBLE",)}
INT, POINTER = ctypes.c_int, ctypes.c_void_p


def usable(tensor: torch.Tensor) -> bool:
    """Whether the C step can run on this tensor's device and dtype (and is enabled and built)."""
    return (tensor.device.type == "cpu" and tensor.dtype in TYPE_FLAGS and native.enabled()
            and library(tensor.dtype) is not None)


@functools.cache
def library(dtype: torch.dtype) -> ctypes.CDLL | None:
    """The compiled steps for `dtype` (forward_step, backward_step, DropConnect's drop_connect and
    drop_connect_backward, locked dropout's scale_steps, and the bf16 loss's cross_entropy_rows and
    cross_entropy_with_gradient), or None when they cannot be built here."""
    return native.load_procedures(SOURCE, {
        "forward_step": [INT] * 3 + [POINTER] * 11,
        "backward_step": [INT] * 3 + [POINTER] * 12,
        "drop_connect": [ctypes.c_long, POINTER, POINTER, INT, POINTER, POINTER],
        "drop_connect_backward": [ctypes.c_long, POINTER, POINTER, POINTER, INT, POINTER],
        "scale_steps": [ctypes.c_long] * 2 + [POINTER] * 5,
        "cross_entropy_rows": [INT] * 2 + [POINTER] * 4,
        "cross_entropy_with_gradient": [INT] * 3 + [POINTER] * 3 + [ctypes.c_float] + [POINTER] * 3,
    }, TYPE_FLAGS[dtype], threads=True)
