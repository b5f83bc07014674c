"""The models that ship inside the package, by name: `--model ptb`, `gi.load("ptb-pair")`. No torch.

`resources/models/models.toml` lists each name: its checkpoint files (float16 weights, see
scripts/models/pack_pretrained.py, which writes the folder), how to parse with it (layers, decoder,
combiner) and what it measured. A name may stand for several files: an ensemble.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, SettingError

GOLD_NLTK = "NLTK Penn Treebank sample (3914 trees, the paper's protocol)"
DEFAULT_MODEL = "en"  # what parse, evaluate and gi.load() use when no model is named
MODELS_DIR = Path(__file__).resolve().parents[1] / "resources" / "models"
INDEX = MODELS_DIR / "models.toml"


@dataclass(frozen=True)
class Pretrained:
    name: str
    files: tuple[str, ...]  # in MODELS_DIR
    kind: str  # the model kind (families/registry.py): onlstm, student, pcfg
    training_text: str
    licence: str
    parameters: int
    f1: float  # sentence F1 on `gold` (for English the NLTK Penn Treebank sample, the paper's protocol)
    gold: str = GOLD_NLTK
    valid_ppl: float | None = None  # None for an ensemble
    test_ppl: float | None = None
    layers: tuple[int, ...] = ()  # (): the middle layer
    decoder: str = "paper"
    combine: str = "mbr"
    right_voter: float = 0.0  # span voting: a right-branching tree's weight as one more voter
    language: str = "en"
    direction: str = "forward"  # an ON-LSTM's: forward, backward, or forward+backward for a pair
    teachers: str = ""  # a distilled student's: what it learned from (its checkpoint's provenance, described)
    label_map: str = ""  # a PCFG's: a file in MODELS_DIR, its labels' best matches on a treebank (grammar --save-map)
    prune: str = ""  # a PCFG's: the shipped student whose span marginals prune its chart (inference/pruning.py)

    @property
    def paths(self) -> list[Path]:
        return [MODELS_DIR / name for name in self.files]

    @property
    def megabytes(self) -> float:
        return sum(p.stat().st_size for p in self.paths) / 1e6


def catalogue() -> dict[str, Pretrained]:
    """Every shipped model by name (empty when the package ships none)."""
    if not INDEX.is_file():
        return {}
    with INDEX.open("rb") as f:
        entries = tomllib.load(f)
    return {name: Pretrained(name=name, **{k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()})
            for name, entry in entries.items()}


def find(spec: str | Path) -> Pretrained | None:
    """The shipped model `spec` names, or None when `spec` is a file's path (a path wins over a name)."""
    if Path(spec).exists():
        return None
    return catalogue().get(str(spec))


@dataclass(frozen=True)
class ModelSpec:
    """What `load` was given, resolved: the checkpoint files and a shipped name's parse settings."""

    paths: tuple[Path, ...]
    layers: tuple[int, ...] = ()
    decoder: str | None = None
    combine: str | None = None
    right_voter: float = 0.0
    notes: tuple[str, ...] = ()  # what the user should know of how the names were read
    pruner: Path | None = None  # the student whose span marginals prune a PCFG's chart (inference/pruning.py)


def resolve(specs: Sequence[str | Path], prune: str | Path | None = None) -> ModelSpec:
    """What `load` (and every setting that takes models) was given, resolved: paths stay paths; a shipped model's
    name becomes its files. A single name brings its own layers, decoder, combiner and pruner (an ensemble of names
    and paths parses with the defaults); `prune` (a name or a path; "off": none) replaces the pruner."""
    specs = [spec for item in specs for spec in (item if isinstance(item, (list, tuple)) else [item])]
    for spec in specs:
        if not isinstance(spec, (str, Path)) or not str(spec).strip():
            raise SettingError("model", f"takes a checkpoint's path or a shipped model's name, not {spec!r} "
                               "(grammar-induce models lists the names)")
    specs = specs or [DEFAULT_MODEL]
    found = [(spec, find(spec)) for spec in specs]
    for spec, entry in found:
        if entry is None and not Path(spec).exists():
            raise unknown(spec)
    paths = tuple(path for spec, entry in found for path in (entry.paths if entry else [Path(spec)]))
    shadowed = tuple(f"{spec}: the file of that name here is read, not the shipped model {spec} (a path wins over "
                     f"a name; write ./{spec} to mean the file without this note)" for spec, entry in found
                     if entry is None and str(spec) in catalogue() and "/" not in str(spec))
    if len(found) == 1 and found[0][1] is not None:
        entry = found[0][1]
        return ModelSpec(paths, entry.layers, entry.decoder, entry.combine, entry.right_voter,
                         pruner=_pruner(entry.prune if prune is None else prune))
    named = [spec for spec, entry in found if entry is not None and (entry.layers or entry.decoder != "paper")]
    note = (f"{', '.join(named)}: {'its' if len(named) == 1 else 'their'} own parse settings (layers, decoder, "
            "combiner) apply to a name alone; in this ensemble every member parses with the defaults or the "
            "options given")
    return ModelSpec(paths, notes=((note,) if named else ()) + shadowed, pruner=_pruner(prune))


def _pruner(name: str | Path | None) -> Path | None:
    if not name or str(name) == "off":
        return None
    paths = resolve([name], "off").paths  # the pruner's own pruner is not asked for
    if len(paths) != 1:
        raise SettingError("prune", f"{name}: names {len(paths)} models; a chart is pruned by one student")
    return paths[0]


def one_file(spec: str | Path, what: str) -> Path:
    """The checkpoint `spec` names for `what` (a setting that takes one model): a file's path, or the name of a shipped
    model of one file."""
    found = find(spec)
    if found is None and not Path(spec).exists():
        raise unknown(spec)
    if found is None:
        return Path(spec)
    if len(found.files) != 1:
        raise InputError(f"{spec}: names {len(found.files)} models; {what} takes one")
    return MODELS_DIR / found.files[0]


def shown(source: str | Path) -> str:
    """How a message names a model: a shipped file by its name in the package (`ptb-forward.pt (shipped)`: the
    install path says nothing to a user who loaded it by name), any other by its path as given."""
    path = Path(source)
    return f"{path.name} (shipped)" if path.parent == MODELS_DIR else str(source)


def unknown(spec: str | Path) -> InputError:
    """The error for a --model that is neither a checkpoint file nor a shipped model's name."""
    names = ", ".join(catalogue()) or "none in this installation"
    return InputError(f"{spec}: no such checkpoint file, nor a model name (models: {names}; "
                      "grammar-induce models lists them)")


def table() -> str:
    """What `grammar-induce models` prints: one row per name."""
    models = catalogue().values()
    golds = list(dict.fromkeys(m.gold for m in models))
    rows = [("name", "language", "kind", "parameters", "MB", "valid ppl", "test ppl", "F1", "parses with")]
    for m in models:
        kind = m.kind if _own_trees(m) else f"{m.kind} {m.direction}"
        rows.append((m.name, m.language, kind, f"{m.parameters:,}", f"{m.megabytes:.1f}", _number(m.valid_ppl),
                     _number(m.test_ppl), f"{m.f1:.1f}{'*' * (golds.index(m.gold) + 1)}", _how(m)))
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    texts = list(dict.fromkeys((m.training_text, m.licence) for m in models))
    lines += [f"\ntraining text: {text}\nlicence: {licence}" for text, licence in texts]
    lines += ["", *(f"F1{'*' * (k + 1)}: sentence F1 on the {gold}" for k, gold in enumerate(golds))]
    lines += [f"{m.name}: a student of {m.teachers}" for m in models if m.teachers]
    return "\n".join(lines)


def _own_trees(m: Pretrained) -> bool:
    """Whether the model's kind yields trees of its own (a student, a PCFG), not distances read by layer."""
    from .registry import family_of  # here: the registry loads torch, and the catalogue is read without it

    return family_of(m.kind).yields.own_trees


def _how(m: Pretrained) -> str:
    if _own_trees(m):
        from .registry import family_of

        yields = family_of(m.kind).yields
        combined = f"; {len(m.files)} combined by {m.combine}" if len(m.files) > 1 else ""
        return (yields.search + (f" (chart pruned by {m.prune})" if m.prune else "") + combined
                + ("; labels with --labels" if yields.labels and len(m.files) == 1 else ""))
    how = f"layers {','.join(map(str, m.layers)) or 'middle'}, {m.decoder} decoder"
    if len(m.files) > 1:
        how += f", {m.combine}" + (f", right-branching voter {m.right_voter:g}" if m.right_voter else "")
    return how


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
