"""How a run starts, in one place (nanoGPT's `init_from`): from scratch, from its own last.pt (`--resume`: read once,
checked against what a resume may change) or from a trained model (`train.init`); and the precision it trains in,
decided once, after its text is read (refused where the hardware lacks it, probed under `auto`, described for the
log). `train` starts its runs here, and a distillation's rounds (`student_run`); `fit` (loop.py) trains a started run.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import config as config_module
from ..config import Config, ConfigError
from ..errors import InputError, UserError
from ..families import checkpoint, pretrained, registry
from ..families.family import Family
from ..families.recipe import Recipe
from ..files import refuse_overwriting
from ..messages import Messages
from ..runtime import distributed, precision, rundir
from ..text.tokenizer import Vocab
from .state import TrainState, resume_state


@dataclass(frozen=True)
class Run:
    """A run about to train: its config (the precision resolved), folder, family, device and processes, and where it
    starts: its own `last` checkpoint and training `state` (a resumed run, with the config it `was` started with), or
    a trained model's checkpoint (`init`), or neither (from scratch)."""

    config: Config
    out_dir: Path
    family: Family
    device: torch.device
    world: distributed.World
    requested: str = "fp32"  # the precision asked for (`auto` is decided in `decide_precision`)
    last: dict[str, Any] | None = None
    state: TrainState | None = None
    was: Config | None = None
    init: dict[str, Any] | None = None
    precision_line: str = ""  # the log's line on the precision, once decided

    @property
    def recipe(self) -> type[Recipe]:
        return registry.recipe_of(self.family)

    @property
    def vocab(self) -> Vocab | None:
        """The vocabulary the run reads its text with: a resumed run's own, or its starting model's (None: built
        from the text)."""
        source = self.last or self.init
        return Vocab(source["vocab"]) if source else None

    @property
    def initial_weights(self) -> dict[str, torch.Tensor] | None:
        """The weights the model starts from: last.pt's, or the trained model's (float16 read as float32)."""
        if self.last is not None:
            return self.last["state_dict"]
        if self.init is not None:
            return {k: v.float() if v.is_floating_point() else v for k, v in self.init["state_dict"].items()}
        return None


def read_last(out_dir: Path) -> dict[str, Any]:
    """A run folder's last.pt, for --resume (its config is what the resumed run trains with)."""
    rundir.check(out_dir, resume=True, force=False)
    return checkpoint.read(out_dir / "last.pt")


def start(config: Config, out_dir: Path, *, resume: bool, force: bool, messages: Messages,
          last: dict[str, Any] | None = None) -> Run:
    """The run `train` makes of `config` in `out_dir`, every input checked before the folder is touched: the family
    and its recipe, the processes, the device and whether it has the precision asked for, the folder (`rundir`), a
    resume's last.pt (`last` where the caller read it already) against what a resume may change, a new run's
    starting model."""
    family = registry.family_of(config.model.kind)
    recipe = registry.recipe_of(family)
    family.model.check_config(config.model)
    world = distributed.World.from_env()
    if world.size > 1 and not recipe.PARALLEL:
        raise UserError(f"{config.model.kind}: training on whole sentences runs in one process (no torchrun yet)")
    device = world.device_for(distributed.resolve_device(config.run.device))
    requested = config.run.precision
    config = _with_precision(config, precision.resolve(requested, device))  # bf16 without the hardware: refused now
    rundir.check(out_dir, resume, force)
    refuse_overwriting({f"the run's {path.name}": path for path in rundir.written_files(out_dir)},
                       [config.data.train, config.data.valid, config.data.test])
    run = Run(config, out_dir, family, device, world, requested)
    if not resume:
        return dataclasses.replace(run, init=_starting_model(config, family))
    last = last if last is not None else checkpoint.read(out_dir / "last.pt")
    state = resume_state(last, out_dir / "last.pt")
    return dataclasses.replace(run, last=last, state=state, was=_resumed_config(last, out_dir, config, state, messages))


def student_run(config: Config, folder: Path, family: Family, device: torch.device, *, resume: bool,
                init: dict[str, Any] | None = None) -> Run:
    """A distillation round's run in `folder` (the distillation holds it): float32, one process, resumed from its
    last.pt where `resume` finds one, else from `init` (a checkpoint's parts: distillation.embedding_start's) where
    given."""
    world = distributed.World()
    line = precision.describe("fp32", "fp32", device, family.bf16_parts, family.fp32_parts)
    run = Run(config, folder, family, device, world, precision_line=line, init=init)
    last_path = folder / "last.pt"
    if not (resume and last_path.exists()):
        return run
    last = checkpoint.read(last_path)
    return dataclasses.replace(run, last=last, state=resume_state(last, last_path))


def decide_precision(run: Run, vocab_size: int) -> Run:
    """The run in the precision it trains in, and the log's line on it. Under `auto`: a resumed run's own (`was`),
    where this device can run it (measured anew it could come out otherwise where the two are near in speed, and the
    run would not go on as it would have without the stop); else measured on a probe of one training step."""
    requested, device = run.requested, run.device
    kept = run.was.run.precision if run.was is not None and requested == "auto" else None
    if kept == "bf16" and precision.bf16_hardware(device) is None:
        kept = None
    probe = None if kept else _measured_precision(run, vocab_size)
    chosen = kept or (precision.resolve(requested, device, probe) if probe else run.config.run.precision)
    said = precision.describe(requested, chosen, device, run.family.bf16_parts, run.family.fp32_parts, probe,
                              kept=bool(kept))
    return dataclasses.replace(run, config=_with_precision(run.config, chosen), precision_line=said)


def _measured_precision(run: Run, vocab_size: int) -> precision.Probe | None:
    """A probe of one training step (forward and backward of a new model of the config on random ids of the training
    batch's shape, as its recipe says) where `auto` has a choice: bfloat16 hardware, one process (under torchrun
    every process keeps bf16, so that all run alike); else None."""
    config = run.config
    if run.requested != "auto" or config.run.precision != "bf16" or run.world.size > 1:
        return None
    model = run.family.build(vocab_size, config.model).to(run.device)
    key = (config.model.kind, tuple(config.to_dict()["model"].values()), vocab_size,
           tuple(config.to_dict()["train"].values()))  # a batch's shape among them
    return precision.Probe(key, run.recipe.probe(model, config, vocab_size))


def _with_precision(config: Config, chosen: str) -> Config:
    return dataclasses.replace(config, run=dataclasses.replace(config.run, precision=chosen))


def _starting_model(config: Config, family: Family) -> dict[str, Any] | None:
    """The checkpoint a new run starts from (`train.init`: a trained model of the run's kind and sizes, or sizes its
    kind adapts (`ModelKind.ADAPTS`: a PCFG's rank), whose vocabulary the text is read with), checked; None without
    one."""
    if not getattr(config.train, "init", ""):
        return None
    payload = checkpoint.read(pretrained.one_file(config.train.init, "train.init"))
    theirs, ours = payload["config"].get("model", {}), config.to_dict()["model"]
    differ = [key for key in ours if theirs.get(key, ours[key]) != ours[key] and key not in family.model.ADAPTS]
    if differ:
        key = differ[0]
        raise InputError(f"train.init {config.train.init}: must be a model of the run's kind and sizes: it has "
                         f"model.{key} = {theirs[key]!r}, the run {ours[key]!r}")
    return payload


def _resumed_config(payload: dict[str, Any], out_dir: Path, config: Config, saved: TrainState,
                    messages: Messages) -> Config:
    """The config a resumed run was started with, its last.pt checked: the folder's own, and `config` changing only
    what --resume may change."""
    _check_its_own(payload, out_dir)
    was = registry.CONFIGS.from_dict(payload["config"], str(out_dir / "last.pt"), saved=True)
    _check_resumable(was, config, out_dir / "last.pt")
    _note_changed_text(was, config, saved, messages)
    return was


def _check_resumable(was: Config, config: Config, source: Path) -> None:
    """Refuse a resume that would change the model, its text or its vocabulary (see resumable); `was`: the
    config the run was started with."""
    changes = resume_changes(was, config)
    if changes:
        key, old, now = changes[0]
        raise InputError(f"{source}: --resume cannot change {key} (the run has {old!r}, now {now!r}); "
                         f"only {', '.join(sorted(resumable(was)))} may change")


# What --resume may change: how long the run goes on, where it runs, what it keeps (every [run] key but its seed);
# where the files are (a run resumed on another machine; the text is read with the run's vocabulary) and how they are
# read in worker processes; and the optimizer's and regularisers' settings (TrainConfig.RESUMABLE: each family's train
# section adds its own), as the paper's code lets a resumed run set them. Every other key changes what the model is,
# how it reads, or how its batches and random draws run on, and a resumed run would no longer be the run it continues.
DATA_RESUMABLE = frozenset({"train", "valid", "test", "workers", "cache_dir"})


def resumable(config: Config) -> frozenset[str]:
    """The section.key names --resume may change in a run of this config's family."""
    return frozenset({f"train.{key}" for key in type(config.train).RESUMABLE}
                     | {f"run.{key}" for key in config_module.RUN_KEYS - config_module.RunConfig.FIXED}
                     | {f"data.{key}" for key in DATA_RESUMABLE})


def resume_changes(saved: Config, now: Config) -> list[tuple[str, Any, Any]]:
    """The keys a resumed run would change that --resume may not: (section.key, the run's value, the new one)."""
    old, new, allowed = saved.to_dict(), now.to_dict(), resumable(saved)
    return [(f"{section}.{key}", value, new[section].get(key)) for section, values in old.items()
            for key, value in values.items()
            if f"{section}.{key}" not in allowed and new[section].get(key) != value]


def _note_changed_text(was: Config, config: Config, saved: TrainState, messages: Messages) -> None:
    """Say what a resume inside an epoch does with another training text (`was`: the config the run was started
    with): it goes on at the same place in the new text's batches (the rest of the old text's epoch is not
    trained)."""
    old = was.data.train
    if saved.position is not None and old != config.data.train:
        messages.note(f"the training text changed inside epoch {saved.epoch} (was {old}, now {config.data.train}): "
                      f"the epoch goes on from the same place (after {saved.position.start:,} token rows or batches) "
                      "in the new text, and the rest of the old text's epoch is not trained")


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


def _described(kind: str) -> str:
    """A model kind as messages name it (`an ON-LSTM language model (onlstm)`), or as written if unknown."""
    try:
        return f"{registry.family_of(kind).description} ({kind})"
    except ConfigError:
        return f"a model of kind {kind!r}"
