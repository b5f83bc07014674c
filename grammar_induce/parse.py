"""Sentences in, trees out: lines tokenized, run through one or more trained models (distances.py),
decoded and combined (ensemble.py), rendered; in this process, in worker processes or under torchrun.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import ClassVar

import torch

from . import precision, trees
from .checkpoint import LoadedModel
from .distances import check_members, parse_words
from .distributed import World
from .ensemble import ParseOptions, combine, layers_by_agreement, member_agreement, resolve_layers
from .files import write_text
from .formats import MemberResult, SentenceResult, render
from .metrics import SpanMetric
from .trees import Tree


def choose_layers(models: list[LoadedModel], sentences: list[list[str]], options: ParseOptions) -> ParseOptions:
    """The options with the layers fixed: chosen by agreement on these sentences when asked to, else as given
    (with no sentence to agree on, the middle layers)."""
    if not options.auto_layers or len(models) < 2 or not sentences:
        return replace(options, layers=tuple(resolve_layers(options, models)), auto_layers=False)
    products = precision.product_dtype(options.precision)
    parsed = [parse_words(loaded, sentences, options.batch_size, products=products) for loaded in models]
    return replace(options, layers=layers_by_agreement(parsed, options), auto_layers=False)


def parse_sentences(models: list[LoadedModel], sentences: list[list[str]], options: ParseOptions,
                    all_layers: bool = False) -> list[SentenceResult]:
    """Each sentence's combined tree and every member's distances and tree (`options.precision` resolved:
    fp32 or bf16)."""
    layers = resolve_layers(options, models)
    products = precision.product_dtype(options.precision)
    parsed = [parse_words(loaded, sentences, options.batch_size, n_layers=None if all_layers else layer,
                          products=products) for loaded, layer in zip(models, layers)]
    results = []
    for k, words in enumerate(sentences):
        members = [member[k] for member in parsed]
        if not words:
            results.append(SentenceResult(words, None))
            continue
        results.append(SentenceResult(words, combine(members, layers, options), [
            MemberResult(p.direction, p.forget, p.input, p.tree(layer, options.distance, options.decoder), m.source,
                         layer, p.gaps(layer, options.distance))
            for p, layer, m in zip(members, layers, models)]))
    return results


@dataclass
class ParseSummary:
    """What a parse found beside its trees, complete once its results have all been read."""

    layers: tuple[int, ...] = ()  # each member's layer (what --layer auto chose)
    agreement: list[SpanMetric] | None = None  # per member, its F1 against the others' trees (if asked)
    writes_output: bool = True  # False on the processes of a torchrun launch other than process 0


def parse(models: list[LoadedModel], lines: Iterable[str], options: ParseOptions, *, workers: int = 1,
          all_layers: bool = False, agreement: bool = False, progress: Callable[[int], object] | None = None
          ) -> tuple[Iterator[SentenceResult], ParseSummary]:
    """The one parse path: lines of text in, each line's SentenceResult out, in input order, a chunk of
    lines at a time; and a summary to read after the results.

    Where it runs is chosen here: under torchrun, chunk k goes to process k mod size and process 0 yields
    every result (the others yield none); with `workers` > 1, in that many processes, each with its own
    copy of the models; else in this process. Layers `auto` chooses are chosen once, on the first chunk,
    for every process. `all_layers` runs every layer (else up to the one read); `progress` is called with
    the number of sentences each chunk parsed.
    """
    check_members(models)
    options = replace(options, precision=precision.resolve(options.precision, models[0].model.device))  # once
    summary = ParseSummary(agreement=[SpanMetric() for _ in models] if agreement else None)
    world = World.from_env()
    summary.writes_output = world.is_main
    chunks = (_tokenized(models[0].tokenizer, chunk) for chunk in _chunks(lines, options.batch_size))
    first = next(chunks, [])
    options = _fixed_layers(models, first, options, world)
    summary.layers = options.layers
    chunks = itertools.chain([first], chunks)
    if world.size > 1:
        parts = _parts_distributed(models, chunks, options, all_layers, world)
    elif workers > 1:
        parts = _parts_in_processes(models, chunks, options, all_layers, workers)
    else:
        parts = (parse_chunk(models, chunk, options, all_layers) for chunk in chunks)
    return _collect(parts, summary, progress), summary


def _collect(parts: Iterable[list[SentenceResult]], summary: ParseSummary,
             progress: Callable[[int], object] | None) -> Iterator[SentenceResult]:
    """The chunks' results in order, adding each chunk's member agreement to the summary."""
    for results in parts:
        if summary.agreement is not None:
            _add_agreement(summary.agreement, member_agreement([[m.tree for m in r.members] for r in results if r.members]))
        if progress is not None:
            progress(len(results))
        yield from results


def _fixed_layers(models: list[LoadedModel], first: list[tuple[list[str], list[bool]]], options: ParseOptions,
                  world: World) -> ParseOptions:
    """The options with every member's layer fixed: chosen by agreement on the first chunk when asked to
    (on process 0, for every process), else as given."""
    sentences = [words for words in _words(first) if words]
    if options.auto_layers and len(models) > 1 and world.size > 1:
        return world.gather_objects(choose_layers(models, sentences, options) if world.is_main else None)[0]
    return choose_layers(models, sentences, options)


def parse_chunk(models: list[LoadedModel], chunk: list[tuple[list[str], list[bool]]], options: ParseOptions,
                all_layers: bool) -> list[SentenceResult]:
    """One chunk of tokenized lines parsed, with its punctuation put back."""
    results = parse_sentences(models, _words(chunk), options, all_layers)
    return [_with_punctuation(r, *t) for r, t in zip(results, chunk)]


def _tokenized(tokenizer, chunk: list[str]) -> list[tuple[list[str], list[bool]]]:
    return [_tokens(tokenizer, line) for line in chunk]


def _words(chunk: list[tuple[list[str], list[bool]]]) -> list[list[str]]:
    return [[t for t, word in zip(tokens, is_word) if word] for tokens, is_word in chunk]


def _parts_in_processes(models: list[LoadedModel], chunks: Iterable, options: ParseOptions, all_layers: bool,
                        workers: int) -> Iterator[list[SentenceResult]]:
    """Chunks parsed in `workers` processes, each with its own copy of the models (loaded from their
    files) and a share of the cores; in input order."""
    threads = max(1, (os.cpu_count() or 1) // workers)
    paths, device = [m.source for m in models], str(models[0].model.device)
    with get_context("spawn").Pool(workers, _Worker.start, (paths, device, threads)) as pool:
        yield from pool.imap(_Worker.parse, ((chunk, options, all_layers) for chunk in chunks))


class _Worker:
    """A worker process's models, loaded once when the process starts."""

    models: ClassVar[list[LoadedModel]] = []

    @classmethod
    def start(cls, paths: list[str], device: str, threads: int) -> None:
        from .checkpoint import load

        torch.set_num_threads(threads)
        cls.models = [load(path, device) for path in paths]

    @classmethod
    def parse(cls, task: tuple[list, ParseOptions, bool]) -> list[SentenceResult]:
        chunk, options, all_layers = task
        return parse_chunk(cls.models, chunk, options, all_layers)


def _parts_distributed(models: list[LoadedModel], chunks: Iterator, options: ParseOptions, all_layers: bool,
                       world: World) -> Iterator[list[SentenceResult]]:
    """Under torchrun: chunk k is parsed by process k mod size; process 0 yields every chunk's results in
    input order, the others yield nothing. Every process reads the same input."""
    device = world.device_for(models[0].model.device)
    for loaded in models:
        loaded.model.to(device)
    while True:
        mine: list = []
        for rank in range(world.size):  # one round: a chunk for each process
            chunk = next(chunks, None)
            if rank == world.rank and chunk is not None:
                mine = chunk
        gathered = world.gather_objects(parse_chunk(models, mine, options, all_layers) if mine else [])
        if world.is_main:
            yield from (part for part in gathered if part)
        if not any(gathered):
            world.close()
            return


def _chunks(lines: Iterable[str], batch_size: int) -> Iterator[list[str]]:
    """Lines in chunks of 64 batches: sorting by length inside a chunk keeps batches full."""
    lines = iter(lines)
    while chunk := list(itertools.islice(lines, 64 * batch_size)):
        yield chunk


def _add_agreement(total: list[SpanMetric], part: list[SpanMetric]) -> None:
    for k, score in enumerate(part):
        total[k] += score


def render_lines(results: Iterable[SentenceResult], fmt: str) -> Iterator[str]:
    """Results as lines of an output format (without newlines); an empty line for an empty sentence."""
    return (render(result, fmt) for result in results)


def _tokens(tokenizer, line: str) -> tuple[list[str], list[bool]]:
    """A line's tokens as written and which of them the models read (a line of nothing but
    punctuation is read whole: its tree still holds every token)."""
    tokens = tokenizer.split(line)
    is_word = [tokenizer.is_word(t) for t in tokens]
    return tokens, is_word if any(is_word) else [True] * len(tokens)


def _with_punctuation(result: SentenceResult, tokens: list[str], is_word: list[bool]) -> SentenceResult:
    """The result with the punctuation the models did not read put back into its tree."""
    if all(is_word):
        return result
    return replace(result, tree=trees.restore_tokens(result.tree, tokens, is_word), tokens=tokens, is_word=is_word)


def draw_pictures(results: Iterable[SentenceResult], layer: int, fmt: str, output: Path | None) -> Iterator[str]:
    """`--format svg`: one SVG per sentence, as lines (to stdout) or as numbered files in the folder
    `output`; `--format html`: one page of every sentence. `layer`: the one marked under the words.
    Yields what goes to stdout."""
    from . import draw

    if fmt == "html":
        page = draw.parse_page((_drawn(r) for r in results if r.tree is not None), layer)
        if output is None:
            yield page
        else:
            write_text(output, page)
        return
    for number, result in enumerate(results, start=1):
        svg = "" if result.tree is None else _sentence_svg(result, layer)
        if output is None:
            yield svg
        elif svg:
            write_text(output / f"{number:06d}.svg", svg)


def _sentence_svg(result: SentenceResult, layer: int) -> str:
    from . import draw

    tokens, tree, members = _drawn(result)
    return draw.tree_svg(tokens, tree, members[0][2] if len(members) == 1 else [], layer)


def _drawn(result: SentenceResult) -> tuple[list[str], Tree, list[tuple[str, Tree, list[list[float | None]]]]]:
    """What a picture shows: every token, the tree, and each member as (name, tree, distances per layer),
    the members' trees and distances spread over every token (no bar under punctuation)."""
    if result.tokens is None:
        return result.words, result.tree, [(_member_name(m), m.tree, m.forget) for m in result.members]
    return result.tokens, result.tree, [
        (_member_name(m), trees.restore_tokens(m.tree, result.tokens, result.is_word),
         [result.token_row(row) for row in m.forget]) for m in result.members]


def _member_name(member: MemberResult) -> str:
    path = Path(member.source)
    return f"{path.parent.name}/{path.name} ({member.direction})"
