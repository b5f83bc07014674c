"""How trees come from distances, torch-free: decoders and combiners as tables, layer choice and
member agreement. Adding a decoder or a combiner is one function and one table entry here; the
command line's choices and the evaluation's rows follow the tables.

A model's distances for a sentence (`Parsed`) are in reading order; each model's tree comes from
one layer's distances with a decoder, and several models' trees are combined into one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import trees
from ..files import SettingError, plural
from ..metrics import SpanMetric
from ..trees import Tree

if TYPE_CHECKING:
    from ..models.checkpoint import LoadedModel


@dataclass(frozen=True)
class ParseOptions:
    layers: tuple[int, ...] = ()  # (): each model's middle layer; one for all models, or one per model
    auto_layers: bool = False  # several models: each one's layer chosen by agreement (see layers_by_agreement)
    distance: str = "forget"  # forget | input
    decoder: str = "paper"  # a name in DECODERS
    combine: str = "mbr"  # a name in COMBINERS, for two or more models
    batch_size: int = 64
    precision: str = "fp32"  # fp32 | bf16 | auto, of the models' matrix products (precision.py)
    # span voting: the weight of a right-branching tree as one more voter (0: none). English leans right,
    # and a weak prior of that kind breaks the members' ties the way the language does.
    right_voter: float = 0.0
    pretokenized: bool = False  # lines are tokens separated by spaces (segmented Chinese, say): not split again


@dataclass(frozen=True)
class Parsed:
    """One model's distances for one sentence, in reading order."""

    words: list[str]
    forget: list[list[float]]  # per layer, per word
    input: list[list[float]]
    direction: str = "forward"
    parsed_tree: Tree | None = None  # a span parser's (a distilled student's) own tree: it has no distances

    @property
    def n_layers(self) -> int:
        return len(self.forget) or 1  # a student is one layer, for the layer choice

    def distances(self, layer: int, kind: str = "forget") -> list[float]:
        """One layer's distances; `layer` counts from 1."""
        return getattr(self, kind)[layer - 1]

    def gaps(self, layer: int, kind: str = "forget") -> list[float]:
        """The scores of the gaps between words (none for a student: it scores spans)."""
        if self.parsed_tree is not None:
            return []
        return trees.gap_scores(self.distances(layer, kind), self.direction)

    def tree(self, layer: int, kind: str = "forget", decoder: str = "paper") -> Tree:
        """The tree of one layer's distances by `decoder`; a student's CKY tree."""
        if self.parsed_tree is not None:
            return self.parsed_tree
        return decode(self.distances(layer, kind), self.words, self.direction, decoder)


def _gap_decoder(distances: Sequence[float], words: Sequence[str], direction: str) -> Tree:
    return trees.tree_from_gaps(trees.gap_scores(distances, direction), words)


# name -> (distances in reading order, words, direction) -> tree
DECODERS: dict[str, Callable[[Sequence[float], Sequence[str], str], Tree]] = {
    "paper": trees.paper_tree,  # the paper's greedy split (mirrored for a backward model)
    "gap": _gap_decoder,  # split at the largest gap between words
}


def decode(distances: Sequence[float], words: Sequence[str], direction: str, decoder: str) -> Tree:
    return DECODERS[decoder](distances, words, direction)


def check_layer(layer: int, n_layers: int) -> None:
    if not 1 <= layer <= n_layers:
        raise SettingError("layer", f"{layer} is out of range: the model has layers 1 to {n_layers}")


def middle_layer(n_layers: int) -> int:
    """The paper parses with the middle layer: 2 of 3."""
    return (n_layers + 1) // 2


def resolve_layer(layer: int | None, loaded: LoadedModel) -> int:
    if not loaded.model.has_distances:  # a student parses by CKY: it has one "layer", whatever is asked
        return 1
    n_layers = loaded.config.model.n_layers
    layer = middle_layer(n_layers) if layer is None else layer
    check_layer(layer, n_layers)
    return layer


def resolve_layers(options: ParseOptions, models: list[LoadedModel]) -> list[int]:
    """Each model's layer: the middle one, the one --layer given for all, or its own --layer."""
    if len(options.layers) not in (0, 1, len(models)):
        raise SettingError("layer", f"is given {plural(len(options.layers), 'time')} for {plural(len(models), 'model')}: "
                         "give it once for all, or once per --model")
    layers = options.layers * len(models) if len(options.layers) == 1 else options.layers or (None,) * len(models)
    return [resolve_layer(layer, loaded) for layer, loaded in zip(layers, models)]


def layers_by_agreement(parsed: list[list[Parsed | None]], options: ParseOptions) -> tuple[int, ...]:
    """A layer for each member, chosen without gold trees: starting from the middle layers, each member in
    turn takes the layer whose trees agree best (pooled sentence F1) with the other members' current
    trees, until none changes. Members' layers carry different structure (a backward model's
    lowest layer, say), and agreement between independent models points to the shared one."""
    counts = [next(p for p in member if p is not None).n_layers for member in parsed]
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


def _span_voting(sentences: list[list[Parsed]], layers: list[int], options: ParseOptions) -> list[Tree]:
    """The binary tree with the most member spans (MBR span voting; see voting.py), the sentences' charts
    in batches."""
    from .voting import most_voted_trees

    voters = [[p.tree(layer, options.distance, options.decoder) for p, layer in zip(members, layers)]
              for members in sentences]
    if not options.right_voter:
        return most_voted_trees(voters)
    weights = [1.0] * len(layers) + [options.right_voter]
    return most_voted_trees([[*members, trees.right_branching(trees.leaves(members[0]))] for members in voters],
                            weights)


def _mean_gaps(sentences: list[list[Parsed]], layers: list[int], options: ParseOptions) -> list[Tree]:
    """The gap decoder on the members' mean standardised gap scores."""
    if sentences and any(p.parsed_tree is not None for p in sentences[0]):
        raise SettingError("combine", "mean needs gap scores, and a distilled student scores spans: combine it with mbr")

    def tree(members: list[Parsed]) -> Tree:
        scores = [trees.standardize(p.gaps(layer, options.distance)) for p, layer in zip(members, layers)]
        return trees.tree_from_gaps([sum(column) / len(scores) for column in zip(*scores)], members[0].words)

    return [tree(members) for members in sentences]


# name -> (per sentence, the members' distances; each member's layer; options) -> the ensemble's trees
COMBINERS: dict[str, Callable[[list[list[Parsed]], list[int], ParseOptions], list[Tree]]] = {
    "mbr": _span_voting,
    "mean": _mean_gaps,
}


def combine(sentences: list[list[Parsed]], layers: list[int], options: ParseOptions) -> list[Tree]:
    """The ensemble's tree of each sentence (a list of its members' distances) by `options.combine`;
    one member's tree is its own."""
    if sentences and len(sentences[0]) == 1:
        return [members[0].tree(layers[0], options.distance, options.decoder) for members in sentences]
    return COMBINERS[options.combine](sentences, layers, options)


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
