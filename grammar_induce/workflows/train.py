"""`train`: a config's family trained on its text files in a run directory (its lock, what a resume may change,
`auto` precision measured on the recipe's probe), through the one loop (families/training.py) with the family's
recipe (`ModelKind.TRAINER`); a trained model's perplexity on a file, as its recipe validates.
"""

from __future__ import annotations

import dataclasses
import gc
import tomllib
from pathlib import Path
from typing import Any

import torch

from .. import config as config_module
from ..config import Config, ConfigError
from ..errors import InputError, UserError
from ..families import checkpoint, registry
from ..families.base import ModelKind, Trainer, exp_loss
from ..families.training import Result, TrainState, fit, resume_state
from ..files import refuse_overwriting
from ..messages import Messages
from ..runtime import distributed, memory, precision, rundir
from ..text import corpus
from ..text.tokenizer import Vocab


def recipe_of(kind: type[ModelKind]) -> type[Trainer]:
    """The recipe `train` fits a kind with; a kind made otherwise (a student: by distill) is a ConfigError."""
    if kind.TRAINER is None:
        trainable = ", ".join(name for name, cls in registry.KINDS.items() if cls.TRAINER is not None)
        raise ConfigError(f"model.kind {kind.NAME!r}: train makes {trainable}; {kind.DESCRIPTION} is made otherwise "
                          "(a student: by distill)")
    return kind.TRAINER


def perplexity(loaded: checkpoint.LoadedModel, path: str, part: str = "valid") -> float:
    """A trained model's perplexity on a text file read as its training read text, measured as its recipe measures
    its held-out `part`, valid or test (the paper's for a language model: the file as one stream in rows, bptt-long
    windows, the state carried; a model of whole sentences: per word and sentence end)."""
    data = loaded.config.data
    entry = corpus.encoded_entry(path, corpus.training_reader(data), loaded.vocab, corpus.cache_root(data.cache_dir), 1,
                                 loaded.config.model.reading_order == "backward")
    return exp_loss(recipe_of(type(loaded.model)).held_out_loss(loaded.model, entry.ids, loaded.config, part))


def train(config: Config, out_dir: Path, *, resume: bool = False, force: bool = False, quiet: bool = False,
          messages: Messages | None = None) -> Result:
    """Train a model of the config's family into `out_dir` (config.toml, metrics.jsonl, best.pt, last.pt).

    Every input is checked before the run directory is touched; see `rundir` for its lock. `messages`:
    where the log lines and notes go (by default nowhere; the notes are kept).
    """
    messages = messages or Messages()
    memory.ask_for_huge_pages()  # before any tensor (faulting a batch in 4 KiB pages costs about 5% of a CPU step)
    kind = registry.kind_of(config.model.kind)  # the family, looked up once
    recipe = recipe_of(kind)
    kind.check_config(config.model)  # before the run directory is touched
    world = distributed.World.from_env()
    if world.size > 1 and not recipe.PARALLEL:
        raise UserError(f"{config.model.kind}: training on whole sentences runs in one process (no torchrun yet)")
    device = world.device_for(distributed.resolve_device(config.train.device))
    requested = config.train.precision
    config = dataclasses.replace(config, train=dataclasses.replace(config.train,
                                                                   precision=precision.resolve(requested, device)))
    rundir.check(out_dir, resume, force)
    refuse_overwriting({f"the run's {path.name}": path for path in rundir.written_files(out_dir)},
                       [config.data.train, config.data.valid, config.data.test])
    payload = checkpoint.read(out_dir / "last.pt") if resume else None
    saved = resume_state(payload, out_dir / "last.pt") if payload else None
    if payload:
        _check_its_own(payload, out_dir)
        _check_resumable(payload, config, out_dir / "last.pt")
        _note_changed_text(payload, config, saved, messages)
    text = recipe.read_text(config, world, Vocab(payload["vocab"]) if payload else None)
    kept = run_precision(payload, requested, device) if payload else None
    if kept:
        config, probe = dataclasses.replace(config, train=dataclasses.replace(config.train, precision=kept)), None
    else:
        config, probe = measured_precision(config, recipe, requested, len(text.vocab), device, world)
    said = precision.describe(requested, config.train.precision, device, kind.BF16_PARTS, kind.FP32_PARTS, probe,
                              kept=bool(kept))
    with rundir.RunDirectory(out_dir, resume, force, main=world.is_main):
        world.barrier()
        result = fit(config, out_dir, lambda cfg, model, phase: recipe(cfg, model, text, device, world, phase),
                     len(text.vocab), (payload, saved) if payload and saved else None, device=device, world=world,
                     quiet=quiet, messages=messages, precision_line=said)
        gc.collect()  # now: a DDP wrapper can sit in reference cycles, and freed at exit it can abort the process
        world.close()
    return result


def run_precision(payload: dict[str, Any], requested: str, device: torch.device) -> str | None:
    """The precision a resumed run keeps under `auto`: the one its last.pt was trained in, where this device can
    run it (None: measure again). Measured anew it could come out otherwise where the two are near in speed, and
    the run would not go on as it would have without the stop."""
    saved = payload["config"].get("train", {}).get("precision")
    if requested != "auto" or saved not in ("fp32", "bf16"):
        return None
    return saved if saved == "fp32" or precision.bf16_hardware(device) is not None else None


def measured_precision(config: Config, recipe: type[Trainer], requested: str, vocab_size: int, device: torch.device,
                       world: distributed.World) -> tuple[Config, precision.Probe | None]:
    """The config with `auto` measured on a probe of one training step (forward and backward of a new model of
    the config on random ids of the training batch's shape, as its recipe says), where bfloat16 hardware leaves a
    choice (a single process: under torchrun every process keeps bf16, so that all run alike); and the probe."""
    if requested != "auto" or config.train.precision != "bf16" or world.size > 1:
        return config, None
    model = registry.build(vocab_size, config.model).to(device)
    cfg = config.train
    shapes = {k: v for k, v in config.to_dict()["train"].items() if k != "precision"}  # a batch's shape among them
    key = (config.model.kind, tuple(config.to_dict()["model"].values()), vocab_size, tuple(shapes.values()))
    probe = precision.Probe(key, recipe.probe(model, config, vocab_size))
    chosen = precision.resolve(requested, device, probe)
    return dataclasses.replace(config, train=dataclasses.replace(cfg, precision=chosen)), probe


def _check_resumable(payload: dict[str, Any], config: Config, source: Path) -> None:
    """Refuse a resume that would change the model, its text or its vocabulary (see config.RESUMABLE)."""
    saved = config_module.from_dict(payload["config"], str(source), saved=True)
    changes = config_module.resume_changes(saved, config)
    if changes:
        key, was, now = changes[0]
        raise InputError(f"{source}: --resume cannot change {key} (the run has {was!r}, now {now!r}); "
                         f"only {', '.join(sorted(config_module.RESUMABLE))} may change")


def _note_changed_text(payload: dict[str, Any], config: Config, saved: TrainState | None, messages: Messages) -> None:
    """Say what a resume inside an epoch does with another training text: it goes on at the same place in the new
    text's batches (the rest of the old text's epoch is not trained)."""
    was = payload["config"].get("data", {}).get("train")
    if saved is not None and saved.position is not None and was != config.data.train:
        messages.note(f"the training text changed inside epoch {saved.epoch} (was {was}, now {config.data.train}): "
                      f"the epoch goes on from the same place (after {saved.position.start:,} token rows or batches) "
                      "in the new text, and the rest of the old text's epoch is not trained")


def resume_config(out_dir: Path) -> dict[str, Any]:
    """The config a run was started with, as a raw dict, for --resume (`train` refuses a last.pt not the run's own)."""
    rundir.check(out_dir, resume=True, force=False)
    return checkpoint.read(out_dir / "last.pt")["config"]


def _check_its_own(payload: dict[str, Any], out_dir: Path) -> None:
    """Refuse a last.pt that is not the run folder's own: a model of another kind than its config.toml says (a file
    copied in from another run), which --resume would train there, rewriting the folder's config and metrics."""
    try:
        with open(out_dir / "config.toml", "rb") as f:
            kind = tomllib.load(f).get("model", {}).get("kind", "onlstm")
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return  # no config of the folder's own to hold it against
    theirs = payload.get("config", {}).get("model", {}).get("kind", "onlstm")
    if theirs != kind:
        raise InputError(f"{out_dir / 'last.pt'}: holds a {theirs} model, but the run in {out_dir} is a {kind} run "
                         f"(config.toml): --resume goes on only from the run's own last.pt (was it copied here?)")
