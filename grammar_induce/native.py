"""The CPU backward step of an ON-LSTM layer in C (onlstm_step.c), compiled on first use.

On a CPU the backward loop's time goes to a dozen small tensor ops per step rather than to
arithmetic; one C call per step does the same maths in a single pass. The library is built
with the system C compiler (`$CC`, else `cc`) into a per-user cache and loaded with ctypes.
Without a compiler, on other devices and dtypes, or with GRAMMAR_INDUCE_NATIVE=0, the model
uses its tensor-op loop instead: same function, slower on a CPU.
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
FLAGS = ["-O3", "-march=native", "-shared", "-fPIC", "-std=c99"]
C_TYPES = {torch.float32: "float", torch.float64: "double"}


def usable(tensor: torch.Tensor) -> bool:
    """Whether the C step can run on this tensor's device and dtype (and is enabled and built)."""
    return (tensor.device.type == "cpu" and tensor.dtype in C_TYPES
            and os.environ.get("GRAMMAR_INDUCE_NATIVE", "1") != "0" and library(tensor.dtype) is not None)


@functools.cache
def library(dtype: torch.dtype) -> ctypes.CDLL | None:
    """The compiled step for `dtype`, or None when it cannot be built here."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        return None
    flags = FLAGS + [f"-DREAL={C_TYPES[dtype]}"]
    key = hashlib.sha256("\0".join([SOURCE.read_text(), compiler, *flags, _cpu_signature()]).encode()).hexdigest()
    path = _cache_dir() / f"onlstm_step_{C_TYPES[dtype]}_{key[:16]}.so"
    if not path.exists() and not _compile(compiler, flags, path):
        return None
    try:
        lib = ctypes.CDLL(str(path))
    except OSError:
        return None
    lib.backward_step.restype = None
    lib.backward_step.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 8
    return lib


def _compile(compiler: str, flags: list[str], path: Path) -> bool:
    """Build into a temporary file, then rename: ranks of a distributed run may build at once."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
        os.close(fd)
    except OSError:  # no writable cache
        return False
    try:
        built = subprocess.run([compiler, *flags, str(SOURCE), "-o", tmp], capture_output=True, check=False)
        if built.returncode == 0:
            os.replace(tmp, path)
        return built.returncode == 0
    except OSError:
        return False
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "grammar-induce"


def _cpu_signature() -> str:
    """What -march=native depends on, so a cache shared between machines never loads a foreign build."""
    try:
        flags = [line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")]
    except OSError:
        flags = []
    return platform.machine() + platform.processor() + (flags[0] if flags else "")

