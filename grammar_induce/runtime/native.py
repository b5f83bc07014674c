"""The package's C files compiled on first use with the system C compiler (`$CC`, else `cc`), cached per
user and machine, and loaded with ctypes.

On a CPU some loops spend more time on many small tensor ops (or Python) than on their arithmetic: the
ON-LSTM's time step (families/onlstm/onlstm_step.c), the student's span scores (families/student/span_scores.c),
the CKY's loop over widths and the span CRF's marginals (structures/cky.c), the TN-PCFG's sums over split points
(structures/split_points.c) and its emission's passes over the logits (families/pcfg/emission.c) run as one C call
instead, a transposed weight is copied in C (families/onlstm/transpose.c), DropConnect's random words are
drawn as torch's generator draws them (runtime/mt19937.c), and averaged SGD updates each weight in one pass
(families/onlstm/asgd.c). Without a compiler, without a writable cache, or with GRAMMAR_INDUCE_NATIVE=0, `load` gives None
and the callers run their tensor ops: the same function, slower.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

# -ffast-math lets gcc call glibc's vector exp and tanh (libmvec). It is for compiling only:
# linking a shared library with it would switch the whole process to flushing denormals to zero.
# On x86, gcc keeps to 256-bit vectors even where the CPU has AVX-512 unless told otherwise: the 512-bit exp and
# tanh run the time steps' gates 1.6x faster on AVX-512 machines (a preference only: AVX2 machines keep 256).
COMPILE_FLAGS = ["-O3", "-march=native", "-ffast-math", "-fPIC", "-std=c99", "-c",
                 *(["-mprefer-vector-width=512"] if platform.machine().lower() in ("x86_64", "amd64") else [])]
LINK_FLAGS = (["-shared", "-lmvec", "-lm"], ["-shared", "-lm"])  # the first where there is a libmvec
OPENMP = "-fopenmp"  # compiling and linking


def enabled() -> bool:
    """Whether native code may run (GRAMMAR_INDUCE_NATIVE=0 turns it off, for comparisons and fallbacks)."""
    return os.environ.get("GRAMMAR_INDUCE_NATIVE", "1") != "0"


def load(source: Path, flags: tuple[str, ...] = (), threads: bool = False) -> ctypes.CDLL | None:
    """`source` compiled (with COMPILE_FLAGS and `flags`) into the cache unless it is there, and loaded; None where
    it cannot be built or loaded here. With `threads`, built with OpenMP where the compiler has it (torch's own
    runtime, libgomp, already loaded: its threads, and torch.set_num_threads, serve both), else without (a build
    that failed once, such as OpenMP's where the compiler lacks it, is marked in the cache and not tried again).
    Callers cache what they load, and check `enabled()` where they run it."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        return None
    for extra in ([OPENMP], []) if threads else ([],):
        all_flags = COMPILE_FLAGS + list(flags) + extra
        key = hashlib.sha256("\0".join([source.read_text(), compiler, *all_flags, _cpu_signature()]).encode())
        path = _cache_dir() / f"{source.stem}_{key.hexdigest()[:16]}.so"
        failed = path.with_suffix(".failed")  # this build failed here before: not tried again in every process
        if not path.exists():
            if failed.exists():
                continue
            if not _build(compiler, all_flags, source, path, extra):
                _mark(failed)
                continue
        try:
            return ctypes.CDLL(str(path))
        except OSError:  # built but not loadable here (an OpenMP runtime missing at run time): the next build
            continue
    return None


def load_procedures(source: Path, signatures: dict[str, list], flags: tuple[str, ...] = (), threads: bool = False
                    ) -> ctypes.CDLL | None:
    """`load`, with each named function's argument types set (`signatures`: name -> ctypes types; they return
    nothing)."""
    lib = load(source, flags, threads)
    if lib is not None:
        for name, argtypes in signatures.items():
            function = getattr(lib, name)
            function.restype, function.argtypes = None, argtypes
    return lib


def _mark(failed: Path) -> None:
    """Leave `failed` in the cache (removing the cache folder tries every build again)."""
    try:
        failed.touch()
    except OSError:  # no writable cache: nothing was built either
        pass


def _build(compiler: str, flags: list[str], source: Path, path: Path, link_extra: list[str]) -> bool:
    """Compile and link into temporary files, then rename: ranks of a distributed run may build at once."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=path.parent))
    except OSError:  # no writable cache
        return False
    try:
        obj, lib = work / "code.o", work / "code.so"
        if not _run([compiler, *flags, str(source), "-o", str(obj)]):
            return False
        if not any(_run([compiler, str(obj), "-o", str(lib), *link, *link_extra]) for link in LINK_FLAGS):
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
