"""The Python API: models by path or shipped name, sentences in, `nltk.Tree`s out; scores as a dataclass.

    >>> import grammar_induce as gi
    >>> parser = gi.load("ptb")                                  # doctest: +SKIP
    >>> print(parser.parse("The old man saw a dog."))            # doctest: +SKIP

The command line is a layer over these functions (flags in, this API called, output written).
torch is imported when a model loads, not before.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from . import trees
from .errors import InputError, SettingError
from .families import pretrained
from .messages import Messages

if TYPE_CHECKING:
    import nltk

    from .families.checkpoint import LoadedModel
    from .families.pretrained import ModelSpec
    from .inference.ensemble import ParseOptions
    from .inference.parsing import ParseSummary
    from .output.evaluation import Report
    from .output.formats import SentenceResult
    from .workflows.grammar import GrammarReport

LABEL = "X"  # the one label of every constituent: the trees are unlabeled


class Parser:
    """One model or an ensemble, with the settings it parses with. Make one with `load`."""

    def __init__(self, models: list[LoadedModel], options: ParseOptions, messages: Messages | None = None):
        from .inference.members import Members

        self.members = Members.of(models, options)  # checked: unfit members (and layers) are refused here, not later
        self.models = models
        self.options = options  # as asked (self.members.options: resolved)
        self.messages = messages or Messages()  # notes of how the models were read (the command line prints them)
        if self.members.chosen:  # what precision `auto` chose, once, for every parse and evaluation
            self.messages.note(self.members.chosen)

    def parse(self, sentence: str) -> nltk.Tree | None:
        """The sentence's unlabeled binary tree (every node labelled X); None for a blank sentence."""
        if not isinstance(sentence, str):
            raise TypeError(f"parse takes a sentence as a str, not {type(sentence).__name__} "
                            "(parse_many takes many, or lists of tokens)")
        return next(self.parse_many([sentence]))

    def parse_many(self, lines: Iterable[str], batch_size: int | None = None) -> Iterator[nltk.Tree | None]:
        """Trees of many sentences, in their order, read and parsed a chunk at a time (only what the trees need: no
        confidences, each member's layers up to its own once they are fixed)."""
        results, _ = self.run(lines, batch_size=batch_size, all_layers=False, confidence=False)
        for result in results:
            yield None if result.tree is None else to_nltk(result.tree, result.labels, result.is_word)

    def analyse(self, sentence: str) -> SentenceResult:
        """Everything parsing found: the words, every layer's forget and input distances per member, their
        gap scores and trees, the tree, and each constituent's confidence (`.spans`). `.to_dict()` is a line of
        `--format jsonl`."""
        return next(self.analyse_many([sentence]))

    def grammar(self, text: Iterable[str] | str | Path | None = None, gold: str | Path | None = None, *,
                treebank: str = "ptb", top: int = 5) -> GrammarReport:
        """What the induced PCFG (one model) learned: each symbol's share of the root rule and of the rules'
        children, its `top` most probable rules (a nonterminal) or words (a preterminal); with `text` (a file or
        sentences), how often each nonterminal labels a constituent of its trees and its most frequent spans; with
        `gold` trees, each nonterminal's best-matching category (`.label_map()`; many-to-one, learned from those
        trees). `.table()`, `.to_dict()`, `.map_json()` show it."""
        from .text.treebank import TagFilter
        from .workflows.grammar import read_grammar

        if isinstance(top, bool) or not isinstance(top, int) or top < 1:
            raise SettingError("top", f"must be a whole number of at least 1, not {top!r}")
        name = ""
        if isinstance(text, (str, Path)):
            from .files import read_lines

            name, text = str(text), (line for _, line in read_lines(Path(text)))
        return read_grammar(self.members, text, name or ("the sentences given" if text is not None else ""),
                            None if gold is None else str(gold), TagFilter.from_options(treebank, None), top)

    def analyse_many(self, lines: Iterable[str], batch_size: int | None = None) -> Iterator[SentenceResult]:
        return self.run(lines, batch_size=batch_size, confidence=True)[0]

    @staticmethod
    def _checked(lines: Iterable[str | Sequence[str]], pause: object) -> Iterator[str | list[str]]:
        """Each line a str (or a list of str tokens) of text: else a TypeError or ValueError saying which
        (`pause`, which the command line's reader of a pipe sends, passes through)."""
        from .files import check_text

        if isinstance(lines, (str, bytes)):
            raise TypeError("parse_many takes an iterable of sentences, not one " + type(lines).__name__ +
                            " (a str would be parsed character by character): use parse, or wrap it in a list")
        if not isinstance(lines, Iterable):
            raise TypeError(f"parse_many takes an iterable of sentences, not {type(lines).__name__}")
        k = 0
        for line in lines:
            if line is pause:
                yield line
                continue
            k += 1
            tokens = [line] if isinstance(line, str) else line
            if not isinstance(tokens, (list, tuple)):
                raise TypeError(f"sentence {k}: a str, or a list of str tokens, not {type(line).__name__}")
            for j, token in enumerate(tokens, 1):
                if not isinstance(token, str):
                    raise TypeError(f"sentence {k}: token {j} is {type(token).__name__} {token!r}, not a str")
                if not isinstance(line, str) and (not token or any(ch.isspace() for ch in token)):
                    raise ValueError(f"sentence {k}: token {j} {token!r} is " + ("empty" if not token else
                                     "more than one token (it holds a space): a token is a word with no space"))
                try:
                    check_text(token, f"sentence {k}")
                except InputError as e:
                    raise ValueError(str(e)) from None
            yield line if isinstance(line, str) else list(line)

    def run(self, lines: Iterable[str], *, batch_size: int | None = None, workers: int = 1, all_layers: bool = True,
            agreement: bool = False, messages: Messages | None = None, stream: bool | None = None,
            confidence: bool | None = None) -> tuple[Iterator[SentenceResult], ParseSummary]:
        """The parse path itself: results in input order, and a summary (the layers used, each member's
        agreement with the others when asked) complete once the results are read; `messages` advance as
        chunks are parsed and keep the notes (caps, fallbacks). `workers` > 1 parses
        in that many processes; under torchrun the processes share the input (see inference/parsing.parse). `stream`
        (default: `lines` is an iterator rather than a list) parses a batch at a time, so the first trees
        come as soon as their lines do. `confidence`: each constituent's (default: as `load` was asked)."""

        from .inference.parsing import PAUSE, parse

        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a whole number of at least 1, not {batch_size!r}")
        members = self.members
        if batch_size is not None:
            members = replace(members, options=replace(members.options, batch_size=batch_size))
        if confidence is not None:
            members = replace(members, options=replace(members.options, confidence=confidence))
        stream = not isinstance(lines, Sequence) if stream is None else stream
        if messages is None and self.members.chooses:  # what `auto` chose, and on how many lines, stays with the parser
            messages = self.messages
        results, summary = parse(members, self._checked(lines, PAUSE), workers=workers, all_layers=all_layers,
                                 agreement=agreement, messages=messages, stream=stream)
        if self.members.chooses and summary.members is not None:  # what `auto` chose holds for every later call
            if self.members.chooses_weights:  # said where a Python user reads the notes: parser.messages.notes
                from .inference.members import auto_weights_note

                self.messages.note(auto_weights_note([m.source for m in self.models], summary.auto_weights))
            self.members = replace(summary.members, options=replace(summary.members.options, batch_size=
                                                                     self.members.options.batch_size,
                                                                     confidence=self.members.options.confidence))
        return results, summary

    def __repr__(self) -> str:
        return f"Parser({', '.join(m.source for m in self.models)})"


def load(*models: str | Path, layer: int | str | Sequence[int] | None = None, distance: str | None = None,
         decoder: str | None = None, combine: str | None = None, batch_size: int = 64, precision: str = "fp32",
         device: str | None = None, right_voter: float | None = None, pretokenized: bool = False,
         labels: bool = False, weights: Sequence[float] | str | None = None, whole_lines: bool = False,
         confidence: bool = False, calibration: str | Path | None = None, label_map: str | Path | None = None,
         map_any_model: bool = False, prune: str | Path | None = None, prune_threshold: float | None = None,
         prune_mass: bool = False) -> Parser:
    """A parser from checkpoint files or shipped model names (`grammar-induce models`); several make an
    ensemble; none: the default model (en). `layer`: a number for every model, one per model, or "auto" (chosen by agreement);
    default: the middle layer, or a shipped name's own settings. `distance`: which of a model's distances make its
    tree (an ON-LSTM's forget or input, a StructFormer's parser; default: each model's first). `decoder`: paper or gap; `combine`:
    mbr (span voting) or mean (mean gap scores); `right_voter`: the weight of a right-branching tree as one
    more voter in span voting (0: none). `pretokenized`: sentences are tokens separated by spaces (already
    segmented Chinese, say), not split again. `labels`: the trees' constituents carry a PCFG's induced labels
    (NT-k) instead of X (one model that induces them). `weights`: span voting's weight of each model, "family"
    (each model weighs one over the number of models of its kind) or "auto" (by agreement, no gold: `rank`).
    A str of several sentences gets a tree per sentence, under one node (`whole_lines`: one tree over them all).
    `confidence`: `analyse` gives each constituent how sure the parser is of it (`SentenceResult.spans`: a PCFG's
    span marginal, an ensemble's share of the vote, ...; inference/ensemble.confidences); `calibration`: a file
    `evaluate --calibrate` wrote, mapping them to the share of such brackets a treebank had. `label_map`: a file
    `grammar --gold TREES --save-map` wrote: the induced labels renamed by the treebank categories they match best
    (implies `labels`; a mapping learned from gold trees, not supervised labels). A map fitted on other models is
    refused unless `map_any_model` (inference/maps.py). `prune`: a distilled student (a name or a path) whose span
    marginals prune a PCFG's chart (spans of marginal below `prune_threshold` are left out, its best tree kept:
    inference/pruning.py), "off" for the whole chart; default: a shipped PCFG's own (`ptb-pcfg`: `en`), else none;
    `prune_mass`: `analyse` says what share of the grammar's probability of each sentence the kept spans carry
    (`SentenceResult.members[k].kept_mass`; one more inside pass, over the whole chart).
    `parse_many` also takes lists of tokens (one sentence each)."""
    from .families import checkpoint
    from .runtime.distributed import resolve_device

    spec = pretrained.resolve(models, prune)
    options = parse_options(spec, layer, distance, decoder, combine, batch_size, precision, right_voter, pretokenized,
                            labels, weights, whole_lines, confidence)
    notes = list(spec.notes)
    if calibration is not None or label_map is not None:
        from .inference.maps import Calibration, LabelMap

        maps = {"calibration": calibration and Calibration.read(Path(calibration)),
                "label_map": label_map and LabelMap.read(label_map)}
        for (setting, found), given in zip(maps.items(), (calibration, label_map)):
            if found:
                notes += filter(None, [found.fitted.check(f"{setting.replace('_', ' ')} {given}", spec.paths,
                                                          map_any_model)])
        options = replace(options, calibration=maps["calibration"] or None, label_map=maps["label_map"] or None,
                          labels=options.labels or label_map is not None)
    where = resolve_device(device or "auto")
    options = replace(options, pruning=_pruning(spec, prune_threshold, prune_mass, where))
    return Parser([checkpoint.load(path, where) for path in spec.paths], options, Messages(notes=notes))


def _pruning(spec: ModelSpec, threshold: float | None, mass: bool, device):
    """The chart constraints of `spec`'s pruner (`load`'s `prune`, else a shipped PCFG's own); None for none."""
    from .families import checkpoint
    from .inference.pruning import THRESHOLD, Pruning

    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
        raise SettingError("prune_threshold", f"must be a number from 0 to 1, not {threshold!r}")
    if not isinstance(mass, bool):
        raise SettingError("prune_mass", f"must be True or False, not {mass!r}")
    if spec.pruner is None:
        return None
    return Pruning(checkpoint.load(spec.pruner, device), THRESHOLD if threshold is None else float(threshold), mass)


def parse_options(spec: ModelSpec, layer: int | str | Sequence[int] | None, distance: str | None, decoder: str | None,
                  combine: str | None, batch_size: int, precision: str, right_voter: float | None = None,
                  pretokenized: bool = False, labels: bool = False,
                  weights: Sequence[float] | str | None = None, whole_lines: bool = False,
                  confidence: bool = False) -> ParseOptions:
    """Parse settings from what was asked, else the shipped name's, else the defaults."""
    from .config import PRECISIONS
    from .inference.ensemble import COMBINERS, ParseOptions
    from .trees import DECODERS

    for setting, flag in (("pretokenized", pretokenized), ("labels", labels), ("whole_lines", whole_lines),
                          ("confidence", confidence)):
        if not isinstance(flag, bool):
            raise SettingError(setting, f"must be True or False, not {flag!r}")
    if isinstance(layer, bool):
        raise SettingError("layer", f"takes a number, one number per model, or auto, not {layer!r}")
    if distance is not None and not isinstance(distance, str):
        raise SettingError("distance", f"names a model's distances (forget, input, parser), not {distance!r}")
    for setting, value, allowed in (("decoder", decoder, DECODERS),
                                    ("combine", combine, COMBINERS), ("precision", precision, PRECISIONS)):
        if value is not None and value not in allowed:
            raise SettingError(setting, f"must be one of {', '.join(allowed)}, not {value!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise SettingError("batch_size", f"must be a whole number of at least 1, not {batch_size!r}")
    if right_voter is not None and not (isinstance(right_voter, (int, float)) and 0 <= right_voter < float("inf")):
        raise SettingError("right_voter", f"must be a finite number of at least 0, not {right_voter!r}")
    auto = layer == "auto"
    if layer is None or auto:
        layers = () if auto else spec.layers
    elif isinstance(layer, int):
        layers = (layer,)
    else:
        layers = tuple(layer) if isinstance(layer, Sequence) and not isinstance(layer, str) else (layer,)
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in layers):
            raise SettingError("layer", f"takes a number, one number per model, or auto, not {layer!r}")
    defaults = ParseOptions()
    return ParseOptions(layers=layers, auto_layers=auto, distance=distance,
                        decoder=decoder or spec.decoder,
                        combine=combine or spec.combine or defaults.combine, batch_size=batch_size, precision=precision,
                        right_voter=spec.right_voter if right_voter is None else right_voter,
                        pretokenized=pretokenized, labels=labels, weights=_weights(weights), whole_lines=whole_lines,
                        confidence=confidence)


def _weights(weights: Sequence[float] | str | None) -> tuple[float, ...] | str:
    if weights is None:
        return ()
    if isinstance(weights, str):
        return weights
    if not isinstance(weights, Sequence):
        raise SettingError("weights", f"takes a number per model or family, not {weights!r}")
    return tuple(weights)


def evaluate(predicted: Parser | Iterable[nltk.Tree | str] | Path | str, gold: str | Path, *, max_length: int = 0,
             treebank: str = "ptb", punct_tags: str | None = None, skip_bad: bool = False, baseline_seed: int = 0,
             labeled: bool = False, quiet: bool = True, pred_format: str | None = None,
             dependencies: bool = False) -> Report:
    """Score a parser, trees aligned with the gold trees (nltk.Trees or bracket strings), or a file of such
    trees (a Path, one per line; `labeled` for PTB-style trees) against gold trees with the paper's
    protocol: the numbers `grammar-induce evaluate` prints, as a Report (`.rows[name].sentence_f1`,
    `.table()`, `.to_dict()`). `treebank`: ptb or ctb, which leaves count as words (or `punct_tags`).
    `pred_format` (a file): brackets, ptb, json or jsonl, what `parse --format` wrote; default: told by its first
    character. `dependencies` (a parser with a StructFormer): also its heads' attachment scores against the gold
    trees by Collins' head rules (`Report.dependencies`)."""
    from .text.predicted import PRED_FORMATS, predicted_trees
    from .text.treebank import TagFilter
    from .workflows import scoring

    if isinstance(predicted, str):
        predicted = Path(predicted)  # a path as a str: the file of trees it names
    if not isinstance(predicted, (Parser, Path, Iterable)) or isinstance(predicted, bytes):
        raise TypeError(f"evaluate scores a parser, trees or a file of trees, not {type(predicted).__name__}")
    gold = _path("gold", gold, "a gold treebank: a file or folder of trees, or nltk:<corpus>")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 0:
        raise SettingError("max_length", f"must be a whole number of at least 0 (0: every sentence), not {max_length!r}")
    batch_size = predicted.options.batch_size if isinstance(predicted, Parser) else 64
    if not isinstance(dependencies, bool):
        raise SettingError("dependencies", f"must be True or False, not {dependencies!r}")
    if dependencies and not isinstance(predicted, Parser):
        raise SettingError("dependencies", "scores a model's dependency heads: give a parser (gi.load), not trees")
    options = scoring.EvalOptions(gold, TagFilter.from_options(treebank, punct_tags), max_length, skip_bad,
                                  batch_size, baseline_seed, quiet=quiet, dependencies=dependencies)
    if isinstance(predicted, Parser):
        return scoring.evaluate_models(predicted.members, options)
    if isinstance(predicted, Path):
        if pred_format is not None and pred_format not in PRED_FORMATS:
            raise SettingError("pred_format", f"must be one of {', '.join(PRED_FORMATS)}, not {pred_format!r}")
        return scoring.evaluate_trees(predicted, predicted_trees(predicted, pred_format), options,
                                      labeled=labeled or pred_format == "ptb")
    return scoring.evaluate_trees("trees", [(k, _checked_tree(tree, k)) for k, tree in enumerate(predicted, 1)],
                                  options, labeled=labeled)


def _path(setting: str, value: object, what: str) -> str:
    """A file or folder setting as a str, or a SettingError saying what it takes."""
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise SettingError(setting, f"takes {what} (a str or Path), not {value!r}")
    return str(value)


def _checked_tree(tree: nltk.Tree | str | None, k: int) -> nltk.Tree | str:
    if tree is None:
        raise TypeError(f"tree {k} is None: a blank sentence has no tree to score (leave its gold tree out)")
    return tree


def train(config: str | Path | None = None, out: str | Path | None = None, *, settings: dict | None = None,
          overrides: Sequence[str] = (), resume: bool = False, force: bool = False, quiet: bool = True,
          log: Callable[[str], None] | None = print, messages: Messages | None = None):
    """Train a model of the config's kind (an ON-LSTM language model, a PCFG: `model.kind = "pcfg"`, a StructFormer)
    into the run folder `out` (default: runs/<config name>), as `grammar-induce train` does: `config` a TOML file (default:
    the quick start's), then `settings` ({"run.epochs": 3, "data.train": "my.txt"}), then `overrides`
    ("section.key=value" strings, as --set); `resume` goes on from `out`/last.pt with the config it was started
    with. `log` is given each line of the training log, and each note as "note: ..." (None: silent). Ctrl-C (or
    SIGTERM) stops the run after the batch, saves last.pt, then takes effect: KeyboardInterrupt is raised.
    Returns the run's result (`out_dir`, `best_valid_ppl`, `test_ppl`, `epochs`); its model is `out`/best.pt."""
    from .training.run import read_last
    from .workflows import train as run

    for setting, flag in (("resume", resume), ("force", force), ("quiet", quiet)):
        if not isinstance(flag, bool):
            raise SettingError(setting, f"must be True or False, not {flag!r}")
    if settings is not None and not isinstance(settings, Mapping):
        raise SettingError("settings", f"take a dict of section.key -> value ({{'run.epochs': 3}}), not "
                           f"{type(settings).__name__}")
    if isinstance(overrides, str) or not all(isinstance(item, str) for item in overrides):
        raise SettingError("overrides", f"take a list of 'section.key=value' strings, not {overrides!r}")
    if log is not None and not callable(log):
        raise TypeError(f"log takes a function of one str (print, say) or None, not {type(log).__name__}")
    source = Path(_path("config", config, "a TOML config file")) if config is not None else QUICKSTART_CONFIG
    out = Path(_path("out", out, "the run folder")).expanduser() if out is not None else Path("runs") / source.stem
    if messages is None:
        messages = Messages(say=log, tell=lambda text: log(f"note: {text}")) if log else Messages()
    if resume and config is not None:
        messages.note(f"{source} is not read: a resumed run goes on with the config it was started with "
                      f"({out / 'config.toml'}); settings and --set change what may change")
    last = read_last(out) if resume else None  # read once: its config, then its weights and state
    checked = _train_config(last["config"] if last else None, source, settings or {}, overrides)
    checked = _teachers_pinned_by_path(checked, resume)
    teachers = {name: _tree_maker(name, checked.run.device) for name in getattr(checked.train, "focus", ())
                if _is_model(name)}
    result = run.train(checked, out, resume=resume, force=force, quiet=quiet, messages=messages, teachers=teachers,
                       last=last)
    if result.stopped_by is not None:  # last.pt is saved: now the signal does what it would have (Ctrl-C raises
        signal.raise_signal(result.stopped_by)  # KeyboardInterrupt), so the caller's script does not carry on
    return result


def _train_config(resumed: dict | None, source: Path, settings: Mapping, overrides: Sequence[str]):
    """The config `train` runs: a resumed run's own (`resumed`) or the file's, then `settings`, then `overrides`;
    a value given here that cannot be used is a SettingError (a ValueError) in the API's words."""
    from . import config as config_module
    from .families import registry

    raw = registry.CONFIGS.migrated(resumed) if resumed is not None else config_module.read_toml(source)
    if settings:  # the file's own kind, refused as the file's (not as the first setting's)
        try:
            family = registry.CONFIGS.family_of(config_module.kind_in(raw))
        except config_module.ConfigError as e:
            raise config_module.ConfigError(f"{source}: {e}") from None
    for key, value in settings.items():
        section, dot, name = str(key).partition(".")
        if not dot or section not in config_module.SECTIONS:
            raise SettingError("settings", f"are keyed section.key (run.epochs), not {key!r}")
        try:
            raw.setdefault(section, {})[name] = registry.CONFIGS.checked_value(section, name, value, family)
        except config_module.ConfigError as e:
            raise _setting_error(str(key), value, str(e)) from None
    given = {str(key): "settings" for key in settings} | {item.partition("=")[0].strip(): f"overrides {item}"
                                                         for item in overrides}
    try:
        return registry.CONFIGS.from_sources(registry.CONFIGS.apply_overrides(raw, list(overrides), str(source)),
                                             str(source), given)
    except config_module.ConfigError as e:  # a value given here, in the API's words: a ValueError
        how, _, text = str(e).partition(": ")
        if how == "settings":
            key = text.split(" ", 1)[0]
            raise _setting_error(key, settings[key], text) from None
        if how.startswith("overrides "):  # on the command line, --set
            item = how.removeprefix("overrides ")
            raise SettingError("overrides", f"{item}: {text}", flag="--set") from None
        raise


def _setting_error(key: str, value: object, text: str) -> SettingError:
    """A bad value in `train`'s settings, in the API's words (`settings run.epochs must be positive`); the command
    line, whose flags it holds, names the flag (`--max-minutes -1: ...`)."""
    detail = text if text.startswith(f"{key} ") else f"{key}: {text}"
    from .config import flag_text

    return SettingError("settings", detail, flag=f"{flag_text(key, value)}:")


def sample(model: str | Path = "ptb-pcfg", n: int = 10, *, seed: int | None = None,
           max_length: int = 40) -> list[nltk.Tree]:
    """`n` sentences drawn from a PCFG (a shipped name or a checkpoint) with their trees: each node labelled with its
    symbol (`NT-k`, and `T-k` over each word), every sentence of 2 to `max_length` words; the same `seed` (default:
    the project's one, config.SEED), the same sentences (the first k of n are those of k)."""
    return list(samples(model, n, seed=seed, max_length=max_length))


def samples(model: str | Path = "ptb-pcfg", n: int = 10, *, seed: int | None = None,
            max_length: int = 40) -> Iterator[nltk.Tree]:
    """`sample`'s sentences one at a time, as they are drawn (a chunk at a time: memory flat in `n`); the model
    and the settings are checked before the first."""
    import itertools

    import nltk
    import torch

    from .config import SEED
    from .families import checkpoint

    seed = SEED if seed is None else seed
    for setting, value, least in (("n", n, 1), ("max_length", max_length, 2), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise SettingError(setting, f"must be a whole number of at least {least}, not {value!r}")
    spec = pretrained.resolve([model])
    if len(spec.paths) != 1:
        raise SettingError("model", f"{model}: names {len(spec.paths)} models; sentences are drawn from one PCFG")
    loaded = checkpoint.load(spec.paths[0])
    if loaded.family.grammar is None:
        raise SettingError("model", f"{model}: {loaded.family.description} is not a grammar to draw sentences from "
                           "(a PCFG is: model.kind = \"pcfg\")")
    with torch.no_grad():
        grammar = loaded.model.grammar()
    drawn = loaded.family.grammar.samples(grammar, loaded.vocab.words, torch.Generator().manual_seed(seed), max_length)
    return (nltk.Tree.fromstring(s.ptb) for s in itertools.islice(drawn, n))


def _teachers_pinned_by_path(config, resume: bool):
    """`train.focus` with every teacher that is a file (of trees, a checkpoint) by its absolute path, as the run's
    config keeps it (a name stays a name): however it was given (a config file, --set, `settings`), the run resumes
    from any folder. A teacher no longer there is refused naming where it was set."""
    given = getattr(config.train, "focus", ())
    if not given:
        return config
    for name in given:
        if pretrained.find(name) is None and not Path(name).exists():
            raise SettingError("focus", f"{name}: " + ("the resumed run's teacher (train.focus of its config.toml) is "
                                                     "no longer there: restore it, or start a new run" if resume else
                                                     "neither a file of trees nor a checkpoint nor a shipped model's "
                                                     "name (grammar-induce models lists the names)"))
    if resume:  # as the run was started (a run of an earlier version may keep a relative path: the same file)
        return config
    pinned = tuple(name if pretrained.find(name) is not None else str(Path(name).resolve()) for name in given)
    return replace(config, train=replace(config.train, focus=pinned))


def _is_model(name: str) -> bool:
    """Whether a focusing teacher is a model (a shipped name, a checkpoint: a zip, as torch saves) or a file of
    trees."""
    from .files import is_zip

    if pretrained.find(name) is not None:
        return True
    try:
        return is_zip(name)
    except OSError:
        raise SettingError("focus", f"{name}: neither a file of trees nor a checkpoint nor a shipped model's name "
                           "(grammar-induce models lists the names)") from None


def _tree_maker(name: str, device: str):
    """A model teacher of `train.focus` as the training workflow takes it: loaded when it first parses (a run whose
    teacher's trees are all in the cache never loads it), parsing the training words as they are."""
    from .inference.teachers import TreeMaker
    from .text.corpus import file_hash

    spec = pretrained.resolve([name])
    parser: list[Parser] = []

    def parse(sentences: list[list[str]]) -> list:
        if not parser:
            parser.append(load(name, whole_lines=True, batch_size=256, device=device))
        return [result.tree for result in parser[0].analyse_many(sentences)]

    kinds = sorted({_kind_of(path) for path in spec.paths})
    pruned = [f"pruned by {file_hash(spec.pruner)}"] if spec.pruner else []  # as it parses
    return TreeMaker("+".join(kinds), " ".join([*(file_hash(path) for path in spec.paths), *pruned]), parse)


def _kind_of(path: Path) -> str:
    from .families import checkpoint

    return checkpoint.read(path)["config"].get("model", {}).get("kind", "onlstm")


RESOURCES = Path(__file__).resolve().parent / "resources"  # shipped inside the package
QUICKSTART_CONFIG = RESOURCES / "quickstart.toml"  # what `train` runs without a config (the quick start)
QUICKSTART_GOLD = RESOURCES / "synthetic" / "test.trees"  # what `evaluate` scores against without --gold


def distill(*teachers: str | Path, train: str | Path, valid: str | Path, out: str | Path, layer=None,
            distance: str | None = None, decoder: str | None = None, combine: str | None = None, batch_size: int = 64,
            precision: str = "fp32", device: str | None = None, right_voter: float | None = None,
            weights: Sequence[float] | str | None = None, log: Callable[[str], None] | None = print,
            force: bool = False, resume: bool = False, **settings) -> Parser:
    """Train a student parser on the trees an ensemble of `teachers` (paths or shipped names, parsing
    as `load` would) makes of the text `train`; the epoch kept is chosen by agreement with the ensemble
    on `valid` (no gold trees). `settings`: those of distillation.DistillSettings (epochs, rounds,
    confident, student_batch_size, keep, ...). A folder holding a student already is refused unless
    `force`; `resume` goes on with an interrupted run (kept in `out`.partial). `log` is given a line per
    round and epoch, and each note as "note: ..." (None: silent).
    Returns the student as a Parser; its checkpoint is `out`/best.pt."""
    from .workflows.distillation import DistillSettings
    from .workflows.distillation import distill as run

    if not teachers:
        raise SettingError("teachers", "are missing: give one or more models (paths or shipped names) whose trees "
                           "the student learns")
    for setting, value in (("train", train), ("valid", valid)):
        _path(setting, value, "a text file, one sentence per line")
    out = Path(_path("out", out, "the student's output folder")).expanduser()

    try:
        checked = DistillSettings(**settings)
    except TypeError as e:  # a setting that does not exist
        raise InputError(f"distill: {str(e).split('__init__() ')[-1]}") from None
    teacher = load(*teachers, layer=layer, distance=distance, decoder=decoder, combine=combine,
                   batch_size=batch_size, precision=precision, device=device, right_voter=right_voter,
                   weights=weights)
    messages = Messages(say=log, tell=lambda text: log(f"note: {text}")) if log else None
    best = run(teacher.models, str(train), str(valid), Path(out), teacher.options, checked, messages, force, resume)
    return load(best, batch_size=batch_size, device=device)


def to_nltk(tree: trees.Tree, labels: dict[tuple[int, int], str] | None = None,
            is_word: Sequence[bool] | None = None) -> nltk.Tree:
    """Our nested-list tree as an nltk.Tree, every constituent labelled X (a one-word sentence: (X word)), or
    with its induced label (`labels` by the words a node covers, as trees.node_labels reads them)."""
    import nltk

    if isinstance(tree, str):
        return nltk.Tree(LABEL, [tree])
    if not labels:
        return trees.rebuild(tree, lambda children: nltk.Tree(LABEL, children))
    names = iter(trees.node_labels(tree, labels, is_word, order="close"))
    return trees.rebuild(tree, lambda children: nltk.Tree(next(names), children))

