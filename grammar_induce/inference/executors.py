"""Where a parse runs, besides this process: in worker processes (each with its own copy of the models) or under
torchrun (chunk k on process k mod size, process 0 yielding every result); and the members' layers fixed once for
all of them (`fixed_layers`). Each runs lines.parse_chunk on a chunk at a time, in input order."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from multiprocessing import get_context
from typing import ClassVar

import torch

from ..families.checkpoint import LoadedModel
from ..messages import Messages, plural
from ..output.formats import SentenceResult
from ..runtime.distributed import World
from .ensemble import ParseOptions
from .lines import Line, parse_chunk, words_of
from .members import Members, chunk_lines

WORKER_BYTES = 250 * 2**20  # a parsing process's own memory besides its models (torch itself)


def worker_count(requested: int, chunks: list[list], batch_size: int, models: list[LoadedModel],
                 messages: Messages) -> int:
    """How many worker processes to parse in: those asked for, but no more than there are chunks of
    input, cores, or copies of the models that fit in half the memory available; a cap is noted."""
    model_bytes = sum(sum(t.numel() * t.element_size() for t in m.model.state_dict().values()) for m in models)
    fits = max(1, available_memory() // 2 // (WORKER_BYTES + model_bytes))
    lines = sum(len(chunk) for chunk in chunks)
    shown = f"{plural(lines, 'line')}" if len(chunks) < requested else f"at least {plural(lines, 'line')}"
    chunked = (f"the input is {shown}, {plural(len(chunks), 'chunk')} of up to {chunk_lines(batch_size):,} lines "
               "(a process parses a chunk at a time)")
    caps = [(len(chunks), chunked),
            (os.cpu_count() or 1, f"this machine has {os.cpu_count()} cores"),
            (fits, f"{fits} cop{'ies' if fits != 1 else 'y'} of the models fit in half the free memory")]
    count, why = min(caps, key=lambda cap: cap[0])
    count = max(1, count)
    if count < requested:
        messages.note(f"--workers {requested} capped at {count}: {why}")
        return count
    return requested


def available_memory() -> int:
    """Bytes of memory free for new processes (MemAvailable), else the free physical pages."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")



def fixed_layers(members: Members, first: list[Line], world: World) -> Members:
    """The members with every layer (and voting weight) fixed: chosen by agreement on the first chunk when asked to
    (on process 0, for every process), else as given."""
    sentences = [words for words in words_of(first) if words]
    if members.chooses and world.size > 1:
        chosen = members.with_layers_on(sentences).options if world.is_main else None
        return Members(members.models, world.gather_objects(chosen)[0])
    return members.with_layers_on(sentences)



def in_processes(members: Members, chunks: Iterable, all_layers: bool, workers: int
                        ) -> Iterator[list[SentenceResult]]:
    """Chunks parsed in `workers` processes, each with its own copy of the models (loaded from their
    files) and a share of the cores; in input order."""
    threads = max(1, (os.cpu_count() or 1) // workers)
    paths, device = [m.source for m in members.models], str(members.models[0].model.device)
    with get_context("spawn").Pool(workers, _Worker.start, (paths, device, threads)) as pool:
        yield from pool.imap(_Worker.parse, ((chunk, members.options, all_layers) for chunk in chunks))


class _Worker:
    """A worker process's models, loaded once when the process starts."""

    models: ClassVar[list[LoadedModel]] = []

    @classmethod
    def start(cls, paths: list[str], device: str, threads: int) -> None:
        from ..families.checkpoint import load

        torch.set_num_threads(threads)
        cls.models = [load(path, device) for path in paths]

    @classmethod
    def parse(cls, task: tuple[list, ParseOptions, bool]) -> list[SentenceResult]:
        chunk, options, all_layers = task  # the options with the layers fixed: the members were checked
        return parse_chunk(Members(cls.models, options), chunk, all_layers)


def distributed(members: Members, chunks: Iterator, all_layers: bool, world: World
                       ) -> Iterator[list[SentenceResult]]:
    """Under torchrun: chunk k is parsed by process k mod size; process 0 yields every chunk's results in
    input order, the others yield nothing. Every process reads the same input."""
    device = world.device_for(members.models[0].model.device)
    for loaded in members.models:
        loaded.model.to(device)
    while True:
        mine: list = []
        for rank in range(world.size):  # one round: a chunk for each process
            chunk = next(chunks, None)
            if rank == world.rank and chunk is not None:
                mine = chunk
        gathered = world.gather_objects(parse_chunk(members, mine, all_layers) if mine else [])
        if world.is_main:
            yield from (part for part in gathered if part)
        if not any(gathered):
            world.close()
            return
