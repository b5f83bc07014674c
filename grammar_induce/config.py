"""Run configuration: frozen dataclasses loaded from TOML.

A config file has four sections. `[data]` and `[run]` (the loop's: how long, where, with what precision and seed) are
every family's and are here; `[model]` and `[train]` (the recipe's batch size, learning rate, clipping and the rest)
are each family's own, subclasses of the ones here in its folder (families/onlstm/settings.py, ...), and the model kind
(`model.kind`) says which family's sections a file is read with. Every key must be a field of them: a key of another
family is an error naming the key and the family, and `--set section.key=value` overrides any key. A `ConfigReader`
is given the families (the package's is families/registry.CONFIGS), so that this core module imports none of them.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from .errors import UserError

DIRECTIONS = ("forward", "backward")
PRECISIONS = ("fp32", "bf16", "auto")  # see runtime/precision.py
TOKENIZERS = ("whitespace", "jieba", "char", "treebank")  # see text/tokenizer.py: Tokenizer
SEED = 141  # the paper's: the seed of every training (a model, a student) unless one is given


class ConfigError(UserError, ValueError):
    """A configuration the user wrote that cannot be used."""


@dataclass(frozen=True)
class ModelConfig:
    """[model]: the kind (a name in families/registry.py); a family's subclass adds its sizes."""

    kind: str = "onlstm"

    def validate(self) -> None:
        if not isinstance(self.kind, str) or not self.kind:
            raise ConfigError(f"model.kind must name a model kind (families/registry.py), got {self.kind!r}")

    @property
    def reading_order(self) -> str:
        """forward or backward: how the model reads a sentence (a family without a direction reads it forward)."""
        return "forward"


@dataclass(frozen=True)
class DataConfig:
    train: str = ""
    valid: str = ""
    test: str = ""
    tokenizer: str = "whitespace"  # whitespace | jieba | char | treebank (English, Penn Treebank-style)
    lowercase: bool = False
    replace_digits: bool = False  # digit runs -> "N", as the paper's code does to treebank words
    # false: lowercase/replace_digits apply only to text parsed later, not to the training files.
    # The PTB LM text is already normalised its own way ("30-year" stays), and the paper trains on it as is.
    normalize_training_text: bool = True
    punctuation_aside: bool = False  # the model reads no punctuation; parsing puts it back (always so for treebank)
    fold_width: bool = False  # full-width letters, digits and signs read as ASCII (Chinese text mixes both)
    max_vocab: int = 0  # 0: no limit
    min_freq: int = 1
    cache_dir: str = ""  # the token cache; "": $GRAMMAR_INDUCE_CACHE, else ~/.cache/grammar-induce/corpora
    workers: int = 0  # processes that tokenize with jieba; 0: one per core

    def validate(self) -> None:
        if self.tokenizer not in TOKENIZERS:
            raise ConfigError(f"data.tokenizer must be one of {', '.join(TOKENIZERS)}, got {self.tokenizer!r}")
        if self.max_vocab < 0 or self.min_freq < 1 or self.workers < 0:
            raise ConfigError("data.max_vocab and data.workers must be >= 0 and data.min_freq >= 1")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """[train]: what every family's recipe has, a batch size, a learning rate and a gradient norm's limit, with no
    values here: each family's subclass gives its paper's, with its recipe's own keys."""

    batch_size: int
    lr: float
    clip: float  # the gradient norm's limit (0: none)
    # the keys --resume may change (training/run.py: resume_changes); a family's subclass adds its optimizer's and
    # regularisers' keys
    RESUMABLE: ClassVar[frozenset[str]] = frozenset({"lr", "clip"})

    def validate(self) -> None:
        at_least(1, "train", self, "batch_size")
        if self.lr <= 0:
            raise ConfigError(f"train.lr must be positive, got {self.lr}")
        at_least(0, "train", self, "clip")


@dataclass(frozen=True)
class RunConfig:
    """[run]: the loop's, every family's alike: how long it trains, what it keeps, where, in what precision and from
    which seed."""

    epochs: int = 1000
    max_steps: int = 0  # 0: no limit; otherwise stop after this many batches in all (inside an epoch too)
    max_minutes: float = 0.0  # 0: no limit; otherwise stop once this run (a resume: again) has trained this long
    seed: int = SEED
    keep_epochs: int = 0  # also keep the last N epochs' models as epoch-K.pt (a snapshot ensemble)
    device: str = "auto"
    # fp32 (the paper's numbers), bf16 (matrix products in bfloat16, on hardware that has it) or
    # auto (bf16 where the hardware has it); see runtime/precision.py
    precision: str = "fp32"
    checkpoint_minutes: float = 10.0  # last.pt inside an epoch this often, so a killed run loses little
    # what --resume may not change: the seed (a resumed run's random draws go on from the run's)
    FIXED: ClassVar[frozenset[str]] = frozenset({"seed"})

    def validate(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"run.precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        at_least(1, "run", self, "epochs")
        if not 0 <= self.seed < 2**32:  # what every random generator of a run takes
            raise ConfigError(f"run.seed must be from 0 to {2**32 - 1}, got {self.seed}")
        at_least(0, "run", self, "max_steps", "max_minutes", "keep_epochs", "checkpoint_minutes")
        if not DEVICE.fullmatch(self.device):  # the kind of name: whether this machine has it is the run's to say
            kind = self.device.split(":")[0]
            raise ConfigError(f"run.device {self.device}: " + (f"grammar-induce runs on cpu or cuda, not {kind}"
                              if kind in OTHER_DEVICES else "expected auto, cpu, cuda or cuda:N"))


RUN_KEYS = frozenset(f.name for f in dataclasses.fields(RunConfig))
DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
OTHER_DEVICES = ("mps", "xpu", "xla", "hpu", "mtia", "meta", "ipu", "ve", "hip", "maia", "lazy", "vulkan")  # torch's


def at_least(least: int, section: str, values: object, *names: str) -> None:
    """Refuse, as a ConfigError naming the key, any of the fields `names` below `least` (1: positive, 0: not
    negative)."""
    for name in names:
        if getattr(values, name) < least:
            rule = "be positive" if least == 1 else f"be at least {least}" if least else "not be negative"
            raise ConfigError(f"{section}.{name} must {rule}, got {getattr(values, name)}")


def probabilities(section: str, values: object, *names: str) -> None:
    """Refuse a dropout rate outside [0, 1)."""
    for name in names:
        if not 0.0 <= getattr(values, name) < 1.0:
            raise ConfigError(f"{section}.{name} must be in [0, 1), got {getattr(values, name)}")


class Sections(Protocol):
    """What a model kind's config is read with (a families/family.Family has it): its [model] and [train]
    dataclasses, and how messages name it."""

    @property
    def model_config(self) -> type[ModelConfig]: ...

    @property
    def train_config(self) -> type[TrainConfig]: ...

    @property
    def description(self) -> str: ...


def sections_of(family: Sections) -> dict[str, type]:
    return {"model": family.model_config, "data": DataConfig, "train": family.train_config, "run": RunConfig}


@dataclass(frozen=True)
class Config:
    model: ModelConfig
    data: DataConfig
    train: TrainConfig
    run: RunConfig

    def validate(self) -> Config:
        self.model.validate()
        self.data.validate()
        self.train.validate()
        self.run.validate()
        return self

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)


SECTIONS = ("model", "data", "train", "run")


def kind_in(raw: dict[str, Any]) -> object:
    model = raw.get("model")
    return model.get("kind", ModelConfig.kind) if isinstance(model, dict) else ModelConfig.kind


def flag_of(key: str) -> str:
    """The command-line flag that sets a config key, where there is one: run.max_minutes -> --max-minutes."""
    return "--" + key.rpartition(".")[2].replace("_", "-")


def flag_text(key: str, value: object) -> str:
    """The flag and value as typed: `--epochs 3`; a list as the flag repeated (`--focus a --focus b`)."""
    values = value if isinstance(value, (list, tuple)) else (value,)
    return " ".join(f"{flag_of(key)} {item}" for item in values)


class ConfigReader:
    """Reads config files into the `Config` of their kind's family: `families` gives each kind's name its sections
    (families/registry.py makes the one the package uses, `registry.CONFIGS`), so this core module knows no family."""

    def __init__(self, families: Callable[[], Mapping[str, Sections]]):
        self._families = families

    def family_of(self, kind: object) -> Sections:
        """The sections of a kind's name; an unknown name is a ConfigError listing the known ones."""
        family = self._families().get(kind) if isinstance(kind, str) else None
        if family is None:
            raise ConfigError(f"model.kind must be one of {', '.join(self._families())}, got {kind!r}")
        return family

    def from_dict(self, raw: dict[str, Any], source: str = "config", saved: bool = False) -> Config:
        """Build a validated Config of the kind's family; unknown sections or keys are errors naming them. `saved`: a
        config a run or a checkpoint was saved with, by an older version too, whose keys of other families (every
        family's keys were once in one [model] and [train]) are dropped, not refused."""
        try:
            family = self.family_of(kind_in(raw))
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
        classes = sections_of(family)
        sections = {}
        for name, values in (self.migrated(raw) if saved else raw).items():
            if name not in classes:
                raise ConfigError(f"{source}: unknown section [{name}] (expected one of {', '.join(SECTIONS)})")
            if not isinstance(values, dict):
                raise ConfigError(f"{source}: [{name}] must be a table")
            sections[name] = self._build_section(name, values, source, family)
        sections = {name: sections.get(name) or classes[name]() for name in SECTIONS}
        try:
            return Config(**sections).validate()
        except ConfigError as e:  # a check across keys (model.direction, model.rank ...): name the file it came from
            raise ConfigError(str(e) if str(e).startswith(f"{source}: ") else f"{source}: {e}") from None

    def migrated(self, raw: dict[str, Any]) -> dict[str, Any]:
        """A saved config (a run's, a checkpoint's; raw) as this version reads it: the loop's keys, in [train] until
        they had their section, in [run]; without the keys its family does not read (until the families had sections
        of their own, every config held every family's keys)."""
        raw = dict(raw)
        if "run" not in raw and isinstance(raw.get("train"), dict):
            train = raw["train"]
            raw["train"] = {key: value for key, value in train.items() if key not in RUN_KEYS}
            raw["run"] = {key: value for key, value in train.items() if key in RUN_KEYS}
        classes = sections_of(self.family_of(kind_in(raw)))
        return {name: {key: value for key, value in values.items()
                       if key in {f.name for f in dataclasses.fields(classes[name])}}
                if name in classes and isinstance(values, dict) else values for name, values in raw.items()}

    def from_sources(self, raw: dict[str, Any], source: str, given: dict[str, str]) -> Config:
        """`from_dict`, an error about a key that was not the file's named by where it came from: `given` maps
        section.key to how it was given (`--max-minutes`, `--set train.lr=5`, `settings`)."""
        try:
            return self.from_dict(raw, source)
        except ConfigError as e:
            text = str(e).removeprefix(f"{source}: ")
            where = next((how for key, how in given.items() if text.startswith(f"{key} ")), None)
            if where is None:
                raise
            raise ConfigError(f"{where}: {text}") from None

    def apply_overrides(self, raw: dict[str, Any], overrides: list[str], source: str = "config") -> dict[str, Any]:
        """Apply `section.key=value` strings; the value is parsed as a TOML value, else kept as a string. A bad key or
        value is an error naming the --set it came from; keys are checked against the family of the kind the config
        has once every --set model.kind is applied (a kind no --set gave is the config file's, `source`)."""
        parsed = []
        for item in overrides:
            dotted, sep, text = item.partition("=")
            section, dot, key = dotted.strip().partition(".")
            if not sep or not dot or not key:
                raise ConfigError(f"--set {item!r}: expected section.key=value")
            if section not in SECTIONS:
                raise ConfigError(f"--set {item}: unknown section [{section}] (expected one of {', '.join(SECTIONS)})")
            parsed.append((item, section, key, parse_value(text.strip())))
            if (section, key) == ("model", "kind"):
                raw.setdefault("model", {})["kind"] = parsed[-1][3]
        try:
            family = self.family_of(kind_in(raw))
        except ConfigError as e:
            kind_set = any((section, key) == ("model", "kind") for _, section, key, _ in parsed)
            raise ConfigError(f"{'--set model.kind' if kind_set else source}: {e}") from None
        for item, section, key, value in parsed:
            try:
                raw.setdefault(section, {})[key] = self.checked_value(section, key, value, family)
            except ConfigError as e:
                raise ConfigError(f"--set {item}: {e}") from None
        return raw

    def checked_value(self, section: str, key: str, value: Any, family: Sections) -> Any:
        """The value of a key of the family's section with the field's type (an int where a float is expected becomes
        one); errors name the key (and the family, for a key it does not read) but not where it came from."""
        fields = {f.name: f for f in dataclasses.fields(sections_of(family)[section])}
        if key not in fields and section == "train" and key in RUN_KEYS:
            raise ConfigError(f"train.{key} is a key of [run] now (the loop's keys have their section): write run.{key}")
        if key not in fields:
            raise ConfigError(f"{section}.{key} is not read by {family.description} (model.kind "
                              f"{self._kind_named(family)}; its {section} keys: {', '.join(fields)})"
                              if self._some_family_reads(section, key) else f"unknown key {section}.{key}")
        expected = type(fields[key].default)
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if expected is tuple:  # a list of names (TOML has arrays)
            if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
                raise ConfigError(f"{section}.{key} must be a list of str, got {value!r}")
            value = tuple(value)
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise ConfigError(f"{section}.{key} must be {expected.__name__}, got {value!r}")
        if expected is float and not math.isfinite(value):
            raise ConfigError(f"{section}.{key} must be a finite number, got {value}")
        return value

    def _build_section(self, name: str, values: dict[str, Any], source: str, family: Sections) -> Any:
        moved = [key for key in values if name == "train" and key in RUN_KEYS
                 and key not in {f.name for f in dataclasses.fields(sections_of(family)[name])}]
        if len(moved) > 1:  # an old layout: every moved key at once, not one a run
            raise ConfigError(f"{source}: " + ", ".join(f"train.{key}" for key in moved) + " are keys of [run] now (the "
                              "loop's keys have their section): write " + ", ".join(f"run.{key}" for key in moved))
        for key, value in values.items():
            try:
                values[key] = self.checked_value(name, key, value, family)
            except ConfigError as e:
                raise ConfigError(f"{source}: {e}") from None
        return sections_of(family)[name](**values)

    def _some_family_reads(self, section: str, key: str) -> bool:
        return any(key in {f.name for f in dataclasses.fields(sections_of(family)[section])}
                   for family in self._families().values())

    def _kind_named(self, family: Sections) -> str:
        names = [name for name, other in self._families().items() if other == family]
        return " or ".join(repr(name) for name in names) or "?"


def read_toml(path: Path) -> dict[str, Any]:
    """Read a TOML config as a raw dict; data paths become relative to the config's folder
    (the folder of the file itself, when `path` is a link to it)."""
    path = Path(path).resolve()
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a TOML file (not UTF-8 text: byte {e.start + 1})") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None
    for key in ("train", "valid", "test"):
        value = raw.get("data", {}).get(key)
        if isinstance(value, str) and value and not Path(value).is_absolute():
            raw["data"][key] = str((path.parent / value).resolve())
    train = raw.get("train", {})
    if isinstance(train.get("init"), str) and train["init"]:
        train["init"] = _beside(path, train["init"])
    if isinstance(train.get("focus"), list):  # a file beside the config; a shipped model's name stays a name
        train["focus"] = [_beside(path, v) if isinstance(v, str) and (path.parent / v).exists() else v
                          for v in train["focus"]]
    return raw


def _beside(config: Path, value: str) -> str:
    """A path the config names, relative to the config's folder (as its data files are)."""
    return value if Path(value).is_absolute() else str((config.parent / value).resolve())


def parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def to_toml(config: Config) -> str:
    lines = []
    for section, values in config.to_dict().items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return repr(value)
