"""Matrix products in bfloat16 where the hardware has bfloat16 units; float32 for everything else.

Precisions (config.PRECISIONS) are "fp32" (the paper's numbers, the default), "bf16" and "auto"
(fp32 without bfloat16 hardware; with it, whichever of the two ran a probe of the work to be done faster
here, measured once a process: on some CPUs bf16 pays only at large shapes). Under bf16 the model's matrix products (the input
maps, but for their master-gate rows in evaluation, the hidden map at every step, the decoder,
and their gradients) take bfloat16 inputs and weights; the gates, cell state, master gates, softmax and
cumsum, the loss and the weights the optimizer updates stay float32 (see onlstm/recurrence.py's
linear, the recurrence's per-step products and backward_map). A workflow resolves the requested precision once (`resolve`) and passes its
`product_dtype` to the model's forward explicitly (`products=`); no autocast is involved.

Without bfloat16 hardware, torch emulates the products and they run slower than float32:
asking for bf16 there is refused rather than silently slow.
"""

from __future__ import annotations

import functools
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import UserError

FULL_PARTS = "gates, cell state, master gates, loss and weights in float32"

# CPU feature flags (Linux /proc/cpuinfo) that mean native bfloat16 matrix arithmetic.
CPU_BF16_FLAGS = {"amx_bf16": "AMX", "avx512_bf16": "AVX-512 BF16", "bf16": "Arm BF16"}


def bf16_hardware(device: torch.device) -> str | None:
    """What gives this device native bfloat16 matrix products, or None where it has none."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device) if torch.cuda.is_bf16_supported(including_emulation=False) else None
    if device.type == "cpu":
        return cpu_bf16_units()
    return None


@functools.cache
def cpu_bf16_units() -> str | None:
    found = [name for flag, name in CPU_BF16_FLAGS.items() if flag in _cpu_flags()]
    return " + ".join(found) or None


def _cpu_flags() -> set[str]:
    """The CPU's feature flags: Linux's /proc/cpuinfo (x86 "flags", Arm "Features"), or macOS's sysctl."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            answer = subprocess.run(["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True, text=True,
                                    check=False)
            return {"bf16"} if answer.stdout.strip() == "1" else set()
        except OSError:
            pass
    return set()


def resolve(precision: str, device: torch.device, probe: Probe | None = None) -> str:
    """fp32 or bf16 for `precision` on `device`; bf16 without the hardware is a UserError. `auto` is fp32 without
    bfloat16 hardware; with it, and a `probe` of the work to be run (`probe.run(dtype)` does it once), the
    precision that ran it faster here (`measure`); without a probe, bf16."""
    if precision == "fp32":
        return "fp32"
    if precision == "auto" and bf16_hardware(device) is not None and probe is not None:
        return measure(probe, device)
    if bf16_hardware(device) is not None:
        return "bf16"
    if precision == "auto":
        return "fp32"
    raise UserError(f"precision bf16: this {device.type.upper()} has no bfloat16 matrix hardware "
                    f"({'AMX, AVX-512 BF16 or Arm BF16' if device.type == 'cpu' else 'bf16 support'}), so bf16 "
                    "would run slower than fp32 here; use fp32, or auto to choose bf16 only where it helps")


@dataclass(frozen=True)
class Probe:
    """The work `auto` measures: `run(dtype)` does it once with matrix products in `dtype` (None: float32);
    `key` names it (the model's kind and sizes, the batch shape), so each is measured once a process."""

    key: tuple
    run: Callable[[torch.dtype | None], object]


MEASURED: dict[tuple, tuple[float, float]] = {}  # probe key -> (fp32 seconds, bf16 seconds)
REPEATS = 2


def measure(probe: Probe, device: torch.device) -> str:
    """bf16 if the probe's work ran faster in bfloat16 than in float32 here (medians of REPEATS runs each,
    alternated, after one of each to warm up), else fp32: never slower than float32."""
    key = (str(device), *probe.key)
    if key not in MEASURED:
        times: dict[torch.dtype | None, list[float]] = {None: [], torch.bfloat16: []}
        for k in range(REPEATS + 1):
            for dtype, seen in times.items():
                start = time.perf_counter()
                probe.run(dtype)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                if k:
                    seen.append(time.perf_counter() - start)
        MEASURED[key] = (statistics.median(times[None]), statistics.median(times[torch.bfloat16]))
    fp32, bf16 = MEASURED[key]
    return "bf16" if bf16 < fp32 else "fp32"


def measured_note(probe: Probe | None, device: torch.device) -> str:
    """What `auto` measured for this probe, for the log ("" when it measured nothing)."""
    if probe is None or (str(device), *probe.key) not in MEASURED:
        return ""
    fp32, bf16 = MEASURED[(str(device), *probe.key)]
    return f" (auto measured this work at {1000 * fp32:.0f} ms in fp32, {1000 * bf16:.0f} ms in bf16)"


def describe(requested: str, resolved: str, device: torch.device, reduced_parts: str = "matrix products in bfloat16",
             full_parts: str = FULL_PARTS, probe: Probe | None = None, kept: bool = False) -> str:
    """One line for the log: which precision each part runs in (`reduced_parts`: what runs in bfloat16, the
    model kind's BF16_PARTS; `full_parts`: what stays float32, its FP32_PARTS), and why (`kept`: `auto` kept what
    the resumed run was trained in)."""
    measured = measured_note(probe, device) if requested == "auto" else ""
    if kept:
        measured = " (auto: kept from the run resumed)"
    if resolved == "bf16":
        return f"precision bf16 ({bf16_hardware(device)}){measured}: {reduced_parts}; {full_parts}"
    if measured:
        return f"precision auto -> fp32{measured}: everything in float32"
    if requested == "auto":
        return f"precision auto -> fp32: this {device.type.upper()} has no bfloat16 matrix hardware; everything in float32"
    return "precision fp32: everything in float32"


PRODUCT_DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}  # None: float32, as the paper


def product_dtype(resolved: str) -> torch.dtype | None:
    """The dtype the model's matrix products run in for a resolved precision (fp32 or bf16)."""
    return PRODUCT_DTYPES[resolved]
