"""Large CPU tensors on huge pages, and freed memory kept for reuse by a CPU training run and the command line.

A training step frees and makes again the same large tensors every time (a layer's activations and gate gradients:
tens of megabytes each at the paper's size). glibc's malloc hands blocks that large back to the kernel when they are
freed and maps fresh ones for the next step, and the kernel zeroes every 4 kB page at its first touch: about 40,000
page faults and 0.15 s of system time a bf16 training step at the paper's size (a 2-core Intel Xeon with AMX). Told to serve such blocks
from its heap and to keep what is freed there, it reuses them: no faults, the same peak memory (the next step
needs the same blocks). A parse's batches are the same: the command line keeps freed memory too (`grammar-induce
parse --model ptb-pcfg` of the 3,370 PTB validation lines: system time 0.62 → 0.40 s, wall 0.95x, peak memory +1%,
on a 2-core AMD EPYC with AVX-512 BF16). In one arena: glibc gives each thread that allocates an arena of its own,
and each arena kept its own freed blocks, so a parse reading two batches at once (runtime/threads.py) peaked at
778-832 MiB where one arena, as fast, peaks at 596-604 (the same parse, `farm-bench`, the same machine).

torch puts tensors of 2 MB and more on transparent huge pages where THP_MEM_ALLOC_ENABLE=1 when it first allocates
(set after that, it does nothing): a training batch's hundreds of MB of fresh activations fault in fewer pages, and
an ON-LSTM's products, which read megabytes of weights at every step, and transposed copies take fewer address
translations (`ptb-pair` bf16 parsing 1.08-1.11x, a transposed copy of 1,400 x 4,830 bfloat16 about 2x, on a 2-core
Intel Xeon with AMX).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # glibc's mallopt parameters
KEEP_BYTES = 1 << 30  # blocks up to this size come from the heap, and the heap keeps up to this much freed


@functools.cache
def keep_freed_memory() -> bool:
    """Have glibc keep freed blocks for reuse, in one arena for every thread, for the rest of the process (a training
    process, and the command line's: a library call that only parses leaves the process's allocator alone). False
    where the C library is not glibc."""
    if platform.system() != "Linux":
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # another C library (musl has no libc.so.6 and no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(parameter, value) for parameter, value in ((M_MMAP_THRESHOLD, KEEP_BYTES),
                                                                  (M_TRIM_THRESHOLD, KEEP_BYTES), (M_ARENA_MAX, 1)))


def ask_for_huge_pages() -> None:
    """THP_MEM_ALLOC_ENABLE=1 unless it is set (0 opts out): effective only before torch's first allocation, so the
    CLI and `train` call it before they make any tensor; importing the package does not."""
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
