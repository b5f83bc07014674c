"""The families by name (`FAMILIES`): a checkpoint stores its family's name (config `model.kind`) and loading looks
the family up here. A new family is one folder whose model module ends with its `FAMILY` (families/family.py) and
one line below."""

from __future__ import annotations

from .. import config as config_module
from ..config import ConfigError
from .family import Family
from .onlstm import model as onlstm
from .pcfg import model as pcfg
from .recipe import Recipe
from .structformer import model as structformer
from .student import model as student

FAMILIES: dict[str, Family] = {family.name: family for family in (
    onlstm.FAMILY, onlstm.LSTM_FAMILY, student.FAMILY, pcfg.FAMILY, structformer.FAMILY)}

CONFIGS = config_module.ConfigReader(lambda: FAMILIES)  # how the package reads a config: with the families' sections


def family_of(name: str) -> Family:
    """The family of a kind's name; an unknown name is a ConfigError listing the known ones."""
    if name not in FAMILIES:
        raise ConfigError(f"model.kind must be one of {', '.join(FAMILIES)}, got {name!r}")
    return FAMILIES[name]


def recipe_of(family: Family) -> type[Recipe]:
    """The recipe `train` fits a family with; a family made otherwise (a student: by distill) is a ConfigError."""
    if family.recipe is None:
        raise ConfigError(f"model.kind {family.name!r}: train makes {', '.join(trained())}; "
                          f"{family.description} is made otherwise (a student: by distill)")
    return family.recipe


def distilled() -> Family:
    """The family `distill` trains (the one made by distilling, not by `train`)."""
    return next(family for family in FAMILIES.values() if family.is_distilled)


def trained() -> list[str]:
    """The names of the families `train` makes."""
    return [name for name, family in FAMILIES.items() if family.recipe is not None]
