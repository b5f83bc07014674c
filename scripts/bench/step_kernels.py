"""How many kernels one time step of an ON-LSTM layer launches in the tensor-op steps (the GPU's: each op a launch),
forward and backward: aten ops that compute or copy, views left out, counted over sequences of two lengths so that
what runs once per sequence drops out. The weight is left unpacked, as on a GPU. Runs on the CPU in seconds.

    python scripts/bench/step_kernels.py [--batch 4] [--hidden 16] [--chunk 4] [--products fp32|bf16]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ["GRAMMAR_INDUCE_NATIVE"] = "0"  # the tensor-op steps, which a GPU runs
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from grammar_induce.families.onlstm import products
from grammar_induce.families.onlstm.recurrence import recurrence

VIEWS = {"view", "select", "slice", "as_strided", "unbind", "transpose", "t", "unsqueeze", "squeeze", "expand",
         "detach", "alias", "_unsafe_view", "permute", "split", "reshape", "lift_fresh", "empty", "new_empty"}


class Kernels(TorchDispatchMode):
    """Counts the aten ops that run inside it, views and allocations left out."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func.__name__.split(".")[0] not in VIEWS
        return func(*args, **(kwargs or {}))


def kernels(steps: int, batch: int, hidden: int, chunk: int, products: torch.dtype | None) -> tuple[int, int]:
    """(forward, backward) kernels of one layer over `steps` steps, with a bias and every output's gradient, its
    products in `products` (None: float32)."""
    n = hidden // chunk
    gates = 4 * hidden + 2 * n
    x, h0 = torch.randn(steps, batch, gates, requires_grad=True), torch.randn(batch, hidden, requires_grad=True)
    c0, weight = torch.randn(batch, hidden), (torch.randn(gates, hidden) * 0.05).requires_grad_()
    bias = torch.randn(gates, requires_grad=True)
    reduced = weight if products is None else weight.detach().to(products).requires_grad_()  # as the layer gives it
    with Kernels() as forward:
        hs, _, forget, inputs = recurrence(x, h0, c0, reduced, n, bias)
    loss = hs.sum() + forget.sum() + inputs.sum()
    with Kernels() as backward:
        loss.backward()
    return forward.count, backward.count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--chunk", type=int, default=4)
    parser.add_argument("--products", choices=("fp32", "bf16"), default="fp32")
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.products == "bf16" else None
    products.PACK_FROM = 10**9  # no MKL or oneDNN layout: the plain product a GPU runs
    short, long = (kernels(steps, args.batch, args.hidden, args.chunk, dtype) for steps in (10, 20))
    forward, backward = ((b - a) / 10 for a, b in zip(short, long))
    print(f"kernels a time step: forward {forward:g}, backward {backward:g}, in all {forward + backward:g}")


if __name__ == "__main__":
    main()
