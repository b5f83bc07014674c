"""Full-range random int64s from torch's CPU generator, drawn in C (mt19937.c): the same values and the same state
after as `torch.randint(-2**63, 2**63 - 1, ...)`, several times faster.

DropConnect draws a 64-bit word for every four weights of a batch (about three million at the paper's size), and
torch draws them one at a time, about a thirtieth of a bf16 training step on an Intel Xeon with AMX. The C code
reads the generator's state (`Generator.get_state`, whose layout torch keeps for its saved states), draws, and writes
the state back (not atomically: a draw from the default generator in another thread meanwhile would be lost; the
training loop draws from one). Before it is first used, it draws beside torch from a private generator; where the
two disagree (a torch that lays its state out otherwise), or where the C code cannot be built, torch draws.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor

from . import native

SOURCE = Path(__file__).with_name("mt19937.c")
LOW, HIGH = -(2**63), 2**63 - 1  # torch.randint's bounds for every int64 but the largest
# torch's saved CPU generator state (CPUGeneratorImplStateLegacy, then two fields): the seed (int64), `left` and
# `seeded` (int32), `next` (uint64), then the state's words, each as a uint64.
LEFT, NEXT, STATE = 8, 16, 24
STATE_BYTES = 5056


def full_range_int64(count: int, device: torch.device | str = "cpu") -> Tensor:
    """`torch.randint(LOW, HIGH, (count,), dtype=torch.int64, device=device)`: on a CPU in C, where it draws the
    same."""
    if torch.device(device).type != "cpu" or not native.enabled() or not _agrees_with_torch():
        return torch.randint(LOW, HIGH, (count,), dtype=torch.int64, device=device)
    return _draw(count, torch.default_generator)


def _draw(count: int, generator: torch.Generator) -> Tensor:
    saved = generator.get_state()  # a copy, updated in place by the C draw (`next` is little-endian: its low half)
    base = saved.data_ptr()
    out = torch.empty(count, dtype=torch.int64)
    _library().full_range_int64(base + STATE, base + LEFT, base + NEXT, count, out.data_ptr())
    generator.set_state(saved)
    return out


@functools.cache
def _library() -> ctypes.CDLL | None:
    arguments = [ctypes.c_void_p] * 3 + [ctypes.c_int64, ctypes.c_void_p]
    return native.load_procedures(SOURCE, {"full_range_int64": arguments})


@functools.cache
def _agrees_with_torch() -> bool:
    """Whether the C draws equal torch's here: values and the state after, over sizes that cross the state's
    regeneration, from a private generator."""
    if _library() is None or torch.Generator().get_state().numel() != STATE_BYTES:
        return False
    ours, theirs = torch.Generator().manual_seed(20190101), torch.Generator().manual_seed(20190101)
    for count in (1, 311, 312, 313, 1000, 5):
        try:
            mine = _draw(count, ours)
        except RuntimeError:  # torch refused the state written back
            return False
        expected = torch.randint(LOW, HIGH, (count,), dtype=torch.int64, generator=theirs)
        if not torch.equal(mine, expected) or not torch.equal(ours.get_state(), theirs.get_state()):
            return False
    return True


def keep_mask(weight: Tensor, p: float) -> Tensor:
    """A Bernoulli(1 - p) mask of 0s and 1s shaped and typed like `weight`: random_bits >= keep_threshold.
    The mask is converted to the weight's dtype once: multiplying by a bool mask converts it again in the forward
    and in the backward product."""
    return (random_bits(weight) >= keep_threshold(p)).to(weight.dtype)


def random_bits(weight: Tensor) -> Tensor:
    """16 random bits per weight, as int16 shaped like it. Drawing the random numbers is most of DropConnect's cost,
    so four weights share one 64-bit draw (p is then resolved to 1/65536, against 2^-24 for a float draw), made in C
    on a CPU (torch's draws, faster)."""
    count = weight.numel()
    bits = full_range_int64((count + 3) // 4, weight.device)
    return bits.view(torch.int16)[:count].view(weight.shape)


def keep_threshold(p: float) -> int:
    """The int16 value from which random_bits keep their weight: kept with probability 1 - p."""
    return round(p * 65536) - 32768
