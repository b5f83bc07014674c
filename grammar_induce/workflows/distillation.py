"""Distillation: an ensemble parses the training text, a span-based student (families/student/model.py) learns its
trees, and optionally parses again beside the teachers for more rounds (self-training).

Nothing here looks at gold trees: each round keeps the epoch whose trees agree best (sentence F1) with
that round's targets on the held-out text. Writes `round-K.pt` per round, `best.pt` (the last round's)
and `distill.jsonl` (a line per epoch) into the output folder.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from .. import trees
from ..config import SEED, Config, ConfigError, RunConfig
from ..errors import InputError
from ..families import checkpoint, pretrained, registry
from ..families.checkpoint import LoadedModel
from ..families.family import Family
from ..families.kind import ModelKind
from ..families.reading import Reading
from ..families.student.recipe import SpanTargets
from ..families.student.settings import EPOCHS_PER_ROUND
from ..files import atomic_write, read_lines, refuse_overwriting
from ..inference.ensemble import ParseOptions, combine, layers_named, mean_chart
from ..inference.members import Members, check_members, read_sentences, token_ids
from ..inference.voting import span_votes
from ..messages import Messages, plural
from ..metrics import SpanMetric
from ..output import draw
from ..runtime import rundir
from ..runtime.rundir import append_metrics
from ..text.tokenizer import EOS, Vocab
from ..training.loop import fit
from ..training.run import student_run
from ..trees import Tree

STUDENT: Family = registry.distilled()  # the family distill trains
_SIZES, _TRAINING = STUDENT.model_config(), STUDENT.train_config()  # its defaults, kept in its settings.py


@dataclass(frozen=True)
class DistillSettings:
    epochs: int = EPOCHS_PER_ROUND
    rounds: int = 1  # 1: learn the teachers' trees; more: re-parse with the student beside them and learn again
    confident: bool = False  # learn only the spans most members agree on (the rest of each tree is free)
    # the weight of the soft targets, the members' mean span marginals (structural KD), beside their tree (0: the tree
    # alone; 1: the marginals alone); every member must have span marginals (a PCFG, a student)
    soft: float = 0.0
    student_batch_size: int = _TRAINING.batch_size  # sentences per optimizer step
    lr: float = _TRAINING.lr  # Adam
    max_length: int = 40  # training sentences of at most this many words (the CRF is cubic in the length)
    emb_size: int = _SIZES.emb_size
    hidden_size: int = _SIZES.hidden_size
    n_layers: int = _SIZES.n_layers  # of the BiLSTM
    dropout: float = _SIZES.dropout
    seed: int = SEED
    # which epoch a round keeps: the one whose trees agree best with the targets on the held-out text,
    # or the last (a fixed budget: the best agreement also copies the teachers' errors best)
    keep: str = _TRAINING.keep
    # a model (a shipped name or a file: an ON-LSTM language model, say) whose word embeddings start the student's
    # (`embedding_start`); "": a random start
    embeddings: str = ""

    def __post_init__(self) -> None:
        """Settings checked before any teacher parses, in the API's words."""
        for name in ("epochs", "rounds", "student_batch_size", "max_length", "emb_size", "hidden_size", "n_layers"):
            value = getattr(self, name)
            least = 3 if name == "max_length" else 1  # a sentence of 1 or 2 words has only one tree
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InputError(f"{name} must be a whole number of at least {least}, "
                                 f"got {value!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise InputError(f"lr must be a positive number, got {self.lr!r}")
        if isinstance(self.soft, bool) or not (isinstance(self.soft, (int, float)) and 0 <= self.soft <= 1):
            raise InputError(f"soft must be a weight from 0 to 1, got {self.soft!r}")
        if not (isinstance(self.dropout, (int, float)) and 0 <= self.dropout < 1):
            raise InputError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.keep not in ("agreement", "last"):
            raise InputError(f"keep must be agreement or last, got {self.keep!r}")
        if not isinstance(self.embeddings, str):
            raise InputError(f"embeddings must be a model's name or file, got {self.embeddings!r}")


@dataclass
class Targets:
    """What a round learns from: per sentence, the ensemble's tree, the spans a majority of members hold and (soft
    targets) the members' mean chart of span marginals, in float16."""

    words: list[list[str]]
    trees: list[Tree]
    confident: list[set[tuple[int, int]]]
    marginals: list[torch.Tensor] | None = None


def distill(teachers: list[LoadedModel], train_path: str, valid_path: str, out_dir: Path, options: ParseOptions,
            settings: DistillSettings, messages: Messages | None = None, force: bool = False,
            resume: bool = False) -> Path:
    """Train a student on the teachers' trees of `train_path` (rounds of self-training after the first);
    returns the path of its best.pt.

    The run works in OUT.partial beside the output folder and moves its files (best.pt, round-K.pt,
    distill.jsonl) into OUT only when it finishes, so a previous student (replaced only with `force`) is
    whole until then; a folder holding anything else as best.pt is never written over. Once the teachers have
    parsed, the work folder holds what `resume` needs to go on from where the run stopped (inside an epoch too); a
    run that fails before that leaves no folder behind. `messages`: where a line per round and epoch goes (default: nowhere)."""
    messages = messages or Messages()
    if not teachers:
        raise InputError("no teachers: give one or more models whose trees the student learns")
    check_members(teachers)
    if settings.soft and (lacking := [t.source for t in teachers if not t.family.yields.marginals]):
        raise InputError(f"soft targets are the teachers' span marginals, and {', '.join(lacking)} has none (only a "
                         "PCFG and a distilled student have them)")
    options = replace(options, marginals=bool(settings.soft))
    out_dir = Path(out_dir)
    work = out_dir.with_name(out_dir.name + ".partial")
    written = [out_dir / name for name in _student_files(settings.rounds)]
    refuse_overwriting({f"the student's {path.name}": path for path in written},
                       [t.source for t in teachers] + [train_path, valid_path])
    _check_output_folder(out_dir, work, force, resume)
    state = _read_state(work) if resume else None
    if state is not None and state["settings"] != asdict(settings):
        raise InputError(f"{work}: the interrupted run's settings differ ({state['settings']}); resume it with them")
    train_words, valid_words = sentences_of(train_path, teachers[0]), sentences_of(valid_path, teachers[0])
    learnable(train_words, settings.max_length, train_path)  # before the teachers parse anything
    created = not work.exists()
    work.mkdir(parents=True, exist_ok=True)
    lock = rundir.take_lock(work, "distill into another --out")
    try:
        _rounds(teachers, train_words, valid_words, options, settings, work, messages, state, (train_path, valid_path))
    except BaseException:
        rundir.release_lock(work, lock)
        if created and not (work / STATE).exists():  # nothing to resume: leave no folder behind
            shutil.rmtree(work, ignore_errors=True)
        elif (work / STATE).exists():
            messages.note(f"stopped: the run so far is in {work}; the same command with --resume goes on from there")
        raise
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in _student_files(settings.rounds):
        os.replace(work / name, out_dir / name)
    shutil.rmtree(work, ignore_errors=True)
    lock.close()  # its file went with the folder
    return out_dir / "best.pt"


STATE = "resume.pt"  # in the work folder: the round reached, the settings and options (the round's own last.pt holds its training)


def _student_files(rounds: int) -> list[str]:
    return ["best.pt", "distill.jsonl", *(f"round-{k}.pt" for k in range(1, rounds + 1))]


def _check_output_folder(out_dir: Path, work: Path, force: bool, resume: bool) -> None:
    """Refuse an output that is not a folder, a folder whose best.pt is not a student (whatever `force`
    says), a student without `force`, and an interrupted run's folder without `resume` (or `resume`
    without one)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: is a file, not a folder")
    if (holder := rundir.lock_holder(work)) is not None:
        raise InputError(f"{out_dir}: in use by {holder}; wait for it or distill into another --out")
    best = out_dir / "best.pt"
    others = sorted(p.name for p in out_dir.iterdir()) if out_dir.is_dir() and not best.exists() else []
    if others:
        raise InputError(f"{out_dir}: holds other files ({', '.join(others[:4])}{', ...' if len(others) > 4 else ''}) "
                         "and no student: distill writes into a new or empty folder (or over a student, with --force)")
    if best.exists():
        family, described = _checkpoint_family(best)
        if family is None or not family.is_distilled:
            raise InputError(f"{out_dir}: its best.pt is {described}, not a distilled student: it is never written "
                             "over; choose another --out")
        if not force:
            raise InputError(f"{out_dir}: holds a student (best.pt); use --force to replace it or another --out")
    if resume and not (work / STATE).exists():
        raise InputError(f"{work}: no interrupted distillation to resume")
    if not resume and work.exists():
        raise InputError(f"{work}: holds an interrupted distillation: add --resume to go on with it, or remove it")


def _checkpoint_family(path: Path) -> tuple[Family | None, str]:
    """The family of a checkpoint's model (None: not one this installation knows) and how a message names it."""
    try:
        name = checkpoint.read(path)["config"]["model"]["kind"]
    except (InputError, KeyError, TypeError):
        return None, "not a grammar-induce checkpoint"
    try:
        family = registry.family_of(name)
    except ConfigError:
        return None, f"a model of an unknown kind ({name})"
    return family, f"{family.description} ({name})"


def _read_state(work: Path) -> dict:
    return torch.load(work / STATE, map_location="cpu", weights_only=True)


def _rounds(teachers: list[LoadedModel], train_words: list[list[str]], valid_words: list[list[str]],
            options: ParseOptions, settings: DistillSettings, work: Path, messages: Messages,
            state: dict | None, texts: tuple[str, str]) -> None:
    """Every round in the work folder, from where `state` stopped; the last round's student is best.pt."""
    members = list(teachers)
    first = state["round"] if state else 1
    for round_number in range(1, settings.rounds + 1):
        path = work / f"round-{round_number}.pt"
        if round_number < first:  # finished before the interruption
            fixed = _saved_options(options, state)
        else:
            began = time.time()
            if state and round_number == first:
                fixed = _saved_options(options, state)
                saved = torch.load(work / _targets_file(round_number), map_location="cpu", weights_only=True)
                train_targets = _targets_from(train_words, saved["train"])
                valid_targets = _targets_from(valid_words, saved["valid"])
            else:
                train_targets, fixed = ensemble_targets(members, train_words, options)
                valid_targets, _ = ensemble_targets(members, valid_words, fixed)
                _save(work / _targets_file(round_number), {"train": _saved_targets(train_targets),
                                                           "valid": _saved_targets(valid_targets)})
                own_trees = [m.family.yields.own_trees for m in members]
                messages.say(f"round {round_number}: {len(members)} members "
                    f"(layers {layers_named(fixed.layers, own_trees, ', ')}, {fixed.combine}"
                    + (f", weights {','.join(f'{w:.3f}' for w in fixed.weights)}"
                       if options.weights == "auto" and isinstance(fixed.weights, tuple) else "")
                    + f") parsed {len(train_words):,} training and {len(valid_words):,} held-out "
                    f"sentences in {time.time() - began:.0f} s")
                _save(work / STATE, {"round": round_number, "settings": asdict(settings),
                                     "options": _options_state(fixed)})
            student = train_student(teachers[0], train_targets, valid_targets, settings, round_number, work, messages,
                                    resume=bool(state) and round_number == first)
            made = provenance(teachers, *texts, len(train_words), fixed, settings, round_number)
            checkpoint.save(path, student.model, student.vocab, student.tokenizer, student.config, provenance=made)
        # the next round's ensemble: the teachers with their layers, and the student, voting on spans
        members = [*teachers, checkpoint.load(path, teachers[0].model.device)]
        options = replace(fixed, layers=(*fixed.layers[: len(teachers)], 1), combine="mbr",
                          weights=(*fixed.weights[: len(teachers)], 1.0) if fixed.weights else ())
    student = members[-1]
    checkpoint.save(work / "best.pt", student.model, student.vocab, student.tokenizer, student.config,
                    provenance=student.provenance)


def _targets_file(round_number: int) -> str:
    return f"targets-{round_number}.pt"  # in the work folder: a round's targets, for resuming within it


def _saved_options(options: ParseOptions, state: dict) -> ParseOptions:
    saved = state["options"]
    return replace(options, **{**saved, "layers": tuple(saved["layers"]), "weights": tuple(saved.get("weights", ()))})


def _targets_from(words: list[list[str]], saved: dict) -> Targets:
    return Targets(words, saved["trees"], [set(map(tuple, spans)) for spans in saved["confident"]],
                   saved.get("marginals"))


def _saved_targets(targets: Targets) -> dict:
    return {"trees": targets.trees, "confident": [sorted(spans) for spans in targets.confident],
            "marginals": targets.marginals}


def provenance(teachers: list[LoadedModel], train_path: str, valid_path: str, sentences: int, options: ParseOptions,
               settings: DistillSettings, rounds: int) -> dict:
    """What a student was made from, carried in its checkpoint: teachers, texts, settings (each teacher's layer, None
    for one that reads none: a PCFG, a student)."""
    return {"kind": "distilled", "teachers": [t.source for t in teachers],
            "teacher_kinds": [t.config.model.kind for t in teachers], "train": str(train_path),
            "valid": str(valid_path), "training_sentences": sentences, "rounds": rounds,
            "layers": [None if t.family.yields.own_trees else layer for t, layer in zip(teachers, options.layers)],
            "decoder": options.decoder, "combine": options.combine,
            "right_voter": options.right_voter, "weights": list(options.weights), "distance": options.distance,
            "settings": asdict(settings)}


def sentences_of(path: str, model: LoadedModel) -> list[list[str]]:
    """The words a model reads of each non-blank line (punctuation set aside, as `parse` does)."""
    sentences = []
    for _, line in read_lines(path):
        tokens, is_word = model.tokenizer.read(line, model.vocab.index)
        if words := [t for t, word in zip(tokens, is_word) if word]:
            sentences.append(words)
    if not sentences:
        raise InputError(f"{path}: no sentences")
    return sentences


def ensemble_targets(models: list[LoadedModel], sentences: list[list[str]], options: ParseOptions
                     ) -> tuple[Targets, ParseOptions]:
    """The ensemble's trees and the spans most members hold; and the options with the layers fixed
    (`auto`: chosen on the first chunk)."""
    found: list[Tree] = []
    confident: list[set[tuple[int, int]]] = []
    charts: list[torch.Tensor] = []
    for parsed in Members.of(models, options).parse(sentences):  # the readings are held a chunk at a time
        part = targets_of(parsed.readings, parsed.options)
        found += part.trees
        confident += part.confident
        charts += part.marginals or []
        options = parsed.options
    return Targets(sentences, found, confident, charts if options.marginals else None), options


def targets_of(readings: list[list[Reading]], options: ParseOptions) -> Targets:
    """The targets of sentences the members have read (`readings`: per member, per sentence), with the
    members' layers fixed in `options`: the ensemble's trees and the spans most members hold."""
    members = [list(column) for column in zip(*readings)]
    found = combine(members, list(options.layers), options)
    confident = [_majority([p.tree(layer, options.distance, options.decoder) for p, layer in zip(column, options.layers)])
                 for column in members]
    charts = [mean_chart(column, options.weights).half() for column in members] if options.marginals else None
    return Targets([column[0].words for column in members], found, confident, charts)


def _majority(trees_of_members: list[Tree]) -> set[tuple[int, int]]:
    """The spans more than half the members hold (they never cross: two majorities share a member)."""
    return {span for span, count in span_votes(trees_of_members).items() if 2 * count > len(trees_of_members)}


def learnable(sentences: list[list[str]], max_length: int, source: str = "the training text") -> list[int]:
    """The sentences a student learns from: 3 to `max_length` words (one of 1 or 2 words has only one tree)."""
    usable = [k for k, words in enumerate(sentences) if 3 <= len(words) <= max_length]
    if not usable:
        raise InputError(f"{source}: none of its {plural(len(sentences), 'sentence')} has 3 to {max_length} words "
                         "(a sentence of 1 or 2 words has only one tree): nothing to learn from")
    return usable


def train_student(teacher: LoadedModel, train: Targets, valid: Targets, settings: DistillSettings,
                  round_number: int, out_dir: Path, messages: Messages, resume: bool = False) -> LoadedModel:
    """A new student trained on `train`'s trees (or confident spans) through the one training loop, in
    out_dir/round-K (last.pt after every epoch: `resume` goes on from it); the epoch kept is the one whose trees
    agree best with `valid`'s (or the last, settings.keep). Appends the round's epochs to out_dir/distill.jsonl."""
    folder = out_dir / f"round-{round_number}"
    folder.mkdir(parents=True, exist_ok=True)
    config = _student_config(teacher, settings, round_number)
    device = teacher.model.device
    ids = [token_ids(teacher, words) for words in train.words]
    spans = train.confident if settings.confident else [trees.spans(t, whole=True) for t in train.trees]
    recipe = STUDENT.distilled_by

    def agreement(model: ModelKind) -> float:
        return agreement_with(LoadedModel(model, teacher.vocab, teacher.tokenizer, config, str(folder / "best.pt")), valid)

    targets = SpanTargets(ids, spans, learnable(train.words, settings.max_length), teacher.vocab.index[EOS],
                          train.marginals if settings.soft else None)
    text = recipe.text_of(teacher.tokenizer, teacher.vocab, targets, len(valid.words), agreement)
    start = embedding_start(settings.embeddings, teacher.vocab, config) if settings.embeddings else None
    run = student_run(config, folder, STUDENT, device, resume=resume, init=start)
    result = fit(run, lambda cfg, model, phase: recipe(cfg, model, text, device, run.world, phase), len(teacher.vocab),
                 quiet=True, messages=messages, after_epoch=[("curves.svg", draw.write_run_curves)])
    if result.stopped_by is not None:
        raise KeyboardInterrupt  # distill notes where the run is and how to resume it
    for record in rundir.read_metrics(folder):  # every epoch of the round, the resumed run's and those before
        append_metrics(out_dir / "distill.jsonl", {"round": round_number, "epoch": record["epoch"], "loss": record["loss"],
                                                   "valid_agreement_f1": record["valid_agreement_f1"],
                                                   "seconds": round(record["seconds"], 1)})
    best = checkpoint.load(folder / "best.pt", device)
    best.model.eval()
    return best


def embedding_start(source: str, vocab: Vocab, config: Config) -> dict:
    """A start for the student (a checkpoint's parts, as `train.init` gives): the word embeddings of `source` (a model
    by name or file that has them: an ON-LSTM, a StructFormer, a student) reduced to the student's size by their
    principal components, scaled to the spread of its own random start (1), each word by its spelling (a word the
    source lacks starts at 0); the rest of the student as it is initialised."""
    loaded = checkpoint.load(pretrained.one_file(source, "embeddings"))
    table = getattr(loaded.model, "embedding", None)
    size = config.model.emb_size
    if not isinstance(table, torch.nn.Embedding) or table.weight.shape[1] < size:
        raise InputError(f"embeddings {source}: {loaded.family.description} has no word embeddings of at least "
                         f"{size} values (the student's --emb-size)")
    weights = table.weight.detach().float().cpu()
    centred = weights - weights.mean(0)
    directions = torch.linalg.svd(centred, full_matrices=False).Vh[:size]  # the principal components, (size, E)
    reduced = centred @ directions.t()
    reduced /= reduced.std()
    start = torch.zeros(len(vocab), size)
    theirs = loaded.vocab.index
    for k, word in enumerate(vocab.words):
        if word in theirs:
            start[k] = reduced[theirs[word]]
    return {"state_dict": {"embedding.weight": start}, "config": config.to_dict(), "vocab": list(vocab.words)}


def _student_config(teacher: LoadedModel, settings: DistillSettings, round_number: int) -> Config:
    """The student's model and how it trains (a round's own seed); its text settings are the teacher's."""
    model = STUDENT.model_config(kind=STUDENT.name, emb_size=settings.emb_size, hidden_size=settings.hidden_size,
                                 n_layers=settings.n_layers, dropout=settings.dropout)
    train = STUDENT.train_config(batch_size=settings.student_batch_size, lr=settings.lr, keep=settings.keep,
                                 round=round_number, soft=settings.soft)
    run = RunConfig(epochs=settings.epochs, seed=settings.seed + round_number, device=str(teacher.model.device))
    return Config(model=model, data=teacher.config.data, train=train, run=run)


def _save(path: Path, state: dict) -> None:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write(path, lambda f: f.write(buffer.getbuffer()))


def _options_state(options: ParseOptions) -> dict:
    return {"layers": list(options.layers), "auto_layers": False, "combine": options.combine,
            "decoder": options.decoder, "distance": options.distance, "right_voter": options.right_voter,
            "weights": list(options.weights)}


def agreement_with(student: LoadedModel, targets: Targets, batch_size: int = 64) -> float:
    """Sentence F1 of the student's trees against the targets' trees (no gold trees)."""
    parsed = read_sentences(student, targets.words, batch_size)
    total = SpanMetric()
    for p, tree in zip(parsed, targets.trees):
        total += SpanMetric.of(trees.spans(p.tree(1)), trees.spans(tree))
    return total.sentence_f1
