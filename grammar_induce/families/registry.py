"""Model kinds by name: a checkpoint stores its kind's name (config `model.kind`) and loading looks the
class up here. A new kind is one folder with a ModelKind class (families/base.py) and one entry in KINDS; a kind
that `train` makes names its recipe (`ModelKind.TRAINER`)."""

from __future__ import annotations

from .. import config as config_module
from ..config import ConfigError, ModelConfig
from .base import ModelKind
from .onlstm.model import LSTMLanguageModel, ONLSTMLanguageModel
from .pcfg.model import TNPCFG
from .structformer.model import StructFormer
from .student.model import SpanParser

KINDS: dict[str, type[ModelKind]] = {cls.NAME: cls for cls in (ONLSTMLanguageModel, LSTMLanguageModel, SpanParser,
                                                               TNPCFG, StructFormer)}


STUDENT: type[SpanParser] = SpanParser  # the kind `distill` trains: its recipe is SpanParser.DISTILLED_BY


def families() -> dict[str, config_module.Family]:
    """Each kind's config sections by its name, as config files are read with them."""
    return {name: config_module.Family(*kind.CONFIG, kind.DESCRIPTION) for name, kind in KINDS.items()}


CONFIGS = config_module.ConfigReader(families)  # how the package reads a config: the registry composes the families


def kind_of(name: str) -> type[ModelKind]:
    """The class of a kind's name; an unknown name is a ConfigError listing the known ones."""
    if name not in KINDS:
        raise ConfigError(f"model.kind must be one of {', '.join(KINDS)}, got {name!r}")
    return KINDS[name]


def build(vocab_size: int, config: ModelConfig) -> ModelKind:
    """A new model of the config's kind (its sizes checked by the kind: a ConfigError)."""
    kind = kind_of(config.kind)
    kind.check_config(config)
    return kind(vocab_size, config)
