"""Sentences in, trees out: batched distances from one or more trained models, decoded and combined.

A sentence is fed as `<eos> w1 ... wn <eos>` from a zero state in evaluation mode (a backward
model gets the words reversed), and the distances at the two `<eos>` positions are dropped, so
distance t belongs to word t in reading order. Each model's tree comes from one layer's
distances with the paper's decoder or the gap decoder; several models' trees are combined by
span voting (mbr) or by averaging their standardised gap scores (mean).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path

import torch

from . import precision as precision_module
from . import trees
from .checkpoint import LoadedModel
from .data import EOS
from .distributed import World
from .files import InputError, write_text
from .formats import ALL_LAYERS, MemberResult, SentenceResult, render
from .metrics import SpanMetric
from .trees import Tree


@dataclass(frozen=True)
class ParseOptions:
    layers: tuple[int, ...] = ()  # (): each model's middle layer; one for all models, or one per model
    auto_layers: bool = False  # several models: each one's layer chosen by agreement (see layers_by_agreement)
    distance: str = "forget"  # forget | input
    decoder: str = "paper"  # paper | gap
    combine: str = "mbr"  # mbr | mean, for two or more models
    batch_size: int = 64
    precision: str = "fp32"  # fp32 | bf16 | auto, of the models' matrix products (precision.py)


@dataclass(frozen=True)
class Parsed:
    """One model's distances for one sentence, in reading order."""

    words: list[str]
    forget: list[list[float]]  # per layer, per word
    input: list[list[float]]
    direction: str = "forward"

    def distances(self, layer: int, kind: str = "forget") -> list[float]:
        """One layer's distances; `layer` counts from 1."""
        return getattr(self, kind)[layer - 1]

    def gaps(self, layer: int, kind: str = "forget") -> list[float]:
        return trees.gap_scores(self.distances(layer, kind), self.direction)

    def tree(self, layer: int, kind: str = "forget", decoder: str = "paper") -> Tree:
        return decode(self.distances(layer, kind), self.words, self.direction, decoder)


def decode(distances: list[float], words: list[str], direction: str, decoder: str) -> Tree:
    if decoder == "gap":
        return trees.tree_from_gaps(trees.gap_scores(distances, direction), words)
    return trees.paper_tree(distances, words, direction)


def check_layer(layer: int, n_layers: int) -> None:
    if not 1 <= layer <= n_layers:
        raise InputError(f"--layer {layer} is out of range: the model has layers 1 to {n_layers}")


def middle_layer(n_layers: int) -> int:
    """The paper parses with the middle layer: 2 of 3."""
    return (n_layers + 1) // 2


def resolve_layer(layer: int | None, loaded: LoadedModel) -> int:
    n_layers = loaded.config.model.n_layers
    layer = middle_layer(n_layers) if layer is None else layer
    check_layer(layer, n_layers)
    return layer


def resolve_layers(options: ParseOptions, models: list[LoadedModel]) -> list[int]:
    """Each model's layer: the middle one, the one --layer given for all, or its own --layer."""
    if len(options.layers) not in (0, 1, len(models)):
        raise InputError(f"--layer is given {len(options.layers)} times for {len(models)} models: "
                         "give it once for all, or once per --model")
    layers = options.layers * len(models) if len(options.layers) == 1 else options.layers or (None,) * len(models)
    return [resolve_layer(layer, loaded) for layer, loaded in zip(layers, models)]


def layers_by_agreement(parsed: list[list[Parsed | None]], options: ParseOptions) -> tuple[int, ...]:
    """A layer for each member, chosen without gold trees: starting from the middle layers, each member in
    turn takes the layer whose trees agree best (pooled sentence F1) with the other members' current
    trees, until none changes. Members' layers carry different structure (a backward model's
    lowest layer, say), and agreement between independent models points to the shared one."""
    counts = [len(next(p for p in member if p is not None).forget) for member in parsed]
    layers = [middle_layer(n) for n in counts]
    cache: dict[tuple[int, int], list[set]] = {}

    def spans(k: int, layer: int) -> list[set]:
        if (k, layer) not in cache:
            cache[k, layer] = [trees.spans(p.tree(layer, options.distance, options.decoder)) if p else set()
                               for p in parsed[k]]
        return cache[k, layer]

    def agreement(k: int, layer: int) -> float:
        return sum(sum((SpanMetric.of(a, b) for a, b in zip(spans(k, layer), spans(j, layers[j]))),
                       SpanMetric()).sentence_f1 for j in range(len(parsed)) if j != k)

    for _ in range(10):
        changed = False
        for k in range(len(parsed)):
            best = max(range(1, counts[k] + 1), key=lambda layer: (agreement(k, layer), layer == layers[k]))
            changed |= best != layers[k]
            layers[k] = best
        if not changed:
            break
    return tuple(layers)


def choose_layers(models: list[LoadedModel], sentences: list[list[str]], options: ParseOptions) -> ParseOptions:
    """The options with the layers fixed: chosen by agreement on these sentences when asked to, else as given."""
    if not options.auto_layers or len(models) < 2:
        return replace(options, layers=tuple(resolve_layers(options, models)), auto_layers=False)
    parsed = [parse_words(loaded, sentences, options.batch_size, precision=options.precision) for loaded in models]
    return replace(options, layers=layers_by_agreement(parsed, options), auto_layers=False)


def check_members(models: list[LoadedModel]) -> None:
    """Every model must have distances, and all must split and normalise words alike."""
    for loaded in models:
        if not loaded.model.has_distances:
            raise InputError(f"{loaded.source}: a {loaded.config.model.kind} language model has no distances "
                             "to parse with (train an ON-LSTM: model.kind = \"onlstm\")")
    first = models[0]
    for loaded in models[1:]:
        if loaded.tokenizer != first.tokenizer:
            raise InputError(f"{loaded.source}: tokenizer {loaded.tokenizer.to_dict()} differs from "
                             f"{first.source}'s {first.tokenizer.to_dict()}; ensemble members must share it")


@torch.no_grad()
def parse_words(loaded: LoadedModel, sentences: list[list[str]], batch_size: int = 64,
                progress: Callable[[int], object] | None = None, n_layers: int | None = None,
                precision: str = "fp32") -> list[Parsed | None]:
    """Distances of every layer (or of layers 1 to `n_layers`) for each sentence (a list of words as written).

    Sentences are sorted by length and padded at the end: the model reads from the start, so
    padding never changes the distances of earlier positions. Empty sentences get None.
    """
    model, vocab, tokenizer = loaded.model, loaded.vocab, loaded.tokenizer
    direction = loaded.config.model.direction
    products = precision_module.products(precision_module.resolve(precision, model.device), model.device)
    eos = vocab.index[EOS]
    order = sorted((k for k, s in enumerate(sentences) if s), key=lambda k: len(sentences[k]))
    results: list[Parsed | None] = [None] * len(sentences)
    for first in range(0, len(order), batch_size):
        batch = order[first : first + batch_size]
        longest = len(sentences[batch[-1]])
        rows = [[eos, *vocab.encode_user_words(tokenizer.normalize(w) for w in _model_order(sentences[k], direction))]
                for k in batch]
        tokens = torch.tensor([row + [eos] * (longest + 2 - len(row)) for row in rows]).t()  # (T, B)
        with products:
            distances = model.distances(tokens.to(model.device), n_layers=n_layers)  # (L, T, B) each
        forget = distances.forget[:, 1 : longest + 1].permute(2, 0, 1).tolist()  # (B, L, T) as lists
        inp = distances.input[:, 1 : longest + 1].permute(2, 0, 1).tolist()
        for column, k in enumerate(batch):
            n = len(sentences[k])
            results[k] = Parsed(sentences[k], [_model_order(d[:n], direction) for d in forget[column]],
                                [_model_order(d[:n], direction) for d in inp[column]], direction)
        if progress is not None:
            progress(len(batch))
    return results


def _model_order(items: list, direction: str) -> list:
    """Reading order <-> the model's order (its own inverse)."""
    return items[::-1] if direction == "backward" else items


def combine(members: list[Parsed], layers: list[int], options: ParseOptions) -> Tree:
    """The ensemble's tree: span voting over the members' trees, or the gap decoder on their mean
    standardised gap scores. One member's tree is its own."""
    if len(members) == 1:
        return members[0].tree(layers[0], options.distance, options.decoder)
    if options.combine == "mean":
        scores = [trees.standardize(p.gaps(layer, options.distance)) for p, layer in zip(members, layers)]
        return trees.tree_from_gaps([sum(column) / len(scores) for column in zip(*scores)], members[0].words)
    return trees.most_voted_tree([p.tree(layer, options.distance, options.decoder) for p, layer in zip(members, layers)])


def parse_sentences(models: list[LoadedModel], sentences: list[list[str]], options: ParseOptions,
                    all_layers: bool = False, progress: Callable[[int], object] | None = None
                    ) -> list[SentenceResult]:
    """Each sentence's combined tree and every member's distances and tree."""
    layers = resolve_layers(options, models)
    parsed = [parse_words(loaded, sentences, options.batch_size, progress if k == 0 else None,
                          None if all_layers else layer, options.precision)
              for k, (loaded, layer) in enumerate(zip(models, layers))]
    results = []
    for k, words in enumerate(sentences):
        members = [member[k] for member in parsed]
        if not words:
            results.append(SentenceResult(words, None))
            continue
        results.append(SentenceResult(words, combine(members, layers, options), [
            MemberResult(p.direction, p.forget, p.input, p.tree(layer, options.distance, options.decoder), m.source)
            for p, layer, m in zip(members, layers, models)]))
    return results


def parse(models: list[LoadedModel], lines: Iterable[str], options: ParseOptions, fmt: str = "brackets",
          agreement: list[SpanMetric] | None = None, progress: Callable[[int], object] | None = None
          ) -> Iterator[str]:
    """Lines of text in, rendered lines out (without newlines), in input order, a chunk of lines at a time.

    With `agreement`, each member's agreement with the others (see `member_agreement`) is added to it;
    `progress` is called with the number of sentences each batch parsed.
    """
    results = stream_results(models, lines, options, fmt in ALL_LAYERS, agreement, progress)
    return (render(result, fmt) for result in results)


def parse_in_processes(model_paths: list[Path], device: str, lines: Iterable[str], options: ParseOptions,
                       fmt: str, workers: int, agreement: list[SpanMetric] | None = None,
                       progress: Callable[[int], object] | None = None) -> Iterator[str]:
    """`parse` in `workers` processes, each with its own copy of the models and a share of the cores;
    the output is the same and in input order."""
    threads = max(1, (os.cpu_count() or 1) // workers)
    with get_context("spawn").Pool(workers, _start_worker, (model_paths, device, threads)) as pool:
        tasks = ((chunk, options, fmt, agreement is not None) for chunk in _chunks(lines, options.batch_size))
        for rendered, parts in pool.imap(_parse_chunk, tasks):
            _add_agreement(agreement, parts)
            if progress is not None:
                progress(len(rendered))
            yield from rendered


def parse_distributed(models: list[LoadedModel], lines: Iterable[str], options: ParseOptions, fmt: str,
                      world: World, agreement: list[SpanMetric] | None = None) -> Iterator[str]:
    """`parse` under torchrun: chunk k is parsed by process k mod size; process 0 yields every chunk's
    output in input order, the others yield nothing. Every process reads the same input."""
    chunks = _chunks(lines, options.batch_size)
    while True:
        mine = []
        for rank in range(world.size):  # one round: a chunk for each process
            chunk = next(chunks, None)
            if rank == world.rank and chunk is not None:
                mine = chunk
        scores = [SpanMetric() for _ in models] if agreement is not None else None
        rendered = list(parse(models, mine, options, fmt, scores))
        gathered = world.gather_objects((rendered, scores))
        if world.is_main:
            for part, part_scores in gathered:
                _add_agreement(agreement, part_scores)
                yield from part
        if sum(len(part) for part, _ in gathered) == 0:
            world.close()
            return


_WORKER_MODELS: list[LoadedModel] = []


def _start_worker(model_paths: list[Path], device: str, threads: int) -> None:
    from .checkpoint import load

    torch.set_num_threads(threads)
    _WORKER_MODELS.extend(load(path, device) for path in model_paths)


def _parse_chunk(task: tuple[list[str], ParseOptions, str, bool]) -> tuple[list[str], list[SpanMetric] | None]:
    lines, options, fmt, with_agreement = task
    scores = [SpanMetric() for _ in _WORKER_MODELS] if with_agreement else None
    return list(parse(_WORKER_MODELS, lines, options, fmt, scores)), scores


def _chunks(lines: Iterable[str], batch_size: int) -> Iterator[list[str]]:
    """Lines in chunks of 64 batches: sorting by length inside a chunk keeps batches full."""
    lines = iter(lines)
    while chunk := list(itertools.islice(lines, 64 * batch_size)):
        yield chunk


def _add_agreement(total: list[SpanMetric] | None, part: list[SpanMetric] | None) -> None:
    if total is not None and part is not None:
        for k, score in enumerate(part):
            total[k] += score


def stream_results(models: list[LoadedModel], lines: Iterable[str], options: ParseOptions, all_layers: bool = False,
                   agreement: list[SpanMetric] | None = None, progress: Callable[[int], object] | None = None
                   ) -> Iterator[SentenceResult]:
    """`parse` before rendering: each line's SentenceResult, in input order."""
    check_members(models)
    tokenizer = models[0].tokenizer
    for chunk in _chunks(lines, options.batch_size):
        sentences = [tokenizer.split(line) for line in chunk]
        if options.auto_layers:  # chosen on the first chunk, kept for the rest
            options = choose_layers(models, [s for s in sentences if s], options)
        results = parse_sentences(models, sentences, options, all_layers, progress)
        if agreement is not None:
            _add_agreement(agreement, member_agreement([[m.tree for m in r.members] for r in results if r.members]))
        yield from results


def draw_pictures(models: list[LoadedModel], lines: Iterable[str], options: ParseOptions, fmt: str,
                  output: Path | None, progress: Callable[[int], object] | None = None) -> Iterator[str]:
    """`--format svg`: one SVG per sentence, as lines (to stdout) or as numbered files in the folder
    `output`; `--format html`: one page of every sentence. Yields what goes to stdout."""
    from . import draw

    results = stream_results(models, lines, options, all_layers=True, progress=progress)
    if fmt == "html":
        page = draw.parse_page(((r.words, r.tree, [(_member_name(m), m.tree, m.forget) for m in r.members])
                                for r in results if r.tree is not None), resolve_layers(options, models)[0])
        if output is None:
            yield page
        else:
            write_text(output, page)
        return
    layer = resolve_layers(options, models)[0]
    for number, result in enumerate(results, start=1):
        svg = "" if result.tree is None else _sentence_svg(result, layer)
        if output is None:
            yield svg
        elif svg:
            write_text(output / f"{number:06d}.svg", svg)


def _sentence_svg(result: SentenceResult, layer: int) -> str:
    from . import draw

    distances = result.members[0].forget if len(result.members) == 1 else []
    return draw.tree_svg(result.words, result.tree, distances, layer)


def _member_name(member: MemberResult) -> str:
    path = Path(member.source)
    return f"{path.parent.name}/{path.name} ({member.direction})"


def member_agreement(sentences: list[list[Tree]]) -> list[SpanMetric]:
    """Per member, the F1 of its trees against each other member's, pooled (a member far below the
    others is an outlier run). Needs no gold trees. `sentences`: per sentence, the members' trees."""
    n = len(sentences[0]) if sentences else 0
    scores = [SpanMetric() for _ in range(n)]
    for members in sentences:
        spans = [trees.spans(tree) for tree in members]
        for a, b in itertools.permutations(range(n), 2):
            scores[a] += SpanMetric.of(spans[a], spans[b])
    return scores
