"""A parser's confidences mapped to how often brackets that sure are right (`evaluate --calibrate FILE` fits the map on
a treebank, `parse --calibration FILE` applies it). A PCFG's span marginals and a student's CRF marginals are sure of
far more than they get right (docs/pcfg.md: calibration); the map is isotonic regression of "is a gold constituent" on
the confidence (pool adjacent violators), a step function that never lowers a surer bracket below a less sure one. It
is learnt from gold trees, and says so wherever it is used."""

from __future__ import annotations

import bisect
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

FORMAT = "grammar-induce calibration 1"


@dataclass(frozen=True)
class Calibration:
    """A non-decreasing step function on [0, 1]: a confidence up to `tops[k]` (and above `tops[k - 1]`) maps to
    `values[k]`; above the last top, the last value."""

    tops: tuple[float, ...]
    values: tuple[float, ...]
    source: str = ""  # the gold trees it was fitted on

    @classmethod
    def fit(cls, scored: list[tuple[float, bool]], source: str = "") -> Calibration:
        """Isotonic regression of the brackets' (confidence, is gold) by pool adjacent violators (brackets of one
        confidence in one block: on the brackets it was fitted on, each confidence bin is then calibrated exactly)."""
        blocks: list[list[float]] = []  # [top confidence, sum of gold, count]
        for confidence, same in itertools.groupby(sorted(scored), key=lambda pair: pair[0]):
            golds = [gold for _, gold in same]
            blocks.append([confidence, float(sum(golds)), float(len(golds))])
            while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
                top, hits, count = blocks.pop()
                blocks[-1] = [top, blocks[-1][1] + hits, blocks[-1][2] + count]
        if not blocks:
            raise InputError(f"{source}: no brackets to calibrate on")
        return cls(tuple(b[0] for b in blocks), tuple(b[1] / b[2] for b in blocks), source)

    def __call__(self, confidence: float) -> float:
        return self.values[min(bisect.bisect_left(self.tops, confidence), len(self.values) - 1)]

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "fitted_on": self.source,
                           "steps": [[top, value] for top, value in zip(self.tops, self.values)]})

    @classmethod
    def read(cls, path: Path) -> Calibration:
        """A file `evaluate --calibrate` wrote; anything else is an InputError naming it."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            assert data["format"] == FORMAT
            steps = [(float(top), float(value)) for top, value in data["steps"]]
            assert steps and all(0 <= v <= 1 for _, v in steps)
        except OSError as e:
            raise InputError(f"{path}: {e.strerror or e}") from None
        except (ValueError, KeyError, TypeError, AssertionError):
            raise InputError(f"{path}: not a calibration file (grammar-induce evaluate --calibrate writes one)") from None
        return cls(tuple(t for t, _ in steps), tuple(v for _, v in steps), str(data.get("fitted_on", "")))
