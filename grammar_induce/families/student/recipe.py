"""The student's recipe (`distill` runs it through the one loop, training/loop.py): the span parser learns the spans of
its targets' trees (or their confident spans) by its CRF loss (and, `train.soft`, their span marginals as soft
targets), batches of sentences of similar lengths in a random
order, Adam, the gradient norm clipped at config.train.clip. Its score is the agreement of its trees with the targets'
on held-out sentences (higher is better), which whoever runs it hands it (`HeldOutTrees`: distill parses them)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ...runtime.clipping import clip_and_step
from ...structures.tree_crf import stacked
from ..kind import ModelKind, count_parameters
from ..recipe import EpochPosition, Recipe, Score, Step, TrainingText
from ..sentences import epoch_order

if TYPE_CHECKING:
    from ...text.tokenizer import Tokenizer, Vocab


@dataclass
class SpanTargets:
    """What the student learns: per sentence its ids (`<eos> w1 ... wn`, as the student reads them) and the spans
    to learn; `usable`: the sentences trained on (the others are too short or too long); `marginals`: each
    sentence's chart of the teachers' span marginals (n+1, n+1), the soft targets (None: none)."""

    ids: list[list[int]]
    spans: list[set[tuple[int, int]]]
    usable: list[int]
    eos: int  # the id that pads a batch's rows
    marginals: list[torch.Tensor] | None = None

    def soft_targets(self, batch: list[int], device: torch.device) -> torch.Tensor | None:
        """(B, N+1, N+1) the batch's charts of span marginals, padded with zeros (None: none)."""
        if self.marginals is None:
            return None
        return stacked([self.marginals[k].float() for k in batch]).to(device)


@dataclass
class HeldOutTrees:
    """The held-out sentences and how a student's trees on them are scored: `agreement(model)`, the sentence F1
    (0 to 1) of its trees against the targets' trees (distill parses them: the recipe does not)."""

    sentences: int
    agreement: Callable[[ModelKind], float]

    def __len__(self) -> int:
        return self.sentences


class StudentRecipe(Recipe):
    """`text.train`: the SpanTargets; `text.valid`: the HeldOutTrees. The config's train section (StudentTrainConfig)
    says which epoch is kept (`keep`: the most agreeing one's, or the last) and the round the log names."""

    UNIT, PHASE = "batch", "adam"

    @classmethod
    def text_of(cls, tokenizer: Tokenizer, vocab: Vocab, targets: SpanTargets, held_out: int,
                agreement: Callable[[ModelKind], float]) -> TrainingText:
        """What distill hands the recipe to learn from: each sentence's ids, spans and (soft targets) span
        marginals, and `held_out` sentences whose trees `agreement` scores."""
        return TrainingText(tokenizer, vocab, targets, HeldOutTrees(held_out, agreement), None, [])

    def setup(self, phase: str) -> None:
        train = self.config.train
        # diverged: only a loss that is not a finite number (a step's is a tree's negative log-probability per
        # sentence, which long sentences make large with nothing wrong; validation's is the trees' agreement)
        self.score = Score(self._record, higher_is_better=True, diverged=lambda loss: not math.isfinite(loss),
                           line=self._line, keep="last" if train.keep == "last" else "best")
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=train.lr)
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
        epoch_order(self.config.run, epoch).shuffle(self.batches)
        self.model.train()
        return len(self.batches)

    def steps(self, position: EpochPosition) -> Iterator[Step]:
        targets = self.text.train
        for batch in self.batches[position.start :]:
            rows = [targets.ids[k] for k in batch]
            longest = max(len(row) for row in rows) + 1  # and the end
            tokens = torch.tensor([row + [targets.eos] * (longest - len(row)) for row in rows]).to(self.device)
            loss = self.model.loss(tokens, [len(row) - 1 for row in rows], [targets.spans[k] for k in batch],
                                   targets.soft_targets(batch, self.device), self.config.train.soft)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            clip_and_step(self.optimizer, self.model.parameters(), self.config.train.clip)
            value = loss.item()
            yield Step(value, 1, sum(len(row) - 1 for row in rows), 1, {"loss": f"{value:.4f}"})

    def held_out(self, model: ModelKind, part: str, products: torch.dtype | None) -> float:
        """The agreement (0 to 1) of the student's trees with the targets' on the held-out sentences."""
        model.eval()
        return self.text.valid.agreement(model)

    @staticmethod
    def _record(agreement: float | None) -> dict[str, Any]:
        """Agreement, not a perplexity (the metrics' valid_ppl stays empty)."""
        return {"valid_ppl": None, "valid_agreement_f1": None if agreement is None else round(100 * agreement, 2)}

    def epoch_record(self, epoch: int, stats: dict[str, float]) -> dict[str, Any]:
        return {"loss": round(stats["train_loss"], 4)}

    def _line(self, record: dict[str, Any]) -> str:
        return (f"round {self.config.train.round} epoch {record['epoch']}: loss {record['loss']:.4f}, held-out agreement "
                f"with the targets {record['valid_agreement_f1']:.1f} F1, {record['seconds']:.0f} s")
