"""The paper's recipe (AWD-LSTM, as the ON-LSTM code trains): the text as one token stream in batch rows, variable
BPTT windows with the learning rate scaled to each, the hidden state carried across windows, cross entropy plus AR
and TAR, gradient clipping, SGD switched to averaged SGD when validation stops improving (non-monotone trigger),
validation with ASGD's averages. training/loop.py runs it."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

from ...config import Config
from ...runtime import distributed, precision
from ...runtime.clipping import clip_and_step
from ...text import corpus
from ...text.tokenizer import Vocab, batchify, get_batch, tokenizer_of
from ..kind import ModelKind, count_parameters
from ..recipe import EpochPosition, Recipe, Step, TrainingText
from . import graphs, native
from .asgd import ASGD
from .recurrence import State


def read_stream(config: Config, world: distributed.World, vocab: Vocab | None = None) -> TrainingText:
    """The config's files through the token cache (see text/corpus.py; rank 0 builds what is missing while the
    others wait), each as one stream: `train` this process's batch rows (T, B), `valid` and `test` theirs at the
    evaluation batch sizes."""
    corpus.require_training_file(config.data)  # before the others wait
    if not world.is_main:
        world.barrier()
    vocab, entries = corpus.training_files(config, vocab)
    if world.is_main:
        world.barrier()
    data, train_cfg = config.data, config.train

    def rows(path: str, batch_size: int) -> Tensor | None:
        return batchify(entries[path].ids, batch_size, path) if path else None

    notes = [f"{path}: skipped {entry.blank_lines} blank lines" for path, entry in entries.items() if entry.blank_lines]
    cache_mb = sum(entry.size_bytes for entry in entries.values()) / 2**20
    notes.append(f"token cache {entries[data.train].path.parent}: {cache_mb:.1f} MB for this run's files")
    return TrainingText(tokenizer_of(data), vocab, world.split_rows(rows(data.train, train_cfg.batch_size)),
                        rows(data.valid, train_cfg.eval_batch_size), rows(data.test, train_cfg.test_batch_size), notes)


def detach_state(hidden: State) -> State:
    return [(h.detach(), c.detach()) for h, c in hidden]


def sample_seq_len(rng: random.Random, bptt: int) -> int:
    """The paper's variable BPTT: bptt w.p. 0.95 else bptt/2, plus N(0, 5) jitter, at least 5."""
    base = bptt if rng.random() < 0.95 else bptt / 2.0
    return max(5, int(rng.gauss(base, 5)))


def make_optimizer(model: torch.nn.Module, config: Config, phase: str) -> torch.optim.Optimizer:
    """The paper's SGD, or ASGD once averaging starts. SGD runs torch's fused kernel on CPUs and GPUs: one pass over
    each weight, the same numbers as its loop (three passes) in a third of the time on a CPU; ASGD one pass in C on a
    CPU (families/onlstm/asgd.py)."""
    cfg = config.train
    if phase == "asgd":
        return ASGD(model.parameters(), lr=cfg.lr, t0=0, lambd=0.0, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused_sgd(model))


def fused_sgd(model: torch.nn.Module) -> bool | None:
    """Whether torch has a fused SGD for the model's device (None: its default, the loop)."""
    return True if next(model.parameters()).device.type in ("cpu", "cuda") else None


def lm_loss(model: torch.nn.Module, inputs: Tensor, targets: Tensor, hidden: State, config: Config):
    """Cross entropy + AR + TAR on the last layer's output, as the paper's code. Returns (loss, ce, hidden).
    config.run.precision is resolved (fp32 or bf16) by then."""
    out = model(inputs, hidden, products=precision.product_dtype(config.run.precision), targets=targets)
    top = out.top_output.float()  # (T, B, E)
    loss = out.ce + config.train.alpha * top.pow(2).mean() + config.train.beta * (top[1:] - top[:-1]).pow(2).mean()
    return loss, out.ce, out.hidden


def train_step(model, optimizer, inputs, targets, hidden, config: Config, seq_len: int):
    """One optimizer step with the learning rate scaled by seq_len / bptt. Returns (ce, hidden)."""
    cfg = config.train
    model.train()
    base_lr = optimizer.param_groups[0]["lr"]
    optimizer.param_groups[0]["lr"] = base_lr * seq_len / cfg.bptt
    optimizer.zero_grad(set_to_none=True)
    loss, ce, hidden = lm_loss(model, inputs, targets, hidden, config)
    loss.backward()
    clip_and_step(optimizer, model.parameters(), cfg.clip)
    optimizer.param_groups[0]["lr"] = base_lr
    return ce.detach(), detach_state(hidden)


@torch.no_grad()
def evaluate_loss(model: ModelKind, source: Tensor, bptt: int, products: torch.dtype | None = None) -> float:
    """Mean next-token cross entropy over a batchified stream, in evaluation mode; `products`: the
    dtype of the matrix products (None: float32)."""
    model.eval()
    hidden = model.init_hidden(source.shape[1])
    total = 0.0
    for start in range(0, source.shape[0] - 1, bptt):
        inputs, targets = get_batch(source, start, bptt)
        out = model(inputs, hidden, products=products, targets=targets)
        total += len(inputs) * out.ce.item()
        hidden = out.hidden
    return total / (source.shape[0] - 1)


class averaged_weights:
    """Swap in ASGD's running averages for validation, as the paper's code does, then restore."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, active: bool):
        self.params = [p for p in model.parameters() if active and "ax" in optimizer.state.get(p, {})]
        self.optimizer = optimizer

    def __enter__(self):
        self.saved = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for p in self.params:
                p.copy_(self.optimizer.state[p]["ax"])

    def __exit__(self, *exc):
        with torch.no_grad():
            for p, saved in zip(self.params, self.saved):
                p.copy_(saved)


def should_average(history: list[float], val_loss: float, nonmono: int) -> bool:
    """The paper's switch to ASGD: no improvement on the best of more than `nonmono` epochs back."""
    return len(history) > nonmono and val_loss > min(history[: len(history) - nonmono])


def time_step_note(model: torch.nn.Module) -> str:
    """How the layers' time steps run: on a CPU in C or (slower) as tensor ops (families/onlstm/native.py); on a GPU
    replayed from CUDA graphs or launched kernel by kernel (families/onlstm/graphs.py)."""
    weight = next(model.parameters())
    if weight.device.type == "cuda":
        return (", time steps replayed from CUDA graphs" if graphs.enabled(weight.device)
                else ", time steps launched kernel by kernel (GRAMMAR_INDUCE_CUDA_GRAPHS=0)")
    if weight.device.type != "cpu":
        return ""
    return ", time steps in C" if native.usable(weight) else ", time steps as tensor ops (the C steps are turned off or could not be built)"


class AWDRecipe(Recipe):
    UNIT, PARALLEL, PHASE = "tok", True, "sgd"

    def setup(self, phase: str) -> None:
        text = self.text
        text.train = text.train.to(self.device)
        text.valid = text.valid.to(self.device) if text.valid is not None else None
        self.optimizer = make_optimizer(self.model, self.config, phase)
        self.trainable = self.world.wrap(self.model)  # the model, or its DistributedDataParallel wrapper
        self.hidden: State = []

    read_text = staticmethod(read_stream)

    @classmethod
    def probe(cls, model: ModelKind, config: Config, vocab_size: int) -> Callable[[torch.dtype | None], None]:
        cfg = config.train
        data = torch.randint(0, vocab_size, (cfg.bptt + 1, cfg.batch_size),
                             generator=torch.Generator().manual_seed(0)).to(model.device)

        def run(dtype: torch.dtype | None) -> None:
            model(data[:-1], model.init_hidden(cfg.batch_size), products=dtype, targets=data[1:]).ce.backward()
        return run

    @classmethod
    def held_out_loss(cls, model: ModelKind, ids: Tensor, config: Config, part: str) -> float:
        """The paper's measure: the file as one stream in rows (train.eval_batch_size for valid, test_batch_size for
        test), bptt-long windows, the state carried."""
        rows = config.train.eval_batch_size if part == "valid" else config.train.test_batch_size
        return evaluate_loss(model, batchify(ids, rows, "the text").to(model.device), config.train.bptt)

    def describe(self) -> str:
        processes = f", {self.world.size} processes" if self.world.size > 1 else ""
        return (f"{count_parameters(self.model):,} parameters, vocabulary {len(self.text.vocab):,}, device "
                f"{self.device}{processes}{time_step_note(self.model)}")

    def begin_epoch(self, epoch: int, position: EpochPosition) -> int:
        if position.hidden is None:
            self.hidden = self.model.init_hidden(self.text.train.shape[1])
        else:  # saved for the whole batch; this process takes its columns
            split = self.world.split_rows
            self.hidden = [(split(h.t()).t().to(self.device), split(c.t()).t().to(self.device))
                           for h, c in position.hidden]
        return self.text.train.shape[0] - 1

    def steps(self, position: EpochPosition) -> Iterator[Step]:
        data = self.text.train
        start = position.start
        while start < data.shape[0] - 2:
            seq_len = sample_seq_len(self.rng, self.config.train.bptt)
            inputs, targets = get_batch(data, start, seq_len)
            ce, self.hidden = train_step(self.trainable, self.optimizer, inputs, targets, self.hidden, self.config,
                                         seq_len)
            ce = ce.item()
            start += len(inputs)
            yield Step(ce * inputs.numel(), inputs.numel(), inputs.numel(), len(inputs), {"loss": f"{ce:.3f}", "ppl": f"{math.exp(min(ce, 50)):.1f}"})

    def pause(self, position: EpochPosition) -> EpochPosition:
        whole = [(self.world.gather_columns(h).cpu(), self.world.gather_columns(c).cpu()) for h, c in self.hidden]
        return dataclasses.replace(position, hidden=whole)

    def held_out(self, model: ModelKind, part: str, products: torch.dtype | None) -> float:
        return evaluate_loss(model, getattr(self.text, part).to(self.device), self.config.train.bptt, products)

    def validation_weights(self, phase: str) -> averaged_weights:
        return averaged_weights(self.model, self.optimizer, phase == "asgd")

    def after_validation(self, phase: str, history: list[float], val_loss: float) -> tuple[str, str | None]:
        """SGD's epochs join `history`; once one is worse than the best of more than nonmono epochs back, ASGD."""
        if phase != "sgd":
            return phase, None
        switch = should_average(history, val_loss, self.config.train.nonmono)
        history.append(val_loss)
        if switch:
            self.optimizer = make_optimizer(self.model, self.config, "asgd")
            return "asgd", "switching to averaged SGD"
        return phase, None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        for group in self.optimizer.param_groups:  # as the paper's --resume: the config's values win
            group.update(lr=self.config.train.lr, weight_decay=self.config.train.weight_decay)
            if "fused" in group:  # SGD's: a state saved without the fused kernel resumes with it where torch has it
                group["fused"] = fused_sgd(self.model)

    def finish(self) -> None:
        self.trainable = self.model  # release the DDP wrapper before the process group goes
