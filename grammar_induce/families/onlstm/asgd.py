"""Averaged SGD, as the paper's code switches to it: torch.optim.ASGD with its update in one C pass per weight on a
CPU (asgd.c).

torch's ASGD makes about seven passes over every weight a step (the weight decay's sum, the decay, the update, the
average's difference, its scaling and its sum), where fused SGD makes one. The C pass reads the gradient, the
weight and its average once and writes the weight and the average: at the paper's size the optimizer's step took
17.9 ms against torch's 78.3 (fused SGD 11.8) on a 2-core Intel Xeon with AMX. The state is torch's (step, eta, mu,
ax), so a checkpoint of either loads into the other; where the pass cannot run (another device or dtype, a sparse
or non-contiguous tensor, an option torch's step has and this one does not, no compiler) torch's own step runs.
Like fused SGD it takes a clipping scale (runtime/clipping.py).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor

from ...runtime import native

SOURCE = Path(__file__).with_name("asgd.c")


@functools.cache
def _library() -> ctypes.CDLL | None:
    return native.load_procedures(
        SOURCE, {"asgd_update": [ctypes.c_long] + [ctypes.c_void_p] * 3 + [ctypes.c_float] * 5}, threads=True)


class ASGD(torch.optim.ASGD):
    """torch.optim.ASGD (lr, lambd, alpha, t0, weight_decay as there), its update in C where it can run."""

    def __init__(self, params, lr: float = 0.01, lambd: float = 1e-4, alpha: float = 0.75, t0: float = 1e6,
                 weight_decay: float = 0.0):
        super().__init__(params, lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay)
        self._step_supports_amp_scaling = True  # it reads `grad_scale`, as torch's fused optimizers do

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        scale: Tensor | None = getattr(self, "grad_scale", None)
        lib = _library() if native.enabled() else None
        if lib is None or not all(_fits(p, group) for group in self.param_groups for p in group["params"]):
            if scale is not None:
                for group in self.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            p.grad.div_(scale)
            super().step()
            return loss
        divisor = 0.0 if scale is None else scale.item()  # 0: none
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(lib, p, group, divisor)
        return loss

    def _update(self, lib: ctypes.CDLL, p: Tensor, group: dict, scale: float) -> None:
        """One weight's step, as torch's single-tensor ASGD makes it."""
        state = self.state[p]
        if not state:  # as torch's: its scalars float64 where that is the default dtype, else float32
            scalar = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
            state.update(step=torch.zeros((), dtype=scalar), eta=torch.tensor(float(group["lr"]), dtype=scalar),
                         mu=torch.ones((), dtype=scalar), ax=torch.zeros_like(p))
        state["step"] += 1
        lr, lambd = float(group["lr"]), group["lambd"]
        eta, mu = state["eta"].item(), state["mu"].item()
        lib.asgd_update(p.numel(), p.data_ptr(), p.grad.data_ptr(), state["ax"].data_ptr(), group["weight_decay"],
                        1 - lambd * eta, -eta, mu, scale)
        step = state["step"].item()
        state["eta"].fill_(lr / ((1 + lambd * lr * step) ** group["alpha"]))
        state["mu"].fill_(1 / max(1, step - group["t0"]))


def _fits(p: Tensor, group: dict) -> bool:
    """Whether the C pass can take this weight with these options."""
    if p.grad is None:
        return True
    plain = not (group["maximize"] or group["capturable"] or group["differentiable"] or group["foreach"])
    return (plain and p.device.type == "cpu" and p.dtype == torch.float32 and p.is_contiguous()
            and p.grad.layout == torch.strided and p.grad.is_contiguous() and p.grad.dtype == torch.float32)
