"""What the loop changes and keeps in last.pt (`TrainState`), so that a resumed run is exact: the epoch and step,
the best held-out figure, the recipe's phase and history, where an interrupted epoch stopped."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..families.recipe import EpochPosition

RESUME_VERSION = 1  # of the training state in last.pt; files from before it was recorded are version 1


@dataclass
class TrainState:
    """Everything the loop changes; `last.pt` stores all of it (with the optimizer and random
    generators) so a resumed run is exact."""

    epoch: int = 1  # the epoch in progress (1-based)
    step: int = 0  # optimizer steps taken in all
    best: float | None = None  # the best held-out figure so far, as the recipe's score reads it (None: none yet)
    val_history: list[float] = field(default_factory=list)
    phase: str = ""  # the recipe's optimizer phase: Recipe.PHASE for a new run (the ON-LSTM's sgd, then asgd)
    position: EpochPosition | None = None  # where an interrupted epoch stopped
    elapsed: float = 0.0
    # a last.pt of before scores said which way is better kept a loss (`best_loss`), the student's agreement negated
    saved_as_loss: bool = False

    def read_best_as(self, higher_is_better: bool) -> None:
        """Take a best kept as a loss (a last.pt of before scores had a direction) as the figure itself: a figure
        where higher is better (a student's agreement) was kept as its negative."""
        if self.saved_as_loss and self.best is not None and higher_is_better:
            self.best = -self.best
        self.saved_as_loss = False

    def to_dict(self) -> dict[str, Any]:
        position = None if self.position is None else {
            f.name: getattr(self.position, f.name) for f in dataclasses.fields(EpochPosition)}
        return {"version": RESUME_VERSION, "epoch": self.epoch, "step": self.step, "best": self.best,
                "val_history": list(self.val_history), "phase": self.phase, "position": position,
                "elapsed": self.elapsed}

    @classmethod
    def from_dict(cls, saved: dict[str, Any], source: Path) -> TrainState:
        version = saved.get("version", 1)
        if version != RESUME_VERSION:
            raise InputError(f"{source}: training state version {version}; this grammar-induce resumes version "
                             f"{RESUME_VERSION} (start a new run, or resume with the version that wrote it)")
        try:
            position = saved["position"]
            if position is not None and "units" not in position:  # saved before tokens read were counted apart:
                position = {**position, "units": position["tokens"]}  # its "tokens" counted the loss's units
            best = saved["best"] if "best" in saved else float(saved["best_loss"])
            return cls(int(saved["epoch"]), int(saved["step"]),
                       None if best is None or not math.isfinite(best) else float(best),
                       [float(v) for v in saved["val_history"]], str(saved["phase"]),
                       None if position is None else EpochPosition(
                           *(position[f.name] for f in dataclasses.fields(EpochPosition))),
                       float(saved["elapsed"]), saved_as_loss="best" not in saved)
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{source}: damaged training state ({type(e).__name__}: {e})") from None


def resume_state(payload: dict[str, Any], source: Path) -> TrainState:
    if "training_state" not in payload:
        raise InputError(f"{source}: holds no training state to resume from (a copy of best.pt?)")
    return TrainState.from_dict(payload["training_state"], source)


