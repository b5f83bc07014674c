"""Work replayed from CUDA graphs: a function of tensors run once into a graph, then relaunched as one call.

On a GPU a recurrence's time steps are many small kernels each (the ON-LSTM's: 13 a step forward and 12 backward,
scripts/bench/step_kernels.py), and the host's launches, not the card, set the pace. A CUDA graph records a function's kernels
once for given input shapes and relaunches all of them at once. `Replayed` keeps a graph per shape (the inputs'
shapes, dtypes and strides, and the caller's own key), made on a shape's second use (a shape seen once, such as a
parsing batch's, runs as it is: recording costs about two runs), within a budget of memory.

What a graph needs, and how it is met here:
- fixed addresses: the inputs are copied into the graph's own tensors before each replay, and its outputs, which the
  next replay overwrites, are copied out after it (a `Replayed` call returns tensors of its own, as the function);
- no host synchronisation and no copy from host memory inside the function (constants made by fill kernels);
- one stream, one call at a time (a backward's graphs are recorded on autograd's thread, with errors for unsafe
  calls from that thread only: a DDP run's NCCL threads go on meanwhile): the graphs share one memory pool, which is
  safe because every replay's outputs are copied out before the next one (a graph's scratch memory may be another's
  outputs, read by then).

The CPU stand-in (`record_eager`) runs the function at each replay and writes its results over the recorded outputs: the
same copies in and out, so that the machinery is tested where there is no GPU. GRAMMAR_INDUCE_CUDA_GRAPHS=0 turns
graphs off (the per-kernel launches, for comparisons).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

Record = Callable[[Callable[[], Any], torch.device], tuple[Callable[[], None], Any]]  # -> (replay, fn's outputs)


def enabled(device: torch.device) -> bool:
    """Whether work on `device` is replayed from CUDA graphs (on CUDA, unless GRAMMAR_INDUCE_CUDA_GRAPHS=0)."""
    return device.type == "cuda" and os.environ.get("GRAMMAR_INDUCE_CUDA_GRAPHS", "1") != "0"


_POOLS: dict[torch.device, Any] = {}


def record_cuda(fn: Callable[[], Any], device: torch.device) -> tuple[Callable[[], None], Any]:
    """`fn` run once on a side stream (cuBLAS sets up its workspace on a first call, which a graph cannot hold), then
    recorded into a graph in `device`'s shared pool; replayed on that device's current stream."""
    with torch.cuda.device(device):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        if device not in _POOLS:
            _POOLS[device] = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=_POOLS[device], capture_error_mode="thread_local"):
            outputs = fn()

    def replay() -> None:
        with torch.cuda.device(device):
            graph.replay()
    return replay, outputs


def record_eager(fn: Callable[[], Any], device: torch.device) -> tuple[Callable[[], None], Any]:
    """The CPU stand-in for `record_cuda`: a replay runs `fn` and writes its results over the recorded outputs."""
    recorded = fn()

    def replay() -> None:
        for kept, new in zip(_tensors(recorded), _tensors(fn())):
            kept.copy_(new)
    return replay, recorded


class Replayed:
    """`fn(*inputs)` (a tuple of tensors or Nones in, a tuple or NamedTuple of tensors or Nones out) run from a graph
    kept per (key, the inputs' shapes, dtypes and strides). `fn` must give the same results for the same input
    values: no random draws, nothing read from elsewhere that changes between calls.

    A graph holds its inputs and outputs for good: the graphs kept hold at most `budget` bytes (default: an eighth
    of the device's memory). A shape past it runs as it is, and keeps doing so: the shapes that came first (in
    training, the common BPTT lengths) keep their graphs, and none is recorded again and again. Where recording
    fails (a CUDA or driver that refuses something in `fn`), a warning says so once and everything runs as it is:
    slower, never wrong."""

    def __init__(self, record: Record = record_cuda, budget: int | None = None, from_use: int = 2):
        self.record, self.budget, self.from_use = record, budget, from_use
        self.graphs: dict[tuple, _Graph] = {}
        self.uses: dict[tuple, int] = {}
        self.held = 0  # bytes the graphs kept hold
        self.declined: set[tuple] = set()  # shapes past the budget
        self.failed: str | None = None  # why recording failed, after which nothing is recorded

    def __call__(self, key: tuple, fn: Callable[..., Any], inputs: Sequence[Tensor | None]) -> Any:
        key = (key, *(_signature(x) for x in inputs))
        graph = self.graphs.get(key)
        if graph is None:
            self.uses[key] = self.uses.get(key, 0) + 1
            if key in self.declined or self.failed or self.uses[key] < self.from_use:
                return fn(*inputs)
            try:
                graph = _Graph(fn, inputs, self.record)
            except RuntimeError as error:
                self.failed = str(error).splitlines()[0] if str(error) else type(error).__name__
                warnings.warn(f"CUDA graphs could not be recorded here ({self.failed}): the time steps run kernel by "
                              "kernel (GRAMMAR_INDUCE_CUDA_GRAPHS=0 says so without trying)", stacklevel=2)
                return fn(*inputs)
            if self.held + graph.bytes > self._budget(graph.device):
                self.declined.add(key)
                return graph(inputs)  # this once, then as it is
            self.graphs[key], self.held = graph, self.held + graph.bytes
        return graph(inputs)

    def _budget(self, device: torch.device) -> int:
        if self.budget is None:
            self.budget = torch.cuda.get_device_properties(device).total_memory // 8
        return self.budget


class _Graph:
    """One recorded call: its input tensors (copied into before each replay), its outputs (copied out after)."""

    def __init__(self, fn: Callable[..., Any], inputs: Sequence[Tensor | None], record: Record):
        self.inputs = [None if x is None else x.detach().clone(memory_format=torch.preserve_format) for x in inputs]
        self.fn = fn  # kept: whatever it holds, the graph may read
        self.device = next(x.device for x in self.inputs if x is not None)
        self.replay, self.outputs = record(lambda: fn(*self.inputs), self.device)
        held = {id(x): x for x in [*self.inputs, *_tensors(self.outputs)] if x is not None}
        self.bytes = sum(x.numel() * x.element_size() for x in held.values())

    def __call__(self, inputs: Sequence[Tensor | None]) -> Any:
        for kept, x in zip(self.inputs, inputs):
            if kept is not None:
                kept.copy_(x)
        self.replay()
        return _copied(self.outputs)


def _signature(x: Tensor | None) -> tuple | None:
    return None if x is None else (tuple(x.shape), x.stride(), x.dtype, x.device)


def _tensors(outputs: Any) -> list[Tensor]:
    return [x for x in outputs if isinstance(x, Tensor)]


def _copied(outputs: Any) -> Any:
    """outputs (a tuple or NamedTuple) with each tensor copied, a tensor given twice copied once (and given twice)."""
    copies: dict[int, Tensor] = {}
    values = [copies.setdefault(id(x), x.clone()) if isinstance(x, Tensor) else x for x in outputs]
    return type(outputs)(*values) if hasattr(outputs, "_fields") else type(outputs)(values)
