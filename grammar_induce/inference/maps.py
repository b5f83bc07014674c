"""The maps fitted on gold trees that a parse applies, each tied to the model it was fitted on:

- a calibration map: a parser's confidences mapped to how often brackets that sure are right (`evaluate --calibrate
  FILE` fits it on a treebank, `parse --calibration FILE` applies it). A PCFG's span marginals and a student's CRF
  marginals are sure of far more than they get right (docs/pcfg.md: calibration); the map is isotonic regression of
  "is a gold constituent" on the confidence (pool adjacent violators), a step function that never lowers a surer
  bracket below a less sure one;
- a label map: a PCFG's induced labels renamed by their best-matching treebank category (`grammar --gold TREES
  --save-map FILE` writes it, `parse --label-map FILE` applies it; a shipped PCFG carries its own).

Both are learnt from gold trees, and say so wherever they are used. Each records the models it was fitted on (their
names and file fingerprints, `Fitted`): another model's map is refused (its confidences or labels mean other things)
unless the user says to use it anyway. A map written before it recorded them is used, with a note."""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..families import pretrained

FORMAT = "grammar-induce calibration 1"
MAP_FORMAT = "grammar-induce label map 1"
LABEL = re.compile(r"[^\s()]+")  # a label PTB brackets can carry: no whitespace, no parenthesis


def fingerprint(path: str | Path) -> str:
    """A model file's identity: the first 16 hex digits of its SHA-256."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Fitted:
    """The models a map was fitted on: how messages name them and their files' fingerprints (none: a map written
    before maps recorded them)."""

    names: tuple[str, ...] = ()
    fingerprints: tuple[str, ...] = ()

    @classmethod
    def of(cls, sources: Sequence[str | Path]) -> Fitted:
        return cls(tuple(pretrained.shown(s) for s in sources), tuple(fingerprint(s) for s in sources))

    def to_dict(self) -> dict:
        return {"models": list(self.names), "fingerprints": list(self.fingerprints)}

    @classmethod
    def read(cls, data: dict) -> Fitted:
        found = data.get("fitted_to", {})
        return cls(tuple(map(str, found.get("models", ()))), tuple(map(str, found.get("fingerprints", ()))))

    def check(self, what: str, sources: Sequence[str | Path], any_model: bool) -> str | None:
        """Refuse a map fitted on other models than `sources` (InputError naming both) unless `any_model`; a note
        where it is used anyway, or where the map does not say what it was fitted on (None: it fits)."""
        if not self.fingerprints:
            return f"{what} does not say which model it was fitted on (written before maps recorded it): used as is"
        if self.fingerprints == Fitted.of(sources).fingerprints:
            return None
        here = ", ".join(pretrained.shown(s) for s in sources)
        if not any_model:
            raise InputError(f"{what}: fitted on {', '.join(self.names)}, not on {here} (another model's "
                             "confidences and labels mean other things); --map-any-model uses it anyway")
        return f"{what} was fitted on {', '.join(self.names)}, not on {here}: used anyway (--map-any-model)"


@dataclass(frozen=True)
class Calibration:
    """A non-decreasing step function on [0, 1]: a confidence up to `tops[k]` (and above `tops[k - 1]`) maps to
    `values[k]`; above the last top, the last value."""

    tops: tuple[float, ...]
    values: tuple[float, ...]
    source: str = ""  # the gold trees it was fitted on
    fitted: Fitted = Fitted()  # the models it was fitted on

    @classmethod
    def fit(cls, scored: list[tuple[float, bool]], source: str = "", fitted: Fitted = Fitted()) -> Calibration:
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
        return cls(tuple(b[0] for b in blocks), tuple(b[1] / b[2] for b in blocks), source, fitted)

    def __call__(self, confidence: float) -> float:
        return self.values[min(bisect.bisect_left(self.tops, confidence), len(self.values) - 1)]

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "fitted_on": self.source, "fitted_to": self.fitted.to_dict(),
                           "steps": [[top, value] for top, value in zip(self.tops, self.values)]})

    @classmethod
    def read(cls, path: Path) -> Calibration:
        """A file `evaluate --calibrate` wrote; anything else is an InputError naming it."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            assert data["format"] == FORMAT
            steps = [(float(top), float(value)) for top, value in data["steps"]]
            assert steps and all(0 <= v <= 1 for _, v in steps)
            fitted = Fitted.read(data)
        except OSError as e:
            raise InputError(f"{path}: {e.strerror or e}") from None
        except (ValueError, KeyError, TypeError, AttributeError, AssertionError):
            raise InputError(f"{path}: not a calibration file (grammar-induce evaluate --calibrate writes one)") from None
        for (top, value), (next_top, next_value) in itertools.pairwise(steps):
            if next_top < top or next_value < value:
                raise InputError(f"{path}: not a non-decreasing map (step {top:g} -> {value:g} is followed by "
                                 f"{next_top:g} -> {next_value:g}): a surer bracket would be made less sure")
        return cls(tuple(t for t, _ in steps), tuple(v for _, v in steps), str(data.get("fitted_on", "")), fitted)


@dataclass(frozen=True)
class LabelMap:
    """Induced label (a PCFG's `NT-k`) -> a treebank's category, learned from gold trees (many-to-one), and the
    models it was learned for."""

    labels: dict[str, str]
    fitted: Fitted = Fitted()

    def get(self, label: str, default: str) -> str:
        return self.labels.get(label, default)

    def to_json(self, learned_from: str) -> str:
        return json.dumps({"format": MAP_FORMAT, "learned_from": learned_from, "model": ", ".join(self.fitted.names),
                           "fitted_to": self.fitted.to_dict(), "map": self.labels}, indent=1)

    @classmethod
    def read(cls, spec: str | Path) -> LabelMap:
        """A file `grammar --save-map` wrote, or the map a shipped model carries (its name: `ptb-pcfg`); anything else,
        or a category PTB brackets cannot carry, is an InputError naming it."""
        path = Path(spec)
        shipped = pretrained.find(spec)
        if shipped is not None and shipped.label_map:
            path = pretrained.MODELS_DIR / shipped.label_map
        elif not path.exists():
            with_maps = [name for name, m in pretrained.catalogue().items() if m.label_map]
            raise InputError(f"{spec}: no such label map file, nor a shipped model with one ("
                             + (", ".join(with_maps) or "none ships one") + ")")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            assert data["format"] == MAP_FORMAT
            found = data["map"]
            assert isinstance(found, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in found.items())
            fitted = Fitted.read(data)
        except OSError as e:
            raise InputError(f"{path}: {e.strerror or e}") from None
        except (ValueError, KeyError, TypeError, AttributeError, AssertionError):
            raise InputError(f"{path}: not a label map (grammar-induce grammar --gold TREES --save-map FILE writes "
                             "one)") from None
        for induced, category in found.items():
            if not LABEL.fullmatch(category):
                raise InputError(f"{path}: {induced} is mapped to {category!r}, which PTB brackets cannot carry "
                                 "(a label has no whitespace and no parenthesis)")
        return cls(found, fitted)
