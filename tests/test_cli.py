
import json
import os
import re
import subprocess
import sys

import click
import pytest
import torch
from click.testing import CliRunner

from grammar_induce import trees
from grammar_induce.cli import main

from .conftest import (
    ROOT,
    invoke,
    one_line_error,
    sole_line_error,
)

TINY = str(ROOT / "configs" / "tiny.toml")
CHINESE = ["我喜欢吃苹果", "他们在北京工作", "我们喜欢北京的苹果", "她在学校学习中文", "他喜欢学习"] * 8


def run(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def test_help_lists_commands_and_version():
    result = run("--help")
    assert result.exit_code == 0
    assert all(cmd in result.output for cmd in ("train", "parse", "evaluate"))
    version = run("--version")
    assert version.exit_code == 0 and version.output.startswith("grammar-induce, version 0.")


def test_train_parse_evaluate_from_the_command_line(tmp_path):
    out = tmp_path / "run"
    result = run("train", "--config", TINY, "--out", out, "--epochs", 1, "--quiet", "--set", "train.lr=10")
    assert result.exit_code == 0, result.output
    assert "best valid ppl" in result.output
    assert 'lr = 10.0' in (out / "config.toml").read_text()

    again = run("train", "--config", TINY, "--out", out, "--quiet")
    assert again.exit_code == 1 and "run directory exists" in again.output and "Traceback" not in again.output

    parsed = run("parse", "--model", out / "best.pt", "--input", "-", input="the dog saw a cat\n\nhe ran\n")
    assert parsed.exit_code == 0, parsed.output
    lines = parsed.output.split("\n")
    assert lines[1] == "" and lines[2] == "(he ran)" and lines[0].count("(") == 4 and lines[3:] == [""]

    evaluated = run("evaluate", "--model", out / "best.pt", "--quiet", "--json", tmp_path / "e.json",
                    "--save-trees", tmp_path / "trees.txt")
    assert evaluated.exit_code == 0, evaluated.output
    assert "right-branching" in evaluated.output and "layer 2 forget *" in evaluated.output
    assert len((tmp_path / "trees.txt").read_text().splitlines()) == 500
    assert "rows" in json.loads((tmp_path / "e.json").read_text())

    rescored = run("evaluate", "--pred", tmp_path / "trees.txt")
    assert rescored.exit_code == 0, rescored.output


@pytest.mark.parametrize("args, message", [
    (["train", "--config", "nope.toml"], "nope.toml: cannot read config"),
    (["train", "--config", TINY, "--set", "model.chunk_size=5"], "does not divide"),
    (["train", "--config", TINY, "--set", "train.bogus=1"], "unknown key train.bogus"),
    (["train", "--config", TINY, "--train", "/nonexistent.txt"], "/nonexistent.txt: cannot read"),
    (["parse", "--model", "/nonexistent.pt", "a b"], "no such checkpoint"),
])
def test_user_errors_are_one_line(tmp_path, args, message):
    result = run(*args, "--out", tmp_path / "r") if args[0] == "train" else run(*args)
    assert result.exit_code != 0
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_parse_layer_out_of_range(tiny_run):
    result = run("parse", "--model", tiny_run / "best.pt", "--layer", 4, "a b")
    assert result.exit_code == 1 and "--layer 4 is out of range" in result.output


def test_chinese_with_jieba(tmp_path):
    corpus = tmp_path / "zh.txt"
    corpus.write_text("\n".join(CHINESE) + "\n", encoding="utf-8")
    out = tmp_path / "zh"
    result = run("train", "--config", TINY, "--train", corpus, "--valid", corpus, "--tokenizer", "jieba",
                 "--out", out, "--epochs", 1, "--quiet", "--set", "train.batch_size=2")
    assert result.exit_code == 0, result.output
    parsed = run("parse", "--model", out / "best.pt", "--format", "json", "我喜欢吃北京的苹果")
    assert parsed.exit_code == 0, parsed.output
    tree = json.loads(parsed.output)
    flat = json.dumps(tree, ensure_ascii=False)
    assert "苹果" in flat and "喜欢" in flat and "\\u" not in parsed.output
    drawn = run("parse", "--model", out / "best.pt", "--format", "svg", "我喜欢吃北京的苹果")
    assert drawn.exit_code == 0, drawn.output
    texts = re.findall(r'class="word">([^<]*)<', drawn.output)
    assert "".join(texts) == "我喜欢吃北京的苹果" and "苹果" in texts


def test_ensembles_from_the_command_line(tiny_run, tiny_backward_run):
    models = ["--model", tiny_run / "best.pt", "--model", tiny_backward_run / "best.pt"]
    parsed = run("parse", *models, "--agreement", "--decoder", "gap", "the dog saw a cat", "he ran")
    assert parsed.exit_code == 0, parsed.output
    assert "mean pairwise F1" in parsed.output and parsed.output.count("best.pt") == 2
    assert parsed.output.splitlines()[1] == "(he ran)"
    evaluated = run("evaluate", *models, "--quiet", "--max-length", 8, "--combine", "mean")
    assert evaluated.exit_code == 0, evaluated.output
    assert "mean of 2 *" in evaluated.output and "mbr of 2" in evaluated.output


def test_a_missing_input_file_is_reported_before_the_models_load(tmp_path):
    result = run("parse", "--model", tmp_path / "absent.pt", "--input", tmp_path / "missing.txt")
    assert result.exit_code == 1 and "missing.txt: cannot read (no such file)" in result.output


def test_layer_auto_and_per_model_layers_from_the_command_line(tiny_run, tiny_backward_run):
    models = ["--model", tiny_run / "best.pt", "--model", tiny_backward_run / "best.pt"]
    evaluated = run("evaluate", *models, "--quiet", "--max-length", 8, "--layer", "auto", "--decoder", "gap")
    assert evaluated.exit_code == 0, evaluated.output
    assert "1: " in evaluated.output and "mbr of 2 *" in evaluated.output
    per_model = run("evaluate", *models, "--quiet", "--max-length", 8, "--layer", 3, "--layer", 1)
    assert "best.pt L3" in per_model.output and "best.pt L1" in per_model.output
    parsed = run("parse", *models, "--layer", "auto", "the dog saw a cat")
    assert parsed.exit_code == 0 and parsed.output.count("(") == 4, parsed.output
    wrong = run("parse", *models, "--layer", "auto", "--layer", 1, "a b")
    assert wrong.exit_code == 2 and "--layer auto chooses every member's layer" in wrong.output


def test_out_of_memory_on_a_gpu_is_one_line(monkeypatch):

    from grammar_induce import api

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(api, "load", out_of_memory)
    result = CliRunner().invoke(main, ["parse", "the dog barked"])
    assert result.exit_code == 1
    assert result.output.strip() == ("Error: not enough memory for this model, batch or input: try smaller sizes or a "
                                     "smaller --batch-size (CUDA out of memory. Tried to allocate 20.00 GiB)")


def test_every_seed_flag_has_the_one_default():
    """--seed seeds a training (a model, a student) or a PCFG's draws and defaults to config.SEED everywhere (train:
    its config's, which is SEED unless the config sets one); evaluate's random baseline has a seed of its own, named
    so."""
    from grammar_induce.config import SEED, RunConfig

    seeds = {name: next(p for p in command.params if p.name == "seed")
             for name, command in main.commands.items()
             if any(p.name == "seed" and p.expose_value for p in command.params)}
    assert set(seeds) == {"train", "distill", "sample"}
    assert seeds["distill"].default == seeds["sample"].default == SEED == RunConfig.seed
    assert seeds["train"].default is None
    assert all(f"[default: {'the config' + chr(39) + 's, else ' if n == 'train' else ''}{SEED}]" in p.help
               for n, p in seeds.items())
    baseline = next(p for p in main.commands["evaluate"].params if p.name == "baseline_seed")
    assert baseline.opts == ["--baseline-seed"] and baseline.default == 0
    old_name = run("evaluate", "--pred", ROOT / "grammar_induce" / "resources" / "synthetic" / "test.trees", "--seed", "3")
    assert old_name.exit_code == 2 and "--seed is now --baseline-seed" in old_name.output


def test_the_baseline_seed_draws_other_random_trees():
    import grammar_induce as gi

    gold = ROOT / "grammar_induce" / "resources" / "synthetic" / "test.trees"
    f1 = {seed: gi.evaluate(gold, gold, baseline_seed=seed).rows["random"].sentence_f1 for seed in (0, 3)}
    assert gi.evaluate(gold, gold).rows["random"].sentence_f1 == f1[0] != f1[3]
    shown = run("evaluate", "--pred", gold, "--gold", gold, "--baseline-seed", "3")
    assert shown.exit_code == 0 and f"{100 * f1[3]:.1f}" in next(line for line in shown.output.splitlines()
                                                                  if line.startswith("random"))


def test_seeds_out_of_range_are_refused_without_traceback(tmp_path):
    result = invoke("train", "--seed", "99999999999999999999", "--out", tmp_path / "r")
    assert result.exit_code == 2 and "--seed" in result.output and not (tmp_path / "r").exists()
    one_line_error(invoke("train", "--set", "run.seed=99999999999999999999", "--out", tmp_path / "r"),
                   "run.seed must be from 0 to 4294967295")


def test_small_messages(tiny_run, tmp_path):
    noise = tmp_path / "noise.pt"
    noise.write_bytes(os.urandom(4096))
    message = one_line_error(invoke("parse", "--model", noise, "a"), "not a torch file")
    assert "Python objects" not in message
    result = invoke("parse", "--model", tiny_run / "best.pt", "--layer", "1,2", "a b")
    assert result.exit_code == 2 and "not '1,2'" in result.output and "--layer 1 --layer 2" in result.output
    valid = tmp_path / "valid.txt"
    valid.write_text("one\n")
    one_line_error(invoke("train", "--config", ROOT / "configs" / "tiny.toml", "--valid", valid, "--out", tmp_path / "r"),
                   f"{valid}: 2 tokens")
    for flag in ("--max-steps", "--max-minutes"):
        assert invoke("train", flag, "-1", "--out", tmp_path / "r").exit_code == 2
    assert not (tmp_path / "r").exists()


def test_ctrl_c_in_parse_exits_130(tiny_run, monkeypatch):
    from grammar_induce import api

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api.Parser, "run", interrupted)
    result = invoke("parse", "--model", tiny_run / "best.pt", "a b")
    assert result.exit_code == 130 and "Aborted" not in result.output


def test_options_without_effect_are_named(tiny_run, tmp_path):
    result = invoke("parse", "--model", tiny_run / "best.pt", "--layer", "auto", "--agreement", "--combine", "mean", "a b")
    assert result.exit_code == 0
    assert "note: --combine, --agreement, --layer have no effect with one model" in result.stderr
    pred = tmp_path / "p.txt"
    assert invoke("evaluate", "--model", tiny_run / "best.pt", "--save-trees", pred, "--quiet").exit_code == 0
    result = invoke("evaluate", "--pred", pred, "--decoder", "gap")
    assert "note: --decoder has no effect with --pred" in result.stderr


def test_a_message_about_one_model_says_model(tiny_run):
    one_line_error(invoke("parse", "--model", tiny_run / "best.pt", "--layer", "1", "--layer", "2", "a b"),
                   "--layer is given 2 times for 1 model:")


def test_json_and_report_to_one_path_are_refused(tiny_run, tmp_path):
    one_line_error(invoke("evaluate", "--model", tiny_run / "best.pt", "--json", tmp_path / "x", "--report", tmp_path / "x"),
                   "given to both --json and --report")


def test_the_command_line_says_the_same_with_its_flag():
    one_line_error(invoke("parse", "--model", "ptb", "--layer", "7", "a b"), "--layer 7 is out of range")


def test_a_full_device_or_standard_output_is_one_line(tiny_run):
    one_line_error(invoke("parse", "--model", tiny_run / "best.pt", "--output", "/dev/full", "a b c"),
                   "/dev/full: cannot write (No space left on device)")
    one_line_error(invoke("evaluate", "--model", tiny_run / "best.pt", "--quiet", "--json", "/dev/full"),
                   "/dev/full: cannot write")
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "grammar_induce", "parse", "--model", str(tiny_run / "best.pt"),
                               "a b c"], check=False, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "Error: standard output: cannot write (No space left on device)" in done.stderr


def test_outputs_and_run_directories_that_cannot_be_used_are_refused_first(tiny_run, tmp_path):
    sole_line_error(invoke("parse", "--model", tiny_run / "best.pt", "--output", tmp_path, "a b"), "is a folder, not a file")
    sole_line_error(invoke("parse", "--model", tiny_run / "best.pt", "--output", "/proc/trees.txt", "a b"),
                   "cannot write in /proc")
    file = tmp_path / "file"
    file.write_text("")
    sole_line_error(invoke("train", "--config", ROOT / "configs" / "tiny.toml", "--out", file), "is a file, not a run directory")


def test_every_option_has_help_and_the_tool_a_version():
    for name, command in main.commands.items():
        for param in command.params:
            if isinstance(param, click.Option) and param.name != "help":
                assert param.help, f"{name} {param.opts[0]} has no help"
    assert invoke("--version").output.startswith("grammar-induce, version ")


@pytest.mark.slow
def test_output_to_dev_stdout_writes_to_standard_output(tiny_run):
    result = subprocess.run([sys.executable, "-m", "grammar_induce", "parse", "--model", str(tiny_run / "best.pt"),
                             "--output", "/dev/stdout", "the dog ran"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert trees.leaves(trees.parse_brackets(result.stdout.strip())) == ["the", "dog", "ran"]
    assert os.path.islink("/dev/stdout") or not os.path.isfile("/dev/stdout")


@pytest.mark.parametrize("preset, expected", [(None, "1"), ("0", "0")])
def test_every_command_asks_torch_for_huge_pages_unless_told_not_to(preset, expected, monkeypatch):
    """The CLI sets THP_MEM_ALLOC_ENABLE=1 before any command runs (torch reads it at its first allocation), and
    keeps a value the user set."""
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    if preset is not None:
        monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", preset)
    assert run("models").exit_code == 0
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == expected


@pytest.mark.slow
@pytest.mark.parametrize("stream", ["/dev/stdout", "/dev/stderr"])
def test_output_to_a_stream_redirected_to_a_file_appends_to_it(tiny_run, tmp_path, stream):
    """`--output /dev/stdout >> log` (or /dev/stderr 2>> log) writes into the stream where it stands: what the log
    held stays, and nothing replaces the file the stream points at."""
    log = tmp_path / "log"
    log.write_text("earlier line\n")
    where = "1" if stream == "/dev/stdout" else "2"
    command = (f"{sys.executable} -m grammar_induce parse --model {tiny_run / 'best.pt'} --output {stream} "
               f"'the dog ran' {where}>> {log}")
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    lines = log.read_text().splitlines()
    assert lines[0] == "earlier line"
    assert any(trees.leaves(trees.parse_brackets(line)) == ["the", "dog", "ran"] for line in lines[1:] if line[:1] == "(")


def test_models_of_their_own_trees_are_each_named_in_a_note():
    result = invoke("parse", "--model", "en", "--model", "ptb-pcfg", "--decoder", "gap", "the dog barked")
    assert result.exit_code == 0
    assert "with a distilled student (CKY) and a TN-PCFG (MBR CKY over span marginals): their trees" in result.stderr


def test_options_that_do_nothing_are_noted(tiny_run, tiny_backward_run, tmp_path):
    one = invoke("parse", "--model", tiny_run / "best.pt", "--right-voter", "0.5", "--weights", "2", "a b c")
    assert one.exit_code == 0 and "--right-voter, --weights have no effect with one model" in one.stderr
    both = ["--model", tiny_run / "best.pt", "--model", tiny_backward_run / "best.pt"]
    zero = invoke("parse", *both, "--weights", "0,0", "a b c")
    assert zero.exit_code == 0 and "--weights 0,0 gives no model a vote" in zero.stderr
    pcfg = invoke("train", "--config", ROOT / "configs" / "pcfg-ptb.toml", "--direction", "backward", "--max-steps", "1",
                  "--quiet", "--out", tmp_path / "pcfg")
    assert pcfg.exit_code == 1 and "model.direction is not read by a TN-PCFG (model.kind 'pcfg'; its model keys: " \
        "kind, nonterminals, preterminals, rank, symbol_dim)" in pcfg.output, pcfg.output
    assert not (tmp_path / "pcfg").exists()


def test_a_flag_is_named_as_typed_and_init_takes_a_shipped_name(tmp_path):
    """Issue 81, class 12 and 14: a repeated flag is shown as typed, not as a Python tuple; a shipped name given to
    --init is its model (named, not by its install path), a name of two files or of none is refused."""
    tiny, pcfg = ("--config", TINY), ("--config", ROOT / "configs" / "pcfg-ptb.toml")
    focused = invoke("train", *tiny, "--focus", "en", "--focus", "ptb", "--max-steps", "1", "--out", tmp_path / "a")
    one_line_error(focused, "--focus en --focus ptb: train.focus is not read by an ON-LSTM")
    init = invoke("train", *tiny, "--init", "ptb-pcfg", "--max-steps", "1", "--out", tmp_path / "b")
    one_line_error(init, "--init ptb-pcfg: train.init is not read by an ON-LSTM")
    student = invoke("train", *pcfg, "--init", "en", "--max-steps", "1", "--out", tmp_path / "c")
    error = one_line_error(student, "train.init en: must be a model of the run's kind and sizes: it has model.kind = "
                                    "'student', the run 'pcfg'")
    assert "resources" not in error
    one_line_error(invoke("train", *pcfg, "--init", "ptb-pair", "--max-steps", "1", "--out", tmp_path / "d"),
                   "ptb-pair: names 2 models; train.init takes one")
    one_line_error(invoke("train", *pcfg, "--init", "zz", "--max-steps", "1", "--out", tmp_path / "e"),
                   "zz: no such checkpoint file, nor a model name (models: en, ")
    assert not any((tmp_path / name).exists() for name in "abcde")


def test_a_tilde_in_a_path_option_is_the_home_folder(tiny_run, tmp_path, monkeypatch):
    """`--input=~/x` reaches the tool with its `~` (the shell expands it only at a word's start): issue 70, class 14."""
    from .conftest import SYNTHETIC_GOLD, invoke

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "in.txt").write_text("the old man saw a dog\n")
    (tmp_path / "gold.mrg").write_text(SYNTHETIC_GOLD.read_text())
    done = invoke("parse", "--model", tiny_run / "best.pt", "--input=~/in.txt", "--output=~/out.txt")
    assert done.exit_code == 0, done.output
    assert (tmp_path / "out.txt").read_text().count("(") == 5
    scored = invoke("evaluate", "--model", tiny_run / "best.pt", "--gold=~/gold.mrg", "--json=~/r.json", "--quiet")
    assert scored.exit_code == 0, scored.output
    assert (tmp_path / "r.json").exists()


@pytest.mark.parametrize("args, note", [
    (["--model", "ptb-pcfg", "--confidence", "--format", "ptb"], "--confidence has no effect with --format ptb"),
    (["--model", "ptb-pcfg", "--label-map", "ptb-pcfg", "--format", "json"], "--label-map has no effect with --format json"),
    (["--model", "ptb", "--model", "ptb-backward", "--combine", "mean", "--right-voter", "0.5"],
     "--right-voter has no effect with --combine mean"),
    (["--model", "ptb", "--prune", "en"], "--prune has no effect with an ON-LSTM language model"),
])
def test_options_that_do_nothing_in_a_parse_say_so(args, note):
    """issue 81, class 11: an option given that this parse has no use for gets a note naming it and why."""
    done = invoke("parse", *args, "The dog barked .")
    assert done.exit_code == 0 and f"note: {note}" in done.stderr, done.output
    quiet = invoke("parse", "--model", "ptb-pcfg", "--format", "jsonl", "The dog barked .")
    assert "no effect" not in quiet.stderr


def test_a_bad_value_is_blamed_on_where_it_was_written(tmp_path):
    """issue 81, class 12: a typo in the file's model.kind names the file, not a flag given beside it; a device given
    by --set names --set, one given by --device names --device."""
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nkind = "pcfgg"\n')
    one_line_error(invoke("train", "--config", bad, "--epochs", "1", "--out", tmp_path / "run"),
                   f"{bad}: model.kind must be one of", "'pcfgg'")
    tiny = ROOT / "configs" / "tiny.toml"
    one_line_error(invoke("train", "--config", tiny, "--set", "run.device=tpu", "--out", tmp_path / "run"),
                   "--set run.device=tpu: run.device tpu: expected auto, cpu, cuda or cuda:N")
    one_line_error(invoke("train", "--config", tiny, "--device", "tpu", "--out", tmp_path / "run"), "--device tpu:")
    assert not (tmp_path / "run").exists()
