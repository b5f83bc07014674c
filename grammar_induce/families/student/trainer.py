"""The student's recipe (`distill` runs it through the one loop, families/training.py): the span parser learns the spans of
its targets' trees (or their confident spans) by its CRF loss, batches of sentences of similar lengths in a random
order, Adam, the gradient norm clipped at config.train.clip; what validates it is given by whoever runs it
(distill: agreement with the targets' trees on held-out text; the loss the loop sees is its negative)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ...config import Config
from ...runtime.clipping import clip_and_step
from ..base import EpochPosition, Measure, ModelKind, Step, Trainer, TrainingText, count_parameters
from ..sentences import epoch_order


@dataclass
class SpanTargets:
    """What the student learns: per sentence its ids (`<eos> w1 ... wn`, as the student reads them) and the spans
    to learn; `usable`: the sentences trained on (the others are too short or too long)."""

    ids: list[list[int]]
    spans: list[set[tuple[int, int]]]
    usable: list[int]
    eos: int  # the id that pads a batch's rows


class StudentTrainer(Trainer):
    UNIT, PHASE = "batch", "adam"

    def __init__(self, config: Config, model: ModelKind, text: TrainingText, device: torch.device,
                 agreement: Callable[[], float], keep_last: bool, name: str):
        """`text.train`: the SpanTargets; `text.valid`: the held-out sentences `agreement` (higher is better)
        scores the student on; `keep_last`: best.pt is the last epoch's, not the most agreeing one's; `name`: the
        log's name of the run ("round 1")."""
        self.config, self.model, self.text, self.device = config, model, text, device
        self.agreement, self.keep_last, self.name = agreement, keep_last, name
        # diverged: only a loss that is not a finite number (a step's is a tree's negative log-probability per
        # sentence, which long sentences make large with nothing wrong; validation's is the trees' agreement)
        self.measure = Measure(self._record, self._better, lambda loss: not math.isfinite(loss), self._line)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=config.train.lr)
        self.batches: list[list[int]] = []

    def describe(self) -> str:
        return f"student: {count_parameters(self.model):,} parameters, {len(self.text.train.usable):,} sentences"

    def begin_epoch(self, epoch: int, position: EpochPosition) -> int:
        """Sentences of similar length together, the batches in a random order of the epoch's own (so a run resumed
        inside an epoch has the same batches)."""
        targets = self.text.train
        ordered = sorted(targets.usable, key=lambda k: len(targets.ids[k]))
        size = self.config.train.batch_size
        self.batches = [ordered[k : k + size] for k in range(0, len(ordered), size)]
        epoch_order(self.config.train, epoch).shuffle(self.batches)
        self.model.train()
        return len(self.batches)

    def steps(self, position: EpochPosition) -> Iterator[Step]:
        targets = self.text.train
        for batch in self.batches[position.start :]:
            rows = [targets.ids[k] for k in batch]
            longest = max(len(row) for row in rows) + 1  # and the end
            tokens = torch.tensor([row + [targets.eos] * (longest - len(row)) for row in rows]).to(self.device)
            loss = self.model.loss(tokens, [len(row) - 1 for row in rows], [targets.spans[k] for k in batch])
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            clip_and_step(self.optimizer, self.model.parameters(), self.config.train.clip)
            value = loss.item()
            yield Step(value, 1, sum(len(row) - 1 for row in rows), 1, {"loss": f"{value:.4f}"})

    def held_out(self, model: ModelKind, part: str, products: torch.dtype | None) -> float:
        """Minus the agreement of the student's trees with the targets on the held-out sentences (a loss)."""
        model.eval()
        return -self.agreement()

    def _better(self, val_loss: float, best_loss: float) -> bool:
        return self.keep_last or val_loss < best_loss

    @staticmethod
    def _record(val_loss: float | None) -> dict[str, Any]:
        """Agreement, not a perplexity (the metrics' valid_ppl stays empty)."""
        return {"valid_ppl": None, "valid_agreement_f1": None if val_loss is None else round(100 * -val_loss, 2)}

    def epoch_record(self, epoch: int, stats: dict[str, float]) -> dict[str, Any]:
        return {"loss": round(stats["train_loss"], 4)}

    def _line(self, record: dict[str, Any]) -> str:
        return (f"{self.name} epoch {record['epoch']}: loss {record['loss']:.4f}, held-out agreement with the targets "
                f"{record['valid_agreement_f1']:.1f} F1, {record['seconds']:.0f} s")
