"""`train`: a config's family trained on its text files in a run directory (its lock, what a resume may change,
`auto` precision measured on the recipe's probe), through the one loop (training/loop.py) with the family's
recipe (`Family.recipe`), a focused grammar with its teachers' votes (families/focus.py); a trained model's
perplexity on a file, as its recipe validates.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .. import config as config_module
from ..config import Config, ConfigError
from ..errors import InputError, UserError
from ..families import checkpoint, focus, registry
from ..families.family import Family
from ..families.focus import TreeMaker
from ..families.recipe import Recipe, exp_loss
from ..files import read_lines, refuse_overwriting, write_text
from ..messages import Messages
from ..runtime import distributed, memory, precision, rundir
from ..text import corpus
from ..text.tokenizer import Vocab
from ..training.loop import Result, fit
from ..training.state import TrainState, resume_state


def recipe_of(family: Family) -> type[Recipe]:
    """The recipe `train` fits a family with; a family made otherwise (a student: by distill) is a ConfigError."""
    if family.recipe is None:
        raise ConfigError(f"model.kind {family.name!r}: train makes {', '.join(registry.trained())}; "
                          f"{family.description} is made otherwise (a student: by distill)")
    return family.recipe


def perplexity(loaded: checkpoint.LoadedModel, path: str, part: str = "valid") -> float:
    """A trained model's perplexity on a text file read as its training read text, measured as its recipe measures
    its held-out `part`, valid or test (the paper's for a language model: the file as one stream in rows, bptt-long
    windows, the state carried; a model of whole sentences: per word and sentence end)."""
    data = loaded.config.data
    entry = corpus.encoded_entry(path, corpus.training_reader(data), loaded.vocab, corpus.cache_root(data.cache_dir), 1,
                                 loaded.config.model.reading_order == "backward")
    return exp_loss(recipe_of(loaded.family).held_out_loss(loaded.model, entry.ids, loaded.config, part))


TEACHERS = "teachers.json"  # in a focused run's folder: what each teacher was when it started (focus.identities)


def train(config: Config, out_dir: Path, *, resume: bool = False, force: bool = False, quiet: bool = False,
          messages: Messages | None = None, teachers: Mapping[str, TreeMaker] | None = None) -> Result:
    """Train a model of the config's family into `out_dir` (config.toml, metrics.jsonl, best.pt, last.pt).

    Every input is checked before the run directory is touched; see `rundir` for its lock. `messages`:
    where the log lines and notes go (by default nowhere; the notes are kept). `teachers`: the focusing teachers of
    `train.focus` that are models, by the name the config gives them (the others are files of trees).
    """
    messages = messages or Messages()
    memory.ask_for_huge_pages()  # before any tensor (faulting a batch in 4 KiB pages costs about 5% of a CPU step)
    family = registry.family_of(config.model.kind)  # looked up once
    recipe = recipe_of(family)
    family.model.check_config(config.model)  # before the run directory is touched
    world = distributed.World.from_env()
    if world.size > 1 and not recipe.PARALLEL:
        raise UserError(f"{config.model.kind}: training on whole sentences runs in one process (no torchrun yet)")
    device = world.device_for(distributed.resolve_device(config.run.device))
    requested = config.run.precision
    config = _with_precision(config, precision.resolve(requested, device))  # bf16 without the hardware: refused now
    rundir.check(out_dir, resume, force)
    refuse_overwriting({f"the run's {path.name}": path for path in rundir.written_files(out_dir)},
                       [config.data.train, config.data.valid, config.data.test])
    payload = checkpoint.read(out_dir / "last.pt") if resume else None
    saved = resume_state(payload, out_dir / "last.pt") if payload else None
    was = _resumed_config(payload, out_dir, config, saved, messages) if payload else None
    start = _starting_model(config) if not payload else None  # a resumed run has its own weights
    vocab_from = payload or start
    text = recipe.read_text(config, world, Vocab(vocab_from["vocab"]) if vocab_from else None)
    if start is not None:
        messages.note(init_coverage(config, text.vocab))
    pinned = focus.identities(config, teachers or {}) if getattr(config.train, "focus", ()) else {}
    if payload and (out_dir / TEACHERS).exists():  # before the votes: a changed teacher's trees are never made
        focus.check_unchanged(json.loads((out_dir / TEACHERS).read_text()), pinned, out_dir / TEACHERS)
    if pinned:  # a family that trains on sentences, focused
        text = dataclasses.replace(text, focus=focus.teachers_votes(config, len(text.train), teachers or {}, messages))
    config, said = run_precision(config, family, requested, len(text.vocab), device, world, was)
    with rundir.RunDirectory(out_dir, resume, force, main=world.is_main):
        if pinned and world.is_main and not (payload and (out_dir / TEACHERS).exists()):
            write_text(out_dir / TEACHERS, json.dumps(pinned, indent=1) + "\n")
        world.barrier()
        result = fit(config, out_dir, family, lambda cfg, model, phase: recipe(cfg, model, text, device, world, phase),
                     len(text.vocab), (payload, saved) if payload and saved else None, device=device, world=world,
                     quiet=quiet, messages=messages, precision_line=said,
                     initial=start["state_dict"] if start else None)
        gc.collect()  # now: a DDP wrapper can sit in reference cycles, and freed at exit it can abort the process
        world.close()
    return result


def _starting_model(config: Config) -> dict[str, Any] | None:
    """The checkpoint a new run starts from (`train.init`: a trained model of the run's kind and sizes, whose
    vocabulary the text is read with), checked; None without one."""
    if not getattr(config.train, "init", ""):
        return None
    path = Path(config.train.init)
    payload = checkpoint.read(path)
    theirs, ours = payload["config"].get("model", {}), config.to_dict()["model"]
    differ = [key for key in ours if theirs.get(key, ours[key]) != ours[key]]
    if differ:
        key = differ[0]
        raise InputError(f"{path}: train.init must be a model of the run's kind and sizes: it has model.{key} = "
                         f"{theirs[key]!r}, the run {ours[key]!r}")
    return payload


def init_coverage(config: Config, vocab: Vocab) -> str:
    """How much of the training text the vocabulary of `train.init` (which the run adopts) covers: a vocabulary of
    another text leaves most words `<unk>`, and the run learns little."""
    reader, known, total = corpus.training_reader(config.data), 0, 0
    for _, line in read_lines(config.data.train):
        words = reader(line)
        total += len(words)
        known += sum(word in vocab.index for word in words)
    share = known / total if total else 0.0
    text = (f"train.init {config.train.init}: its vocabulary ({len(vocab):,} words) covers {100 * share:.1f}% of the "
            f"training text's {total:,} words (the run reads the text with it)")
    return text + ("; the rest are <unk>: a model of another text's words learns little here" if share < 0.9 else "")


def run_precision(config: Config, family: Family, requested: str, vocab_size: int, device: torch.device,
                  world: distributed.World, was: Config | None) -> tuple[Config, str]:
    """The config in the precision the run trains in, and the log's line on it. Under `auto`: a resumed run's own
    (`was`), where this device can run it (measured anew it could come out otherwise where the two are near in
    speed, and the run would not go on as it would have without the stop); else measured on a probe of one training
    step (`measured_precision`)."""
    kept = was.run.precision if was is not None and requested == "auto" else None
    if kept == "bf16" and precision.bf16_hardware(device) is None:
        kept = None
    probe = None if kept else measured_precision(config, family, requested, vocab_size, device, world)
    chosen = kept or (precision.resolve(requested, device, probe) if probe else config.run.precision)
    said = precision.describe(requested, chosen, device, family.bf16_parts, family.fp32_parts, probe, kept=bool(kept))
    return _with_precision(config, chosen), said


def measured_precision(config: Config, family: Family, requested: str, vocab_size: int, device: torch.device,
                       world: distributed.World) -> precision.Probe | None:
    """A probe of one training step (forward and backward of a new model of the config on random ids of the training
    batch's shape, as its recipe says) where `auto` has a choice: bfloat16 hardware, one process (under torchrun
    every process keeps bf16, so that all run alike); else None."""
    if requested != "auto" or config.run.precision != "bf16" or world.size > 1:
        return None
    model = family.build(vocab_size, config.model).to(device)
    key = (config.model.kind, tuple(config.to_dict()["model"].values()), vocab_size,
           tuple(config.to_dict()["train"].values()))  # a batch's shape among them
    return precision.Probe(key, recipe_of(family).probe(model, config, vocab_size))


def _with_precision(config: Config, chosen: str) -> Config:
    return dataclasses.replace(config, run=dataclasses.replace(config.run, precision=chosen))


def _resumed_config(payload: dict[str, Any], out_dir: Path, config: Config, saved: TrainState | None,
                    messages: Messages) -> Config:
    """The config a resumed run was started with, its last.pt checked: the folder's own, and `config` changing only
    what --resume may change."""
    _check_its_own(payload, out_dir)
    was = registry.CONFIGS.from_dict(payload["config"], str(out_dir / "last.pt"), saved=True)
    _check_resumable(was, config, out_dir / "last.pt")
    _note_changed_text(was, config, saved, messages)
    return was


def _check_resumable(was: Config, config: Config, source: Path) -> None:
    """Refuse a resume that would change the model, its text or its vocabulary (see config.resumable); `was`: the
    config the run was started with."""
    changes = config_module.resume_changes(was, config)
    if changes:
        key, old, now = changes[0]
        raise InputError(f"{source}: --resume cannot change {key} (the run has {old!r}, now {now!r}); "
                         f"only {', '.join(sorted(config_module.resumable(was)))} may change")


def _note_changed_text(was: Config, config: Config, saved: TrainState | None, messages: Messages) -> None:
    """Say what a resume inside an epoch does with another training text (`was`: the config the run was started
    with): it goes on at the same place in the new text's batches (the rest of the old text's epoch is not
    trained)."""
    old = was.data.train
    if saved is not None and saved.position is not None and old != config.data.train:
        messages.note(f"the training text changed inside epoch {saved.epoch} (was {old}, now {config.data.train}): "
                      f"the epoch goes on from the same place (after {saved.position.start:,} token rows or batches) "
                      "in the new text, and the rest of the old text's epoch is not trained")


def _described(kind: str) -> str:
    """A model kind as messages name it (`an ON-LSTM language model (onlstm)`), or as written if unknown."""
    try:
        return f"{registry.family_of(kind).description} ({kind})"
    except ConfigError:
        return f"a model of kind {kind!r}"


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
        raise InputError(f"{out_dir / 'last.pt'}: holds {_described(theirs)}, but the run in {out_dir} trains "
                         f"{_described(kind)} (config.toml): --resume goes on only from the run's own last.pt (was it "
                         "copied here?)")
