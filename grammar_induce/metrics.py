"""Unlabeled span F1, sentence-level (the paper's number) and corpus-level, as objects that add."""

from __future__ import annotations

from dataclasses import dataclass

Spans = set[tuple[int, int]]


def sentence_scores(predicted: Spans, gold: Spans) -> tuple[float, float, float]:
    """(precision, recall, F1) of one sentence, with the paper's conventions for empty sets:
    recall is 1 when the gold set is empty, and precision is 1 when both are empty."""
    matched = len(predicted & gold)
    precision = matched / len(predicted) if predicted else (1.0 if not gold else 0.0)
    recall = matched / len(gold) if gold else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


@dataclass(frozen=True)
class SpanMetric:
    sentences: int = 0
    sum_f1: float = 0.0  # sum of sentence-level F1
    matched: int = 0
    predicted: int = 0
    gold: int = 0

    @classmethod
    def of(cls, predicted: Spans, gold: Spans) -> SpanMetric:
        return cls(1, sentence_scores(predicted, gold)[2], len(predicted & gold), len(predicted), len(gold))

    def __add__(self, other: SpanMetric) -> SpanMetric:
        return SpanMetric(self.sentences + other.sentences, self.sum_f1 + other.sum_f1,
                          self.matched + other.matched, self.predicted + other.predicted, self.gold + other.gold)

    @property
    def sentence_f1(self) -> float:
        return self.sum_f1 / self.sentences if self.sentences else 0.0

    @property
    def precision(self) -> float:
        return self.matched / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.matched / self.gold if self.gold else 0.0

    @property
    def corpus_f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def to_dict(self) -> dict[str, float]:
        return {"sentences": self.sentences, "sentence_f1": self.sentence_f1, "corpus_f1": self.corpus_f1,
                "precision": self.precision, "recall": self.recall}


CONFIDENCE_BINS = 10  # calibration: confidence in tenths, [0, 0.1), ..., [0.9, 1]


@dataclass(frozen=True)
class CalibrationBin:
    """The predicted brackets whose confidence fell in [low, high): how many, their mean confidence and the share of
    them that are gold constituents (a calibrated parser's share is its mean confidence)."""

    low: float
    high: float
    brackets: int
    mean_confidence: float
    gold_share: float

    @property
    def gap(self) -> float:
        return self.gold_share - self.mean_confidence

    def to_dict(self) -> dict[str, float]:
        return {"from": self.low, "to": self.high, "brackets": self.brackets,
                "mean_confidence": self.mean_confidence, "gold_share": self.gold_share}


def calibration(scored: list[tuple[float, bool]], bins: int = CONFIDENCE_BINS) -> list[CalibrationBin]:
    """The brackets (confidence, is a gold constituent) in `bins` equal bins of confidence (1 falls in the last); empty
    bins are left out."""
    found: list[list[tuple[float, bool]]] = [[] for _ in range(bins)]
    for confidence, gold in scored:
        found[min(int(confidence * bins), bins - 1)].append((confidence, gold))
    return [CalibrationBin(k / bins, (k + 1) / bins, len(part), sum(c for c, _ in part) / len(part),
                           sum(g for _, g in part) / len(part))
            for k, part in enumerate(found) if part]


def calibration_error(found: list[CalibrationBin]) -> float:
    """The expected calibration error: the bins' |gold share - mean confidence| weighted by their brackets."""
    total = sum(b.brackets for b in found)
    return sum(b.brackets * abs(b.gap) for b in found) / total if total else 0.0
