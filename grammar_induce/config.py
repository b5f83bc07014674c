"""Run configuration: frozen dataclasses loaded from TOML.

A config file has three sections, `[model]`, `[data]` and `[train]`; every key must be
a field below (unknown keys are errors), and `--set section.key=value` overrides any key.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UserError

DIRECTIONS = ("forward", "backward")
PRECISIONS = ("fp32", "bf16", "auto")  # see runtime/precision.py
TOKENIZERS = ("whitespace", "jieba", "char", "treebank")  # see data.Tokenizer
SEED = 141  # the paper's: the seed of every training (a model, a student) unless one is given


class ConfigError(UserError, ValueError):
    """A configuration the user wrote that cannot be used."""


@dataclass(frozen=True)
class ModelConfig:
    kind: str = "onlstm"  # a name in families/registry.py: onlstm | lstm (the AWD-LSTM baseline) | student (distill)
    emb_size: int = 400
    hidden_size: int = 1150
    chunk_size: int = 10
    n_layers: int = 3
    dropout: float = 0.45  # locked dropout on the last layer's output
    dropouth: float = 0.3  # locked dropout between layers
    dropouti: float = 0.5  # locked dropout on the embedding output
    dropoute: float = 0.1  # word-type dropout on the embedding matrix
    wdrop: float = 0.45  # DropConnect on hidden-to-hidden weights
    direction: str = "forward"  # forward | backward: read each sentence left to right or right to left
    # kind "pcfg" (TN-PCFG, families/pcfg/model.py); the paper's sizes
    nonterminals: int = 250
    preterminals: int = 500
    rank: int = 500  # of the binary rule tensor's decomposition
    symbol_dim: int = 256  # symbol embeddings and the rule MLPs
    # kind "structformer" (families/structformer/model.py; with hidden_size, n_layers, dropout); the paper's sizes
    heads: int = 8  # attention heads a layer
    parser_layers: int = 3  # the parser network's convolutions
    conv_size: int = 9  # their width in words
    dropatt: float = 0.0  # dropout on the attention weights
    position_embedding: bool = True  # learnt positions (the paper's README command: --pos_emb)

    def validate(self) -> None:
        if not isinstance(self.kind, str) or not self.kind:
            raise ConfigError(f"model.kind must name a model kind (families/registry.py), got {self.kind!r}")
        if self.direction not in DIRECTIONS:
            raise ConfigError(f"model.direction must be forward or backward, got {self.direction!r}")
        for name in ("emb_size", "hidden_size", "chunk_size", "n_layers", "nonterminals", "preterminals", "rank",
                     "symbol_dim", "heads", "parser_layers", "conv_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"model.{name} must be positive, got {getattr(self, name)}")
        for name in ("dropout", "dropouth", "dropouti", "dropoute", "wdrop", "dropatt"):
            p = getattr(self, name)
            if not 0.0 <= p < 1.0:
                raise ConfigError(f"model.{name} must be in [0, 1), got {p}")

    @property
    def layer_sizes(self) -> list[int]:
        """Input size of the first layer, then each layer's hidden size (emb -> H ... H -> emb)."""
        return [self.emb_size] + [self.hidden_size] * (self.n_layers - 1) + [self.emb_size]


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


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = 20
    eval_batch_size: int = 10
    test_batch_size: int = 1
    bptt: int = 70
    lr: float = 30.0
    clip: float = 0.25
    weight_decay: float = 1.2e-6
    alpha: float = 2.0  # activation regularisation
    beta: float = 1.0  # temporal activation regularisation
    epochs: int = 1000
    max_steps: int = 0  # 0: no limit; otherwise stop after this many batches in all (inside an epoch too)
    max_minutes: float = 0.0  # 0: no limit; otherwise stop once this run (a resume: again) has trained this long
    nonmono: int = 5
    seed: int = SEED
    keep_epochs: int = 0  # also keep the last N epochs' models as epoch-K.pt (a snapshot ensemble)
    device: str = "auto"
    # fp32 (the paper's numbers), bf16 (matrix products in bfloat16, on hardware that has it) or
    # auto (bf16 where the hardware has it); see precision.py
    precision: str = "fp32"
    # a model trained on whole sentences (kind "pcfg"): Adam (betas 0.75, 0.999, as TN-PCFG), the longest
    # training sentence, a length curriculum (start_length > 0: the first epoch's longest, + length_step an epoch)
    max_length: int = 40
    start_length: int = 0
    length_step: int = 10
    checkpoint_minutes: float = 10.0  # last.pt inside an epoch this often, so a killed run loses little
    mask_rate: float = 0.3  # a masked language model (kind "structformer"): the share of words masked

    def validate(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"train.precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        for name in ("batch_size", "eval_batch_size", "test_batch_size", "bptt", "epochs", "max_length"):
            if getattr(self, name) < 1:
                raise ConfigError(f"train.{name} must be positive, got {getattr(self, name)}")
        if not 0.0 < self.mask_rate < 1.0:
            raise ConfigError(f"train.mask_rate must be in (0, 1), got {self.mask_rate}")
        if self.lr <= 0:
            raise ConfigError(f"train.lr must be positive, got {self.lr}")
        if not 0 <= self.seed < 2**32:  # what every random generator of a run takes
            raise ConfigError(f"train.seed must be from 0 to {2**32 - 1}, got {self.seed}")
        for name in ("clip", "weight_decay", "alpha", "beta", "max_steps", "max_minutes", "nonmono",
                     "keep_epochs", "start_length", "length_step", "checkpoint_minutes"):
            if getattr(self, name) < 0:
                raise ConfigError(f"train.{name} must not be negative, got {getattr(self, name)}")


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def validate(self) -> Config:
        self.model.validate()
        self.data.validate()
        self.train.validate()
        return self

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)


SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}


def from_dict(raw: dict[str, Any], source: str = "config") -> Config:
    """Build a validated Config; unknown sections or keys are errors naming them."""
    sections = {}
    for name, values in raw.items():
        if name not in SECTIONS:
            raise ConfigError(f"{source}: unknown section [{name}] (expected one of {', '.join(SECTIONS)})")
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: [{name}] must be a table")
        sections[name] = _build_section(name, values, source)
    try:
        return Config(**sections).validate()
    except ConfigError as e:  # a check across keys (model.direction, model.rank ...): name the file it came from
        raise ConfigError(str(e) if str(e).startswith(f"{source}: ") else f"{source}: {e}") from None


def _build_section(name: str, values: dict[str, Any], source: str) -> Any:
    for key, value in values.items():
        try:
            values[key] = checked_value(name, key, value)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
    return SECTIONS[name](**values)


def checked_value(section: str, key: str, value: Any) -> Any:
    """The value of a known key with the field's type (an int where a float is expected becomes one);
    errors name the key but not where it came from."""
    fields = {f.name: f for f in dataclasses.fields(SECTIONS[section])}
    if key not in fields:
        raise ConfigError(f"unknown key {section}.{key}")
    expected = type(fields[key].default)
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ConfigError(f"{section}.{key} must be {expected.__name__}, got {value!r}")
    if expected is float and not math.isfinite(value):
        raise ConfigError(f"{section}.{key} must be a finite number, got {value}")
    return value


def load(path: Path) -> dict[str, Any]:
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
    return raw


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `section.key=value` strings; the value is parsed as a TOML value, else kept as a string.
    A bad key or value is an error naming the --set it came from."""
    for item in overrides:
        dotted, sep, text = item.partition("=")
        section, dot, key = dotted.strip().partition(".")
        if not sep or not dot or not key:
            raise ConfigError(f"--set {item!r}: expected section.key=value")
        if section not in SECTIONS:
            raise ConfigError(f"--set {item}: unknown section [{section}] (expected one of {', '.join(SECTIONS)})")
        try:
            raw.setdefault(section, {})[key] = checked_value(section, key, parse_value(text.strip()))
        except ConfigError as e:
            raise ConfigError(f"--set {item}: {e}") from None
    return raw


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
    return repr(value)


# What --resume may change: how long the run goes on, where it runs, what it keeps; where the files are (a run
# resumed on another machine; the text is read with the run's vocabulary) and how they are read in worker
# processes; and the optimizer's and regularisers' settings, as the paper's code lets a resumed run set them.
# Every other key changes what the model is, how it reads, or how its batches and random draws run on,
# and a resumed run would no longer be the run it continues.
RESUMABLE = frozenset({"train.epochs", "train.max_steps", "train.max_minutes", "train.keep_epochs", "train.device",
                       "train.checkpoint_minutes",
                       "train.precision", "train.lr", "train.weight_decay", "train.clip", "train.alpha", "train.beta",
                       "train.nonmono", "data.train", "data.valid", "data.test", "data.workers", "data.cache_dir"})


def resume_changes(saved: Config, now: Config) -> list[tuple[str, Any, Any]]:
    """The keys a resumed run would change that --resume may not: (section.key, the run's value, the new one)."""
    old, new = saved.to_dict(), now.to_dict()
    return [(f"{section}.{key}", value, new[section][key]) for section, values in old.items()
            for key, value in values.items()
            if f"{section}.{key}" not in RESUMABLE and new[section][key] != value]
