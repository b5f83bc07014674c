"""The command line: parse flags, call one workflow, print. The only module that imports click.

torch and jieba are imported inside the commands so `grammar-induce --help` stays fast.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import click

from . import config as config_module
from .api import QUICKSTART_CONFIG, QUICKSTART_GOLD
from .families.pretrained import DEFAULT_MODEL, shown
from .families.student.settings import (  # distill's student: torch-free
    EPOCHS_PER_ROUND,
    KEEPS,
    StudentConfig,
    StudentTrainConfig,
)
from .inference.ensemble import COMBINERS
from .messages import clipped
from .output.formats import ALL_LAYERS, CONFIDENT, DEPENDENCY, FORMATS, LABELLED, PICTURES
from .runtime import memory
from .trees import DECODERS

OUT_OF_MEMORY = "not enough memory for this model, batch or input: try smaller sizes or a smaller --batch-size"


def user_errors(command):
    """Report a user's mistake (bad file, bad config) as one line and a non-zero exit, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from .errors import SettingError, UserError

        _terminate_on_sigterm()
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)  # the shell's convention for Ctrl-C
        except SettingError as e:
            raise click.ClickException(e.as_flag()) from None
        except UserError as e:
            raise click.ClickException(str(e)) from None
        except MemoryError:
            raise click.ClickException(OUT_OF_MEMORY) from None
        except RuntimeError as e:  # torch.OutOfMemoryError on a GPU; its CPU allocator's RuntimeError on a CPU
            torch = sys.modules.get("torch")  # loaded by whatever ran out of memory; never imported here
            if (torch is not None and isinstance(e, torch.OutOfMemoryError)) or "can't allocate memory" in str(e):
                raise click.ClickException(f"{OUT_OF_MEMORY} ({clipped(str(e), 160)})") from None
            raise
        except RecursionError:
            raise click.ClickException("the input is nested too deeply to process") from None
        except BrokenPipeError:  # `grammar-induce parse ... | head`: the reader has what it wanted
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
            sys.exit(0)
        except OSError as e:  # writing to standard output failed: a full disk, a closed terminal
            where = e.filename or "standard output"
            raise click.ClickException(f"{where}: cannot write ({e.strerror or e})") from None

    return wrapper


def _terminate_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C (temporary files and folders are removed on the way out) and exits
    143; training turns it into a stop after the current batch instead (training/loop.py)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _note(text: str) -> None:
    click.echo(f"note: {text}", err=True)


def _messages(**more):
    """A workflow's messages on the command line: log lines to stdout, notes to stderr as they come."""
    from .messages import Messages

    return Messages(say=click.echo, tell=_note, **more)


def _ignored(options: Iterable[str], why: str) -> None:
    """Say which options the user gave that have no effect here."""
    context = click.get_current_context()
    flags = {param.name: param.opts[0] for param in context.command.params}
    given = [flags[name] for name in options
             if context.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
    if given:
        _note(f"{', '.join(given)} {'has' if len(given) == 1 else 'have'} no effect {why}")


def _no_votes(weights: str | None) -> None:
    """Say that weights of all 0 leave span voting nothing to count (every tree is as good: ties go leftmost)."""
    numbers = _weights(weights)
    if isinstance(numbers, tuple) and numbers and not any(numbers):
        _note(f"--weights {weights} gives no model a vote: span voting counts nothing and every tree ties (the "
              "leftmost splits win)")


def renamed_option(old: str, new: str):
    """A hidden option under a name that was renamed: given, it is a usage error that says the new name (click
    alone would suggest the nearest spelling of another option)."""
    def refuse(context: click.Context, param: click.Parameter, value: object) -> None:
        if value is not None:
            raise click.UsageError(f"{old} is now {new}")

    return click.option(old, default=None, hidden=True, expose_value=False, help=f"renamed {new.split()[0]}",
                        callback=refuse)


def precision_option(default: str | None):
    shown = f"[default: {default}]" if default else "[default: the config's]"
    return click.option("--precision", type=click.Choice(config_module.PRECISIONS), default=default,
                        help="matrix products in float32, in bfloat16 (needs CPU or GPU bfloat16 hardware; "
                        f"several times faster where it pays), or auto: whichever runs this work faster here, measured at the "
                        f"start and said {shown}")


def seed_option(what: str, from_config: bool = False):
    """--seed: one default for every command (config.SEED); `train` takes its config's, which is that too unless
    the config sets another."""
    shown = f"the config's, else {config_module.SEED}" if from_config else str(config_module.SEED)
    return click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=None if from_config else config_module.SEED,
                        help=f"random seed {what} [default: {shown}]")


def device_option(command):
    return click.option("--device", default=None, help="auto, cpu, cuda or cuda:N [default: auto]")(command)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="grammar-induce", prog_name="grammar-induce")
def main() -> None:
    """Unsupervised grammar induction: trees from raw text without a treebank, by three families of models, the
    ON-LSTM (Shen et al., ICLR 2019), the TN-PCFG (Yang et al., NAACL 2021) and StructFormer (Shen et al., ACL 2021),
    their ensembles and students distilled from them. With no --model, parse and evaluate use the shipped `en`."""
    memory.ask_for_huge_pages()  # every command, before any tensor (runtime/memory.py)
    memory.keep_freed_memory()  # the process is the command's: a parse's batches reuse what the last one freed


def config_options(command):
    """Options shared by `train` and `prepare`: the config, how its text is read, and --set."""
    for option in reversed([
        click.option("--config", "config_path", type=click.Path(path_type=Path), default=None,
                     help="TOML config [default: the quick start's, shipped in the package]"),
        click.option("--tokenizer", type=click.Choice(config_module.TOKENIZERS), default=None,
                     help="how lines split into words: spaces, jieba (Chinese), characters, or treebank (English text "
                     "split the Penn Treebank way, punctuation set aside) [default: the config's]"),
        click.option("--direction", type=click.Choice(["forward", "backward"]), default=None,
                     help="read sentences left to right or right to left [default: the config's model.direction, else forward]"),
        click.option("--workers", type=click.IntRange(min=0), default=None,
                     help="processes that tokenize with jieba on a first run [default: one per core]"),
        click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE", help="override any config key"),
    ]):
        command = option(command)
    return command


@main.command()
@config_options
@click.option("--train", "train_file", default=None, help="training text, one sentence per line")
@click.option("--valid", "valid_file", default=None, help="validation text")
@click.option("--test", "test_file", default=None, help="test text")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="run directory [default: runs/<config name>]")
@device_option
@click.option("--epochs", type=click.IntRange(min=1), default=None, help="epochs in all [default: the config's]")
@click.option("--max-steps", type=click.IntRange(min=0), default=None,
              help="stop after this many batches in all, inside an epoch too (--resume finishes it); 0: no limit "
                   "[default: the config's]")
@click.option("--max-minutes", type=click.FloatRange(min=0), default=None,
              help="stop once this run has trained this many minutes, inside an epoch too (--resume finishes it, "
                   "with the budget again); 0: no limit [default: the config's]")
@seed_option("of the run", from_config=True)
@precision_option(None)
@click.option("--keep-epochs", type=click.IntRange(min=0), default=None,
              help="also keep the models of the last N epochs (epoch-K.pt) for a snapshot ensemble")
@click.option("--init", "init", default=None, metavar="CHECKPOINT",
              help="a PCFG: start from this trained model of the same sizes (its vocabulary too)")
@click.option("--focus", "focus", multiple=True, metavar="TREES|MODEL",
              help="a PCFG: focus it toward a teacher's trees (parse-focusing): a file of trees, one per line of "
                   "the training text (what parse writes), or a model whose trees of it are made once; repeat for "
                   "each teacher (train.focus_mode, focus_strength, focus_by, focus_right: --set)")
@click.option("--resume", is_flag=True, help="continue the run in --out from its last.pt")
@click.option("--force", is_flag=True, help="overwrite an existing run directory")
@click.option("--quiet", is_flag=True, help="no progress bars")
@user_errors
def train(config_path, train_file, valid_file, test_file, tokenizer, out_dir, device, epochs, max_steps,
          max_minutes, seed, direction, precision, keep_epochs, workers, overrides, init, focus, resume, force,
          quiet) -> None:
    """Train a model of the config's kind: an ON-LSTM language model (the paper's AWD-LSTM recipe, the default), a
    PCFG (model.kind = "pcfg", configs/pcfg-ptb.toml) or a StructFormer (model.kind = "structformer",
    configs/structformer-ptb.toml)."""
    from . import api

    flags = {
        "data.train": _absolute(train_file), "data.valid": _absolute(valid_file), "data.test": _absolute(test_file),
        "data.tokenizer": tokenizer, "run.device": device, "run.epochs": epochs, "run.max_steps": max_steps,
        "run.max_minutes": max_minutes, "run.seed": seed, "model.direction": direction,
        "run.keep_epochs": keep_epochs, "data.workers": workers, "run.precision": precision,
        "train.init": _file_or_name(init) if init else None,
        "train.focus": tuple(map(_file_or_name, focus)) if focus else None,
    }
    settings = {key: value for key, value in flags.items() if value is not None}
    out_dir = out_dir.expanduser() if out_dir else Path("runs") / (config_path or QUICKSTART_CONFIG).stem
    result = api.train(config_path, out_dir, settings=settings, overrides=list(overrides), resume=resume, force=force,
                       quiet=quiet, messages=_messages())
    if result.main_process and result.best_valid_ppl is not None:
        click.echo(f"best valid ppl {result.best_valid_ppl:.2f}; model in {out_dir.resolve() / 'best.pt'}")
    if result.stopped_by is not None:
        sys.exit(128 + result.stopped_by)  # the shell's convention: 130 after Ctrl-C, 143 after SIGTERM


@main.command()
@click.argument("text_file", type=click.Path(path_type=Path))
@config_options
@user_errors
def prepare(text_file, config_path, tokenizer, direction, workers, overrides) -> None:
    """Tokenize a training file into the token cache ahead of training, and say what it holds."""
    from .text import corpus

    raw = config_module.read_toml(config_path or QUICKSTART_CONFIG)
    flags = {"data.tokenizer": tokenizer, "model.direction": direction, "data.workers": workers}
    config = _config(raw, flags, overrides, config_path or QUICKSTART_CONFIG)
    click.echo(corpus.prepare(config, str(text_file)))


def _config(raw: dict, flags: dict, overrides: tuple[str, ...], source: Path):
    """The config file's values, then the flags given (section.key -> value), then each --set."""
    from .families import registry

    given = {}
    for key, value in flags.items():
        if value is not None:
            section, name = key.split(".")
            raw.setdefault(section, {})[name] = value
            given[key] = config_module.flag_text(key, value)
    given |= {item.partition("=")[0].strip(): f"--set {item}" for item in overrides}
    return registry.CONFIGS.from_sources(registry.CONFIGS.apply_overrides(raw, list(overrides), str(source)), str(source),
                                      given)


def _file_or_name(spec: str) -> str:
    """A file's path made absolute (as data files are kept); a shipped model's name as given."""
    return str(Path(spec).resolve()) if Path(spec).exists() else spec


def _absolute(path: str | None) -> str | None:
    """A data file's path as the config keeps it: absolute, links resolved, but a pipe (`<(cat f)`) as
    given (resolving it names no file)."""
    if not path:
        return None
    return str(Path(path).resolve()) if Path(path).is_file() or not Path(path).exists() else str(Path(path).absolute())


def model_options(command):
    """Options shared by `parse` and `evaluate` for choosing, running and combining the models."""
    for option in reversed([
        click.option("--layer", "layers", multiple=True, metavar="N|auto",
                     help="layer whose distances make the tree: once for all models, once per --model, or auto "
                     "(an ensemble member's layer chosen by agreement with the others, or with the other family's "
                     "where there are two, no gold needed) "
                     "[default: the middle layer, or a shipped model's own]"),
        click.option("--distance", metavar="NAME", default=None,
                     help="which of a model's distances make its tree: an ON-LSTM's forget or input master gate's "
                     "expected level, a StructFormer's parser distances [default: each model's first]"),
        click.option("--decoder", type=click.Choice(list(DECODERS)), default=None,
                     help="paper: the paper's greedy split; gap: split at the largest gap between words "
                     "[default: paper, or a shipped model's own]"),
        click.option("--combine", type=click.Choice(list(COMBINERS)), default=None,
                     help="with several --model: span voting over their trees, or their mean gap scores "
                     "[default: mbr, or a shipped model's own]"),
        click.option("--right-voter", type=click.FloatRange(min=0), default=None, metavar="WEIGHT",
                     help="span voting: a right-branching tree as one more voter of this weight "
                     "[default: 0 (none), or a shipped model's own]"),
        click.option("--weights", default=None, metavar="W1,W2,...|family|auto",
                     help="span voting: each --model's weight; family: each model weighs one over the number of "
                     "models of its kind, so each family (ON-LSTMs, PCFGs, students) votes as one; auto: each model "
                     "weighs by how much more it agrees with the other family's models than right-branching trees "
                     "do (no gold needed; grammar-induce rank shows it) [default: 1 each]"),
        click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True,
                     help="sentences run through the model together"),
        precision_option("fp32"),
    ]):
        command = option(command)
    return device_option(command)


def home(ctx: click.Context, param: click.Parameter, value):
    """A path option's `~` expanded (the shell leaves `--gold=~/wsj` as it is), `-` and None as they are."""
    if isinstance(value, Path):
        return value.expanduser()
    return os.path.expanduser(value) if isinstance(value, str) and value != "-" else value


MODEL_HELP = ("checkpoint (best.pt) or a shipped model's name (grammar-induce models); repeat it for an ensemble "
              "[default: en]")


map_any_model_option = click.option(
    "--map-any-model", is_flag=True,
    help="use --calibration or --label-map even when fitted on another model (its confidences and labels mean other "
         "things; refused without this)")


def prune_options(command):
    """--prune and --prune-threshold: a PCFG's chart constraints (inference/pruning.py)."""
    command = click.option("--prune-threshold", type=click.FloatRange(0, 1, max_open=True), default=None,
                           help="with --prune: the student's span marginal a span needs to be kept [default: 0.001]")(command)
    return click.option("--prune", metavar="MODEL|off", default=None,
                        help="prune a PCFG's chart to the spans this distilled student finds likely (its best tree "
                             "always kept; several times faster), or off: the whole chart [default: a shipped PCFG's "
                             "own (ptb-pcfg: en, zh-pcfg: zh), else off]")(command)


def _parser(models: tuple[str, ...], layers, distance, decoder, combine, right_voter, weights, batch_size, precision,
            device, pretokenized: bool = False, labels: bool = False, whole_lines: bool = False,
            confidence: bool = False, calibration: Path | None = None, label_map: str | None = None,
            map_any_model: bool = False, prune: str | None = None, prune_threshold: float | None = None,
            prune_mass: bool = False):
    """The API's parser for the flags: what is not given comes from a shipped model, else the defaults."""
    from . import api
    from .runtime.distributed import World

    parser = api.load(*models, layer=_layer(layers), distance=distance, decoder=decoder, combine=combine,
                      batch_size=batch_size, precision=precision, device=device, right_voter=right_voter,
                      weights=_weights(weights), pretokenized=pretokenized, labels=labels, whole_lines=whole_lines,
                      confidence=confidence, calibration=calibration, label_map=label_map,
                      map_any_model=map_any_model, prune=prune, prune_threshold=prune_threshold,
                      prune_mass=prune_mass)
    if World.from_env().is_main:  # under torchrun, process 0 says it for all
        for text in parser.messages.notes:
            _note(text)
    if all(m.family.yields.own_trees for m in parser.models):  # each kind named, not the first one's for all
        kinds = list(dict.fromkeys(m.family for m in parser.models))
        said = " and ".join(f"{kind.description} ({kind.yields.search})" for kind in kinds)
        _ignored(["layers", "distance", "decoder"], f"with {said}: {'its' if len(kinds) == 1 else 'their'} trees "
                 "come from their own search, not distances")
    return parser


def _kinds_named(models) -> str:
    return " and ".join(dict.fromkeys(m.family.description for m in models))


def _weights(text: str | None) -> tuple[float, ...] | str | None:
    """--weights as the API's `weights`: None, "family", "auto" or numbers."""
    if text is None or text.strip() in ("family", "auto"):
        return text and text.strip()
    try:
        return tuple(float(w) for w in text.split(","))
    except ValueError:
        raise click.UsageError(f"--weights takes comma-separated numbers (one per --model), family or auto, "
                               f"not {text!r}") from None


def _layer(layers: tuple[str, ...]) -> str | tuple[int, ...] | None:
    """--layer as the API's `layer`: None, "auto" or numbers."""
    if "auto" in layers:
        if len(layers) > 1:
            raise click.UsageError("--layer auto chooses every member's layer: give it alone")
        return "auto"
    try:
        return tuple(int(layer) for layer in layers) or None
    except ValueError:
        bad = next(layer for layer in layers if not layer.strip().isdigit())
        raise click.UsageError(f"--layer takes a number or auto, not {bad!r} (for several layers repeat it: "
                               "--layer 1 --layer 2)") from None


@main.command()
@click.option("--model", "model_names", multiple=True, help=MODEL_HELP)
@click.argument("sentences", nargs=-1)
@click.option("--input", "input_path", callback=home, default=None,
              help="file of sentences, one per line, or - for stdin [default: stdin when it is not a terminal]")
@click.option("--output", "output_path", callback=home, type=click.Path(path_type=Path), default=None, help="[default: stdout]")
@click.option("--force", is_flag=True, help="write --output over a checkpoint or a training run's file")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="brackets", show_default=True,
              help="brackets, PTB with X labels, nested JSON lists, JSONL with every distance, drawn in text, "
              "CoNLL-U dependency heads (a StructFormer's), SVG pictures (--output DIR: a file per line) or one HTML "
              "page")
@click.option("--agreement", is_flag=True, help="print how much each ensemble member agrees with the others")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="processes that parse (on the CPU), each with its own copy of the models")
@click.option("--pretokenized", is_flag=True,
              help="the sentences are tokens separated by spaces (segmented Chinese, say): not split again")
@click.option("--whole-lines", is_flag=True,
              help="parse a line of several sentences as one (by default each sentence gets its own tree, and the "
              "line's tree joins them under one node)")
@click.option("--labels", is_flag=True,
              help="label constituents with a PCFG's induced symbols (NT-k), shown in --format ptb (then the "
              "default), jsonl and ascii")
@click.option("--confidence/--no-confidence", default=None,
              help="give each constituent how sure the parser is of it (a PCFG's span marginal, an ensemble's share of "
              "the vote, ...): jsonl's `spans`, the pictures' shading [default: on for jsonl, svg and html]")
@click.option("--calibration", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="map the confidences through this file (evaluate --calibrate writes it, fitted on gold trees)")
@map_any_model_option
@prune_options
@click.option("--prune-mass", is_flag=True,
              help="say what share of the grammar's probability of each line its pruned chart kept (jsonl's "
              "kept_mass; the mean and the least on stderr): one more inside pass, over the whole chart")
@click.option("--label-map", metavar="FILE|NAME", default=None,
              help="rename a PCFG's induced labels by this file (grammar --gold TREES --save-map writes it: a mapping "
              "learned from a treebank, not supervised labels), or by the map a shipped model carries (--label-map "
              "ptb-pcfg); implies --labels")
@model_options
@user_errors
def parse(model_names, sentences, input_path, output_path, force, fmt, agreement, workers, pretokenized, whole_lines,
          labels, confidence, calibration, map_any_model, prune, prune_threshold, prune_mass, label_map, layers, distance,
          decoder, combine, right_voter, weights, batch_size, precision, device) -> None:
    """Parse sentences into unlabeled binary trees (or a PCFG's labelled ones, with --labels)."""
    from .files import refuse_overwriting
    from .messages import Messages, progress_bar
    from .output import pictures
    from .output.formats import render_lines

    labels = labels or label_map is not None
    if labels:
        fmt = _labelled_format(fmt)
    _check_parse_output(fmt, output_path, force)
    lines, stream = _read_sentences(sentences, input_path)
    if confidence is None:
        confidence = fmt in CONFIDENT
    parser = _parser(model_names or (DEFAULT_MODEL,), layers, distance, decoder, combine, right_voter, weights,
                     batch_size, precision, device, pretokenized, labels, whole_lines, confidence or bool(calibration),
                     calibration, label_map, map_any_model, prune, prune_threshold, prune_mass)
    models = parser.models
    if fmt in DEPENDENCY and not any(m.family.yields.heads for m in models):
        raise click.UsageError(f"--format {fmt} writes dependency heads, and {_kinds_named(models)} "
                               "has none: a StructFormer (model.kind = \"structformer\") has them")
    refuse_overwriting({"--output": output_path},
                       [m.source for m in models] + _input_files(input_path) + _map_files(calibration, label_map))
    if len(models) == 1:
        _ignored(["combine", "agreement", "right_voter", "weights"] + ["layers"] * (layers == ("auto",)),
                 "with one model")
    _unused_in_parse(parser, fmt)
    _no_votes(weights)
    with progress_bar(None, "parsing", "sent") as bar:
        results, summary = parser.run(lines, workers=workers, all_layers=fmt in ALL_LAYERS or fmt in PICTURES,
                                      stream=stream,
                                      agreement=agreement, messages=(messages := Messages(progress=bar.update)))
        if fmt in PICTURES:
            for text in pictures.draw_pictures(results, fmt, output_path, summary.distance):
                click.echo(text)
        elif summary.writes_output:
            _write_lines(render_lines(results, fmt), output_path)
        else:  # another process of a torchrun launch: it parses and hands its results to process 0
            for _ in results:
                pass
    if summary.writes_output:
        _say_how_it_parsed(models, summary, messages)


def _check_parse_output(fmt: str, output_path: str | None, force: bool) -> None:
    """--output may be written as asked (svg pictures go into a folder unless one file is named)."""
    from .files import check_folder_output, check_output
    from .output import pictures

    if fmt == "svg" and not pictures.one_file(output_path):
        check_folder_output(output_path, pictures.PICTURE_FILE)
    else:
        check_output(output_path, force)


def _say_how_it_parsed(models, summary, messages) -> None:
    """What parse says after its trees (on stderr): the choices auto made, the notes, the members' agreement."""
    if summary.auto_layers:
        _note("--layer auto chose " + ", ".join(f"layer {layer} of {shown(m.source)}" for m, layer in zip(models, summary.layers)
                                                if not m.family.yields.own_trees))
    if summary.auto_weights:
        from .inference.members import auto_weights_note

        _note(auto_weights_note([m.source for m in models], summary.auto_weights))
    for text in messages.notes:
        _note(text)
    if summary.agreement and len(models) > 1:
        from .output.tables import agreement_table

        click.echo(agreement_table({f"{k + 1}: {shown(m.source)}": score for k, (m, score)
                                    in enumerate(zip(models, summary.agreement))}), err=True)


@main.command()
@click.option("--model", "model_names", multiple=True, required=True,
              help="checkpoint or shipped model's name; give two or more (the models of an ensemble)")
@click.option("--input", "input_path", callback=home, required=True,
              help="text to rank them on, one sentence per line, or - for stdin (no trees: held-out text will do)")
@click.option("--layer", "layers", multiple=True, metavar="N|auto", default=("auto",),
              help="each model's layer, as parse takes it [default: auto, chosen by agreement]")
@click.option("--decoder", type=click.Choice(list(DECODERS)), default="gap", show_default=True,
              help="how the distances make a tree")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="sentences run through the model together (the first 64 batches are ranked on)")
@precision_option("fp32")
@device_option
@user_errors
def rank(model_names, input_path, layers, decoder, batch_size, precision, device) -> None:
    """Rank an ensemble's models without gold trees: how much each one's trees agree with the other family's (or
    the other models') beyond what right-branching trees do; the weights --weights auto gives them."""
    from . import api
    from .inference.parsing import standings
    from .output.tables import standings_table

    parser = api.load(*model_names, layer=_layer(layers), decoder=decoder, batch_size=batch_size,
                      precision=precision, device=device)
    if len(parser.models) < 2:  # a shipped name may be two models (ptb-pair)
        raise click.UsageError("rank compares models with each other: give two or more --model (or a shipped "
                               "ensemble's name)")
    lines, _ = _read_sentences((), input_path)
    members = standings(parser.models, lines, parser.options)
    models = members.models
    click.echo(standings_table([shown(m.source) for m in models], [m.config.model.kind for m in models],
                               members.options.layers, [m.family.yields.own_trees for m in models], members.standings,
                               members.options.decoder))


def _unused_in_parse(parser, fmt: str) -> None:
    """Notes on the options given that this parse has no use for (issue 81, class 11): confidences in a format that
    cannot show them or from models that have none, a label map in a format without labels, votes' weights with
    `--combine mean`, chart constraints for models that take none."""
    models, options = parser.models, parser.options
    if fmt not in CONFIDENT:
        _ignored(["confidence", "calibration"], f"with --format {fmt} (confidences show in {', '.join(CONFIDENT)})")
    elif len(models) == 1 and not models[0].family.yields.confidence and models[0].model.parse_layers < 2:
        _ignored(["confidence", "calibration"], f"with {_kinds_named(models)} alone (it has no confidences)")
    if fmt not in LABELLED:
        _ignored(["label_map"], f"with --format {fmt} (labels show in {', '.join(LABELLED)})")
    if options.combine == "mean" and len(models) > 1:
        _ignored(["weights", "right_voter"], "with --combine mean (each member's gap scores count alike)")
    if not any(m.family.yields.prunable for m in models):
        _ignored(["prune", "prune_threshold", "prune_mass"], f"with {_kinds_named(models)} (chart constraints prune a "
                 "PCFG's chart)")
    elif options.pruning is None:
        _ignored(["prune_mass"], "without chart constraints (--prune off, or no pruner)")


def _labelled_format(fmt: str) -> str:
    """--format with --labels: PTB where none was given (labels are what was asked for); one that cannot show them
    stays, with a note."""
    if click.get_current_context().get_parameter_source("fmt") != click.core.ParameterSource.COMMANDLINE:
        return "ptb"
    if fmt not in LABELLED:
        _ignored(["labels"], f"with --format {fmt} (labels show in {', '.join(LABELLED)})")
    return fmt


def _input_files(input_path: str | None) -> list[str]:
    return [input_path] if input_path not in (None, "-") else []


def _map_files(calibration: Path | None, label_map: str | None) -> list[str]:
    """The map files a command reads (a label map given as a shipped model's name is no file here)."""
    return _input_files(calibration) + _input_files(label_map if label_map and Path(label_map).exists() else None)


@main.command()
@click.option("--model", "model_names", multiple=True, help=MODEL_HELP)
@click.option("--pred", "pred_path", callback=home, type=click.Path(path_type=Path), default=None,
              help="file of predicted trees instead of a model, one per sentence")
@click.option("--pred-format", type=click.Choice(["brackets", "ptb", "json", "jsonl"]), default=None,
              help="what parse --format wrote: unlabeled brackets, labelled PTB trees (a line each or spread over "
              "lines, as .mrg files), nested JSON lists, or JSONL records [default: told by the file's first tree]")
@click.option("--gold", callback=home, default=None, help="gold trees: a .mrg or one-tree-per-line file, a folder of .mrg, "
              "or nltk:treebank [default: the quick start's synthetic test trees]")
@click.option("--treebank", "preset", type=click.Choice(["ptb", "ctb"]), default="ptb", show_default=True,
              help="which leaves count as words: PTB word tags, or all but PU and -NONE- (Chinese Treebank)")
@click.option("--punct-tags", default=None, help="drop leaves with these tags instead (comma-separated)")
@click.option("--max-length", type=click.IntRange(min=0), default=0, show_default=True,
              help="only sentences of at most N words (0: all)")
@click.option("--skip-bad", is_flag=True, help="skip malformed gold trees and count them")
@click.option("--json", "json_path", callback=home, type=click.Path(path_type=Path), default=None, help="write every number here")
@click.option("--save-trees", callback=home, type=click.Path(path_type=Path), default=None, help="write the predicted trees here")
@click.option("--report", "report_path", callback=home, type=click.Path(path_type=Path), default=None,
              help="write an HTML page: the table, F1 by length, predicted and gold trees drawn")
@click.option("--report-sentences", type=click.IntRange(min=0), default=1000, show_default=True,
              help="how many sentences the HTML page draws")
@click.option("--baseline-seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="seed of the random baseline's trees")
@renamed_option("--seed", "--baseline-seed (it seeds only the random baseline's trees)")
@click.option("--deps", is_flag=True, help="also score the model's dependency heads (a StructFormer's): attachment "
              "against the gold trees by Collins' head rules, directed and undirected, beside left and right chains")
@click.option("--calibrate", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="fit a map from the model's confidences to the share of such brackets that are gold constituents "
              "(isotonic) and write it here, for parse --calibration")
@click.option("--calibration", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="map the confidences through this file first (to check a map fitted on other trees)")
@map_any_model_option
@prune_options
@click.option("--label-map", metavar="FILE|NAME", default=None,
              help="score a PCFG's induced labels renamed by this file (grammar --save-map writes it) or a shipped "
              "model's map: labelled F1")
@click.option("--quiet", is_flag=True, help="no progress bar")
@click.option("--force", is_flag=True, help="write --json, --save-trees or --report over a checkpoint or a "
              "training run's file")
@model_options
@user_errors
def evaluate(model_names, pred_path, pred_format, gold, preset, punct_tags, max_length, skip_bad, json_path,
             save_trees, report_path, report_sentences, baseline_seed, deps, calibrate, calibration, map_any_model,
             prune, prune_threshold, label_map, quiet,
             force, layers,
             distance, decoder, combine, right_voter, weights, batch_size, precision, device) -> None:
    """Score induced trees against gold trees (unlabeled F1, the paper's protocol)."""
    from . import api
    from .files import check_output, files_under, refuse_overwriting, write_all
    from .trees import to_brackets
    from .workflows import scoring

    if model_names and pred_path is not None:
        raise click.UsageError("give one of --model and --pred, not both")
    outputs = {"--json": json_path, "--save-trees": save_trees, "--report": report_path, "--calibrate": calibrate}
    for path in outputs.values():
        check_output(path, force)
    gold = gold or str(QUICKSTART_GOLD)
    gold_files = files_under(Path(gold)) if Path(gold).is_dir() else [gold] if Path(gold).exists() else []
    settings = {"max_length": max_length, "treebank": preset, "punct_tags": punct_tags, "skip_bad": skip_bad,
                "baseline_seed": baseline_seed, "quiet": quiet}
    if pred_path is None:
        parser = _parser(model_names or (DEFAULT_MODEL,), layers, distance, decoder, combine, right_voter, weights,
                         batch_size, precision, device, labels=label_map is not None, calibration=calibration,
                         label_map=label_map, map_any_model=map_any_model, prune=prune,
                         prune_threshold=prune_threshold)
        refuse_overwriting(outputs, [m.source for m in parser.models] + gold_files + _map_files(calibration, label_map))
        if len(parser.models) == 1:
            _ignored(["combine", "right_voter", "weights"] + ["layers"] * (layers == ("auto",)), "with one model")
        _no_votes(weights)
        report = api.evaluate(parser, gold, dependencies=deps, **settings)
    else:
        for flag, given in (("--deps scores a model's dependency heads", deps),
                            ("--calibrate and --calibration map a model's confidences", calibrate or calibration),
                            ("--label-map renames a model's induced labels", label_map)):
            if given:
                raise click.UsageError(f"{flag}: give --model, not --pred")
        refuse_overwriting(outputs, [pred_path, *gold_files])
        _ignored(["layers", "distance", "decoder", "combine", "right_voter", "weights", "batch_size", "precision",
                  "device"],
                 "with --pred (they choose how a model parses)")
        report = api.evaluate(pred_path, gold, pred_format=pred_format, **settings)
    texts = {json_path: lambda: report.to_json() + "\n",
             save_trees: lambda: "".join(to_brackets(t) + "\n" for t in report.predicted),
             report_path: lambda: report.to_html(report_sentences),
             calibrate: lambda: scoring.fitted_calibration(report, gold, [m.source for m in parser.models]).to_json() + "\n"}
    # the files first, all of them or none: the table is printed only when every one was written
    write_all([(path, lambda f, text=text: f.write(text().encode("utf-8"))) for path, text in texts.items() if path])
    click.echo(report.table())


@main.command()
@click.option("--model", "model_names", required=True, multiple=True,
              help="a teacher: checkpoint or shipped model name; repeat it for an ensemble")
@click.option("--train", "train_file", required=True, help="text the teachers parse and the student learns, a sentence per line")
@click.option("--valid", "valid_file", required=True, help="held-out text: the epoch kept agrees best with the teachers on it")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True, help="folder for round-K.pt, best.pt, distill.jsonl")
@click.option("--epochs", type=click.IntRange(min=1), default=EPOCHS_PER_ROUND, show_default=True,
              help="student epochs per round")
@click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True,
              help="1: learn the teachers' trees; more: parse again with the student beside the teachers, learn again")
@click.option("--confident", is_flag=True, help="learn only the spans most members agree on (the rest of each tree is free)")
@click.option("--soft", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="the weight of soft targets, the teachers' mean span marginals (PCFGs', students'), beside their "
                   "tree: 0 the tree alone, 1 the marginals alone")
@click.option("--max-length", type=click.IntRange(min=3), default=40, show_default=True,
              help="learn from sentences of at most N words (the tree CRF is cubic in the length)")
@seed_option("of the student")
@click.option("--force", is_flag=True, help="write over a folder that holds a student already")
@click.option("--keep", type=click.Choice(KEEPS), default=StudentTrainConfig.keep, show_default=True,
              help="the epoch a round keeps: the one agreeing best with the teachers on --valid, or the last")
@click.option("--resume", is_flag=True, help="go on with an interrupted run (its work is in OUT.partial)")
@click.option("--emb-size", type=click.IntRange(min=1), default=StudentConfig.emb_size, show_default=True,
              help="the student's word embedding size (most of its weights)")
@click.option("--hidden-size", type=click.IntRange(min=1), default=StudentConfig.hidden_size, show_default=True,
              help="the student's BiLSTM size per direction, and its span MLP's")
@click.option("--embeddings", metavar="MODEL", default="",
              help="start the student's word embeddings from this model's (an ON-LSTM language model such as ptb), "
                   "reduced to --emb-size by their principal components [default: a random start]")
@model_options
@user_errors
def distill(model_names, train_file, valid_file, out_dir, epochs, rounds, confident, soft, max_length, seed, force, keep,
            resume, emb_size, hidden_size, embeddings, layers, distance, decoder, combine, right_voter, weights, batch_size, precision,
          device) -> None:
    """Train a span-based student parser on an ensemble's trees (self-training with --rounds)."""
    from . import api

    student = api.distill(*model_names, train=train_file, valid=valid_file, out=out_dir, layer=_layer(layers),
                          distance=distance, decoder=decoder, combine=combine, right_voter=right_voter,
                          weights=_weights(weights), batch_size=batch_size, precision=precision, device=device, log=click.echo, epochs=epochs,
                          rounds=rounds, confident=confident, soft=soft, max_length=max_length, seed=seed, keep=keep, force=force,
                          resume=resume, emb_size=emb_size, hidden_size=hidden_size, embeddings=embeddings)
    click.echo(f"student in {Path(student.models[0].source).resolve()}")


@main.command()
@click.option("--model", "model_name", default="ptb-pcfg", show_default=True,
              help="a PCFG: a shipped model's name or a checkpoint")
@click.option("-n", "count", type=click.IntRange(min=1), default=10, show_default=True, help="how many sentences")
@seed_option("of the draws (the same seed, the same sentences)")
@click.option("--max-length", type=click.IntRange(min=2), default=40, show_default=True,
              help="the longest sentence (longer draws are drawn again)")
@click.option("--format", "fmt", type=click.Choice(["ptb", "text", "jsonl"]), default="ptb", show_default=True,
              help="ptb: each tree with its symbols (NT-k over spans, T-k over words); text: the words; jsonl: parse's "
                   "records (tokens, words, tree as nested lists, labels [start, end, NT-k]) and each word's T-k")
@user_errors
def sample(model_name, count, seed, max_length, fmt) -> None:
    """Draw sentences with their trees from a PCFG (the root, rules through the rank factors, emissions)."""
    import json

    from . import api

    for tree in api.samples(model_name, count, seed=seed, max_length=max_length):
        if fmt == "jsonl":
            click.echo(json.dumps(_sampled_record(tree), ensure_ascii=False))
        else:
            click.echo(tree.pformat(margin=10**9) if fmt == "ptb" else " ".join(tree.leaves()))


def _sampled_record(tree) -> dict:
    """A drawn tree (nltk, NT-k over spans, T-k over each word) as a line of parse's --format jsonl (the same keys:
    tokens, words, tree as nested lists, labels [start, end, label] per span of two or more words), and each word's
    preterminal."""
    labels, position = [], 0

    def nested(node):
        nonlocal position
        if isinstance(node[0], str):  # a preterminal over its word
            position += 1
            return node[0]
        start = position
        children = [nested(child) for child in node]
        labels.append([start, position, node.label()])
        return children

    shape = nested(tree)
    words = tree.leaves()
    return {"tokens": words, "words": words, "labels": sorted(labels), "tree": shape,
            "preterminals": [label for _, label in tree.pos()]}


@main.command()
@click.option("--model", "model_name", default="ptb-pcfg", show_default=True,
              help="a PCFG: a shipped model's name or a checkpoint")
@click.option("--text", "text_path", default=None,
              help="sentences (a file, one per line) on which to count how often each nonterminal labels a "
              "constituent, and its most frequent spans")
@click.option("--gold", default=None, help="gold trees: each nonterminal's best-matching category on them")
@click.option("--treebank", "preset", type=click.Choice(["ptb", "ctb"]), default="ptb", show_default=True,
              help="which leaves of the gold trees are words")
@click.option("--save-map", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="write the best matches (with --gold) as a label map for parse --label-map")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "html"]), default="table", show_default=True,
              help="a table of the most used symbols, every symbol as JSON, or one HTML page of every symbol")
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True,
              help="the table shows this many nonterminals and preterminals (json and html: all)")
@click.option("--rules", type=click.IntRange(min=1), default=5, show_default=True,
              help="each nonterminal's most probable rules, and each preterminal's words, to show")
@click.option("--output", "output_path", callback=home, type=click.Path(path_type=Path), default=None, help="[default: stdout]")
@click.option("--force", is_flag=True, help="write --output or --save-map over a checkpoint or a training run's file")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True,
              help="sentences run through the model together")
@device_option
@user_errors
def grammar(model_name, text_path, gold, preset, save_map, fmt, top, rules, output_path, force, batch_size,
            device) -> None:
    """Show what an induced PCFG learned: each symbol's share of the rules, its most probable rules or words, its
    usage and spans on a text, and its best-matching treebank category on gold trees."""
    import json

    from . import api
    from .files import check_output, refuse_overwriting, write_all

    if save_map is not None and gold is None:
        raise click.UsageError("--save-map writes the labels' best matches on gold trees: give --gold")
    for path in (output_path, save_map):
        check_output(path, force)
    parser = api.load(model_name, batch_size=batch_size, device=device)
    refuse_overwriting({"--output": output_path, "--save-map": save_map},
                       [m.source for m in parser.models] + _input_files(text_path) + _input_files(gold))
    report = parser.grammar(text_path, gold, treebank=preset, top=rules)
    shown_text = {"table": lambda: report.table(top), "json": lambda: json.dumps(report.to_dict(), indent=1),
                  "html": report.to_html}[fmt]
    outputs = [(path, lambda f, text=text: f.write((text() + "\n").encode("utf-8")))
               for path, text in ((output_path, shown_text), (save_map, report.map_json)) if path]
    write_all(outputs)
    if output_path is None:
        click.echo(shown_text())


@main.command()
def models() -> None:
    """List the models that ship with grammar-induce (use a name with --model, or gi.load(name))."""
    from .families.pretrained import catalogue, table

    click.echo(table() if catalogue() else "no models ship with this installation")


@main.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--output", "output_path", type=click.Path(path_type=Path), default=Path("curves.svg"),
              show_default=True, help="the SVG to write")
@click.option("--force", is_flag=True, help="write over a checkpoint or a training run's file")
@user_errors
def plot(run_dirs, output_path, force) -> None:
    """Draw the learning curves of one or more run directories in one chart."""
    from .files import check_output, files_under, refuse_overwriting
    from .messages import plural
    from .output.draw import write_curves

    check_output(output_path, force)
    refuse_overwriting({"--output": output_path}, [f for run_dir in run_dirs for f in files_under(run_dir)])
    write_curves(list(run_dirs), output_path)
    click.echo(f"learning curves of {plural(len(run_dirs), 'run')} in {output_path.resolve()}")


def _read_sentences(arguments: tuple[str, ...], input_path: str | None) -> tuple[Iterable[str], bool]:
    """The sentences to parse, read as they are needed, and whether they come over time (a pipe, a terminal)."""
    from .errors import InputError
    from .files import check_text, read_lines

    if arguments and input_path:
        raise click.UsageError("give sentences as arguments or with --input, not both")
    if arguments:
        for k, text in enumerate(arguments, start=1):
            check_text(text, f"sentence {k} of the arguments")
        return list(arguments), False
    if input_path is None and _stdin_is_terminal():
        raise click.UsageError("no sentences: give them as arguments, with --input FILE, or on standard input")
    input_path = input_path or "-"
    if input_path != "-" and not Path(input_path).exists():  # before the models load; a pipe is read once
        raise InputError(f"{input_path}: cannot read (no such file)")
    if Path(input_path).is_dir():
        raise InputError(f"{input_path}: is a folder, not a file of sentences")
    if input_path == "-" and not _stdin_is_a_file():  # a pipe or a terminal: lines come over time
        from .inference.parsing import live_lines

        return live_lines(_own_stdin_reader()), True
    return (text for _, text in read_lines(sys.stdin.buffer if input_path == "-" else input_path)), False


def _own_stdin_reader():
    """A reader of its own on the standard input's descriptor (sys.stdin.buffer where there is none, as under a test
    runner): the thread that reads a pipe may be blocked in a read, holding its reader's lock, when the process
    exits, and Python aborts ("could not acquire lock ... at interpreter shutdown") if that is sys.stdin's."""
    try:
        return open(sys.stdin.fileno(), "rb", closefd=False)
    except (OSError, ValueError):  # no descriptor
        return sys.stdin.buffer


def _stdin_is_a_file() -> bool:
    import os
    import stat

    try:
        return stat.S_ISREG(os.fstat(sys.stdin.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):  # replaced by a stream without a descriptor (a test runner's)
        return False


def _stdin_is_terminal() -> bool:
    """True when nothing is piped in (or there is no standard input at all)."""
    return sys.stdin is None or sys.stdin.isatty()


def _write_lines(lines: Iterable[str], path: Path | None) -> None:
    """To stdout as they come, or atomically to a file."""
    from .files import write_lines

    if path is None:
        for line in lines:
            click.echo(line)
    else:
        write_lines(lines, path)
