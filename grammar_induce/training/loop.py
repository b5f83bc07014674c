"""The one training loop every family runs through (a family's recipe: families/recipe.py): `fit` trains a model in
a folder its caller holds (`train`'s run directory, a distillation's round). It owns the resume state in last.pt
(state.py; the recipe's optimizer and the random generators beside it), signals, step and time limits, validation
each epoch, best.pt by the recipe's score, epoch snapshots, metrics.jsonl, the log and its curves; the recipe says
what an optimizer step is and how held-out text is scored."""

from __future__ import annotations

import dataclasses
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import config as config_module
from ..config import Config
from ..errors import UserError
from ..families import checkpoint
from ..families.kind import ModelKind, count_parameters
from ..families.recipe import EpochPosition, Recipe
from ..files import write_text
from ..messages import Messages, progress_bar
from ..runtime import distributed, memory, precision, rundir
from ..text import corpus
from . import randomness
from .run import Run
from .state import TrainState


class TrainingStopped(UserError):
    """Training cannot go on (a NaN loss); the last good checkpoint is kept."""


@dataclass
class Result:
    out_dir: Path
    parameters: int
    best: dict[str, Any]  # the best held-out figure as the recipe's score records it: {"valid_ppl": 93.4}, ...
    test: dict[str, Any]  # best.pt on the test text, as the recipe's score records it ({}: no test text, or stopped)
    epochs: list[dict[str, Any]]
    main_process: bool = True  # false on the other ranks of a distributed run
    stopped_by: int | None = None  # the signal that interrupted training, if one did
    limited_by: str | None = None  # the limit that stopped it ("max_steps", "max_minutes"), if one did

    @property
    def best_valid_ppl(self) -> float | None:
        """The best held-out perplexity (None: the recipe's score is not a perplexity, or there was no held-out
        text)."""
        return self.best.get("valid_ppl")

    @property
    def test_ppl(self) -> float | None:
        """best.pt's test perplexity (None: the recipe's score is not a perplexity, or there was no test text)."""
        return self.test.get("test_ppl")


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


SideOutput = tuple[str, Callable[[Path], object]]  # what it writes (for a note), and how, given the run folder


@dataclass
class _Loop:
    """The parts of a run: fixed ones (config, device, world, run directory, logging) and the recipe."""

    config: Config
    recipe: Recipe
    model: ModelKind
    device: torch.device
    world: distributed.World
    out_dir: Path
    quiet: bool
    messages: Messages
    after_epoch: Sequence[SideOutput] = ()
    started: float = field(default_factory=time.time)
    saved_at: float = field(default_factory=time.time)
    stopped_by: int | None = None  # the signal that interrupted the run
    limited_by: str | None = None  # the limit that stopped it


MakeRecipe = Callable[[Config, ModelKind, "str | None"], Recipe]  # (config, model, saved phase) -> the recipe


def fit(run: Run, make_recipe: MakeRecipe, vocab_size: int, *, quiet: bool, messages: Messages,
        after_epoch: Sequence[SideOutput] = ()) -> Result:
    """The loop itself, for a started run (training/run.py) in a folder the caller holds (`train`'s run directory, a
    distillation's round): a model of the family built under the config's seed, with the weights the run starts
    from (its last.pt's, or a trained model's), its recipe, epochs until done or stopped. `after_epoch`: what the
    caller writes into the run folder after each epoch (its learning curves, say), where a failure never stops it."""
    config, device, world = run.config, run.device, run.world
    if device.type == "cpu":
        memory.keep_freed_memory()
    torch.manual_seed(config.run.seed)
    model = run.family.build(vocab_size, config.model).to(device)
    if (weights := run.initial_weights) is not None:  # a property that converts: read once
        model.load_state_dict(weights if run.init is None else model.adopt(weights, run.init["config"]["model"]))
    recipe = make_recipe(config, model, run.state.phase if run.state else None)
    recipe.rng = random.Random(config.run.seed)
    if run.last is not None:
        recipe.load_state_dict(run.last["training_state"])
        randomness.restore(randomness.of_training_state(run.last["training_state"]), recipe.rng, device)
    state = run.state or TrainState(phase=recipe.PHASE)
    state.read_best_as(recipe.score.higher_is_better)
    loop = _Loop(config, recipe, model, device, world, run.out_dir, quiet, messages, after_epoch)
    if world.is_main:
        _announce(loop, state)
        messages.say(run.precision_line)
    epochs = _run_epochs(loop, state)
    interrupted = state.position is not None
    test = _final_test(loop) if world.is_main and recipe.has("test") and not interrupted else {}
    recipe.finish()
    best = recipe.score.record(state.best if recipe.has("valid") else None)
    return Result(run.out_dir, count_parameters(model), best, test, epochs, world.is_main, loop.stopped_by,
                  loop.limited_by)


def _announce(loop: _Loop, state: TrainState) -> None:
    """Write config.toml and say what is about to train."""
    rundir.trim_metrics(loop.out_dir / "metrics.jsonl", state.epoch)
    write_text(loop.out_dir / "config.toml", config_module.to_toml(loop.config))
    data = loop.config.data
    for path in dict.fromkeys(p for p in (data.train, data.valid, data.test) if p and corpus.is_stream(p)):
        loop.messages.note(f"{path} is not a file but a stream, read once; --resume will need the text as a file")
    for line in loop.recipe.text.notes:
        loop.messages.say(line)
    loop.messages.say(loop.recipe.describe())


def _save_last(loop: _Loop, state: TrainState) -> None:
    if not loop.world.is_main:
        return
    text = loop.recipe.text
    training_state = {**state.to_dict(), **loop.recipe.state_dict(),
                      "random": randomness.saved(loop.recipe.rng, loop.device),
                      "elapsed": state.elapsed + time.time() - loop.started}
    checkpoint.save(loop.out_dir / "last.pt", loop.model, text.vocab, text.tokenizer, loop.config, training_state)
    loop.saved_at = time.time()


def _run_epochs(loop: _Loop, state: TrainState) -> list[dict[str, Any]]:
    """Epoch after epoch until the epoch count, a step or time limit, or a stop request. A limit reached inside an
    epoch stops it there, as Ctrl-C does (last.pt holds the position, and --resume finishes the epoch), after a
    validation of the weights so far, recorded as a partial epoch: it moves no epoch count and no optimizer phase."""
    cfg = loop.config.run
    records: list[dict[str, Any]] = []
    if _nothing_to_do(loop, state):
        return records
    with _StopFlag() as stop:
        while state.epoch <= cfg.epochs:
            stats = _run_epoch(loop, state, stop)
            if stats is None:  # interrupted: last.pt holds the position inside the epoch
                _save_last(loop, state)
                loop.stopped_by = stop.signal or signal.SIGINT  # other ranks learn of it from rank 0
                loop.messages.say(f"interrupted in epoch {state.epoch}; continue with --resume")
                break
            if state.position is not None:  # a limit, inside the epoch
                records.append(_end_partial_epoch(loop, state, stats))
                break
            records.append(_end_epoch(loop, state, stats))
            if limit := _limit_reached(loop, state):
                loop.limited_by = limit
                loop.messages.say(f"stopped by {_limit_named(loop, limit)} after epoch {state.epoch - 1}"
                                  + ("; --resume goes on" if state.epoch <= cfg.epochs else ""))
                break
    return records


def _nothing_to_do(loop: _Loop, state: TrainState) -> bool:
    """Whether a resumed run has nothing left to train (its epochs done, or its steps spent), said in a line."""
    cfg = loop.config.run
    if state.epoch > cfg.epochs:
        loop.messages.say(f"nothing to train: the run has finished its {cfg.epochs} epochs (--epochs N to go on)")
        return True
    if cfg.max_steps and state.step >= cfg.max_steps:
        loop.limited_by = "max_steps"
        loop.messages.say(f"nothing to train: the run has taken {state.step} steps, its max_steps ({cfg.max_steps}); "
                          "raise --max-steps, or --max-steps 0 for no limit")
        return True
    return False


def _limit_reached(loop: _Loop, state: TrainState) -> str | None:
    """The limit this run has reached, if any: max_steps counts the run's steps in all, max_minutes this process's
    time (a resumed run gets the budget again)."""
    cfg = loop.config.run
    if cfg.max_steps and state.step >= cfg.max_steps:
        return "max_steps"
    if cfg.max_minutes and (time.time() - loop.started) / 60 >= cfg.max_minutes:
        return "max_minutes"
    return None


def _limit_named(loop: _Loop, limit: str) -> str:
    cfg = loop.config.run
    return (f"the step limit (max_steps {cfg.max_steps})" if limit == "max_steps"
            else f"the time budget (max_minutes {cfg.max_minutes:g} of this run)")


def _run_epoch(loop: _Loop, state: TrainState, stop: _StopFlag) -> dict[str, float] | None:
    """Train from `state.position` (or the epoch's start). Returns statistics, or None if interrupted; a limit
    reached before the epoch's end leaves `state.position` set (where it stopped). A single process also saves
    last.pt every run.checkpoint_minutes, so a killed run loses little."""
    recipe, world, cfg = loop.recipe, loop.world, loop.config.run
    pos = state.position or EpochPosition()
    state.position = None
    length = recipe.begin_epoch(state.epoch, pos)
    began = time.time()
    bar = progress_bar(length, f"epoch {state.epoch}", recipe.UNIT, quiet=loop.quiet or not world.is_main,
                       initial=pos.start)
    steps = recipe.steps(pos)
    while True:
        if world.any(stop.requested):
            bar.close()
            state.position = dataclasses.replace(recipe.pause(pos), seconds=pos.seconds + time.time() - began)
            return None
        step = next(steps, None)
        if step is None:
            break
        loss = step.loss_sum / max(1, step.units)
        if world.any(recipe.score.diverged(loss)):  # on every process at once, as a stop request
            bar.close()
            _stop_on_bad_loss(loop, state, f"the training loss became {loss:.4g}",
                              f"at step {state.step + 1} of epoch {state.epoch}")
        state.step += 1
        pos.loss_sum += step.loss_sum
        pos.units += step.units  # this process's share
        pos.tokens += step.tokens
        pos.start += step.advance
        seconds = pos.seconds + time.time() - began
        bar.update(step.advance)
        bar.set_postfix(**step.shown, tok_s=f"{pos.tokens * world.size / seconds:.0f}")
        if world.size == 1 and time.time() - loop.saved_at > cfg.checkpoint_minutes * 60:
            state.position = dataclasses.replace(recipe.pause(pos), seconds=seconds)
            _save_last(loop, state)
            state.position = None
        if world.any(bool(_limit_reached(loop, state))):  # every process stops at the same step
            loop.limited_by = _limit_reached(loop, state) or "max_minutes"
            if pos.start < length:  # inside the epoch: keep its place
                state.position = dataclasses.replace(recipe.pause(pos), seconds=pos.seconds + time.time() - began)
            break
    bar.close()
    seconds = pos.seconds + time.time() - began
    mean_loss = world.mean(pos.loss_sum / max(1, pos.units))
    return {"train_loss": mean_loss, "tokens_per_s": pos.tokens * world.size / max(seconds, 1e-9), "seconds": seconds,
            "fraction": min(pos.start / max(length, 1), 1.0)}


def _stop_on_bad_loss(loop: _Loop, state: TrainState, what: str, when: str) -> None:
    """Stop a run that has diverged (its recipe's score says so), saying what is kept and which lr did it."""
    last = loop.out_dir / "last.pt"
    kept = (f"{last} keeps the last good state" if last.exists()
            else "nothing had been saved yet, so the run can start again")
    raise TrainingStopped(f"{what} {when}; {kept} (lr {loop.recipe.lr:g} with {state.phase}: try a lower lr or "
                          f"clip)")


def _end_epoch(loop: _Loop, state: TrainState, stats: dict[str, float]) -> dict[str, Any]:
    """Validate (with the weights the recipe validates: ASGD's averages once averaging runs), keep the best
    model, let the recipe change phase, write the metrics line and last.pt."""
    recipe, world, cfg = loop.recipe, loop.world, loop.config.run
    with recipe.validation_weights(state.phase):
        record, val_loss = _validate_and_record(loop, state, stats, f"after epoch {state.epoch}")
        if cfg.keep_epochs and world.is_main:
            _keep_snapshot(loop, state.epoch)
    if val_loss is not None:
        state.phase, change = recipe.after_validation(state.phase, state.val_history, val_loss)
        if change:
            loop.messages.say(f"epoch {state.epoch}: {change}")
    state.epoch += 1
    state.position = None
    if world.is_main:
        rundir.append_metrics(loop.out_dir / "metrics.jsonl", record)
    _save_last(loop, state)
    if world.is_main:  # side outputs, after the state is safe: a failure here never stops the run
        _side_output(loop, "the log line", lambda: loop.messages.say(recipe.score.line(record)))
        for what, write in loop.after_epoch:
            _side_output(loop, what, lambda write=write: write(loop.out_dir))
    return record


def _end_partial_epoch(loop: _Loop, state: TrainState, stats: dict[str, float]) -> dict[str, Any]:
    """A limit stopped the run inside an epoch: validate the weights so far (best.pt if they are the best yet), write
    a metrics line marked partial, and last.pt with the position, so that --resume finishes the epoch. The epoch
    count, the validation history and the optimizer phase stay as they were: a part of an epoch is not an epoch."""
    recipe, world = loop.recipe, loop.world
    with recipe.validation_weights(state.phase):
        found, val_loss = _validate_and_record(loop, state, stats, f"in epoch {state.epoch}")
    record = {"epoch": state.epoch, "partial": round(stats["fraction"], 4), "stopped_by": loop.limited_by, **found}
    if world.is_main:
        rundir.append_metrics(loop.out_dir / "metrics.jsonl", record)
    _save_last(loop, state)
    loop.messages.say(f"stopped by {_limit_named(loop, loop.limited_by or 'max_minutes')} in epoch {state.epoch}, "
                      f"{100 * stats['fraction']:.0f}% of the way through"
                      + (f" ({_figure(recipe.score.record(val_loss))} so far)" if val_loss is not None else "")
                      + "; last.pt keeps its place and --resume finishes it")
    return record


def _validate_and_record(loop: _Loop, state: TrainState, stats: dict[str, float], when: str
                         ) -> tuple[dict[str, Any], float | None]:
    """An epoch's end, whole or partial, alike (under the recipe's validation weights): validate (None where the
    recipe has no held-out text), stop on a diverged figure (every process has rank 0's), keep best.pt where the
    weights are the best yet (state.best on every rank, the file written by the main one), and the metrics record
    with the recipe's own fields."""
    recipe = loop.recipe
    val_loss = _validation_loss(loop) if recipe.has("valid") else None
    if val_loss is not None and recipe.score.diverged(val_loss):
        _stop_on_bad_loss(loop, state, f"the validation loss became {val_loss:.4g}", when)
    if val_loss is None or recipe.score.keeps(val_loss, state.best):
        state.best = stats["train_loss"] if val_loss is None else val_loss
        if loop.world.is_main:
            _save_model(loop, loop.out_dir / "best.pt")
    record = {"epoch": state.epoch, "train_loss": round(stats["train_loss"], 5), **recipe.score.record(val_loss),
              "lr": recipe.lr, "phase": state.phase, "tokens_per_s": round(stats["tokens_per_s"], 1),
              "seconds": round(stats["seconds"], 2), **recipe.epoch_record(state.epoch, stats)}
    return record, val_loss


def _figure(record: dict[str, Any]) -> str:
    """A score's record as the log says it: "valid ppl 93.40", "valid agreement f1 61.20"."""
    return ", ".join(f"{name.replace('_', ' ')} {value:.2f}" for name, value in record.items() if value is not None)


def _validation_loss(loop: _Loop) -> float:
    """The held-out text's loss under the model now, measured by rank 0 and given to every process."""
    products = precision.product_dtype(loop.config.run.precision)
    return loop.world.broadcast(loop.recipe.held_out(loop.model, "valid", products) if loop.world.is_main else 0.0)


def _save_model(loop: _Loop, path: Path) -> None:
    text = loop.recipe.text
    checkpoint.save(path, loop.model, text.vocab, text.tokenizer, loop.config)


def _side_output(loop: _Loop, what: str, write: Callable[[], object]) -> None:
    """Write a picture or a log line; if that fails, note it and train on."""
    try:
        write()
    except Exception as e:  # noqa: BLE001 - nothing a side output raises may stop training
        loop.messages.note(f"could not write {what} ({type(e).__name__}: {e}); training goes on")


def _keep_snapshot(loop: _Loop, epoch: int) -> None:
    """Save this epoch's model (as validated: ASGD's averages once averaging runs) as epoch-K.pt,
    dropping the one that falls out of the last `keep_epochs`."""
    _save_model(loop, loop.out_dir / f"epoch-{epoch}.pt")
    (loop.out_dir / f"epoch-{epoch - loop.config.run.keep_epochs}.pt").unlink(missing_ok=True)


def _final_test(loop: _Loop) -> dict[str, Any]:
    """best.pt's figure on the test text, as the recipe's score records it (a perplexity: {"test_ppl": 110.9}), and
    its log line ("test ppl 110.90 (best.pt)")."""
    best = checkpoint.load(loop.out_dir / "best.pt", loop.device)
    loss = loop.recipe.held_out(best.model, "test", precision.product_dtype(loop.config.run.precision))
    record = loop.recipe.score.test(loss)
    loop.messages.say(", ".join(f"{key.replace('_', ' ')} {value:.2f}" for key, value in record.items()) + " (best.pt)")
    return record
