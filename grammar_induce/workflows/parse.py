"""Sentences in, trees out: lines tokenized and run through one or more trained models, combined (the member path:
inference/lines.py, inference/members.py), in this process, in worker processes or under torchrun (chosen here:
inference/executors.py); rendered (output/), or ranked (`standings`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from ..errors import InputError
from ..families.checkpoint import LoadedModel
from ..files import read_lines
from ..inference.ensemble import ParseOptions, member_agreement
from ..inference.executors import distributed, fixed_layers, in_processes, worker_count
from ..inference.lines import PAUSE, chunks_of, parse_chunk, tokens_of, words_of
from ..inference.members import Members
from ..messages import Messages, plural
from ..metrics import SpanMetric
from ..output.formats import SentenceResult, render
from ..runtime.collector import made_uncollected
from ..runtime.distributed import World
from ..structures import cky


@dataclass
class ParseSummary:
    """What a parse found beside its trees, complete once its results have all been read."""

    layers: tuple[int, ...] = ()  # each member's layer (what --layer auto chose)
    agreement: list[SpanMetric] | None = None  # per member, its F1 against the others' trees (if asked)
    writes_output: bool = True  # False on the processes of a torchrun launch other than process 0
    distance: str = "forget"  # the distances the trees came from
    auto_layers: bool = False  # the layers were chosen by agreement
    auto_weights: tuple[float, ...] = ()  # the voting weights `--weights auto` chose (else empty)
    workers: int = 1  # the processes that parsed


def parse(models: list[LoadedModel], lines: Iterable[str], options: ParseOptions, *, workers: int = 1,
          all_layers: bool = False, agreement: bool = False, messages: Messages | None = None,
          stream: bool = False) -> tuple[Iterator[SentenceResult], ParseSummary]:
    """The one parse path: lines of text in, each line's SentenceResult out, in input order, a chunk of
    lines at a time; and a summary to read after the results.

    Where it runs is chosen here: under torchrun, chunk k goes to process k mod size and process 0 yields
    every result (the others yield none); with `workers` > 1, in that many processes, each with its own
    copy of the models; else in this process. Layers `auto` chooses are chosen once, on the first chunk,
    for every process. `all_layers` runs every layer (else up to the one read); `messages` advance by the
    sentences each chunk parsed and get the notes (caps, fallbacks); `stream`: the lines arrive over time
    (see chunks_of).
    """
    messages = messages or Messages()
    members = Members.of(models, options)  # checked, the precision resolved once
    if members.chosen:
        messages.note(members.chosen)
    options, world = members.options, World.from_env()
    summary = ParseSummary(agreement=[SpanMetric() for _ in models] if agreement else None,
                           writes_output=world.is_main, distance=options.distance, auto_layers=members.chooses_layers)
    chunks = ([tokens_of(models[0], line, options) for line in chunk]
              for chunk in chunks_of(lines, options.batch_size, stream))
    first = next(chunks, [])
    auto_weights = members.chooses_weights
    members = fixed_layers(members, first, world)
    summary.layers = members.options.layers
    summary.auto_weights = tuple(members.options.weights) if auto_weights else ()
    chunks = itertools.chain([first], chunks)
    if world.size == 1 and workers > 1:
        ahead = list(itertools.islice(chunks, workers))  # as many chunks as workers, to see if there is work for each
        chunks = itertools.chain(ahead, chunks)
        summary.workers = worker_count(workers, ahead, options.batch_size, models, messages)
    # the many trees made do not make the collector rescan torch's objects, nor each other (runtime/collector.py)
    if world.size > 1:
        parts = made_uncollected(distributed(members, chunks, all_layers, world))
    elif summary.workers > 1:
        parts = made_uncollected(in_processes(members, chunks, all_layers, summary.workers))
    else:
        parts = made_uncollected(chunks, lambda chunk: parse_chunk(members, chunk, all_layers))
    return _collect(parts, summary, messages, _long_line_rules(members)), summary


def _long_line_rules(members: Members) -> list[tuple[int, str]]:
    """(the longest line parsed exactly, what is done with a longer one) of every search whose work grows faster
    than the length: span voting's, and each member's own (a model that yields trees)."""
    greedy = (cky.EXACT_LIMIT, "split them greedily, top down (the exact search is cubic in the length)")
    rules = []
    voting = len(members.models) > 1 and members.options.combine == "mbr"
    if voting:
        rules.append((greedy[0], f"span voting {greedy[1]}"))
    for model in dict.fromkeys(m.model for m in members.models):
        limit, what = model.LONGEST or greedy
        if model.SEARCH and not (voting and limit >= greedy[0]):  # span voting's note says it for the others
            rules.append((limit, f"the {model.NAME}'s {model.SEARCH} {what}"))
    return rules


def _collect(parts: Iterable[list[SentenceResult]], summary: ParseSummary, messages: Messages,
             rules: list[tuple[int, str]]) -> Iterator[SentenceResult]:
    """The chunks' results in order, adding each chunk's member agreement to the summary, and a note of the lines
    too long for a search to be exact (`rules`: _long_line_rules)."""
    long_lines = [0] * len(rules)
    for results in parts:
        if summary.agreement is not None:
            trees_by_member = [[m.tree for m in r.members] for r in results if r.members]
            _add_agreement(summary.agreement, member_agreement(trees_by_member))
        messages.advance(len(results))
        for k, (limit, _) in enumerate(rules):
            long_lines[k] += sum(len(r.words) > limit for r in results)
        yield from results
    for count, (limit, what) in zip(long_lines, rules):
        if count:
            messages.note(f"{plural(count, 'line')} of more than {limit} words: {what}")



def standings(models: list[LoadedModel], lines: Iterable[str], options: ParseOptions) -> Members:
    """The members with their layers and `--weights auto`'s weights chosen on the first chunk of `lines` (what
    `grammar-induce rank` shows: the standings are in `.standings`), no gold trees needed."""
    members = Members.of(models, replace(options, weights="auto"))
    first = next(chunks_of(lines, options.batch_size, False), [])
    sentences = [words for words in words_of([tokens_of(models[0], line, options) for line in first]) if words]
    if not sentences:
        raise InputError("no sentences to rank the models on")
    return members.with_layers_on(sentences)



def _add_agreement(total: list[SpanMetric], part: list[SpanMetric]) -> None:
    for k, score in enumerate(part):
        total[k] += score


def render_lines(results: Iterable[SentenceResult], fmt: str) -> Iterator[str]:
    """Results as lines of an output format (without newlines); an empty line for an empty sentence."""
    return (render(result, fmt) for result in results)



def live_lines(stream) -> Iterator[object]:
    """The stream's lines (a pipe, a terminal) as they come, read in a thread; PAUSE whenever none has come for a
    moment, so that `parse` parses what has come."""
    import queue
    import threading

    lines: queue.Queue = queue.Queue(maxsize=4096)
    end = object()

    def read() -> None:
        try:
            for _, text in read_lines(stream):
                lines.put(text)
        except BaseException as e:  # noqa: BLE001 - handed to the reading side, which raises it
            lines.put(e)
        lines.put(end)

    threading.Thread(target=read, daemon=True).start()
    while True:
        try:
            item = lines.get(timeout=0.2)
        except queue.Empty:
            yield PAUSE
            item = lines.get()
        if item is end:
            return
        if isinstance(item, BaseException):
            raise item
        yield item
