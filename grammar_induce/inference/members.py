"""The one member path: an ensemble's members checked, their precision resolved once, their layers fixed
once, every member run over the sentences and their readings combined. parse (and through it the API),
evaluate and distill each call `Members.parse`. A parse offers evaluation its named rows of trees (`Parse.rows`: an
ensemble's members and combinations, a model's own trees, or a row per layer and distance), as SuPar's `eval_step`.

A sentence is fed as `<eos> w1 ... wn <eos>` from a zero state in evaluation mode (a backward model gets
the words reversed); each model kind turns its rows into readings in reading order (families/kind.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from .. import trees
from ..errors import InputError, SettingError
from ..families.checkpoint import LoadedModel
from ..families.pretrained import shown
from ..families.reading import Reading, model_order
from ..metrics import SpanMetric
from ..runtime import precision
from ..runtime.threads import LANES, map_in_threads
from ..text.tokenizer import EOS
from ..trees import Tree
from .ensemble import (
    ParseOptions,
    Standing,
    combine,
    combiners_for,
    confidences,
    layers_by_agreement,
    member_agreement,
    rank_members,
    resolve_layers,
    resolve_weights,
)
from .pruning import Pruning

Readings = list[list[Reading | None]]  # per member, per sentence (None: an empty sentence)
Spans = dict[tuple[int, int], float]
CHUNK_BATCHES = 64  # sentences are read a chunk of this many batches at a time; `auto` chooses on the first chunk
CHUNK_LINES = 1 << 14  # ... and of at most this many lines, whatever the batch size asked for
BATCH_WORDS = 1 << 13  # a batch holds at most this many words (one longer sentence alone): memory follows the work


@dataclass(frozen=True)
class Members:
    """An ensemble's models (one or more) with the options they parse with. `of` checks them, fixes the layers
    given and resolves the precision; `with_layers` fixes every member's layer (the options' layers, or `auto`'s
    choice) and the voting weights `auto` chooses."""

    models: list[LoadedModel]
    options: ParseOptions
    chosen: str = ""  # what `auto` precision chose and why, for a note
    standings: tuple[Standing, ...] = ()  # what `--weights auto` weighed each member by (with_layers)

    @classmethod
    def of(cls, models: list[LoadedModel], options: ParseOptions) -> Members:
        """The models checked (fit to parse, alike in splitting text, a layer each that they have: the one given or
        the middle one, unless `auto` chooses on the first chunk) and the precision resolved."""
        check_members(models)
        for loaded in models:  # a distance the model lacks (a StructFormer has its parser's alone)
            family, yields = loaded.family, loaded.family.yields
            if options.distance is not None and not yields.own_trees and options.distance not in yields.distances:
                raise SettingError("distance", f"{options.distance}: {shown(loaded.source)} ({family.description}) "
                                   f"has no {options.distance} distances; it has {', '.join(yields.distances)}")
        if options.labels and (len(models) > 1 or not models[0].family.yields.labels):
            raise SettingError("labels", "come from one model that induces them (a PCFG), not "
                               + (f"an ensemble of {len(models)}" if len(models) > 1 else models[0].family.description))
        if not (options.auto_layers and len(models) > 1):
            options = replace(options, layers=tuple(resolve_layers(options, models)), auto_layers=False)
        weights = resolve_weights(options, [m.config.model.kind for m in models])  # "auto": on the first chunk
        if options.precision != "auto":
            resolved, _ = resolve_precision(models, options)
            return cls(models, replace(options, precision=resolved, weights=weights))
        # auto: each member on its own probe (kinds differ: bf16 may pay for an ON-LSTM and not for a PCFG)
        each = [resolve_precision([m], options) for m in models]
        chosen = each[0][1] if len({c for _, c in each}) == 1 else "; ".join(
            f"{m.source}: {c}" for m, (_, c) in zip(models, each))
        resolved = tuple(r for r, _ in each)
        common = resolved[0] if len(set(resolved)) == 1 else "auto"
        return cls(models, replace(options, precision=common, member_precisions=resolved, weights=weights), chosen)

    @property
    def layers_fixed(self) -> bool:
        return not self.options.auto_layers and len(self.options.layers) == len(self.models)

    @property
    def chunk(self) -> int:
        """How many sentences are read at a time; layers by agreement are chosen on the first chunk."""
        return chunk_lines(self.options.batch_size)

    @property
    def chooses_layers(self) -> bool:
        """Whether the layers are to be chosen by agreement (`auto`, two or more members)."""
        return self.options.auto_layers and len(self.models) > 1

    @property
    def chooses_weights(self) -> bool:
        """Whether the voting weights are to be chosen by agreement (`--weights auto`, two or more members)."""
        return self.options.weights == "auto"

    @property
    def chooses(self) -> bool:
        """Whether anything is chosen on the first chunk's readings (layers or weights)."""
        return self.chooses_layers or self.chooses_weights

    def parse(self, sentences: list[list[str]], all_layers: bool = True, progress: Callable[[int], object] | None = None,
              at_once: bool = False) -> Iterator[Parse]:
        """The one member path: every member reads `sentences` a chunk at a time (`at_once`: all in one), the
        layers fixed once, on the first chunk (chosen by agreement where `auto` asks); each chunk's readings
        with the members (their layers fixed) that combine them. `all_layers`: every layer's distances, else
        (once the layers are fixed) those up to each member's layer."""
        members, size = self, max(len(sentences), 1) if at_once else self.chunk
        for start in range(0, len(sentences), size):
            readings = members.read(sentences[start : start + size], all_layers, progress)
            if start == 0:
                members = members.with_layers(readings)
            yield Parse(members, readings)

    def parse_all(self, sentences: list[list[str]], all_layers: bool = True,
                  progress: Callable[[int], object] | None = None) -> Parse | None:
        """`parse` of every sentence at once (the layers fixed on all of them, where `auto` chooses); None for none."""
        return next(self.parse(sentences, all_layers, progress, at_once=True), None)

    def read(self, sentences: list[list[str]], all_layers: bool = True,
             progress: Callable[[int], object] | None = None) -> Readings:
        """Every member's reading of each sentence: every layer's distances, or (with the layers fixed and
        not `all_layers`) those up to the member's layer."""
        resolved = self.options.member_precisions or (self.options.precision,) * len(self.models)
        layers = self.options.layers if self.layers_fixed and not all_layers else (None,) * len(self.models)
        return [read_sentences(loaded, sentences, self.options.batch_size, progress, layer,
                               precision.product_dtype(chosen), self.options.confidence, self.options.reads_marginals,
                               self.options.pruning, self.options.labels)
                for loaded, layer, chosen in zip(self.models, layers, resolved)]

    def with_layers(self, readings: Readings | None = None) -> Members:
        """The members with every layer fixed: chosen by agreement on the first chunk of `readings` when `auto`
        asks for it (and there are readings), else as given (or the middle ones)."""
        kinds = [m.config.model.kind for m in self.models]
        read = bool(readings) and any(p is not None for p in readings[0][: self.chunk])
        if self.chooses_layers and read:
            layers = layers_by_agreement([member[: self.chunk] for member in readings], self.options, kinds)
        else:
            layers = tuple(resolve_layers(self.options, self.models))
        options = replace(self.options, layers=layers, auto_layers=False)
        if self.chooses_weights:  # each member's standing on the same sentences, its trees at its layer
            first = Members(self.models, options).member_trees([member[: self.chunk] for member in readings]) if read \
                else []
            standings = rank_members([list(column) for column in zip(*first)], kinds) if first and first[0] else []
            options = replace(options, weights=tuple(s.weight for s in standings) or (1.0,) * len(self.models))
            return Members(self.models, options, self.chosen, tuple(standings))
        return Members(self.models, options, self.chosen, self.standings)

    def with_layers_on(self, sentences: list[list[str]]) -> Members:
        """`with_layers`, reading `sentences` first only where the layers or weights are to be chosen by agreement."""
        return self.with_layers(self.read(sentences) if self.chooses and sentences else None)

    def combine(self, readings: Readings) -> list[Tree]:
        """The ensemble's tree of each non-empty sentence (the layers fixed); one member's is its own."""
        per_sentence = [list(column) for column in zip(*readings) if column[0] is not None]
        return combine(per_sentence, list(self.options.layers), self.options)

    def member_trees(self, readings: Readings) -> list[list[Tree]]:
        """Per member, its tree of each non-empty sentence at its layer."""
        options = self.options
        return [[p.tree(layer, options.distance, options.decoder) for p in member if p is not None]
                for member, layer in zip(readings, options.layers)]


@dataclass(frozen=True)
class Parse:
    """What an ensemble made of some sentences: the members (every layer fixed) and each one's readings."""

    members: Members
    readings: Readings

    @property
    def trees(self) -> list[Tree]:
        """The ensemble's tree of each non-empty sentence."""
        return self.members.combine(self.readings)

    @property
    def options(self) -> ParseOptions:
        return self.members.options

    def rows(self, heads: bool = False) -> Rows:
        """The named rows of trees these readings offer for scoring (`Rows`); `heads`: with dependency
        heads."""
        return rows_of(self.members, self.readings, heads)


# The rows of trees a parse offers for scoring (`Parse.rows`); workflows/scoring.py scores what it is given.


@dataclass(frozen=True)
class Rows:
    """Named rows of trees (a tree per non-empty sentence), which one is the main one, and what comes with it."""

    trees: dict[str, list[Tree]]
    main: str
    agreement: dict[str, SpanMetric] = field(default_factory=dict)  # an ensemble's: each member against the others
    confidences: list[Spans | None] = field(default_factory=list)  # the main row's spans' confidence, per sentence
    labels: list[dict[tuple[int, int], str]] | None = None  # the main row's induced labels (a PCFG alone), per sentence
    heads: dict[str, list[list[int]]] = field(default_factory=dict)  # dependency heads per row name (when asked)

    @property
    def predicted(self) -> list[Tree]:
        return self.trees[self.main]


def rows_of(members: Members, readings: Readings, heads: bool = False) -> Rows:
    """The rows of `readings` (the layers of `members` fixed; no empty sentences); `heads`: the first model with
    dependency heads gives them (an InputError where none has)."""
    models = members.models
    if len(models) == 1:
        rows, main, agreement = *_single_rows(members, readings), {}
    else:
        rows, agreement = _ensemble_rows(members, readings)
        main = f"{members.options.combine} of {len(models)}"
    labels = [p.labels or {} for p in readings[0]] if members.options.labels and len(models) == 1 else None
    found_heads = _heads(members, readings) if heads else {}
    layers = list(members.options.layers)
    sure = [confidences(list(sentence), layers, members.options, tree)
            for sentence, tree in zip(zip(*readings), rows[main])]
    return Rows(rows, main, agreement, sure, labels, found_heads)


def _single_rows(members: Members, readings: Readings) -> tuple[dict[str, list[Tree]], str]:
    """One model's rows: its own trees, or a row per layer and distance (and the means), and the main row's name."""
    family, yields = members.models[0].family, members.models[0].family.yields
    if yields.own_trees:
        main = f"{family.name} ({yields.search})"
        return {main: members.combine(readings)}, main
    distance = members.options.distance or yields.distances[0]
    main = f"layer {members.options.layers[0]} {distance}" if yields.layered else f"{distance} distances"
    return _layer_rows(readings[0], members.options.decoder, yields.layered), main


def _layer_rows(parsed: list, decoder: str, layered: bool) -> dict[str, list[Tree]]:
    """A row per layer and distance name, and each name's mean over the layers; distances that are not a layer's
    (not `Yields.layered`: a StructFormer's parser) are one row, `<name> distances`."""
    n_layers = parsed[0].n_layers
    predicted: dict[str, list[Tree]] = {}
    for k in (name for name, rows in parsed[0].distances.items() if rows):  # the names the model has
        if not layered:
            predicted[f"{k} distances"] = [p.tree(1, k, decoder) for p in parsed]
            continue
        for layer in range(1, n_layers + 1):
            predicted[f"layer {layer} {k}"] = [p.tree(layer, k, decoder) for p in parsed]
        predicted[f"mean of layers {k}"] = [
            trees.decode([sum(col) / n_layers for col in zip(*p.distances[k])], p.words, p.direction,
                         decoder or p.decoder)
            for p in parsed
        ]
    return predicted


def _ensemble_rows(members: Members, readings: Readings) -> tuple[dict[str, list[Tree]], dict[str, SpanMetric]]:
    """A row per member and per combination that fits the members, and each member's agreement with the others."""
    layers = members.options.layers
    names = [f"{k + 1}: {_short_name(m.source)}" + ("" if m.family.yields.own_trees else f" L{layer}")
             for k, (m, layer) in enumerate(zip(members.models, layers))]  # a model of its own trees reads no layer
    predicted = dict(zip(names, members.member_trees(readings)))
    for how in combiners_for([list(column) for column in zip(*readings)]):
        combined = replace(members, options=replace(members.options, combine=how))
        predicted[f"{how} of {len(members.models)}"] = combined.combine(readings)
    per_sentence = [list(member_trees) for member_trees in zip(*(predicted[name] for name in names))]
    return predicted, dict(zip(names, member_agreement(per_sentence)))


def _heads(members: Members, readings: Readings) -> dict[str, list[list[int]]]:
    """The first model with dependency heads: its tree-decoded heads, beside its argmax ones (the paper's: each word's
    best head alone) where it has them."""
    models = members.models
    k, family = next(((k, m.family) for k, m in enumerate(models) if m.family.yields.heads), (0, models[0].family))
    if not family.yields.heads:
        raise InputError(f"--deps scores dependency heads, and {shown(models[0].source)} ({family.description}) "
                         "has none: a StructFormer (model.kind = \"structformer\") has them")
    rows = {f"{family.name} heads (tree)": [p.heads for p in readings[k]]}
    if readings[k] and readings[k][0].argmax_heads is not None:
        rows = {f"{family.name} heads (argmax)": [p.argmax_heads for p in readings[k]], **rows}
    return rows


def _short_name(source: str) -> str:
    path = Path(source)
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def auto_weights_note(sources: Sequence[str], weights: Sequence[float]) -> str:
    """What `--weights auto` chose, for a note (parse and evaluate say it alike)."""
    return ("--weights auto weighed " + ", ".join(f"{shown(s)} {w:.2f}" for s, w in zip(sources, weights))
            + " (each member's lead in agreement over right-branching trees, the best 1; grammar-induce rank with the "
            "same models, --layer and --decoder shows it, and --weights with these numbers fixes them)")


def resolve_precision(models: list[LoadedModel], options: ParseOptions) -> tuple[str, str]:
    """fp32 or bf16 for these models' products, and a line saying what `auto` chose and why."""
    device, probe = models[0].model.device, parse_probe(models, options.batch_size)
    if options.precision == "auto" and probe is None:  # nothing would run in bfloat16
        return "fp32", "precision auto -> fp32: these models run no products in bfloat16"
    resolved = precision.resolve(options.precision, device, probe)
    return resolved, precision.describe(options.precision, resolved, device, "the models' products in bfloat16",
                                        "the rest in float32", probe)


PARSE_PROBE_WORDS = 20  # the length of the sentences `auto` times a parse on (at most PROBE_ROWS of them)
PROBE_ROWS = 32


def parse_probe(models: list[LoadedModel], batch_size: int) -> precision.Probe | None:
    """`auto`'s probe of a parse: every member reading a batch of PARSE_PROBE_WORDS-word sentences of random words, as
    read_sentences reads (a kind that reads in lanes: a batch in each at once), None when no member has products to
    run in bfloat16."""
    if not any(m.family.bf16_parts for m in models):
        return None
    rows = min(batch_size, PROBE_ROWS)
    generator = torch.Generator().manual_seed(0)
    words = [[f"w{k}" for k in range(PARSE_PROBE_WORDS)]] * rows

    def run(dtype: torch.dtype | None) -> None:
        for m in models:
            tokens = torch.randint(2, len(m.vocab), (rows, PARSE_PROBE_WORDS + 2), generator=generator).to(m.model.device)
            lanes = _lanes(m, pruned=False)
            list(map_in_threads(lambda t, m=m: m.model.read(t, words, None, dtype), [tokens] * lanes, m.model.device,
                                lanes))

    key = tuple((m.config.model.kind, tuple(v for k, v in m.config.to_dict()["model"].items() if k != "direction"),
                 len(m.vocab)) for m in models)  # a pair's two directions cost the same: measured once
    return precision.Probe((*key, rows), run)


def chunk_lines(batch_size: int) -> int:
    return min(CHUNK_BATCHES * batch_size, CHUNK_LINES)


def check_members(models: list[LoadedModel]) -> None:
    """Every model must yield distances or trees, and all must split text alike (each one normalises its own copy of
    the tokens: lowercase, digits as N, as its tokenizer says)."""
    for loaded in models:
        if not (loaded.family.yields.own_trees or loaded.family.yields.distances):
            raise InputError(f"{loaded.source}: {loaded.family.description} has no distances to parse with "
                             "(train an ON-LSTM: model.kind = \"onlstm\")")
    first = models[0]
    for loaded in models[1:]:
        if not loaded.tokenizer.splits_like(first.tokenizer):
            raise InputError(f"{loaded.source}: splits text unlike {first.source} (tokenizer "
                             f"{loaded.tokenizer.to_dict()} against {first.tokenizer.to_dict()}); ensemble members must "
                             "split text alike (their lowercasing and digits may differ)")


@torch.no_grad()
def read_sentences(loaded: LoadedModel, sentences: list[list[str]], batch_size: int = 64,
                   progress: Callable[[int], object] | None = None, n_layers: int | None = None,
                   products: torch.dtype | None = None, confidence: bool = False, marginals: bool = False,
                   pruning: Pruning | None = None, labels: bool = False) -> list[Reading | None]:
    """One model's reading of each sentence (a list of words as written); empty sentences get None.

    Sentences are sorted by length and padded at the end: a model reads from the start, so padding never
    changes what it makes of earlier positions. `n_layers`: only the lowest layers are needed; `products`:
    the dtype of the matrix products (None: float32; see runtime/precision.py); `confidence`: the spans' probabilities
    of a kind of trees of its own (`Reading.confidence`); `marginals`: every span's, a chart (`Reading.marginals`),
    from a family that yields them; `pruning`: chart constraints, for a family that takes them; `labels`: the induced
    labels of its tree's spans, from a family that induces them (`Reading.labels`).
    """
    direction = loaded.config.model.reading_order
    order = sorted((k for k, s in enumerate(sentences) if s), key=lambda k: len(sentences[k]))
    results: list[Reading | None] = [None] * len(sentences)

    yields = loaded.family.yields
    asked = {name: True for name, wanted in (("confidence", confidence), ("marginals", marginals), ("labels", labels))
             if wanted and getattr(yields, name)}  # what the family gives, of what is asked

    constrained = pruning is not None and yields.prunable

    def read(batch: list[int]) -> list[Reading]:
        words = [sentences[k] for k in batch]
        tokens = token_rows(loaded, [model_order(w, direction) for w in words])  # (B, T)
        keep = {"keep": pruning.keep(words, token_rows(pruning.pruner, words)),
                "kept_mass": pruning.kept_mass} if constrained else {}
        return loaded.model.read(tokens, words, n_layers, products, **asked, **keep)

    decoder = yields.decoder  # what its distances are read with unless a decoder is asked for
    batches, lanes = list(_batches(order, sentences, batch_size)), _lanes(loaded, constrained)
    if lanes > 1:  # the longest first: the lanes end on the shortest batches, not on the longest one alone
        batches.reverse()
    for batch, readings in zip(batches, map_in_threads(read, batches, loaded.model.device, lanes)):
        for k, reading in zip(batch, readings):
            results[k] = reading if reading.decoder == decoder else replace(reading, decoder=decoder)
        if progress is not None:
            progress(len(batch))
    return results


def _lanes(loaded: LoadedModel, pruned: bool) -> int:
    """How many batches a model reads at once on a CPU (runtime/threads.py): as its kind says, for a chart pruned or
    not."""
    return LANES if loaded.family.lanes == "always" or (loaded.family.lanes == "pruned" and pruned) else 1


def _batches(order: list[int], sentences: list[list[str]], batch_size: int) -> Iterator[list[int]]:
    """`order` (sorted by length) in batches of at most `batch_size` sentences and BATCH_WORDS words."""
    batch: list[int] = []
    for k in order:
        if batch and (len(batch) == batch_size or (len(batch) + 1) * len(sentences[k]) > BATCH_WORDS):
            yield batch
            batch = []
        batch.append(k)
    if batch:
        yield batch


def token_rows(loaded: LoadedModel, sentences: list[list[str]]) -> torch.Tensor:
    """(B, T) ids of `<eos> w1 ... wn <eos>` per sentence, padded with `<eos>` to the longest."""
    longest = max(len(s) for s in sentences)
    rows = [token_ids(loaded, s) for s in sentences]
    eos = rows[0][0]
    return torch.tensor([row + [eos] * (longest + 2 - len(row)) for row in rows])


def token_ids(loaded: LoadedModel, sentence: Sequence[str]) -> list[int]:
    """`<eos> w1 ... wn` as the model reads the words (normalised by its tokenizer, unknown words as `<unk>`)."""
    return [loaded.vocab.index[EOS], *map(loaded.word_id, sentence)]
