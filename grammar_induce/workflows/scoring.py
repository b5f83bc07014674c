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
from ..inference.maps import Calibration, Fitted
from ..messages import Messages, plural, progress_bar
from ..metrics import SpanMetric
from ..output.evaluation import Report
from ..text.predicted import on_gold
from ..text.treebank import GoldTree, TagFilter, read_gold

if TYPE_CHECKING:
    from ..inference.members import Members, Rows

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


def evaluate_models(members: Members, options: EvalOptions, messages: Messages | None = None) -> Report:
    """Parse the gold sentences with one or more loaded models, checked (`Members.of`), and score the rows of trees
    they offer (`Parse.rows`, inference/members.py), made by the member path as `parse` makes them.

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
    gold = _some([g for g in gold if g.within(options.max_length)], options)
    sentences = [g.words for g in gold]
    with _progress(len(gold) * len(models), options.quiet) as bar:  # every gold sentence at once: the rows need all
        parsed = members.parse_all(sentences, progress=bar.update)
    unknown = {shown(m.source): unknown_words(m, sentences) for m in models}
    _note_unknown_words(unknown, noted)
    if parsed.members.standings:
        noted.note(auto_weights_note([m.source for m in models], parsed.options.weights))
    rows = parsed.rows(heads=options.dependencies)
    dependencies = dependency_scores(rows.heads, gold) if rows.heads else {}
    report = replace(_report(gold, skipped, rows.trees, rows.main, options, rows.agreement, noted.notes),
                     unknown=unknown, dependencies=dependencies, brackets=_confident_brackets(rows, gold))
    if parsed.options.label_map is not None and rows.labels is not None:
        report.labelled = labelled_score(rows.labels, rows.predicted, gold, parsed.options.label_map.labels)
    return report


def _some(gold: list[GoldTree], options: EvalOptions) -> list[GoldTree]:
    """The gold trees to score (those within --max-length), refused when there are none."""
    if not gold:
        raise InputError(f"{options.gold}: no gold trees of at most {options.max_length} words")
    return gold


def _confident_brackets(rows: Rows, gold: list[GoldTree]) -> list[tuple[float, bool]]:
    """The main row's brackets the F1 counts, each with its confidence and whether it is a gold constituent; none
    where the models give no confidence (a StructFormer alone, a student's greedy tree of a sentence too long for its
    CKY)."""
    scored = []
    for sure, tree, g in zip(rows.confidences, rows.predicted, gold):
        if sure is not None:
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


def labelled_score(labels: list[dict[tuple[int, int], str]], predicted: list, gold: list[GoldTree],
                   label_map: dict[str, str]) -> SpanMetric:
    """Labelled span F1 of the induced labels (per sentence, span -> label) renamed by `label_map` against the gold
    categories (the spans the unlabelled F1 counts: two or more words, not the whole sentence; a unary chain's
    outermost category)."""
    total = SpanMetric()
    for found_labels, tree, g in zip(labels, predicted, gold):
        found = {(i, j, label_map.get(found_labels.get((i, j), ""), found_labels.get((i, j), "")))
                 for i, j in trees.spans(tree)}
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


def _note_unknown_words(unknown: dict[str, tuple[int, int]], noted: Messages) -> None:
    """A note for each model (as messages name it) that knows too few of the gold words."""
    for source, (count, total) in unknown.items():
        if total and count > UNKNOWN_WARNING * total:
            noted.note(f"{count:,} of the {total:,} gold words ({100 * count / total:.0f}%) are unknown to {source}: "
                       "its tokenizer or vocabulary does not fit these trees (another language, word segmentation or "
                       "casing?)")


def evaluate_trees(source: str | Path, lines: list[tuple[int, object]], options: EvalOptions, labeled: bool,
                   messages: Messages | None = None) -> Report:
    """Score predicted trees, (number, tree) pairs aligned with the gold trees (all of them, or those within
    --max-length, as `evaluate --max-length N --save-trees` writes them): each tree bracket text or a tree object
    (nested lists of words, as an nltk.Tree is: its labels read as tags when `labeled`), "" for none; a file's are
    text/predicted.predicted_trees. `source` names them in messages."""
    noted = _report_messages(messages)
    gold, skipped = read_gold(options.gold, options.tags, options.skip_bad, noted)
    try:
        aligned, predicted, dropped = on_gold(Path(source), lines, gold, skipped, options.max_length, labeled,
                                              options.tags)
    except InputError as e:
        raise InputError("; ".join([str(e), *noted.notes])) from None  # a tag-filter hint explains most word mismatches
    if dropped:
        noted.note(f"{plural(len(dropped), 'predicted token')} the gold trees do not have (punctuation, traces) "
                   f"left out, the first {dropped[0][1]!r} at {dropped[0][0]}")
    return _report(aligned, skipped, {"predicted": predicted}, "predicted", options, notes=noted.notes)


def _report(gold: list[GoldTree], skipped: int, predicted: dict[str, list], main_row: str,
            options: EvalOptions, agreement: dict[str, SpanMetric] | None = None,
            notes: list[str] | None = None) -> Report:
    gold = _some(gold, options)
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
