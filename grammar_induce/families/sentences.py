"""The recipe of families fitted to whole sentences by their likelihood (a PCFG, families/pcfg; any kind with
`log_likelihood(words, lengths, products)`): batches of sentences of neighbouring lengths (a curriculum of longest
lengths if asked), Adam with the PCFG papers' betas, gradient clipping, the model kept by held-out likelihood.
training/loop.py runs it; one process (no torchrun)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..config import Config, ConfigError, RunConfig, TrainConfig, at_least
from ..errors import InputError
from ..messages import plural
from ..runtime import distributed, precision
from ..runtime.clipping import clip_and_step
from ..text import corpus
from ..text.tokenizer import Vocab, tokenizer_of
from . import focus
from .kind import ModelKind, count_parameters
from .recipe import EpochPosition, Recipe, Step, TrainingText

ADAM_BETAS = (0.75, 0.999)  # TN-PCFG's (and compound PCFG's) optimiser
PROBE_WORDS = 20  # `auto` precision's probe: a training batch of sentences this long


@dataclass(frozen=True)
class SentenceTrainConfig(TrainConfig):
    """[train] of a kind fitted to whole sentences: the longest training sentence, and a length curriculum
    (start_length > 0: the first epoch's longest, + length_step an epoch); a trained model of the same sizes to start
    from (`init`, its vocabulary too); and parse-focusing (families/focus.py): the teachers whose trees focus it
    (`focus`: files of trees aligned with the training text, shipped names or checkpoints), how their votes count
    (`focus_by`), a right-branching voter's weight, the mode and the strength. The batch size, lr and clip are a
    family's own (the PCFG's: families/pcfg/settings.py)."""

    max_length: int = 40
    start_length: int = 0
    length_step: int = 10
    init: str = ""
    focus: tuple[str, ...] = ()
    focus_mode: str = "soft"
    focus_strength: float = 1.0
    focus_by: str = "teacher"
    focus_right: float = 0.0

    def validate(self) -> None:
        super().validate()
        at_least(2, "train", self, "max_length")  # one word has no binary rule to train
        at_least(0, "train", self, "start_length", "length_step", "focus_strength", "focus_right")
        for key, allowed in (("focus_mode", focus.MODES), ("focus_by", focus.COUNTS)):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"train.{key} must be one of {', '.join(allowed)}, got {getattr(self, key)!r}")


def split_sentences(ids: Tensor) -> list[Tensor]:
    """An `<eos>`-separated id stream as one tensor of ids per sentence."""
    ids = ids.long()
    ends = (ids == 1).nonzero().squeeze(1)  # Vocab: id 1 is <eos>
    starts = torch.cat([ends.new_zeros(1), ends[:-1] + 1])
    return [ids[s:e] for s, e in zip(starts.tolist(), ends.tolist())]


def read_as_sentences(config: Config, world: distributed.World, vocab: Vocab | None = None,
                      longest: int | None = None) -> TrainingText:
    """The config's files through the token cache (as the stream recipe reads them), each as sentences of ids; a
    training file with no sentence of 2 to `longest` words (default: the curriculum's first epoch's) is refused."""
    vocab, entries = corpus.training_files(config, vocab)
    data = config.data
    held_out = {path: split_sentences(entries[path].ids) for path in (data.valid, data.test) if path}
    train = split_sentences(entries[data.train].ids)
    longest = longest or epoch_longest(config.train, 1)  # the curriculum's first epoch: the later ones take longer
    if not any(2 <= len(s) <= longest for s in train):
        limit = "train.start_length" if longest < config.train.max_length else "train.max_length"
        raise InputError(f"{data.train}: none of its {plural(len(train), 'sentence')} has 2 to {longest} words "
                         f"({limit}): nothing to train on")
    return TrainingText(tokenizer_of(data), vocab, train, held_out.get(data.valid), held_out.get(data.test), [])


def epoch_order(run: RunConfig, epoch: int) -> random.Random:
    """The generator of an epoch's batch order: its own, so that a run resumed inside the epoch has its batches."""
    return random.Random(run.seed * 100003 + epoch)


def described(model: ModelKind, text: TrainingText, device: torch.device) -> str:
    """The log's line on a model trained on sentences and its text."""
    return (f"{count_parameters(model):,} parameters, vocabulary {len(text.vocab):,}, "
            f"{plural(len(text.train), 'training sentence')}, device {device}")


def length_batches(sentences: list[Tensor], batch_size: int, longest: int, rng: random.Random) -> list[list[int]]:
    """Batches of sentences of 2..`longest` words, each of neighbouring lengths (sorted by length, ties in a
    random order), the batches in a random order."""
    kept = [k for k, s in enumerate(sentences) if 2 <= len(s) <= longest]
    rng.shuffle(kept)
    kept.sort(key=lambda k: len(sentences[k]))
    batches = [kept[i : i + batch_size] for i in range(0, len(kept), batch_size)]
    rng.shuffle(batches)
    return batches


def padded(sentences: list[Tensor], device: torch.device, pad: int = 0) -> tuple[Tensor, list[int]]:
    """The sentences as the rows of one tensor, padded with `pad` on the right, and their lengths."""
    lengths = [len(s) for s in sentences]
    rows = torch.full((len(sentences), max(lengths)), pad, dtype=torch.long)
    for row, s in zip(rows, sentences):
        row[: len(s)] = s
    return rows.to(device), lengths


def epoch_longest(cfg: SentenceTrainConfig, epoch: int) -> int:
    """The longest training sentence of an epoch: max_length, or the curriculum's (start_length, growing by
    length_step an epoch up to max_length)."""
    if not cfg.start_length:
        return cfg.max_length
    return min(cfg.max_length, cfg.start_length + (epoch - 1) * cfg.length_step)


@torch.no_grad()
def held_out(model, sentences: list[Tensor], device: torch.device, products: torch.dtype | None = None,
             tokens_per_batch: int = 2000) -> tuple[float, int]:
    """(- sum of log p(sentence), words + one end per sentence) over the sentences of two or more words: the
    PCFG's exact likelihood (an upper bound on perplexity as the PCFG papers report it: a string's
    probability, with the length implied, per word and end)."""
    model.eval()
    order = sorted((k for k, s in enumerate(sentences) if len(s) >= 2), key=lambda k: len(sentences[k]))
    total, count, first = 0.0, 0, 0
    while first < len(order):
        size = max(1, tokens_per_batch // len(sentences[order[first]]))
        batch = [sentences[k] for k in order[first : first + size]]
        words, lengths = padded(batch, device)
        total -= model.log_likelihood(words, lengths, products).sum().item()
        count += sum(lengths) + len(lengths)
        first += size
    return total, count


def sentence_step(model, optimizer: torch.optim.Optimizer, words: Tensor, lengths: list[int], clip: float,
                  products: torch.dtype | None, span_bias: Tensor | None = None) -> float:
    """One optimizer step on the batch's mean negative log-likelihood (focused by `span_bias`, where given); returns
    that mean."""
    optimizer.zero_grad(set_to_none=True)
    focused = {} if span_bias is None else {"span_bias": span_bias.to(words.device)}
    loss = -model.log_likelihood(words, lengths, products, **focused).mean()
    loss.backward()
    clip_and_step(optimizer, model.parameters(), clip)
    return loss.item()


def adam(model: torch.nn.Module, lr: float) -> torch.optim.Adam:
    """The recipe's Adam (betas ADAM_BETAS), its update fused into one kernel per device (`fused=True`: the same
    update, about a fifth of the time of torch's default on a CPU at the PCFG's size: issue 80)."""
    return torch.optim.Adam(model.parameters(), lr=lr, betas=ADAM_BETAS, fused=True)


class SentenceRecipe(Recipe):
    UNIT, PHASE = "batch", "adam"

    def setup(self, phase: str) -> None:
        self.optimizer = adam(self.model, self.config.train.lr)
        self.batches: list[list[int]] = []

    read_text = staticmethod(read_as_sentences)

    @classmethod
    def probe(cls, model: ModelKind, config: Config, vocab_size: int) -> Callable[[torch.dtype | None], None]:
        batch = config.train.batch_size
        words = torch.randint(2, vocab_size, (batch, PROBE_WORDS),
                              generator=torch.Generator().manual_seed(0)).to(model.device)

        def run(dtype: torch.dtype | None) -> None:
            model.log_likelihood(words, [PROBE_WORDS] * batch, dtype).sum().backward()
        return run

    @classmethod
    def held_out_loss(cls, model: ModelKind, ids: Tensor, config: Config, part: str) -> float:
        """Per word and sentence end (sentences batched by length, either part)."""
        nll, count = held_out(model, split_sentences(ids), model.device)
        return nll / max(1, count)

    def describe(self) -> str:
        cfg, focus_votes = self.config.train, self.text.focus
        lines = [described(self.model, self.text, self.device)]
        if cfg.init:
            lines.append(f"started from {cfg.init}")
        if focus_votes is not None:
            how = f"strength {cfg.focus_strength:g}" if cfg.focus_mode == "soft" else "others weigh 1e-4"
            lines.append(f"focused ({cfg.focus_mode}, {how}; votes by {cfg.focus_by}"
                         + (f", a right-branching voter of weight {cfg.focus_right:g}" if cfg.focus_right else "")
                         + f") by {', '.join(cfg.focus)}: {focus_votes.covered:,} of {len(focus_votes):,} "
                         "sentences have teacher trees; the training loss is the focused objective's, the held-out "
                         "one the plain likelihood")
        return "\n".join(lines)

    def begin_epoch(self, epoch: int, position: EpochPosition) -> int:
        cfg, run = self.config.train, self.config.run
        self.products = precision.product_dtype(run.precision)
        self.batches = length_batches(self.text.train, cfg.batch_size, epoch_longest(cfg, epoch), epoch_order(run, epoch))
        self.model.train()
        return len(self.batches)

    def steps(self, position: EpochPosition) -> Iterator[Step]:
        cfg, votes = self.config.train, self.text.focus
        for batch in self.batches[position.start :]:
            words, lengths = padded([self.text.train[k] for k in batch], self.device)
            bias = None if votes is None else votes.bias(batch, lengths, cfg.focus_mode, cfg.focus_strength)
            nll = sentence_step(self.model, self.optimizer, words, lengths, cfg.clip, self.products, bias)
            loss_sum, units = nll * len(lengths), sum(lengths) + len(lengths)
            running = (position.loss_sum + loss_sum) / (position.units + units)
            yield Step(loss_sum, units, sum(lengths), 1, {"ppl": f"{math.exp(min(running, 50)):.1f}"})

    def held_out(self, model: ModelKind, part: str, products: torch.dtype | None) -> float:
        nll, count = held_out(model, getattr(self.text, part), self.device, products)
        return nll / max(1, count)

    def epoch_record(self, epoch: int, stats: dict[str, float]) -> dict[str, Any]:
        return {"longest": epoch_longest(self.config.train, epoch)}
