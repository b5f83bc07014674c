"""Batches read two at a time on a CPU, each on a thread of its own with half of torch's threads.

At the shipped student's size a parse's torch work gains little from a second core (oneDNN's LSTM over batches of 64
sentences, 200 units a direction), and a third of its time is Python (ids, trees) while the other core waits. Two
batches at once, on two threads with one torch thread each, keep both cores busy: torch's operations and the C passes
release the interpreter's lock, so one thread's products run while the other's Python does (`en` on a 2-core Intel
Xeon with AMX: 1.2-1.3x the sentences a second, the same trees). A model whose products keep both cores busy loses by
it (the ON-LSTM pair there: 0.9x, each thread streaming the whole weights): a model kind says whether it reads so
(`Family.lanes`). A PCFG whose chart is pruned is many small steps and its pruner's BiLSTM, and reads so (`ptb-pcfg`
on the 3,370 PTB validation lines, a 2-core AMD EPYC: about 1.2x); over the whole chart its products keep both cores
busy (0.6x in lanes), and it reads a batch at a time. The caller hands the longest batches first, so that the lanes
end on short ones, not on the longest alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

LANES = 2  # batches at once where a model kind reads so
In, Out = TypeVar("In"), TypeVar("Out")


def map_in_threads(fn: Callable[[In], Out], items: Sequence[In], device: torch.device, lanes: int = LANES
                   ) -> Iterator[Out]:
    """fn(item) for each item, in order. On a CPU with at least `lanes` (2 or more) torch threads, `lanes` items at a
    time, each on a thread with an equal share of torch's threads, without gradients (as the callers read); elsewhere
    here."""
    total = torch.get_num_threads()
    if lanes < 2 or device.type != "cpu" or total < lanes or len(items) < 2:
        yield from map(fn, items)
        return

    def run(item: In) -> Out:
        with torch.no_grad():
            return fn(item)

    # each thread's own OpenMP and MKL threads, set once as it starts
    pool = ThreadPoolExecutor(lanes, thread_name_prefix="grammar-induce-read", initializer=torch.set_num_threads,
                              initargs=(total // lanes,))
    try:
        yield from pool.map(run, items)
    finally:
        pool.shutdown(cancel_futures=True)
        torch.set_num_threads(total)  # also what threads made later start with
