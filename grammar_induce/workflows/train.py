"""Training: the AWD-LSTM recipe of the paper's code, run directories, checkpoints and resume.

`train(config, out_dir, ...)` is the whole workflow; the loop is split into helpers that
each do one thing (sample a sequence length, one optimizer step, one epoch, validation).
"""

from __future__ import annotations

import dataclasses
import gc
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

from .. import config as config_module
from ..config import Config
from ..files import InputError, Messages, UserError, plural, progress_bar, refuse_overwriting, write_text
from ..models import checkpoint, native, registry
from ..models.onlstm import LanguageModel, State, count_parameters, cross_entropy, detach_state
from ..output import draw
from ..runtime import distributed, precision, rundir
from ..text import corpus
from ..text.tokenizer import Tokenizer, Vocab, batchify, get_batch, tokenizer_of


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
    cache_bytes: int = 0  # of the token cache entries it maps
    cache: Path | None = None  # the token cache folder


RESUME_VERSION = 1  # of the training state in last.pt; files from before it was recorded are version 1


@dataclass
class EpochPosition:
    """How far an epoch has come; saved when it is interrupted, so --resume continues inside it."""

    start: int = 0  # the next batch's first row
    hidden: list[tuple[Tensor, Tensor]] | None = None  # per layer (h, c) of the whole batch, on the CPU
    loss_sum: float = 0.0
    tokens: int = 0  # this process's tokens so far
    seconds: float = 0.0


@dataclass
class TrainState:
    """Everything the loop changes; `last.pt` stores all of it (with the optimizer and random
    generators) so a resumed run is exact."""

    epoch: int = 1  # the epoch in progress (1-based)
    step: int = 0  # optimizer steps taken in all
    best_loss: float = math.inf
    val_history: list[float] = field(default_factory=list)
    phase: str = "sgd"  # sgd | asgd
    position: EpochPosition | None = None  # where an interrupted epoch stopped
    elapsed: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        position = None if self.position is None else {
            f.name: getattr(self.position, f.name) for f in dataclasses.fields(EpochPosition)}
        return {"version": RESUME_VERSION, "epoch": self.epoch, "step": self.step, "best_loss": self.best_loss,
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
            return cls(int(saved["epoch"]), int(saved["step"]), float(saved["best_loss"]),
                       [float(v) for v in saved["val_history"]], str(saved["phase"]),
                       None if position is None else EpochPosition(
                           *(position[f.name] for f in dataclasses.fields(EpochPosition))),
                       float(saved["elapsed"]))
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{source}: damaged training state ({type(e).__name__}: {e})") from None


@dataclass
class Result:
    out_dir: Path
    parameters: int
    best_valid_ppl: float | None
    test_ppl: float | None
    epochs: list[dict[str, Any]]
    main_process: bool = True  # false on the other ranks of a distributed run
    stopped_by: int | None = None  # the signal that interrupted training, if one did


def load_corpus(config: Config, world: distributed.World, vocab: Vocab | None = None) -> Corpus:
    """Memory-map the corpus files from the token cache (see text/corpus.py), building it on first use (on
    rank 0, while the others wait); the vocabulary comes from the training file unless given (on resume)."""
    data, train_cfg = config.data, config.train
    if not data.train:
        raise InputError("no training file: give --train FILE or set data.train in the config")
    tokenizer = tokenizer_of(data)
    reader = corpus.training_reader(data)
    root, workers = corpus.cache_root(data.cache_dir), data.workers or os.cpu_count() or 1
    backward = config.model.direction == "backward"
    limits = corpus.Limits(data.max_vocab, data.min_freq)
    if not world.is_main:
        world.barrier()  # rank 0 builds what is missing
    with corpus.read_once([data.train, data.valid, data.test], root) as readable:
        train = corpus.training_entry(readable[data.train], reader, limits, root, workers, backward)
        if vocab is not None and vocab.words != train.vocab.words:  # resuming after the file or the limits changed
            train = corpus.encoded_entry(readable[data.train], reader, vocab, root, workers, backward)
        vocab = vocab or train.vocab
        entries = {data.train: train}
        for path in (data.valid, data.test):
            if path and path not in entries:
                entries[path] = corpus.encoded_entry(readable[path], reader, vocab, root, workers, backward)
    if world.is_main:
        world.barrier()

    def rows(path: str, batch_size: int) -> Tensor | None:
        return batchify(entries[path].ids, batch_size, path) if path else None

    return Corpus(tokenizer, vocab, world.split_rows(rows(data.train, train_cfg.batch_size)),
                  rows(data.valid, train_cfg.eval_batch_size), rows(data.test, train_cfg.test_batch_size),
                  {path: entry.blank_lines for path, entry in entries.items()},
                  sum(entry.size_bytes for entry in entries.values()), train.path.parent)


def sample_seq_len(rng: random.Random, bptt: int) -> int:
    """The paper's variable BPTT: bptt w.p. 0.95 else bptt/2, plus N(0, 5) jitter, at least 5."""
    base = bptt if rng.random() < 0.95 else bptt / 2.0
    return max(5, int(rng.gauss(base, 5)))


def make_optimizer(model: torch.nn.Module, config: Config, phase: str) -> torch.optim.Optimizer:
    cfg = config.train
    if phase == "asgd":
        return torch.optim.ASGD(model.parameters(), lr=cfg.lr, t0=0, lambd=0.0, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def lm_loss(model: torch.nn.Module, inputs: Tensor, targets: Tensor, hidden: State, config: Config):
    """Cross entropy + AR + TAR on the last layer's output, as the paper's code. Returns (loss, ce, hidden).
    config.train.precision is resolved (fp32 or bf16) by then."""
    out = model(inputs, hidden, products=precision.product_dtype(config.train.precision))
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
def evaluate_loss(model: LanguageModel, source: Tensor, bptt: int, products: torch.dtype | None = None) -> float:
    """Mean next-token cross entropy over a batchified stream, in evaluation mode; `products`: the
    dtype of the matrix products (None: float32)."""
    model.eval()
    hidden = model.init_hidden(source.shape[1])
    total = 0.0
    for start in range(0, source.shape[0] - 1, bptt):
        inputs, targets = get_batch(source, start, bptt)
        out = model(inputs, hidden, products=products)
        total += len(inputs) * cross_entropy(out.logits.view(-1, out.logits.shape[-1]), targets.reshape(-1)).item()
        hidden = out.hidden
    return total / (source.shape[0] - 1)


def perplexity(loaded: checkpoint.LoadedModel, path: str, batch_size: int) -> float:
    """A trained model's perplexity on a text file read as its training read text (the paper's
    measure: the file as one stream in `batch_size` rows, bptt-long windows, the state carried; a model of
    whole sentences: `held_out`'s, per word and sentence end)."""
    data = loaded.config.data
    entry = corpus.encoded_entry(path, corpus.training_reader(data), loaded.vocab, corpus.cache_root(data.cache_dir), 1,
                                 loaded.config.model.direction == "backward")
    if registry.trains_on_sentences(loaded.config.model.kind):
        nll, count = held_out(loaded.model, split_sentences(entry.ids), loaded.model.device)
        return _exp(nll / max(1, count))
    source = batchify(entry.ids, batch_size, path).to(loaded.model.device)
    return _exp(evaluate_loss(loaded.model, source, loaded.config.train.bptt))


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


class _StopFlag:
    """Turns Ctrl-C and SIGTERM into a request to stop after the current batch."""

    def __init__(self):
        self.requested = False
        self.signal: int | None = None

    def __enter__(self):
        in_main_thread = threading.current_thread() is threading.main_thread()  # only it may set handlers
        self.previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)
                         if in_main_thread}
        return self

    def _handle(self, signum, frame):
        self.requested = True
        self.signal = signum

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


@dataclass
class _Loop:
    """The parts of a run: fixed ones (config, device, world, run directory, logging) and the ones
    training swaps (the optimizer at the switch to averaged SGD, the corpus moved to the device)."""

    config: Config
    corpus: Corpus
    model: LanguageModel
    trainable: torch.nn.Module  # the model, or its DistributedDataParallel wrapper
    device: torch.device
    world: distributed.World
    out_dir: Path
    quiet: bool
    messages: Messages
    optimizer: torch.optim.Optimizer  # replaced at the switch to averaged SGD
    rng: random.Random = field(default_factory=random.Random)
    started: float = field(default_factory=time.time)
    stopped_by: int | None = None  # the signal that interrupted the run


def train(config: Config, out_dir: Path, *, resume: bool = False, force: bool = False, quiet: bool = False,
          messages: Messages | None = None) -> Result:
    """Train a language model into `out_dir` (config.toml, metrics.jsonl, best.pt, last.pt).

    Every input is checked before the run directory is touched; see `rundir` for its lock. `messages`:
    where the log lines and notes go (by default nowhere; the notes are kept).
    """
    messages = messages or Messages()
    # Large CPU tensors on transparent huge pages (torch reads this at its first large allocation): a training
    # batch allocates hundreds of MB of fresh activations and gradients, and faulting them in 4 KiB pages costs
    # about 5% of a CPU training step (scripts/benchmark.py). Set it to 0 to opt out.
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    registry.check_trainable(config.model.kind)
    world = distributed.World.from_env()
    if registry.trains_on_sentences(config.model.kind) and world.size > 1:
        raise UserError(f"{config.model.kind}: training on whole sentences runs in one process (no torchrun yet)")
    device = world.device_for(distributed.resolve_device(config.train.device))
    requested = config.train.precision
    config = dataclasses.replace(config, train=dataclasses.replace(config.train,
                                                                   precision=precision.resolve(requested, device)))
    rundir.check(out_dir, resume, force)
    refuse_overwriting({f"the run's {path.name}": path for path in rundir.written_files(out_dir)},
                       [config.data.train, config.data.valid, config.data.test])
    if registry.trains_on_sentences(config.model.kind):
        return train_sentences(config, out_dir, requested, device, resume, force, quiet, messages, world)
    payload = checkpoint.read(out_dir / "last.pt") if resume else None
    saved = _resume_state(payload, out_dir / "last.pt") if payload else None
    if payload:
        _check_resumable(payload, config, out_dir / "last.pt")
    streams = load_corpus(config, world, Vocab(payload["vocab"]) if payload else None)
    config, probe = measured_precision(config, requested, len(streams.vocab), device, world)
    with rundir.RunDirectory(out_dir, resume, force, main=world.is_main):
        world.barrier()
        loop = _start_loop(config, streams, out_dir, payload, saved, world, device, quiet, messages)
        state = _restore_state(loop, payload, saved)
        if world.is_main:
            _announce(loop, state)
            loop.messages.say(precision.describe(requested, config.train.precision, device, loop.model.BF16_PARTS,
                                                 loop.model.FP32_PARTS, probe))
        epochs = _run_epochs(loop, state)
        interrupted = state.position is not None
        test_ppl = _final_test(loop) if world.is_main and streams.test is not None and not interrupted else None
        loop.trainable = loop.model  # release the DDP wrapper before the process group goes,
        gc.collect()  # now: it can sit in reference cycles, and freed at exit it can abort the process (gloo)
        world.close()
    best = _exp(state.best_loss) if streams.valid is not None and math.isfinite(state.best_loss) else None
    return Result(out_dir, count_parameters(loop.model), best, test_ppl, epochs, world.is_main, loop.stopped_by)


PROBE_WORDS = 20  # a sentence model's probe: a training batch of sentences this long


def measured_precision(config: Config, requested: str, vocab_size: int, device: torch.device,
                       world: distributed.World) -> tuple[Config, precision.Probe | None]:
    """The config with `auto` measured on a probe of one training step (forward and backward of a new model of
    the config on random ids of the training batch's shape), where bfloat16 hardware leaves a choice (a
    single process: under torchrun every process keeps bf16, so that all run alike); and the probe."""
    if requested != "auto" or config.train.precision != "bf16" or world.size > 1:
        return config, None
    model = registry.build(vocab_size, config.model).to(device)
    generator = torch.Generator().manual_seed(0)
    cfg = config.train
    if registry.trains_on_sentences(config.model.kind):
        words = torch.randint(2, vocab_size, (cfg.batch_size, PROBE_WORDS), generator=generator).to(device)

        def run(dtype: torch.dtype | None) -> None:
            model.log_likelihood(words, [PROBE_WORDS] * cfg.batch_size, dtype).sum().backward()
    else:
        data = torch.randint(0, vocab_size, (cfg.bptt + 1, cfg.batch_size), generator=generator).to(device)

        def run(dtype: torch.dtype | None) -> None:
            out = model(data[:-1], model.init_hidden(cfg.batch_size), products=dtype)
            cross_entropy(out.logits.float().view(-1, out.logits.shape[-1]), data[1:].reshape(-1)).backward()

    key = (config.model.kind, tuple(config.to_dict()["model"].values()), vocab_size, cfg.batch_size, cfg.bptt)
    probe = precision.Probe(key, run)
    chosen = precision.resolve(requested, device, probe)
    return dataclasses.replace(config, train=dataclasses.replace(cfg, precision=chosen)), probe


def _resume_state(payload: dict[str, Any], source: Path) -> TrainState:
    if "training_state" not in payload:
        raise InputError(f"{source}: holds no training state to resume from (a copy of best.pt?)")
    return TrainState.from_dict(payload["training_state"], source)


def _check_resumable(payload: dict[str, Any], config: Config, source: Path) -> None:
    """Refuse a resume that would change the model, its text or its vocabulary (see config.RESUMABLE)."""
    saved = config_module.from_dict(payload["config"], str(source))
    changes = config_module.resume_changes(saved, config)
    if changes:
        key, was, now = changes[0]
        raise InputError(f"{source}: --resume cannot change {key} (the run has {was!r}, now {now!r}); "
                         f"only {', '.join(sorted(config_module.RESUMABLE))} may change")


def _announce(loop: _Loop, state: TrainState) -> None:
    """Write config.toml and say what is about to train."""
    rundir.trim_metrics(loop.out_dir / "metrics.jsonl", state.epoch)
    write_text(loop.out_dir / "config.toml", config_module.to_toml(loop.config))
    data = loop.config.data
    for path in dict.fromkeys(p for p in (data.train, data.valid, data.test) if p and corpus.is_stream(p)):
        loop.messages.note(f"{path} is not a file but a stream, read once; --resume will need the text as a file")
    for path, blank in loop.corpus.blank_lines.items():
        if blank:
            loop.messages.say(f"{path}: skipped {blank} blank lines")
    loop.messages.say(f"token cache {loop.corpus.cache}: {loop.corpus.cache_bytes / 2**20:.1f} MB for this run's files")
    loop.messages.say(f"{count_parameters(loop.model):,} parameters, vocabulary {len(loop.corpus.vocab):,}, device "
             f"{loop.device}" + (f", {loop.world.size} processes" if loop.world.size > 1 else "")
             + time_step_note(loop.model))


def time_step_note(model: torch.nn.Module) -> str:
    """On a CPU, whether the layers' time steps run in C or (slower) as tensor ops; see models/native.py."""
    weight = next(model.parameters())
    if weight.device.type != "cpu":
        return ""
    return ", time steps in C" if native.usable(weight) else ", time steps as tensor ops (the C steps are turned off or could not be built)"


def _start_loop(config, streams, out_dir, payload, saved, world, device, quiet, messages) -> _Loop:
    """The run's parts, each made once: the model (with the saved weights), its optimizer for the saved
    phase, the corpus on the device."""
    torch.manual_seed(config.train.seed)
    model = registry.build(len(streams.vocab), config.model).to(device)
    if payload:
        model.load_state_dict(payload["state_dict"])
    streams.train = streams.train.to(device)
    streams.valid = streams.valid.to(device) if streams.valid is not None else None
    optimizer = make_optimizer(model, config, saved.phase if saved else "sgd")
    return _Loop(config, streams, model, world.wrap(model), device, world, out_dir, quiet, messages, optimizer,
                rng=random.Random(config.train.seed))


def _restore_state(loop: _Loop, payload: dict | None, saved: TrainState | None) -> TrainState:
    """A new run's state, or the saved one with the optimizer and random generators as they were."""
    if payload is None or saved is None:
        return TrainState()
    loop.optimizer.load_state_dict(payload["training_state"]["optimizer"])
    for group in loop.optimizer.param_groups:  # as the paper's --resume: the config's values win
        group.update(lr=loop.config.train.lr, weight_decay=loop.config.train.weight_decay)
    _set_rng_state(loop, payload["training_state"]["rng"])
    return saved


def _rng_state(loop: _Loop) -> dict[str, Any]:
    _, internal, gauss_next = loop.rng.getstate()
    state = {"python": list(internal), "gauss_next": gauss_next, "torch": torch.get_rng_state()}
    if loop.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(loop.device)
    return state


def _set_rng_state(loop: _Loop, state: dict[str, Any]) -> None:
    loop.rng.setstate((3, tuple(state["python"]), state["gauss_next"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and loop.device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], loop.device)


def _save_last(loop: _Loop, state: TrainState) -> None:
    if not loop.world.is_main:
        return
    training_state = {**state.to_dict(), "optimizer": loop.optimizer.state_dict(), "rng": _rng_state(loop),
                      "elapsed": state.elapsed + time.time() - loop.started}
    checkpoint.save(loop.out_dir / "last.pt", loop.model, loop.corpus.vocab, loop.corpus.tokenizer, loop.config,
                    training_state)


def _run_epochs(loop: _Loop, state: TrainState) -> list[dict[str, Any]]:
    """Epoch after epoch until the epoch count, a step or time limit, or a stop request."""
    cfg = loop.config.train
    records = []
    with _StopFlag() as stop:
        while state.epoch <= cfg.epochs:
            stats = _run_epoch(loop, state, stop)
            if stats is None:  # interrupted: last.pt holds the position inside the epoch
                _save_last(loop, state)
                loop.stopped_by = stop.signal or signal.SIGINT  # other ranks learn of it from rank 0
                loop.messages.say(f"interrupted in epoch {state.epoch}; continue with --resume")
                break
            records.append(_end_epoch(loop, state, stats))
            if _limit_reached(loop, state):
                break
    return records


def _limit_reached(loop: _Loop, state: TrainState) -> bool:
    cfg = loop.config.train
    minutes = (state.elapsed + time.time() - loop.started) / 60
    return bool(cfg.max_steps and state.step >= cfg.max_steps) or bool(cfg.max_minutes and minutes >= cfg.max_minutes)


def _run_epoch(loop: _Loop, state: TrainState, stop: _StopFlag) -> dict[str, float] | None:
    """Train from `state.position` (or the epoch's start). Returns statistics, or None if interrupted."""
    data, cfg = loop.corpus.train, loop.config.train
    pos = state.position or EpochPosition()
    if pos.hidden is None:
        hidden = loop.model.init_hidden(data.shape[1])
    else:  # saved for the whole batch; this process takes its columns
        hidden = [(loop.world.split_rows(h.t()).t().to(loop.device), loop.world.split_rows(c.t()).t().to(loop.device))
                  for h, c in pos.hidden]
    start, began = pos.start, time.time()
    bar = progress_bar(data.shape[0] - 1, f"epoch {state.epoch}", "tok", quiet=loop.quiet or not loop.world.is_main,
                       initial=start)
    while start < data.shape[0] - 2:
        if loop.world.any(stop.requested):
            bar.close()
            whole = [(loop.world.gather_columns(h).cpu(), loop.world.gather_columns(c).cpu()) for h, c in hidden]
            state.position = dataclasses.replace(pos, start=start, hidden=whole, seconds=pos.seconds + time.time() - began)
            return None
        seq_len = sample_seq_len(loop.rng, cfg.bptt)
        inputs, targets = get_batch(data, start, seq_len)
        ce, hidden = train_step(loop.trainable, loop.optimizer, inputs, targets, hidden, loop.config, seq_len)
        ce = ce.item()
        if not math.isfinite(ce):
            bar.close()
            last = loop.out_dir / "last.pt"
            kept = (f"{last} keeps the last good state" if last.exists()
                    else "no epoch had finished, so nothing was kept and the run can start again")
            raise TrainingStopped(f"the training loss became {ce} at step {state.step + 1} of epoch {state.epoch}; "
                                  f"{kept} (try a lower lr or clip)")
        state.step += 1
        pos.loss_sum += ce * inputs.numel()
        pos.tokens += inputs.numel()  # this process's share
        start += len(inputs)
        seconds = pos.seconds + time.time() - began
        bar.update(len(inputs))
        bar.set_postfix(loss=f"{ce:.3f}", ppl=f"{math.exp(min(ce, 50)):.1f}", tok_s=f"{pos.tokens * loop.world.size / seconds:.0f}")
        if _limit_reached(loop, state):
            break
    bar.close()
    seconds = pos.seconds + time.time() - began
    mean_loss = loop.world.mean(pos.loss_sum / max(1, pos.tokens))
    return {"train_loss": mean_loss, "tokens_per_s": pos.tokens * loop.world.size / max(seconds, 1e-9),
            "seconds": seconds}


def _end_epoch(loop: _Loop, state: TrainState, stats: dict[str, float]) -> dict[str, Any]:
    """Validate (with ASGD's averages once averaging runs), keep the best model, maybe switch to ASGD."""
    cfg = loop.config.train
    valid = loop.corpus.valid
    with averaged_weights(loop.model, loop.optimizer, state.phase == "asgd"):
        val_loss = evaluate_loss(loop.model, valid, cfg.bptt, precision.product_dtype(cfg.precision)) if valid is not None and loop.world.is_main else 0.0
        val_loss = loop.world.broadcast(val_loss) if valid is not None else stats["train_loss"]
        if val_loss < state.best_loss or valid is None:
            state.best_loss = val_loss
            if loop.world.is_main:
                checkpoint.save(loop.out_dir / "best.pt", loop.model, loop.corpus.vocab, loop.corpus.tokenizer,
                                loop.config)
        if cfg.keep_epochs and loop.world.is_main:
            _keep_snapshot(loop, state.epoch)
    record = {
        "epoch": state.epoch,
        "train_loss": round(stats["train_loss"], 5),
        "valid_ppl": round(_exp(val_loss), 3) if valid is not None else None,
        "lr": loop.optimizer.param_groups[0]["lr"],
        "phase": state.phase,
        "tokens_per_s": round(stats["tokens_per_s"], 1),
        "seconds": round(stats["seconds"], 2),
    }
    if state.phase == "sgd" and valid is not None:
        if should_average(state.val_history, val_loss, cfg.nonmono):
            state.phase = "asgd"
            loop.optimizer = make_optimizer(loop.model, loop.config, "asgd")
            loop.messages.say(f"epoch {state.epoch}: switching to averaged SGD")
        state.val_history.append(val_loss)
    state.epoch += 1
    state.position = None
    if loop.world.is_main:
        rundir.append_metrics(loop.out_dir / "metrics.jsonl", record)
    _save_last(loop, state)
    if loop.world.is_main:  # side outputs, after the state is safe: a failure here never stops the run
        _side_output(loop, "the log line", lambda: loop.messages.say(rundir.format_record(record)))
        _side_output(loop, "curves.svg", lambda: draw.write_curves([loop.out_dir], loop.out_dir / "curves.svg"))
    return record


def _exp(loss: float) -> float:
    """A perplexity, infinite past what a float holds (a diverged run's)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


def _side_output(loop: _Loop, what: str, write: Callable[[], object]) -> None:
    """Write a picture or a log line; if that fails, note it and train on."""
    try:
        write()
    except Exception as e:  # noqa: BLE001 - nothing a side output raises may stop training
        loop.messages.note(f"could not write {what} ({type(e).__name__}: {e}); training goes on")


def _keep_snapshot(loop: _Loop, epoch: int) -> None:
    """Save this epoch's model (as validated: ASGD's averages once averaging runs) as epoch-K.pt,
    dropping the one that falls out of the last `keep_epochs`."""
    checkpoint.save(loop.out_dir / f"epoch-{epoch}.pt", loop.model, loop.corpus.vocab, loop.corpus.tokenizer,
                    loop.config)
    (loop.out_dir / f"epoch-{epoch - loop.config.train.keep_epochs}.pt").unlink(missing_ok=True)


def should_average(history: list[float], val_loss: float, nonmono: int) -> bool:
    """The paper's switch to ASGD: no improvement on the best of more than `nonmono` epochs back."""
    return len(history) > nonmono and val_loss > min(history[: len(history) - nonmono])


def _final_test(loop: _Loop) -> float:
    """Test perplexity of the best model."""
    best = checkpoint.load(loop.out_dir / "best.pt", loop.device)
    ppl = _exp(evaluate_loss(best.model, loop.corpus.test.to(loop.device), loop.config.train.bptt,
                                  precision.product_dtype(loop.config.train.precision)))
    loop.messages.say(f"test ppl {ppl:.2f} (best.pt)")
    return ppl


def resume_config(out_dir: Path) -> dict[str, Any]:
    """The config a run was started with, as a raw dict, for --resume."""
    rundir.check(out_dir, resume=True, force=False)
    return checkpoint.read(out_dir / "last.pt")["config"]


# Models trained on whole sentences (a PCFG, models/pcfg.py): maximum marginal likelihood, sentence batches of one
# length band, Adam, the model kept by held-out likelihood. The run directory, lock, signals, time limits and the
# resume state (TrainState, its position = the next batch of the epoch) are the language model's.

ADAM_BETAS = (0.75, 0.999)  # TN-PCFG's (and compound PCFG's) optimiser


@dataclass
class Sentences:
    tokenizer: Tokenizer
    vocab: Vocab
    train: list[Tensor]  # each sentence's ids
    valid: list[Tensor]
    test: list[Tensor]


@dataclass
class _SentenceLoop:
    config: Config
    data: Sentences
    model: torch.nn.Module
    device: torch.device
    out_dir: Path
    quiet: bool
    messages: Messages
    optimizer: torch.optim.Optimizer
    started: float = field(default_factory=time.time)
    saved_at: float = field(default_factory=time.time)
    stopped_by: int | None = None


def split_sentences(ids: Tensor) -> list[Tensor]:
    """An `<eos>`-separated id stream as one tensor of ids per sentence."""
    ids = ids.long()
    ends = (ids == 1).nonzero().squeeze(1)  # Vocab: id 1 is <eos>
    starts = torch.cat([ends.new_zeros(1), ends[:-1] + 1])
    return [ids[s:e] for s, e in zip(starts.tolist(), ends.tolist())]


def load_sentences(config: Config, vocab: Vocab | None = None) -> Sentences:
    """The corpus files as sentences of ids (through the token cache, as `load_corpus`)."""
    data = config.data
    if not data.train:
        raise InputError("no training file: give --train FILE or set data.train in the config")
    reader = corpus.training_reader(data)
    root, workers = corpus.cache_root(data.cache_dir), data.workers or os.cpu_count() or 1
    backward = config.model.direction == "backward"
    with corpus.read_once([data.train, data.valid, data.test], root) as readable:
        train = corpus.training_entry(readable[data.train], reader, corpus.Limits(data.max_vocab, data.min_freq),
                                      root, workers, backward)
        if vocab is not None and vocab.words != train.vocab.words:
            train = corpus.encoded_entry(readable[data.train], reader, vocab, root, workers, backward)
        vocab = vocab or train.vocab
        other = {path: split_sentences(corpus.encoded_entry(readable[path], reader, vocab, root, workers, backward).ids)
                 for path in (data.valid, data.test) if path}
    return Sentences(tokenizer_of(data), vocab, split_sentences(train.ids), other.get(data.valid, []),
                     other.get(data.test, []))


def length_batches(sentences: list[Tensor], batch_size: int, longest: int, rng: random.Random) -> list[list[int]]:
    """Batches of sentences of 2..`longest` words, each of neighbouring lengths (sorted by length, ties in a
    random order), the batches in a random order."""
    kept = [k for k, s in enumerate(sentences) if 2 <= len(s) <= longest]
    rng.shuffle(kept)
    kept.sort(key=lambda k: len(sentences[k]))
    batches = [kept[i : i + batch_size] for i in range(0, len(kept), batch_size)]
    rng.shuffle(batches)
    return batches


def padded(sentences: list[Tensor], device: torch.device) -> tuple[Tensor, list[int]]:
    lengths = [len(s) for s in sentences]
    rows = torch.zeros(len(sentences), max(lengths), dtype=torch.long)
    for row, s in zip(rows, sentences):
        row[: len(s)] = s
    return rows.to(device), lengths


def epoch_longest(cfg, epoch: int) -> int:
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


def train_sentences(config: Config, out_dir: Path, requested: str, device: torch.device, resume: bool, force: bool,
                    quiet: bool, messages: Messages, world: distributed.World) -> Result:
    """Train a model of whole sentences (`model.log_likelihood`) into `out_dir`, as `train` does a language
    model: best.pt by held-out likelihood, last.pt to resume (also every train.checkpoint_minutes)."""
    payload = checkpoint.read(out_dir / "last.pt") if resume else None
    saved = _resume_state(payload, out_dir / "last.pt") if payload else None
    if payload:
        _check_resumable(payload, config, out_dir / "last.pt")
    data = load_sentences(config, Vocab(payload["vocab"]) if payload else None)
    config, probe = measured_precision(config, requested, len(data.vocab), device, world)
    with rundir.RunDirectory(out_dir, resume, force):
        torch.manual_seed(config.train.seed)
        model = registry.build(len(data.vocab), config.model).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=config.train.lr, betas=ADAM_BETAS)
        loop = _SentenceLoop(config, data, model, device, out_dir, quiet, messages, optimizer)
        state = TrainState(phase="adam")
        if payload and saved:
            model.load_state_dict(payload["state_dict"])
            optimizer.load_state_dict(payload["training_state"]["optimizer"])
            torch.set_rng_state(payload["training_state"]["rng"]["torch"])
            state = saved
        rundir.trim_metrics(out_dir / "metrics.jsonl", state.epoch)
        write_text(out_dir / "config.toml", config_module.to_toml(config))
        messages.say(f"{count_parameters(model):,} parameters, vocabulary {len(data.vocab):,}, "
                     f"{plural(len(data.train), 'training sentence')}, device {device}")
        messages.say(precision.describe(requested, config.train.precision, device, model.BF16_PARTS, model.FP32_PARTS,
                                        probe))
        records = []
        with _StopFlag() as stop:
            while state.epoch <= config.train.epochs:
                stats = _sentence_epoch(loop, state, stop)
                if stats is None:
                    _save_sentence_state(loop, state)
                    loop.stopped_by = stop.signal or signal.SIGINT
                    messages.say(f"interrupted in epoch {state.epoch}; continue with --resume")
                    break
                records.append(_end_sentence_epoch(loop, state, stats))
                if _limit_reached(loop, state):
                    break
        test_ppl = None
        if data.test and state.position is None and (out_dir / "best.pt").exists():
            best = checkpoint.load(out_dir / "best.pt", device)
            nll, count = held_out(best.model, data.test, device, precision.product_dtype(config.train.precision))
            test_ppl = _exp(nll / max(1, count))
            messages.say(f"test ppl {test_ppl:.2f} (best.pt)")
    best_ppl = _exp(state.best_loss) if math.isfinite(state.best_loss) else None
    return Result(out_dir, count_parameters(model), best_ppl, test_ppl, records, True, loop.stopped_by)


def sentence_step(model, optimizer: torch.optim.Optimizer, words: Tensor, lengths: list[int], clip: float,
                  products: torch.dtype | None) -> float:
    """One optimizer step on the batch's mean negative log-likelihood; returns that mean."""
    optimizer.zero_grad(set_to_none=True)
    loss = -model.log_likelihood(words, lengths, products).mean()
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return loss.item()


def _sentence_epoch(loop: _SentenceLoop, state: TrainState, stop: _StopFlag) -> dict[str, float] | None:
    """Train from `state.position` (the next batch of this epoch's order). Returns statistics, or None if
    interrupted."""
    cfg = loop.config.train
    products = precision.product_dtype(cfg.precision)
    batches = length_batches(loop.data.train, cfg.batch_size, epoch_longest(cfg, state.epoch),
                             random.Random(cfg.seed * 100003 + state.epoch))
    pos = state.position or EpochPosition()
    began = time.time()
    bar = progress_bar(len(batches), f"epoch {state.epoch}", "batch", quiet=loop.quiet, initial=pos.start)
    loop.model.train()
    while pos.start < len(batches):
        if stop.requested:
            bar.close()
            state.position = dataclasses.replace(pos, seconds=pos.seconds + time.time() - began)
            return None
        words, lengths = padded([loop.data.train[k] for k in batches[pos.start]], loop.device)
        nll = sentence_step(loop.model, loop.optimizer, words, lengths, cfg.clip, products)
        if not math.isfinite(nll):
            bar.close()
            raise TrainingStopped(f"the training loss became {nll} at step {state.step + 1} of epoch {state.epoch}; "
                                  f"{loop.out_dir / 'last.pt'} keeps the last saved state (try a lower lr or clip)")
        state.step += 1
        pos.start += 1
        pos.loss_sum += nll * len(lengths)
        pos.tokens += sum(lengths) + len(lengths)
        bar.update(1)
        bar.set_postfix(ppl=f"{_exp(pos.loss_sum / max(1, pos.tokens)):.1f}")
        if time.time() - loop.saved_at > cfg.checkpoint_minutes * 60:
            state.position = dataclasses.replace(pos, seconds=pos.seconds + time.time() - began)
            _save_sentence_state(loop, state)
            state.position = None
        if _limit_reached(loop, state):
            break
    bar.close()
    seconds = pos.seconds + time.time() - began
    return {"train_loss": pos.loss_sum / max(1, pos.tokens), "tokens_per_s": pos.tokens / max(seconds, 1e-9),
            "seconds": seconds}


def _end_sentence_epoch(loop: _SentenceLoop, state: TrainState, stats: dict[str, float]) -> dict[str, Any]:
    """Held-out likelihood; best.pt when it is the best yet; the metrics line; last.pt."""
    cfg = loop.config.train
    valid = loop.data.valid
    if valid:
        nll, count = held_out(loop.model, valid, loop.device, precision.product_dtype(cfg.precision))
        val_loss = nll / max(1, count)
    else:
        val_loss = stats["train_loss"]
    if val_loss < state.best_loss:
        state.best_loss = val_loss
        checkpoint.save(loop.out_dir / "best.pt", loop.model, loop.data.vocab, loop.data.tokenizer, loop.config)
    record = {"epoch": state.epoch, "train_loss": round(stats["train_loss"], 5),
              "valid_ppl": round(_exp(val_loss), 3) if valid else None, "lr": loop.optimizer.param_groups[0]["lr"],
              "phase": state.phase, "tokens_per_s": round(stats["tokens_per_s"], 1),
              "seconds": round(stats["seconds"], 2), "longest": epoch_longest(cfg, state.epoch)}
    state.val_history.append(val_loss)
    state.epoch += 1
    state.position = None
    rundir.append_metrics(loop.out_dir / "metrics.jsonl", record)
    _save_sentence_state(loop, state)
    loop.messages.say(rundir.format_record(record))
    return record


def _save_sentence_state(loop: _SentenceLoop, state: TrainState) -> None:
    elapsed = state.elapsed + time.time() - loop.started
    training_state = {**state.to_dict(), "optimizer": loop.optimizer.state_dict(), "rng": {"torch": torch.get_rng_state()},
                      "elapsed": elapsed}
    checkpoint.save(loop.out_dir / "last.pt", loop.model, loop.data.vocab, loop.data.tokenizer, loop.config,
                    training_state)
    loop.saved_at = time.time()
