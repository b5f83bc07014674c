"""Scoring induced trees against gold trees with the paper's protocol, beside trivial baselines.

Rows: every layer with both distance kinds and the mean over layers (for a model), or a file
of predicted trees; then left-branching, right-branching, balanced and random trees.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .. import trees
from ..errors import InputError
from ..families.pretrained import shown
from ..inference.ensemble import confidences
from ..inference.maps import Calibration, Fitted
from ..messages import Messages, plural, progress_bar
from ..metrics import SpanMetric
from ..output.evaluation import Report
from ..text.predicted import onto_gold, predicted_trees
from ..text.treebank import GoldTree, TagFilter, read_gold

if TYPE_CHECKING:
    from ..inference.members import Members

LENGTH_BUCKETS = ((1, 10), (11, 20), (21, 30), (31, 40), (41, 10**9))
RECALL_LABELS = ("NP", "VP", "PP", "SBAR", "ADJP", "ADVP")  # the categories the PCFG papers report recall of
BASELINES: dict[str, Callable] = {
    "left-branching": trees.left_branching,
    "right-branching": trees.right_branching,
    "balanced": trees.balanced,
}


@dataclass(frozen=True)
class EvalOptions:
    gold: str
    tags: TagFilter = field(default_factory=TagFilter)
    max_length: int = 0  # 0: all; WSJ10 is 10 (counted after punctuation removal)
    skip_bad: bool = False
    batch_size: int = 64
    baseline_seed: int = 0  # the random baseline's draws: the same trees in every evaluation
    random_draws: int = 5
    quiet: bool = False
    dependencies: bool = False  # also score a model's dependency heads (UAS) against the gold trees' head rules


def label_recall(predicted: list, gold: list[GoldTree]) -> dict[str, tuple[int, int]]:
    """For each of RECALL_LABELS: (gold constituents of it whose span the predicted tree holds, gold
    constituents of it), counting the spans the F1 protocol counts (two or more words, not the whole sentence)."""
    found = {label: [0, 0] for label in RECALL_LABELS}
    for tree, g in zip(predicted, gold):
        held = trees.spans(tree)
        for start, end, label in g.labels:
            if label in found and end - start >= 2 and (start, end) != (0, len(g.words)):
                found[label][0] += (start, end) in held
                found[label][1] += 1
    return {label: (hit, total) for label, (hit, total) in found.items()}


def dependency_scores(rows: dict[str, list[list[int]]], gold: list[GoldTree]) -> dict[str, tuple[float, float]]:
    """Each row's heads' attachment scores (directed, undirected), and the left- and right-chain baselines'; the
    head rules (text/heads.py) are loaded here, for --deps alone."""
    from ..text.heads import attachment, chain

    truth = [g.heads for g in gold]
    return {**{name: attachment(heads, truth) for name, heads in rows.items()},
            "left chain": attachment([chain(len(g.words), leftward=True) for g in gold], truth),
            "right chain": attachment([chain(len(g.words), leftward=False) for g in gold], truth)}


def within_length(gold: list[GoldTree], max_length: int) -> list[GoldTree]:
    return [g for g in gold if not max_length or len(g.words) <= max_length]


def evaluate_models(members: Members, options: EvalOptions, messages: Messages | None = None) -> Report:
    """Parse the gold sentences with one or more loaded models, checked (`Members.of`), and score them: the
    trees the member path makes (inference/members.py), as `parse` makes them.

    One model: every layer with both distance kinds and the mean of the layers (a model that yields its
    own trees: those). Several: each member (its chosen layer), every combination that fits them, and how
    much each member agrees with the others. The notes (the gold trees' warnings) go to `messages` and
    into the report.
    """
    from ..inference.members import auto_weights_note

    models = members.models
    members = replace(members, options=replace(members.options, confidence=True))  # for the calibration
    noted = _report_messages(messages)
    gold, skipped = read_gold(options.gold, options.tags, options.skip_bad, noted)
    gold = within_length(gold, options.max_length)
    sentences = [g.words for g in gold]
    with _progress(len(gold) * len(models), options.quiet) as bar:  # every gold sentence at once: the rows need all
        parsed = next(members.parse(sentences, progress=bar.update, at_once=True), None)
    unknown = {shown(m.source): unknown_words(m, sentences) for m in models}
    for source, (count, total) in unknown.items():
        if total and count > UNKNOWN_WARNING * total:
            noted.note(f"{count:,} of the {total:,} gold words ({100 * count / total:.0f}%) are unknown to {shown(source)}: "
                       "its tokenizer or vocabulary does not fit these trees (another language, word segmentation or "
                       "casing?)")
    members, readings = (parsed.members, parsed.readings) if parsed else (members.with_layers(), [[]] * len(models))
    if members.standings:
        noted.note(auto_weights_note([m.source for m in models], members.options.weights))
    predicted, main_row, agreement = _predicted_rows(members, readings)
    report = replace(_report(gold, skipped, predicted, main_row, options, agreement, noted.notes), unknown=unknown,
                     brackets=_confident_brackets(members, readings, predicted[main_row], gold))
    if members.options.label_map is not None:
        report.labelled = labelled_score(readings[0], predicted[main_row], gold, members.options.label_map.labels)
    if options.dependencies:
        report.dependencies = _dependency_rows(models, readings, gold)
    return report


def _predicted_rows(members: Members, readings: list[list]) -> tuple[dict[str, list[trees.Tree]], str, list | None]:
    """The rows of induced trees (an ensemble's combinations, a model's own trees, or a row per layer and distance),
    which of them is the main one, and, for an ensemble, how much each member agrees with the others."""
    models = members.models
    if len(models) > 1:
        predicted, agreement = _ensemble_rows(members, readings)
        return predicted, f"{members.options.combine} of {len(models)}", agreement
    family, yields = models[0].family, models[0].family.yields
    if yields.own_trees:
        main_row = f"{family.name} ({yields.search})"
        return {main_row: members.combine(readings)}, main_row, None
    distance = members.options.distance or yields.distances[0]
    main_row = f"layer {members.options.layers[0]} {distance}" if yields.layered else f"{distance} distances"
    return _layer_rows(readings[0], members.options.decoder, yields.layered), main_row, None


def _dependency_rows(models: list, readings: list[list], gold: list[GoldTree]) -> dict[str, tuple[float, float]]:
    """The first model with dependency heads: its tree-decoded heads' attachment scores, beside its argmax ones."""
    k, family = next(((k, m.family) for k, m in enumerate(models) if m.family.yields.heads), (0, models[0].family))
    if not family.yields.heads:
        raise InputError(f"--deps scores dependency heads, and {shown(models[0].source)} ({family.description}) "
                         "has none: a StructFormer (model.kind = \"structformer\") has them")
    rows = {f"{family.name} heads (tree)": [p.heads for p in readings[k]]}
    if readings[k] and readings[k][0].argmax_heads is not None:  # the paper's: each word's best head alone
        rows = {f"{family.name} heads (argmax)": [p.argmax_heads for p in readings[k]], **rows}
    return dependency_scores(rows, gold)


def _confident_brackets(members: Members, readings: list[list], predicted: list[trees.Tree], gold: list[GoldTree]
                        ) -> list[tuple[float, bool]]:
    """The main row's brackets the F1 counts, each with its confidence (inference/ensemble.confidences) and whether
    it is a gold constituent; none where the models give no confidence (a StructFormer alone, a student's greedy
    tree of a sentence too long for its CKY)."""
    layers, options = list(members.options.layers), members.options
    scored = []
    for sentence, tree, g in zip(zip(*readings), predicted, gold):
        sure = confidences(list(sentence), layers, options, tree)
        if sure is None:
            continue
        truth = trees.spans(g.tree)
        scored += [(sure[span], span in truth) for span in trees.spans(tree)]
    return scored


def fitted_calibration(report: Report, gold: str, models: list[str]) -> Calibration:
    """`evaluate --calibrate`: the map from the main row's confidences to the share of such brackets that are gold,
    tied to the `models` (their files) that gave them."""
    if not report.brackets:
        raise InputError(f"--calibrate: {report.main_row} gives no confidences to calibrate")
    return Calibration.fit(report.brackets, f"{gold} ({report.main_row}, {plural(report.sentences, 'sentence')})",
                           Fitted.of(models))


def labelled_score(readings: list, predicted: list, gold: list[GoldTree], label_map: dict[str, str]) -> SpanMetric:
    """Labelled span F1 of the induced labels renamed by `label_map` against the gold categories (the spans the
    unlabelled F1 counts: two or more words, not the whole sentence; a unary chain's outermost category)."""
    total = SpanMetric()
    for reading, tree, g in zip(readings, predicted, gold):
        labels = reading.labels or {}
        found = {(i, j, label_map.get(labels.get((i, j), ""), labels.get((i, j), ""))) for i, j in trees.spans(tree)}
        truth = {(i, j, c) for (i, j), c in g.categories().items() if (i, j) != (0, len(g.words))}
        total += SpanMetric.of(found, truth)
    return total


def _report_messages(messages: Messages | None) -> Messages:
    """An evaluation's own messages (its notes go into its report), passing each note on to `messages`."""
    return Messages(tell=messages.note if messages is not None else None)


UNKNOWN_WARNING = 0.2  # of the gold words unknown to a model: a note above it


def unknown_words(loaded, sentences: list[list[str]]) -> tuple[int, int]:
    """How many of the words are not in the model's vocabulary (read as the model reads them), of how many."""
    index, normalize = loaded.vocab.index, loaded.tokenizer.normalize
    words = [w for sentence in sentences for w in sentence]
    return sum(normalize(w) not in index for w in words), len(words)


def _layer_rows(parsed: list, decoder: str, layered: bool) -> dict[str, list[trees.Tree]]:
    """A row per layer and distance name, and each name's mean over the layers; distances that are not a layer's
    (not `Yields.layered`: a StructFormer's parser) are one row, `<name> distances`."""
    n_layers = parsed[0].n_layers
    predicted: dict[str, list[trees.Tree]] = {}
    for k in (name for name, rows in parsed[0].distances.items() if rows):  # the names the model has
        if not layered:
            predicted[f"{k} distances"] = [p.tree(1, k, decoder) for p in parsed]
            continue
        for l in range(1, n_layers + 1):
            predicted[f"layer {l} {k}"] = [p.tree(l, k, decoder) for p in parsed]
        predicted[f"mean of layers {k}"] = [
            trees.decode([sum(col) / n_layers for col in zip(*p.distances[k])], p.words, p.direction,
                         decoder or p.decoder)
            for p in parsed
        ]
    return predicted


def _ensemble_rows(members, readings: list[list]) -> tuple[dict[str, list[trees.Tree]], dict[str, SpanMetric]]:
    """A row per member and per combination that fits the members, and each member's agreement with the others."""
    from ..inference.ensemble import combiners_for, member_agreement
    from ..inference.members import Members

    layers = members.options.layers
    names = [f"{k + 1}: {_short_name(m.source)}" + ("" if m.family.yields.own_trees else f" L{layer}")
             for k, (m, layer) in enumerate(zip(members.models, layers))]  # a model of its own trees reads no layer
    predicted = dict(zip(names, members.member_trees(readings)))
    for how in combiners_for([list(column) for column in zip(*readings)]):
        combined = Members(members.models, replace(members.options, combine=how))
        predicted[f"{how} of {len(members.models)}"] = combined.combine(readings)
    per_sentence = [list(member_trees) for member_trees in zip(*(predicted[name] for name in names))]
    return predicted, dict(zip(names, member_agreement(per_sentence)))


def _short_name(source: str) -> str:
    path = Path(source)
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name



def evaluate_file(pred_path: Path, options: EvalOptions, labeled: bool, messages: Messages | None = None,
                  fmt: str | None = None) -> Report:
    """Score a file of predicted trees, aligned with the gold trees (all of them, or those within --max-length,
    as `evaluate --max-length N --save-trees` writes them): `fmt` brackets or ptb (a tree a line, or trees spread
    over lines as .mrg files write them), json (nested lists, a line each) or jsonl (`parse --format jsonl`'s
    records); None: told by the first tree's first character. A blank line is a sentence with no tree."""
    return evaluate_trees(pred_path, predicted_trees(Path(pred_path), fmt), options, labeled, messages)


def evaluate_trees(source: str | Path, lines: list[tuple[int, object]], options: EvalOptions, labeled: bool,
                   messages: Messages | None = None) -> Report:
    """`evaluate_file` of (number, tree) pairs, each tree bracket text or a tree object (nested lists of
    words, as an nltk.Tree is: its labels read as tags when `labeled`); `source` names them in messages."""
    noted = _report_messages(messages)
    gold, skipped = read_gold(options.gold, options.tags, options.skip_bad, noted)
    short = within_length(gold, options.max_length)
    lines = _without_skipped(lines, gold, skipped, source)
    if len(lines) not in (len(gold), len(short)):
        within = f" ({len(short)} of at most {options.max_length} words)" if options.max_length else ""
        counts = f"{source}: {plural(len(lines), 'predicted tree')} for {plural(len(gold), 'gold tree')}{within}"
        raise InputError("; ".join([counts, *noted.notes]))
    aligned = gold if len(lines) == len(gold) else short
    dropped: list[tuple[str, str]] = []  # (file:line, token) of every predicted token the gold trees lack
    try:
        predicted = [onto_gold(Path(source), n, text, g, labeled, options.tags, dropped)
                     for (n, text), g in zip(lines, aligned)]
    except InputError as e:
        raise InputError("; ".join([str(e), *noted.notes])) from None  # a tag-filter hint explains most word mismatches
    if dropped:
        noted.note(f"{plural(len(dropped), 'predicted token')} the gold trees do not have (punctuation, traces) "
                     f"left out, the first {dropped[0][1]!r} at {dropped[0][0]}")
    keep = [k for k, g in enumerate(aligned) if not options.max_length or len(g.words) <= options.max_length]
    return _report([aligned[k] for k in keep], skipped, {"predicted": [predicted[k] for k in keep]},
                   "predicted", options, notes=noted.notes)


def _without_skipped(lines: list[tuple[int, object]], gold: list[GoldTree], skipped, source) -> list:
    """The predictions without those of skipped gold trees, where there is one per gold tree of the file (the
    blank line `parse` writes for a sentence of traces only, say): a prediction with words there is refused."""
    if not skipped or len(lines) != len(gold) + skipped:
        return lines
    positions = {position for position, _, _ in skipped.trees}
    for k, (n, text) in enumerate(lines):
        if k in positions and text not in ("", None) and (not isinstance(text, str) or text.strip()):
            where = next(w for p, w, _ in skipped.trees if p == k)
            raise InputError(f"{source}:{n}: a tree for the gold tree at {where}, which is skipped (it has no words)")
    return [line for k, line in enumerate(lines) if k not in positions]


def _report(gold: list[GoldTree], skipped: int, predicted: dict[str, list], main_row: str,
            options: EvalOptions, agreement: dict[str, SpanMetric] | None = None,
            notes: list[str] | None = None) -> Report:
    if not gold:
        raise InputError(f"{options.gold}: no gold trees of at most {options.max_length} words")
    gold_spans = [trees.spans(g.tree) for g in gold]
    rows = {name: _score(ts, gold_spans) for name, ts in predicted.items()}
    baselines = {name: [build(g.words) for g in gold] for name, build in BASELINES.items()}
    rows.update({name: _score(ts, gold_spans) for name, ts in baselines.items()})
    draws = _random_draws(gold, options)
    rows["random"] = _random_baseline(draws, gold_spans)
    lengths = [len(g.words) for g in gold]
    by_length = {name: _by_length(ts, gold_spans, lengths)
                 for name, ts in ((main_row, predicted[main_row]), *baselines.items())}
    recall = {}
    if any(g.labels for g in gold):
        recall = {name: label_recall(ts, gold) for name, ts in (*predicted.items(), *baselines.items())}
        recall["random"] = _random_label_recall(draws, gold)
    return Report(rows, main_row, by_length, len(gold), skipped, predicted[main_row], agreement or {}, notes or [],
                  gold, label_recall=recall)


def _score(predicted: list, gold_spans: list[set]) -> SpanMetric:
    return sum((SpanMetric.of(trees.spans(t), g) for t, g in zip(predicted, gold_spans)), SpanMetric())


def _random_draws(gold: list[GoldTree], options: EvalOptions) -> list[list]:
    """Seeded random trees of every gold sentence, `options.random_draws` times."""
    rng = random.Random(options.baseline_seed)
    return [[trees.random_tree(g.words, rng) for g in gold] for _ in range(options.random_draws)]


def _random_baseline(draws: list[list], gold_spans: list[set]) -> SpanMetric:
    """The random row: the mean of the draws."""
    total = sum((_score(drawn, gold_spans) for drawn in draws), SpanMetric())
    n = len(draws)  # the mean draw: as many sentences as the other rows, its counts averaged
    return SpanMetric(total.sentences // n, total.sum_f1 / n, total.matched / n, total.predicted / n, total.gold / n)


def _random_label_recall(draws: list[list], gold: list[GoldTree]) -> dict[str, tuple[float, int]]:
    """The label recall of the random row's trees: each category's found count averaged over the draws."""
    counts = [label_recall(drawn, gold) for drawn in draws]
    return {label: (sum(c[label][0] for c in counts) / len(counts), counts[0][label][1]) for label in counts[0]}


def _by_length(predicted: list, gold_spans: list[set], lengths: list[int]) -> dict[str, SpanMetric]:
    result = {}
    for low, high in LENGTH_BUCKETS:
        picked = [k for k, n in enumerate(lengths) if low <= n <= high]
        if picked:
            label = f"{low}-{high}" if high < 10**9 else f"{low}+"
            result[label] = _score([predicted[k] for k in picked], [gold_spans[k] for k in picked])
    return result


def _progress(total: int, quiet: bool):
    return progress_bar(total, "parsing", "sent", quiet=quiet or total < 500)
