"""The evaluation's result record (`Report`: every row's scores, by length, label recall, dependencies, calibration,
member agreement) and how it is rendered: the table `evaluate` prints, its JSON, its HTML page. Where the evaluate
table changes, it changes here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import trees
from ..messages import plural
from ..metrics import CalibrationBin, SpanMetric, calibration, calibration_error
from . import draw
from .tables import agreement_table

if TYPE_CHECKING:
    from ..text.treebank import GoldTree


@dataclass
class Report:
    rows: dict[str, SpanMetric]
    main_row: str  # the row whose trees are saved and broken down by length
    by_length: dict[str, dict[str, SpanMetric]]  # row -> bucket -> metric
    sentences: int
    skipped: int
    predicted: list[trees.Tree]
    agreement: dict[str, SpanMetric] = field(default_factory=dict)  # member -> its F1 against the others
    notes: list[str] = field(default_factory=list)  # warnings about the gold trees
    gold: list[GoldTree] = field(default_factory=list)  # the scored gold trees, aligned with `predicted`
    # model (as messages name it) -> gold words it does not know, of all
    unknown: dict[str, tuple[int, int]] = field(default_factory=dict)
    # row -> label -> (found, of); the random row's found is the mean of its draws
    label_recall: dict[str, dict[str, tuple[float, int]]] = field(default_factory=dict)
    # row -> (directed, undirected) attachment score against Collins' head rules (evaluate --deps)
    dependencies: dict[str, tuple[float, float]] = field(default_factory=dict)
    # the main row's brackets the F1 counts: (its confidence, whether it is a gold constituent); none without confidences
    brackets: list[tuple[float, bool]] = field(default_factory=list)
    labelled: SpanMetric | None = None  # the main row's induced labels under a label map, against the gold categories

    @property
    def calibration(self) -> list[CalibrationBin]:
        return calibration(self.brackets)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_html(self, limit: int = 1000) -> str:
        """The evaluation as one self-contained HTML page (see draw.report_page); at most `limit` sentences drawn."""
        sentences = [draw.ReportSentence(g.source, g.words, p, g.tree)
                     for g, p in zip(self.gold[:limit], self.predicted[:limit])]
        by_length = {row: {bucket: m.sentence_f1 for bucket, m in buckets.items()}
                     for row, buckets in self.by_length.items()}
        title = f"grammar-induce evaluation: {self.main_row}, {self.sentences} sentences"
        return draw.report_page(title, [(name, m.to_dict()) for name, m in self.rows.items()], self.main_row,
                                by_length, sentences, self.sentences)

    def to_dict(self) -> dict:
        return {
            "sentences": self.sentences, "skipped": self.skipped, "main": self.main_row,
            "agreement": {name: m.to_dict() for name, m in self.agreement.items()}, "notes": self.notes,
            "rows": {name: m.to_dict() for name, m in self.rows.items()},
            "by_length": {row: {b: m.to_dict() for b, m in buckets.items()} for row, buckets in self.by_length.items()},
            **({"unknown_words": {name: {"unknown": count, "words": total} for name, (count, total)
                                  in self.unknown.items()}} if self.unknown else {}),
            **({"label_recall": {row: {label: found / total if total else None for label, (found, total) in labels.items()}
                                 for row, labels in self.label_recall.items()}} if self.label_recall else {}),
            **({"dependencies": {row: {"directed": d, "undirected": u} for row, (d, u) in self.dependencies.items()}}
               if self.dependencies else {}),
            **({"labelled": self.labelled.to_dict()} if self.labelled is not None else {}),
            **({"calibration": {"row": self.main_row, "expected_calibration_error": calibration_error(self.calibration),
                                "bins": [b.to_dict() for b in self.calibration]}} if self.calibration else {}),
        }

    def table(self) -> str:
        width = max(28, *(len(name) + 2 for name in self.rows))
        lines = [f"{'':{width}s} {'sent F1':>8s} {'corpus F1':>10s} {'prec':>6s} {'recall':>7s}"]
        for name, m in self.rows.items():
            mark = " *" if name == self.main_row else ""
            if m.predicted or m.gold:
                corpus = f"{100 * m.corpus_f1:10.1f} {100 * m.precision:6.1f} {100 * m.recall:7.1f}"
            else:  # no span of two or more words on either side (every sentence too short): nothing to score
                corpus = f"{'n/a':>10s} {'n/a':>6s} {'n/a':>7s}"
            lines.append(f"{name + mark:{width}s} {100 * m.sentence_f1:8.1f} {corpus}")
        if self.label_recall:
            lines.append("\n" + label_recall_table(self.label_recall))
        if self.dependencies:
            lines.append("\n" + dependency_table(self.dependencies))
        if self.calibration:
            lines.append("\n" + calibration_table(self.main_row, self.calibration))
        if self.labelled is not None:
            m = self.labelled
            lines.append(f"\nlabelled (the induced labels renamed by the label map, a mapping learned from gold trees): "
                         f"corpus F1 {100 * m.corpus_f1:.1f}, prec {100 * m.precision:.1f}, recall {100 * m.recall:.1f}, "
                         f"sentence F1 {100 * m.sentence_f1:.1f}")
        if self.agreement:
            lines.append("\n" + agreement_table(self.agreement))
        lines += [f"\ngold words unknown to {name}: {100 * count / max(total, 1):.1f}% ({count:,} of {total:,})"
                  for name, (count, total) in self.unknown.items()]
        lines += [f"\nnote: {note}" for note in self.notes]
        lines.append(f"\nsentence F1 by length ({plural(self.sentences, 'sentence')}, {self.skipped:,} skipped)")
        rows = list(self.by_length)
        lines.append(f"{'words':10s} {'count':>6s} " + " ".join(f"{r[:16]:>16s}" for r in rows))
        for bucket in self.by_length[rows[0]]:
            count = self.by_length[rows[0]][bucket].sentences
            lines.append(f"{bucket:10s} {count:6d} "
                         + " ".join(f"{100 * self.by_length[r][bucket].sentence_f1:16.1f}" for r in rows))
        return "\n".join(lines)


def calibration_table(row: str, bins: list[CalibrationBin]) -> str:
    """How far a row's confidences mean what they say: per confidence bin, its brackets (those the F1 counts), their
    mean confidence and the share of them that are gold constituents."""
    lines = [f"calibration of {row} (the brackets the F1 counts, by confidence; calibrated: gold share = confidence)",
             f"{'confidence':12s} {'brackets':>9s} {'mean':>6s} {'gold share':>11s} {'gap':>6s}"]
    lines += [f"{f'{b.low:.1f}-{b.high:.1f}':12s} {b.brackets:9,d} {b.mean_confidence:6.2f} {b.gold_share:11.2f} "
              f"{b.gap:+6.2f}" for b in bins]
    lines.append(f"expected calibration error {calibration_error(bins):.3f}")
    return "\n".join(lines)


def label_recall_table(recall: dict[str, dict[str, tuple[float, int]]]) -> str:
    """Per row, the share of the gold constituents of each category whose span the predicted trees hold."""
    labels = list(next(iter(recall.values())))
    width = max(28, *(len(name) + 2 for name in recall))
    counts = next(iter(recall.values()))
    lines = ["label recall (gold constituents of each category whose span the trees hold)",
             f"{'':{width}s} " + " ".join(f"{label:>6s}" for label in labels),
             f"{'(gold constituents)':{width}s} " + " ".join(f"{counts[label][1]:6d}" for label in labels)]
    for name, row in recall.items():
        lines.append(f"{name:{width}s} " + " ".join(f"{100 * found / total:6.1f}" if total else f"{'-':>6s}"
                                                    for found, total in row.values()))  # -: no gold constituent
    return "\n".join(lines)


def dependency_table(scores: dict[str, tuple[float, float]]) -> str:
    lines = ["dependencies: attachment scores against Collins' (1999) head rules (text/heads.py)",
             f"{'':28s} {'directed':>9s} {'undirected':>11s}"]
    lines += [f"{name:28s} {100 * d:9.1f} {100 * u:11.1f}" for name, (d, u) in scores.items()]
    return "\n".join(lines)
