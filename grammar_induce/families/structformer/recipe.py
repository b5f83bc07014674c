"""The StructFormer paper's masked-LM recipe (google-research/structformer, main.py): sentences sorted by length and
cut into batches of about `batch_size` tokens, the batches in a random order; a random 30% of each batch's words
(never `<unk>`) replaced by the mask and predicted; Adam (lr 3e-4, eps 1e-9, L2 weight decay), gradient clipping,
the learning rate halved when validation has not improved for two epochs. training/loop.py runs it.

Validation masks with a generator seeded the same way every time (the paper's code draws new masks each epoch),
so that its perplexity moves only with the model."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch
from torch import Tensor

from ...config import Config
from ...runtime import distributed, precision
from ...runtime.clipping import clip_and_step
from ...text.tokenizer import Vocab
from ..kind import ModelKind
from ..recipe import EpochPosition, Recipe, Step, TrainingText
from ..sentences import PROBE_WORDS, described, epoch_order, padded, read_as_sentences, split_sentences


class MaskedLM(Protocol):
    """What the recipe reads of its model (model.py's StructFormer): the padding and mask ids and the masked loss."""

    pad: int
    mask: int
    device: torch.device

    def masked_loss(self, ids: Tensor, targets: Tensor, products: torch.dtype | None = None) -> tuple[Tensor, int]: ...

    def eval(self) -> Any: ...

ADAM_EPS = 1e-9
PLATEAU_PATIENCE, PLATEAU_FACTOR = 2, 0.5  # ReduceLROnPlateau(factor 0.5, patience 2, threshold 0)
HELD_OUT_SEED = 1111  # the paper's seed: validation's and test's masks
UNK = 0  # Vocab: id 0 is <unk>, never masked


def token_batches(sentences: list[Tensor], tokens: int, longest: int, rng: random.Random | None) -> list[list[int]]:
    """The sentences of 1..`longest` words sorted by length, cut into batches of at least `tokens` tokens (the last
    may be smaller), the batches in a random order (`rng`; None: in length order)."""
    order = sorted((k for k, s in enumerate(sentences) if 1 <= len(s) <= longest), key=lambda k: len(sentences[k]))
    batches, batch, size = [], [], 0
    for k in order:
        batch.append(k)
        size += len(sentences[k])
        if size >= tokens:
            batches.append(batch)
            batch, size = [], 0
    if batch:
        batches.append(batch)
    if rng is not None:
        rng.shuffle(batches)
    return batches


def masked(ids: Tensor, model: MaskedLM, rate: float, generator: torch.Generator | None = None
           ) -> tuple[Tensor, Tensor]:
    """(the ids with a random `rate` of the words, never `<unk>`, replaced by the mask; the targets: each masked
    word's id, padding elsewhere)."""
    draw = torch.rand(ids.shape, generator=generator).to(ids.device) < rate
    chosen = draw & (ids != model.pad) & (ids != UNK)
    return ids.masked_fill(chosen, model.mask), ids.masked_fill(~chosen, model.pad)


@torch.no_grad()
def held_out(model: MaskedLM, sentences: list[Tensor], config: Config, products: torch.dtype | None
             ) -> float:
    """The mean cross entropy at the masked words of held-out sentences, every call masking the same words."""
    model.eval()
    generator = torch.Generator().manual_seed(HELD_OUT_SEED)
    total, count = 0.0, 0
    for batch in token_batches(sentences, config.train.batch_size, config.train.max_length, None):
        ids, targets = masked(padded([sentences[k] for k in batch], model.device, model.pad)[0], model,
                              config.train.mask_rate, generator)
        loss, n = model.masked_loss(ids, targets, products)
        total, count = total + loss.item(), count + n
    return total / max(1, count)


class MaskedLMRecipe(Recipe):
    UNIT, PHASE = "batch", "adam"

    def setup(self, phase: str) -> None:
        cfg = self.config.train
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, eps=ADAM_EPS,
                                          weight_decay=cfg.weight_decay)
        self.plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(self.optimizer, "min", PLATEAU_FACTOR,
                                                                  PLATEAU_PATIENCE, threshold=0)
        self.batches: list[list[int]] = []

    @classmethod
    def read_text(cls, config: Config, world: distributed.World, vocab: Vocab | None) -> TrainingText:
        return read_as_sentences(config, world, vocab, config.train.max_length)

    @classmethod
    def probe(cls, model: ModelKind, config: Config, vocab_size: int) -> Callable[[torch.dtype | None], None]:
        rows = max(1, config.train.batch_size // PROBE_WORDS)
        ids = torch.randint(2, vocab_size, (rows, PROBE_WORDS), generator=torch.Generator().manual_seed(0))
        ids, targets = masked(ids.to(model.device), model, config.train.mask_rate, torch.Generator().manual_seed(0))

        def run(dtype: torch.dtype | None) -> None:
            model.masked_loss(ids, targets, dtype)[0].backward()
        return run

    @classmethod
    def held_out_loss(cls, model: ModelKind, ids: Tensor, config: Config, part: str) -> float:
        """Per masked word (batches of config.train.batch_size tokens, either part)."""
        return held_out(model, split_sentences(ids), config, None)

    def describe(self) -> str:
        return described(self.model, self.text, self.device)

    def begin_epoch(self, epoch: int, position: EpochPosition) -> int:
        cfg, run = self.config.train, self.config.run
        self.products = precision.product_dtype(run.precision)
        self.batches = token_batches(self.text.train, cfg.batch_size, cfg.max_length, epoch_order(run, epoch))
        self.model.train()
        return len(self.batches)

    def steps(self, position: EpochPosition) -> Iterator[Step]:
        cfg = self.config.train
        for batch in self.batches[position.start :]:
            ids, targets = masked(padded([self.text.train[k] for k in batch], self.device, self.model.pad)[0],
                                  self.model, cfg.mask_rate)
            self.optimizer.zero_grad(set_to_none=True)
            loss, units = self.model.masked_loss(ids, targets, self.products)
            (loss / max(1, units)).backward()
            clip_and_step(self.optimizer, self.model.parameters(), cfg.clip)
            running = (position.loss_sum + loss.item()) / max(1, position.units + units)
            read = sum(len(self.text.train[k]) for k in batch)
            yield Step(loss.item(), units, read, 1, {"ppl": f"{math.exp(min(running, 50)):.1f}"})

    def held_out(self, model: ModelKind, part: str, products: torch.dtype | None) -> float:
        return held_out(model, getattr(self.text, part), self.config, products)

    def after_validation(self, phase: str, history: list[float], val_loss: float) -> tuple[str, str | None]:
        history.append(val_loss)
        before = self.lr
        self.plateau.step(val_loss)
        return phase, None if self.lr == before else f"no better for {PLATEAU_PATIENCE} epochs: lr {self.lr:g}"

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "plateau": self.plateau.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.plateau.load_state_dict(state["plateau"])
