"""Training: the AWD-LSTM recipe of the paper's code, run directories, checkpoints and resume.

`train(config, out_dir, ...)` is the whole workflow; the loop is split into helpers that
each do one thing (sample a sequence length, one optimizer step, one epoch, validation).
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from . import checkpoint, distributed, native
from . import config as config_module
from .config import Config
from .files import InputError, UserError, atomic_write
from .data import (Tokenizer, Vocab, batchify, build_vocab, encode_stream, get_batch, model_order,
                   read_corpus)
from .model import LanguageModel, State, build_model, count_parameters, cross_entropy, detach_state

RUN_FILES = ("config.toml", "metrics.jsonl", "best.pt", "last.pt")


class TrainingStopped(UserError):
    """Training cannot go on (a NaN loss); the last good checkpoint is kept."""


@dataclass
class Corpus:
    tokenizer: Tokenizer
    vocab: Vocab
    train: Tensor  # (T, B) batch rows of this process
    valid: Tensor | None  # (T, eval_batch_size)
    test: Tensor | None  # (T, test_batch_size)
    blank_lines: dict[str, int]  # per file, skipped


@dataclass
class TrainState:
    """Everything the loop changes; `last.pt` stores all of it so a resumed run is exact."""

    epoch: int = 1  # the epoch in progress (1-based)
    step: int = 0  # optimizer steps taken in all
    best_loss: float = math.inf
    val_history: list[float] = field(default_factory=list)
    phase: str = "sgd"  # sgd | asgd
    position: dict[str, Any] | None = None  # where an interrupted epoch stopped
    elapsed: float = 0.0


@dataclass
class Result:
    out_dir: Path
    parameters: int
    best_valid_ppl: float | None
    test_ppl: float | None
    epochs: list[dict[str, Any]]
    main_process: bool = True  # false on the other ranks of a distributed run


def load_corpus(config: Config, world: distributed.World, vocab: Vocab | None = None) -> Corpus:
    """Read the corpus files; the vocabulary comes from the training file unless given (on resume)."""
    data, train_cfg = config.data, config.train
    if not data.train:
        raise InputError("no training file: give --train FILE or set data.train in the config")
    tokenizer = Tokenizer(data.tokenizer, data.lowercase, data.replace_digits)
    reader = tokenizer if data.normalize_training_text else Tokenizer(data.tokenizer)
    blank_lines: dict[str, int] = {}
    direction = config.model.direction
    sentences, blank_lines[data.train] = read_corpus(data.train, reader)
    sentences = model_order(sentences, direction)
    vocab = vocab or build_vocab(sentences, data.max_vocab, data.min_freq)
    train_rows = world.split_rows(batchify(encode_stream(sentences, vocab), train_cfg.batch_size))

    def optional(path: str, batch_size: int) -> Tensor | None:
        if not path:
            return None
        sentences, blank_lines[path] = read_corpus(path, reader)
        return batchify(encode_stream(model_order(sentences, direction), vocab), batch_size)

    return Corpus(tokenizer, vocab, train_rows, optional(data.valid, train_cfg.eval_batch_size),
                  optional(data.test, train_cfg.test_batch_size), blank_lines)


def prepare_run_dir(out_dir: Path, resume: bool, force: bool) -> None:
    existing = [name for name in RUN_FILES if (out_dir / name).exists()]
    existing += sorted(path.name for path in out_dir.glob("epoch-*.pt"))
    if resume:
        if not (out_dir / "last.pt").exists():
            raise InputError(f"{out_dir}: nothing to resume (no last.pt)")
        return
    if existing and not force:
        raise InputError(f"{out_dir}: run directory exists ({', '.join(existing)}); use --resume or --force")
    for name in existing:
        (out_dir / name).unlink()
    out_dir.mkdir(parents=True, exist_ok=True)


def sample_seq_len(rng: random.Random, bptt: int) -> int:
    """The paper's variable BPTT: bptt w.p. 0.95 else bptt/2, plus N(0, 5) jitter, at least 5."""
    base = bptt if rng.random() < 0.95 else bptt / 2.0
    return max(5, int(rng.gauss(base, 5)))


def make_optimizer(model: torch.nn.Module, config: Config, phase: str) -> torch.optim.Optimizer:
    cfg = config.train
    if phase == "asgd":
        return torch.optim.ASGD(model.parameters(), lr=cfg.lr, t0=0, lambd=0.0, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def autocast(config: Config, device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.train.precision == "bf16")


def lm_loss(model: torch.nn.Module, inputs: Tensor, targets: Tensor, hidden: State, config: Config):
    """Cross entropy + AR + TAR on the last layer's output, as the paper's code. Returns (loss, ce, hidden)."""
    with autocast(config, inputs.device):
        out = model(inputs, hidden)
    ce = cross_entropy(out.logits.float().view(-1, out.logits.shape[-1]), targets.reshape(-1))
    top = out.top_output.float()  # (T, B, E)
    loss = ce + config.train.alpha * top.pow(2).mean() + config.train.beta * (top[1:] - top[:-1]).pow(2).mean()
    return loss, ce, out.hidden


def train_step(model, optimizer, inputs, targets, hidden, config: Config, seq_len: int):
    """One optimizer step with the learning rate scaled by seq_len / bptt. Returns (ce, hidden)."""
    cfg = config.train
    model.train()
    base_lr = optimizer.param_groups[0]["lr"]
    optimizer.param_groups[0]["lr"] = base_lr * seq_len / cfg.bptt
    optimizer.zero_grad(set_to_none=True)
    loss, ce, hidden = lm_loss(model, inputs, targets, hidden, config)
    loss.backward()
    if cfg.clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
    optimizer.step()
    optimizer.param_groups[0]["lr"] = base_lr
    return ce.detach(), detach_state(hidden)


@torch.no_grad()
def evaluate_loss(model: LanguageModel, source: Tensor, bptt: int) -> float:
    """Mean next-token cross entropy over a batchified stream, in evaluation mode."""
    model.eval()
    hidden = model.init_hidden(source.shape[1])
    total = 0.0
    for start in range(0, source.shape[0] - 1, bptt):
        inputs, targets = get_batch(source, start, bptt)
        out = model(inputs, hidden)
        total += len(inputs) * cross_entropy(out.logits.view(-1, out.logits.shape[-1]), targets.reshape(-1)).item()
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


class StopFlag:
    """Turns Ctrl-C and SIGTERM into a request to stop after the current batch."""

    def __init__(self):
        self.requested = False

    def __enter__(self):
        in_main_thread = threading.current_thread() is threading.main_thread()  # only it may set handlers
        self.previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)
                         if in_main_thread}
        return self

    def _handle(self, signum, frame):
        self.requested = True

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


@dataclass
class Loop:
    """What stays fixed during a run."""

    config: Config
    corpus: Corpus
    model: LanguageModel
    trainable: torch.nn.Module  # the model, or its DistributedDataParallel wrapper
    device: torch.device
    world: distributed.World
    out_dir: Path
    quiet: bool
    log: Callable[[str], None]
    rng: random.Random = field(default_factory=random.Random)
    optimizer: torch.optim.Optimizer | None = None
    started: float = field(default_factory=time.time)


def train(config: Config, out_dir: Path, *, resume: bool = False, force: bool = False, quiet: bool = False,
          log: Callable[[str], None] = print) -> Result:
    """Train a language model into `out_dir` (config.toml, metrics.jsonl, best.pt, last.pt)."""
    world = distributed.World.from_env()
    device = world.device_for(distributed.resolve_device(config.train.device))
    if world.is_main:
        prepare_run_dir(out_dir, resume, force)
    world.barrier()
    payload = checkpoint.read(out_dir / "last.pt") if resume else None
    loop = start_loop(config, out_dir, payload, world, device, quiet, log)
    state = restore_state(loop, payload)
    if world.is_main:
        trim_metrics(out_dir / "metrics.jsonl", state.epoch)
        atomic_write(out_dir / "config.toml", lambda f: f.write(config_module.to_toml(config).encode()))
        for path, blank in loop.corpus.blank_lines.items():
            if blank:
                log(f"{path}: skipped {blank} blank lines")
        log(f"{count_parameters(loop.model):,} parameters, vocabulary {len(loop.corpus.vocab):,}, device {device}"
            + (f", {world.size} processes" if world.size > 1 else "") + time_step_note(loop.model))
    epochs = run_epochs(loop, state)
    test_ppl = final_test(loop) if world.is_main and loop.corpus.test is not None and state.position is None else None
    loop.trainable = loop.model  # release the DDP wrapper before the process group goes
    world.close()
    best = math.exp(state.best_loss) if loop.corpus.valid is not None and math.isfinite(state.best_loss) else None
    return Result(out_dir, count_parameters(loop.model), best, test_ppl, epochs, world.is_main)


def time_step_note(model: torch.nn.Module) -> str:
    """On a CPU, whether the layers' time steps run in C or (slower) as tensor ops; see native.py."""
    weight = next(model.parameters())
    if weight.device.type != "cpu":
        return ""
    return ", time steps in C" if native.usable(weight) else ", time steps as tensor ops (the C steps are turned off or could not be built)"


def start_loop(config, out_dir, payload, world, device, quiet, log) -> Loop:
    torch.manual_seed(config.train.seed)
    corpus = load_corpus(config, world, Vocab(payload["vocab"]) if payload else None)
    model = build_model(len(corpus.vocab), config.model).to(device)
    if payload:
        model.load_state_dict(payload["state_dict"])
    corpus.train = corpus.train.to(device)
    corpus.valid = corpus.valid.to(device) if corpus.valid is not None else None
    return Loop(config, corpus, model, world.wrap(model), device, world, out_dir, quiet, log,
                rng=random.Random(config.train.seed))


def restore_state(loop: Loop, payload: dict | None) -> TrainState:
    if payload is None:
        loop.optimizer = make_optimizer(loop.model, loop.config, "sgd")
        return TrainState()
    saved = dict(payload["training_state"])
    loop.optimizer = make_optimizer(loop.model, loop.config, saved["phase"])
    loop.optimizer.load_state_dict(saved.pop("optimizer"))
    for group in loop.optimizer.param_groups:  # as the paper's --resume: the config's values win
        group.update(lr=loop.config.train.lr, weight_decay=loop.config.train.weight_decay)
    set_rng_state(loop, saved.pop("rng"))
    return TrainState(**saved)


def rng_state(loop: Loop) -> dict[str, Any]:
    _, internal, gauss_next = loop.rng.getstate()
    state = {"python": list(internal), "gauss_next": gauss_next, "torch": torch.get_rng_state()}
    if loop.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(loop.device)
    return state


def set_rng_state(loop: Loop, state: dict[str, Any]) -> None:
    loop.rng.setstate((3, tuple(state["python"]), state["gauss_next"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and loop.device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], loop.device)


def save_last(loop: Loop, state: TrainState) -> None:
    if not loop.world.is_main:
        return
    training_state = {**state.__dict__, "optimizer": loop.optimizer.state_dict(), "rng": rng_state(loop),
                      "elapsed": state.elapsed + time.time() - loop.started}
    checkpoint.save(loop.out_dir / "last.pt", loop.model, loop.corpus.vocab, loop.corpus.tokenizer, loop.config,
                    training_state)


def run_epochs(loop: Loop, state: TrainState) -> list[dict[str, Any]]:
    """Epoch after epoch until the epoch count, a step or time limit, or a stop request."""
    cfg = loop.config.train
    records = []
    with StopFlag() as stop:
        while state.epoch <= cfg.epochs:
            stats = run_epoch(loop, state, stop)
            if stats is None:  # interrupted: last.pt holds the position inside the epoch
                save_last(loop, state)
                loop.log(f"interrupted in epoch {state.epoch}; continue with --resume")
                break
            records.append(end_epoch(loop, state, stats))
            if limit_reached(loop, state):
                break
    return records


def limit_reached(loop: Loop, state: TrainState) -> bool:
    cfg = loop.config.train
    minutes = (state.elapsed + time.time() - loop.started) / 60
    return bool(cfg.max_steps and state.step >= cfg.max_steps) or bool(cfg.max_minutes and minutes >= cfg.max_minutes)


def run_epoch(loop: Loop, state: TrainState, stop: StopFlag) -> dict[str, float] | None:
    """Train from `state.position` (or the epoch's start). Returns statistics, or None if interrupted."""
    from tqdm import tqdm

    data, cfg = loop.corpus.train, loop.config.train
    pos = state.position or {"start": 0, "hidden": None, "loss_sum": 0.0, "tokens": 0, "seconds": 0.0}
    if pos["hidden"] is None:
        hidden = loop.model.init_hidden(data.shape[1])
    else:  # saved for the whole batch; this process takes its columns
        hidden = [(loop.world.split_rows(h.t()).t().to(loop.device), loop.world.split_rows(c.t()).t().to(loop.device))
                  for h, c in pos["hidden"]]
    start, began = pos["start"], time.time()
    bar = tqdm(total=data.shape[0] - 1, initial=start, desc=f"epoch {state.epoch}", leave=False,
               disable=loop.quiet or not loop.world.is_main, dynamic_ncols=True)
    while start < data.shape[0] - 2:
        if loop.world.any(stop.requested):
            bar.close()
            whole = [(loop.world.gather_columns(h).cpu(), loop.world.gather_columns(c).cpu()) for h, c in hidden]
            state.position = {**pos, "start": start, "hidden": whole, "seconds": pos["seconds"] + time.time() - began}
            return None
        seq_len = sample_seq_len(loop.rng, cfg.bptt)
        inputs, targets = get_batch(data, start, seq_len)
        ce, hidden = train_step(loop.trainable, loop.optimizer, inputs, targets, hidden, loop.config, seq_len)
        ce = ce.item()
        if not math.isfinite(ce):
            bar.close()
            raise TrainingStopped(f"the training loss became {ce} at step {state.step + 1} of epoch {state.epoch}; "
                                  f"{loop.out_dir / 'last.pt'} keeps the last good state (try a lower lr or clip)")
        state.step += 1
        pos["loss_sum"] += ce * inputs.numel()
        pos["tokens"] += inputs.numel()  # this process's share
        start += len(inputs)
        seconds = pos["seconds"] + time.time() - began
        bar.update(len(inputs))
        bar.set_postfix(loss=f"{ce:.3f}", ppl=f"{math.exp(min(ce, 50)):.1f}", tok_s=f"{pos['tokens'] * loop.world.size / seconds:.0f}")
        if limit_reached(loop, state):
            break
    bar.close()
    seconds = pos["seconds"] + time.time() - began
    mean_loss = loop.world.mean(pos["loss_sum"] / max(1, pos["tokens"]))
    return {"train_loss": mean_loss, "tokens_per_s": pos["tokens"] * loop.world.size / max(seconds, 1e-9),
            "seconds": seconds}


def end_epoch(loop: Loop, state: TrainState, stats: dict[str, float]) -> dict[str, Any]:
    """Validate (with ASGD's averages once averaging runs), keep the best model, maybe switch to ASGD."""
    cfg = loop.config.train
    valid = loop.corpus.valid
    with averaged_weights(loop.model, loop.optimizer, state.phase == "asgd"):
        val_loss = evaluate_loss(loop.model, valid, cfg.bptt) if valid is not None and loop.world.is_main else 0.0
        val_loss = loop.world.broadcast(val_loss) if valid is not None else stats["train_loss"]
        if val_loss < state.best_loss or valid is None:
            state.best_loss = val_loss
            if loop.world.is_main:
                checkpoint.save(loop.out_dir / "best.pt", loop.model, loop.corpus.vocab, loop.corpus.tokenizer,
                                loop.config)
        if cfg.keep_epochs and loop.world.is_main:
            keep_snapshot(loop, state.epoch)
    record = {
        "epoch": state.epoch,
        "train_loss": round(stats["train_loss"], 5),
        "valid_ppl": round(math.exp(val_loss), 3) if valid is not None else None,
        "lr": loop.optimizer.param_groups[0]["lr"],
        "phase": state.phase,
        "tokens_per_s": round(stats["tokens_per_s"], 1),
        "seconds": round(stats["seconds"], 2),
    }
    if state.phase == "sgd" and valid is not None:
        if should_average(state.val_history, val_loss, cfg.nonmono):
            state.phase = "asgd"
            loop.optimizer = make_optimizer(loop.model, loop.config, "asgd")
            loop.log(f"epoch {state.epoch}: switching to averaged SGD")
        state.val_history.append(val_loss)
    state.epoch += 1
    state.position = None
    if loop.world.is_main:
        append_metrics(loop.out_dir / "metrics.jsonl", record)
        loop.log(format_record(record))
    save_last(loop, state)
    return record


def keep_snapshot(loop: Loop, epoch: int) -> None:
    """Save this epoch's model (as validated: ASGD's averages once averaging runs) as epoch-K.pt,
    dropping the one that falls out of the last `keep_epochs`."""
    checkpoint.save(loop.out_dir / f"epoch-{epoch}.pt", loop.model, loop.corpus.vocab, loop.corpus.tokenizer,
                    loop.config)
    (loop.out_dir / f"epoch-{epoch - loop.config.train.keep_epochs}.pt").unlink(missing_ok=True)


def should_average(history: list[float], val_loss: float, nonmono: int) -> bool:
    """The paper's switch to ASGD: no improvement on the best of more than `nonmono` epochs back."""
    return len(history) > nonmono and val_loss > min(history[: len(history) - nonmono])


def append_metrics(path: Path, record: dict[str, Any]) -> None:
    """Append one whole line with a single write, so a kill never leaves half a line."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def trim_metrics(path: Path, next_epoch: int) -> None:
    """After a kill, drop lines of epochs that `last.pt` does not include (they will be redone)."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.endswith("\n") and json.loads(line)["epoch"] < next_epoch]
    if kept != lines:
        atomic_write(path, lambda f: f.write("".join(kept).encode()))


def format_record(record: dict[str, Any]) -> str:
    valid = f"valid ppl {record['valid_ppl']:.2f}" if record["valid_ppl"] is not None else "no validation"
    return (f"epoch {record['epoch']:3d} | train loss {record['train_loss']:.3f} | {valid} | "
            f"lr {record['lr']:g} | {record['phase']} | {record['tokens_per_s']:.0f} tok/s | {record['seconds']:.1f}s")


def final_test(loop: Loop) -> float:
    """Test perplexity of the best model."""
    best = checkpoint.load(loop.out_dir / "best.pt", loop.device)
    ppl = math.exp(evaluate_loss(best.model, loop.corpus.test.to(loop.device), loop.config.train.bptt))
    loop.log(f"test ppl {ppl:.2f} (best.pt)")
    return ppl


def resume_config(out_dir: Path) -> dict[str, Any]:
    """The config a run was started with, as a raw dict, for --resume."""
    return checkpoint.read(out_dir / "last.pt")["config"]
