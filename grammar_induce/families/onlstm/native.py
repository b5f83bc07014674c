"""The CPU time step of an ON-LSTM layer in C (onlstm_step.c), compiled on first use.

On a CPU the time loops spend more time on a dozen small tensor ops per step than on their
arithmetic; one C call per step does the same maths in a single pass. The library is built
with the system C compiler (`$CC`, else `cc`) into a per-user cache and loaded with ctypes.
Without a compiler, on other devices and dtypes, or with GRAMMAR_INDUCE_NATIVE=0, the model
runs its tensor-op steps instead: same function, slower on a CPU.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("onlstm_step.c")
# -ffast-math lets gcc call glibc's vector exp and tanh (libmvec). It is for compiling only:
# linking a shared library with it would switch the whole process to flushing denormals to zero.
COMPILE_FLAGS = ["-O3", "-march=native", "-ffast-math", "-fPIC", "-std=c99", "-c"]
LINK_FLAGS = (["-shared", "-lmvec", "-lm"], ["-shared", "-lm"])  # the first where there is a libmvec
TYPE_FLAGS = {torch.float32: [], torch.float64: ["-DDOUBLE"]}
INT, POINTER = ctypes.c_int, ctypes.c_void_p


def usable(tensor: torch.Tensor) -> bool:
    """Whether the C step can run on this tensor's device and dtype (and is enabled and built)."""
    return (tensor.device.type == "cpu" and tensor.dtype in TYPE_FLAGS
            and os.environ.get("GRAMMAR_INDUCE_NATIVE", "1") != "0" and library(tensor.dtype) is not None)


@functools.cache
def library(dtype: torch.dtype) -> ctypes.CDLL | None:
    """The compiled steps for `dtype` (forward_step, backward_step), or None when they cannot be built here."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        return None
    flags = COMPILE_FLAGS + TYPE_FLAGS[dtype]
    key = hashlib.sha256("\0".join([SOURCE.read_text(), compiler, *flags, _cpu_signature()]).encode()).hexdigest()
    path = _cache_dir() / f"onlstm_step_{str(dtype).removeprefix('torch.')}_{key[:16]}.so"
    if not path.exists() and not _build(compiler, flags, path):
        return None
    try:
        lib = ctypes.CDLL(str(path))
    except OSError:
        return None
    lib.forward_step.restype = lib.backward_step.restype = None
    lib.forward_step.argtypes = [INT] * 3 + [POINTER] * 6
    lib.backward_step.argtypes = [INT] * 3 + [POINTER] * 8
    return lib


def _build(compiler: str, flags: list[str], path: Path) -> bool:
    """Compile and link into temporary files, then rename: ranks of a distributed run may build at once."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=path.parent))
    except OSError:  # no writable cache
        return False
    try:
        obj, lib = work / "step.o", work / "step.so"
        if not _run([compiler, *flags, str(SOURCE), "-o", str(obj)]):
            return False
        if not any(_run([compiler, str(obj), "-o", str(lib), *link]) for link in LINK_FLAGS):
            return False
        os.replace(lib, path)
        return True
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, check=False).returncode == 0
    except OSError:
        return False


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "grammar-induce"


def _cpu_signature() -> str:
    """What -march=native depends on, so a cache shared between machines never loads a foreign build."""
    try:
        flags = [line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")]
    except OSError:
        flags = []
    return platform.machine() + platform.processor() + (flags[0] if flags else "")
