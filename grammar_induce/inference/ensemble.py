"""How an ensemble's readings become trees, torch-free: the combiners as a table, layer choice and
member agreement. A new combiner is one function and one entry in COMBINERS (a new decoder: one in
trees.DECODERS); the command line's choices and the evaluation's rows follow the tables.

Each member's reading of a sentence (families/reading.py: `Reading`) is in reading order; its tree comes from
one layer's distances with a decoder (or is its own), and several members' trees are combined into one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import trees
from ..errors import SettingError
from ..families.reading import Reading, middle_layer
from ..messages import plural
from ..metrics import SpanMetric
from ..trees import Tree
from .maps import Calibration, LabelMap

if TYPE_CHECKING:
    from ..families.checkpoint import LoadedModel
    from .pruning import Pruning  # a model inside: torch


@dataclass(frozen=True, kw_only=True)
class ParseOptions:
    layers: tuple[int, ...] = ()  # (): each model's middle layer; one for all models, or one per model
    auto_layers: bool = False  # several models: each one's layer chosen by agreement (see layers_by_agreement)
    distance: str | None = None  # a name the models' readings have (an ON-LSTM's forget, input); None: each one's first
    decoder: str | None = None  # a name in trees.DECODERS; None: each model's own (its kind's: an ON-LSTM's paper)
    combine: str = "mbr"  # a name in COMBINERS, for two or more models
    batch_size: int = 64
    precision: str = "fp32"  # fp32 | bf16 | auto, of the models' matrix products (runtime/precision.py)
    # span voting: the weight of a right-branching tree as one more voter (0: none). English leans right,
    # and a weak prior of that kind breaks the members' ties the way the language does.
    right_voter: float = 0.0
    pretokenized: bool = False  # lines are tokens separated by spaces (segmented Chinese, say): not split again
    whole_lines: bool = False  # a line of several sentences is parsed as one (else a tree per sentence, joined)
    labels: bool = False  # keep a model's induced labels (a PCFG's NT-k) of its tree's spans, where one model parses
    confidence: bool = False  # give each span of a tree how sure it is (`confidences`)
    calibration: Calibration | None = None  # the confidences mapped to how often such brackets are right (fitted)
    label_map: LabelMap | None = None  # induced label -> a treebank's category (learned from gold trees)
    # span voting: each member's weight (one per member; (): 1 each), or "family": each member weighs one over
    # the number of members of its model kind, so that each family (ON-LSTMs, PCFGs, students) votes as one, or
    # "auto": each member's lead in agreement over right-branching trees (rank_members), on the first chunk
    weights: tuple[float, ...] | str = ()
    member_precisions: tuple[str, ...] = ()  # auto, resolved: fp32 or bf16 per member (each measured on its own)
    marginals: bool = False  # the members' charts of every span's probability (Reading.marginals), for soft targets
    pruning: Pruning | None = None  # chart constraints for the members that take them (a PCFG's parse)

    @property
    def reads_marginals(self) -> bool:
        """Whether the members read their charts of span marginals: asked for, or the combiner sums them."""
        return self.marginals or self.combine == "marginals"


def resolve_weights(options: ParseOptions, kinds: list[str]) -> tuple[float, ...] | str:
    """Each member's voting weight: as given (one per member), the family rule's, or () for 1 each; "auto" where the
    readings will choose them (two or more members)."""
    if options.weights == "family":
        return tuple(1 / kinds.count(kind) for kind in kinds)
    if options.weights == "auto" and len(kinds) > 1:
        return "auto"  # chosen on the first chunk's readings (inference/members.Members.with_layers)
    if options.weights == "auto":
        return ()  # one model votes alone
    if isinstance(options.weights, str):
        raise SettingError("weights", f"takes a number per model, family or auto, not {options.weights!r}")
    if options.weights and len(options.weights) != len(kinds):
        raise SettingError("weights", f"are {plural(len(options.weights), 'number')} for "
                           f"{plural(len(kinds), 'model')}: give one per model")
    if any(not (isinstance(w, (int, float)) and not isinstance(w, bool) and 0 <= w < float("inf"))
           for w in options.weights):
        raise SettingError("weights", f"must be numbers of at least 0, not {options.weights!r}")
    return tuple(float(w) for w in options.weights)


def resolve_layers(options: ParseOptions, models: list[LoadedModel]) -> list[int]:
    """Each model's layer: the middle one, the one layer given for all, or its own."""
    if len(options.layers) not in (0, 1, len(models)):
        raise SettingError("layer", f"is given {plural(len(options.layers), 'time')} for {plural(len(models), 'model')}: "
                         "give it once for all, or once per model")
    layers = options.layers * len(models) if len(options.layers) == 1 else options.layers or (None,) * len(models)
    return [parse_layer(loaded, layer) for layer, loaded in zip(layers, models)]


def parse_layer(loaded: LoadedModel, asked: int | None) -> int:
    """The layer a parse reads: the one asked for (checked), else the middle one (the paper's 2 of 3); a family that
    yields its own trees has one, whatever is asked (the command line notes that)."""
    if loaded.family.yields.own_trees:
        return 1
    n_layers = loaded.model.parse_layers
    layer = middle_layer(n_layers) if asked is None else asked
    if not 1 <= layer <= n_layers:
        raise SettingError("layer", f"{layer} is out of range: the model has layers 1 to {n_layers}")
    return layer


def layers_by_agreement(parsed: list[list[Reading | None]], options: ParseOptions,
                        families: Sequence[str] = ()) -> tuple[int, ...]:
    """A layer for each member, chosen without gold trees: starting from the middle layers, each member in
    turn takes the layer whose trees agree best (pooled sentence F1) with the other members' current
    trees, until none changes. Members' layers carry different structure (a backward model's
    lowest layer, say), and agreement between independent models points to the shared one.

    `families` (each member's model kind): where there are two or more, a member agrees only with the
    members of other families. Models of one family share its biases (the two Chinese ON-LSTMs' top layers
    agree best with each other and parse worst, docs/chinese.md); another family's trees are independent
    evidence."""
    counts = [next(p for p in member if p is not None).n_layers for member in parsed]
    across = len(set(families)) > 1
    layers = [middle_layer(n) for n in counts]
    cache: dict[tuple[int, int], list[set]] = {}

    def spans(k: int, layer: int) -> list[set]:
        if (k, layer) not in cache:
            cache[k, layer] = [trees.spans(p.tree(layer, options.distance, options.decoder)) if p else set()
                               for p in parsed[k]]
        return cache[k, layer]

    def agreement(k: int, layer: int) -> float:
        return sum(sum((SpanMetric.of(a, b) for a, b in zip(spans(k, layer), spans(j, layers[j]))),
                       SpanMetric()).sentence_f1 for j in peers(k))

    def peers(k: int) -> list[int]:
        return [j for j in range(len(parsed)) if j != k and not (across and families[j] == families[k])]

    for _ in range(10):
        changed = False
        for k in range(len(parsed)):
            best = max(range(1, counts[k] + 1), key=lambda layer: (agreement(k, layer), layer == layers[k]))
            changed |= best != layers[k]
            layers[k] = best
        if not changed:
            break
    return tuple(layers)


def _span_voting(sentences: list[list[Reading]], layers: list[int], options: ParseOptions) -> list[Tree]:
    """The binary tree with the most member spans (MBR span voting; see voting.py), the sentences' charts
    in batches."""
    from .voting import most_voted_trees

    voters = [[p.tree(layer, options.distance, options.decoder) for p, layer in zip(members, layers)]
              for members in sentences]
    own = list(options.weights) if isinstance(options.weights, tuple) and options.weights else None
    if not options.right_voter:
        return most_voted_trees(voters, own)
    weights = (own or [1.0] * len(layers)) + [options.right_voter]
    return most_voted_trees([[*members, trees.right_branching(trees.leaves(members[0]))] for members in voters],
                            weights)


def _marginal_sum(sentences: list[list[Reading]], layers: list[int], options: ParseOptions) -> list[Tree]:
    """The tree with the most expected spans under the members' summed span marginals (each member's chart times
    its weight): minimum-Bayes-risk decoding of the ensemble, as a PCFG's own tree is of its chart (the CKY)."""
    if sentences and not all(p.marginals is not None for p in sentences[0]):
        raise SettingError("combine", "marginals sums the members' span marginals, and a member has none (only a PCFG "
                           "and a distilled student have them): combine it with mbr")
    from ..structures.cky import best_trees
    from ..structures.tree_crf import stacked

    if not sentences:
        return []
    charts = stacked([mean_chart(members, options.weights) for members in sentences])
    return best_trees(charts, [len(members[0].words) for members in sentences],
                      [members[0].words for members in sentences])


def _mean_gaps(sentences: list[list[Reading]], layers: list[int], options: ParseOptions) -> list[Tree]:
    """The gap decoder on the members' mean standardised gap scores."""
    if sentences and not all(p.has_gaps for p in sentences[0]):
        raise SettingError("combine", "mean needs gap scores, and a member yields trees of its own (a PCFG, a "
                           "distilled student: no distances): combine it with mbr")

    def tree(members: list[Reading]) -> Tree:
        scores = [trees.standardize(p.gaps(layer, options.distance)) for p, layer in zip(members, layers)]
        return trees.tree_from_gaps([sum(column) / len(scores) for column in zip(*scores)], members[0].words)

    return [tree(members) for members in sentences]


# name -> (per sentence, the members' readings; each member's layer; options) -> the ensemble's trees.
# A new combiner: a function and an entry here (and in NEEDS_GAPS if it reads gap scores, NEEDS_MARGINALS if span
# marginals).
COMBINERS: dict[str, Callable[[list[list[Reading]], list[int], ParseOptions], list[Tree]]] = {
    "mbr": _span_voting,
    "mean": _mean_gaps,
    "marginals": _marginal_sum,
}
NEEDS_GAPS = {"mean"}  # combiners that read gap scores, which a member yielding trees of its own has not
NEEDS_MARGINALS = {"marginals"}  # combiners that read charts of span marginals (a PCFG's, a student's)


def combiners_for(sentences: list[list[Reading]]) -> list[str]:
    """The combiners that can combine these members' readings."""
    gaps = not sentences or all(p.has_gaps for p in sentences[0])
    charts = not sentences or all(p.marginals is not None for p in sentences[0])
    return [name for name in COMBINERS
            if (gaps or name not in NEEDS_GAPS) and (charts or name not in NEEDS_MARGINALS)]


def combine(sentences: list[list[Reading]], layers: list[int], options: ParseOptions) -> list[Tree]:
    """The ensemble's tree of each sentence (a list of its members' distances) by `options.combine`;
    one member's tree is its own."""
    if sentences and len(sentences[0]) == 1:
        return [members[0].tree(layers[0], options.distance, options.decoder) for members in sentences]
    return COMBINERS[options.combine](sentences, layers, options)


def confidences(members: list[Reading], layers: list[int], options: ParseOptions, tree: Tree
                ) -> dict[tuple[int, int], float] | None:
    """How sure each span of `tree` (the ensemble's tree of one sentence, over its words; the whole sentence too)
    is, in [0, 1]; None where a model has no such number (a StructFormer alone: one layer of distances).

    - one model of trees of its own: its probability of the span (a PCFG's span marginal, a student's CRF marginal);
    - one model of distances with several layers (an ON-LSTM): the share of its layers whose trees (by the same
      decoder) have the span;
    - an ensemble: the span's share of the vote, each member's tree weighing its voting weight and the right-branching
      voter its weight (`--combine mean`: each member's tree one vote, no right voter).

    With `options.calibration`, each number is mapped through it (what share of such brackets a treebank had)."""
    found = _raw_confidences(members, layers, options, tree)
    if found is None or options.calibration is None:
        return found
    whole = (0, len(members[0].words))  # in every tree: sure, whatever the map says of brackets so sure
    return {span: value if span == whole else options.calibration(value) for span, value in found.items()}


def _raw_confidences(members: list[Reading], layers: list[int], options: ParseOptions, tree: Tree
                     ) -> dict[tuple[int, int], float] | None:
    spans = trees.spans(tree, whole=True)
    if len(members) == 1:
        reading = members[0]
        if reading.confidence is not None:
            return {span: reading.confidence.get(span, 0.0) for span in spans}
        if not reading.has_gaps or reading.n_layers < 2:
            return None
        voters = [reading.tree(layer, options.distance, options.decoder) for layer in range(1, reading.n_layers + 1)]
        weights = [1.0] * len(voters)
    else:
        voters = [p.tree(layer, options.distance, options.decoder) for p, layer in zip(members, layers)]
        own = options.weights if isinstance(options.weights, tuple) and options.weights else None
        if options.combine == "marginals":  # the ensemble's own chart: each span's weighted mean marginal
            chart = mean_chart(members, options.weights)
            return {(i, j): float(chart[i, j]) for i, j in spans}
        voting = options.combine == "mbr"
        weights = list(own) if voting and own else [1.0] * len(voters)
        if voting and options.right_voter:
            voters.append(trees.right_branching(trees.leaves(tree)))
            weights.append(options.right_voter)
    return vote_shares(spans, voters, weights)


def vote_shares(spans: set[tuple[int, int]], voters: list[Tree], weights: Sequence[float]
                ) -> dict[tuple[int, int], float]:
    """Each span's weighted share of the voters' trees that have it (the whole sentence: 1)."""
    total = sum(weights) or 1.0
    found = [trees.spans(voter, whole=True) for voter in voters]
    return {span: sum(w for w, has in zip(weights, found) if span in has) / total for span in spans}


def mean_chart(members: list[Reading], weights: tuple[float, ...] | str):
    """The members' charts of span marginals (n+1, n+1), each weighed by its voting weight (1 each unless given),
    averaged: the marginal-sum ensemble's chart, and a student's soft targets."""
    own = list(weights) if isinstance(weights, tuple) and weights else [1.0] * len(members)
    return sum(w * p.marginals for w, p in zip(own, members)) / (sum(own) or 1.0)


def layers_named(layers: Sequence[int], own_trees: Sequence[bool], sep: str = ",") -> str:
    """The members' layers for a message: "-" for a member that reads no layer (a PCFG, a student: its own trees,
    its place in `layers` a placeholder)."""
    return sep.join("-" if own else str(layer) for layer, own in zip(layers, own_trees))


@dataclass(frozen=True)
class Standing:
    """A member's gold-free standing in an ensemble (see `rank_members`)."""

    agreement: float  # mean pooled sentence F1 of its trees against each peer's
    baseline: float  # the same of right-branching trees against the same peers
    weight: float  # its vote in span voting under `--weights auto`: its lead over the baseline, the best member's 1
    peers: str  # "other families" or "other members"

    @property
    def lead(self) -> float:
        return self.agreement - self.baseline


def rank_members(sentences: list[list[Tree]], families: Sequence[str]) -> list[Standing]:
    """Each member's standing without gold trees, for `--weights auto` (issue 59). `sentences`: per sentence, the
    members' trees; `families`: each member's model kind.

    A member's agreement is the mean, over its peers, of the pooled sentence F1 of its trees against the peer's (the
    inter-model agreement of ED4UCP, Shayegh et al. 2024). Its peers are the members of the other families where
    there are two or more (a family's members share its biases, so they vouch for each other's errors; another
    family's trees are independent evidence), else every other member. What a trivial parser scores against the same
    peers is subtracted (right-branching trees: English leans right, so every member agrees with that much for free),
    and a member's weight is that lead over the baseline, scaled so that the best member has 1 (at least 0: a member
    that agrees no more than right-branching trees gets no vote; where none leads, each gets 1)."""
    n = len(families)
    across = len(set(families)) > 1
    peers = [[j for j in range(n) if j != k and not (across and families[j] == families[k])] for k in range(n)]
    pairs = [[SpanMetric() for _ in range(n)] for _ in range(n)]
    right = [SpanMetric() for _ in range(n)]
    for members in sentences:
        spans = [trees.spans(tree) for tree in members]
        branching = trees.spans(trees.right_branching(trees.leaves(members[0])))
        for k in range(n):
            right[k] += SpanMetric.of(branching, spans[k])
            for j in range(k + 1, n):
                pairs[k][j] += SpanMetric.of(spans[k], spans[j])
    f1 = [[pairs[min(k, j)][max(k, j)].sentence_f1 for j in range(n)] for k in range(n)]
    agreement = [sum(f1[k][j] for j in peers[k]) / max(len(peers[k]), 1) for k in range(n)]
    baseline = [sum(right[j].sentence_f1 for j in peers[k]) / max(len(peers[k]), 1) for k in range(n)]
    leads = [max(a - b, 0.0) for a, b in zip(agreement, baseline)]
    top = max(leads, default=0.0)
    weights = [lead / top if top > 0 else 1.0 for lead in leads]
    kind = "other families" if across else "other members"
    return [Standing(a, b, w, kind) for a, b, w in zip(agreement, baseline, weights)]


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
