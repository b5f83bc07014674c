"""Scoring induced trees against gold trees with the paper's protocol, beside trivial baselines.

Rows: every layer with both distance kinds and the mean over layers (for a model), or a file
of predicted trees; then left-branching, right-branching, balanced and random trees.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import trees
from .data import InputError, Tokenizer, read_lines
from .metrics import SpanMetric
from .treebank import GoldTree, TagFilter, read_gold

LENGTH_BUCKETS = ((1, 10), (11, 20), (21, 30), (31, 40), (41, 10**9))
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
    seed: int = 0
    random_draws: int = 5
    quiet: bool = False


@dataclass
class Report:
    rows: dict[str, SpanMetric]
    main_row: str  # the row whose trees are saved and broken down by length
    by_length: dict[str, dict[str, SpanMetric]]  # row -> bucket -> metric
    sentences: int
    skipped: int
    predicted: list[trees.Tree]

    def to_dict(self) -> dict:
        return {
            "sentences": self.sentences, "skipped": self.skipped, "main": self.main_row,
            "rows": {name: m.to_dict() for name, m in self.rows.items()},
            "by_length": {row: {b: m.to_dict() for b, m in buckets.items()} for row, buckets in self.by_length.items()},
        }

    def table(self) -> str:
        lines = [f"{'':28s} {'sent F1':>8s} {'corpus F1':>10s} {'prec':>6s} {'recall':>7s}"]
        for name, m in self.rows.items():
            mark = " *" if name == self.main_row else ""
            lines.append(f"{name + mark:28s} {100 * m.sentence_f1:8.1f} {100 * m.corpus_f1:10.1f} "
                         f"{100 * m.precision:6.1f} {100 * m.recall:7.1f}")
        lines.append(f"\nsentence F1 by length ({self.sentences} sentences, {self.skipped} skipped)")
        rows = list(self.by_length)
        lines.append(f"{'words':10s} {'count':>6s} " + " ".join(f"{r[:16]:>16s}" for r in rows))
        for bucket in self.by_length[rows[0]]:
            count = self.by_length[rows[0]][bucket].sentences
            lines.append(f"{bucket:10s} {count:6d} "
                         + " ".join(f"{100 * self.by_length[r][bucket].sentence_f1:16.1f}" for r in rows))
        return "\n".join(lines)


def within_length(gold: list[GoldTree], max_length: int) -> list[GoldTree]:
    return [g for g in gold if not max_length or len(g.words) <= max_length]


def evaluate_model(loaded, options: EvalOptions, layer: int, kind: str) -> Report:
    """Parse the gold sentences with a loaded model and score every layer and distance kind."""
    from .parse import parse_words

    gold, skipped = read_gold(options.gold, options.tags, options.skip_bad)
    gold = within_length(gold, options.max_length)
    with _progress(len(gold), options.quiet) as bar:
        parsed = parse_words(loaded, [g.words for g in gold], options.batch_size, bar.update)
    n_layers = len(parsed[0].forget)
    predicted: dict[str, list[trees.Tree]] = {}
    for k in ("forget", "input"):
        for l in range(1, n_layers + 1):
            predicted[f"layer {l} {k}"] = [p.tree(l, k) for p in parsed]
        predicted[f"mean of layers {k}"] = [
            trees.tree_from_distances([sum(col) / n_layers for col in zip(*getattr(p, k))], p.words) for p in parsed
        ]
    return _report(gold, skipped, predicted, f"layer {layer} {kind}", options)


def evaluate_file(pred_path: Path, options: EvalOptions, labeled: bool) -> Report:
    """Score a file of predicted trees, one per line, aligned with the gold trees."""
    gold, skipped = read_gold(options.gold, options.tags, options.skip_bad)
    lines = list(read_lines(pred_path))
    if len(lines) != len(gold):
        raise InputError(f"{pred_path}: {len(lines)} predicted trees for {len(gold)} gold trees")
    predicted = [_read_predicted(pred_path, n, text, g, labeled) for (n, text), g in zip(lines, gold)]
    keep = [k for k, g in enumerate(gold) if not options.max_length or len(g.words) <= options.max_length]
    return _report([gold[k] for k in keep], skipped, {"predicted": [predicted[k] for k in keep]},
                   "predicted", options)


def _read_predicted(path: Path, lineno: int, text: str, gold: GoldTree, labeled: bool) -> trees.Tree:
    from .treebank import parse_bracketed, preprocess

    try:
        tree = (preprocess(parse_bracketed(text, f"{path}:{lineno}"), TagFilter(keep=None), f"{path}:{lineno}")
                if labeled else trees.parse_brackets(text))
    except trees.TreeSyntaxError as e:
        raise InputError(f"{path}:{lineno}: malformed tree ({e})") from None
    words = trees.leaves(tree) if tree is not None else []
    normalize = Tokenizer(lowercase=True, replace_digits=True).normalize
    if [normalize(w) for w in words] != [normalize(w) for w in gold.words]:
        raise InputError(f"{path}:{lineno}: the words ({len(words)}) differ from the gold tree at {gold.source} "
                         f"({len(gold.words)}): {' '.join(words[:8])} ... vs {' '.join(gold.words[:8])} ...")
    return tree


def _report(gold: list[GoldTree], skipped: int, predicted: dict[str, list], main_row: str,
            options: EvalOptions) -> Report:
    if not gold:
        raise InputError(f"{options.gold}: no gold trees of at most {options.max_length} words")
    gold_spans = [trees.spans(g.tree) for g in gold]
    rows = {name: _score(ts, gold_spans) for name, ts in predicted.items()}
    baselines = {name: [build(g.words) for g in gold] for name, build in BASELINES.items()}
    rows.update({name: _score(ts, gold_spans) for name, ts in baselines.items()})
    rows["random"] = _random_baseline(gold, gold_spans, options)
    lengths = [len(g.words) for g in gold]
    by_length = {name: _by_length(ts, gold_spans, lengths)
                 for name, ts in ((main_row, predicted[main_row]), ("right-branching", baselines["right-branching"]))}
    return Report(rows, main_row, by_length, len(gold), skipped, predicted[main_row])


def _score(predicted: list, gold_spans: list[set]) -> SpanMetric:
    return sum((SpanMetric.of(trees.spans(t), g) for t, g in zip(predicted, gold_spans)), SpanMetric())


def _random_baseline(gold: list[GoldTree], gold_spans: list[set], options: EvalOptions) -> SpanMetric:
    """Seeded random trees, pooled over several draws (sentence F1 is then the mean over draws)."""
    rng = random.Random(options.seed)
    draws = [_score([trees.random_tree(g.words, rng) for g in gold], gold_spans) for _ in range(options.random_draws)]
    return sum(draws, SpanMetric())


def _by_length(predicted: list, gold_spans: list[set], lengths: list[int]) -> dict[str, SpanMetric]:
    result = {}
    for low, high in LENGTH_BUCKETS:
        picked = [k for k, n in enumerate(lengths) if low <= n <= high]
        if picked:
            label = f"{low}-{high}" if high < 10**9 else f"{low}+"
            result[label] = _score([predicted[k] for k in picked], [gold_spans[k] for k in picked])
    return result


def _progress(total: int, quiet: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc="parsing", unit="sent", leave=False, disable=quiet or total < 500)


def write_json(report: Report, path: Path) -> None:
    from .checkpoint import atomic_write

    atomic_write(path, lambda f: f.write(json.dumps(report.to_dict(), indent=2).encode()))
