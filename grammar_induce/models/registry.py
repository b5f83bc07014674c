"""Model kinds by name: a checkpoint stores its kind's name (config `model.kind`) and loading looks the
class up here. A new kind is one module with a ModelKind class (models/kind.py) and one entry in KINDS."""

from __future__ import annotations

from ..config import ConfigError, ModelConfig
from .kind import ModelKind
from .onlstm import LanguageModel, LSTMLanguageModel, ONLSTMLanguageModel
from .pcfg import TNPCFG
from .span_parser import SpanParser

KINDS: dict[str, type[ModelKind]] = {cls.NAME: cls for cls in (ONLSTMLanguageModel, LSTMLanguageModel, SpanParser,
                                                               TNPCFG)}


def kind_of(name: str) -> type[ModelKind]:
    """The class of a kind's name; an unknown name is a ConfigError listing the known ones."""
    if name not in KINDS:
        raise ConfigError(f"model.kind must be one of {', '.join(KINDS)}, got {name!r}")
    return KINDS[name]


def build(vocab_size: int, config: ModelConfig) -> ModelKind:
    """A new model of the config's kind."""
    return kind_of(config.kind)(vocab_size, config)


def trains_on_sentences(name: str) -> bool:
    """Whether `train` fits the kind to whole sentences (`log_likelihood`), not to a token stream."""
    return hasattr(kind_of(name), "log_likelihood")


def check_trainable(name: str) -> None:
    """`train` makes language models and PCFGs: another kind's name (a student's: distill makes those) is a
    ConfigError."""
    def trainable(cls: type[ModelKind]) -> bool:
        return issubclass(cls, LanguageModel) or hasattr(cls, "log_likelihood")

    if not trainable(kind_of(name)):
        trainable_names = ", ".join(n for n, cls in KINDS.items() if trainable(cls))
        raise ConfigError(f"model.kind {name!r}: train makes language models and PCFGs ({trainable_names}); "
                          f"{kind_of(name).DESCRIPTION} is made otherwise (a student: by distill)")
