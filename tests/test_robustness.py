"""Bad input, interruptions and untrusted files: clear errors, nothing half-written, no code run."""

import json
import os
import signal
import subprocess
import sys
import time

import click
import pytest
import torch
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grammar_induce import trees
from grammar_induce.cli import main
from grammar_induce.files import InputError
from grammar_induce.inference.members import read_sentences
from grammar_induce.models import checkpoint
from grammar_induce.text.tokenizer import Tokenizer, read_corpus
from grammar_induce.text.treebank import TagFilter, read_gold
from grammar_induce.workflows import train as train_module
from grammar_induce.workflows.train import train

from .conftest import QUIET, ROOT, tiny_config


def cli(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


# --- checkpoints ---------------------------------------------------------------------------

def test_truncated_foreign_and_future_checkpoints_are_refused(tiny_run, tmp_path):
    data = (tiny_run / "best.pt").read_bytes()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(data[: len(data) // 2])
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    text = tmp_path / "text.pt"
    text.write_text("hello")
    future = tmp_path / "future.pt"
    payload = torch.load(tiny_run / "best.pt", weights_only=True)
    torch.save({**payload, "format_version": 99}, future)
    for path, message in [(truncated, "not a grammar-induce checkpoint or corrupt"),
                          (foreign, "not a grammar-induce checkpoint"),
                          (text, "not a grammar-induce checkpoint or corrupt"),
                          (future, "format version 99")]:
        result = cli("parse", "--model", path, "a b")
        assert result.exit_code == 1 and message in result.output, result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save({"format_version": 1, "config": RunsCode(marker)}, evil)
    with pytest.raises(InputError, match="not a grammar-induce checkpoint or corrupt"):
        checkpoint.load(evil)
    assert not marker.exists()
    with open(evil, "rb") as f:  # the file really is armed: plain unpickling would run it
        assert b"system" in f.read()


# --- bad input files ---------------------------------------------------------------------

def test_empty_corpus_after_tokenisation(tmp_path):
    path = tmp_path / "blank.txt"
    path.write_text("   \n\t\n")
    result = cli("train", "--config", ROOT / "configs" / "tiny.toml", "--train", path, "--out", tmp_path / "r")
    assert result.exit_code == 1 and "blank.txt: no sentences" in result.output
    assert not (tmp_path / "r" / "last.pt").exists()


def test_non_utf8_input_to_parse_names_the_line(tiny_run, tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"the dog\n\xc3\x28 bad\n")
    result = cli("parse", "--model", tiny_run / "best.pt", "--input", path)
    assert result.exit_code == 1 and "in.txt:2: not UTF-8" in result.output


def test_output_in_a_missing_folder_writes_nothing(tiny_run, tmp_path):
    result = cli("parse", "--model", tiny_run / "best.pt", "--output", tmp_path / "no" / "such" / "out.txt", "a b")
    assert result.exit_code == 1 and "does not exist" in result.output
    assert not (tmp_path / "no").exists()
    result = cli("evaluate", "--model", tiny_run / "best.pt", "--json", tmp_path / "no" / "e.json")
    assert result.exit_code == 1 and "does not exist" in result.output and "right-branching" not in result.output


@pytest.mark.parametrize("text, message", [
    ("(S (NP (DT the) (NN dog)) (VP (VBD ran))\n", "gold.txt:1: unbalanced"),
    ("(S (NP (DT)) (VP (VBD ran)))\n", "gold.txt:1: (DT) has no word"),
    ("()\n", "gold.txt:1: empty tree"),
    ("(S (NN a))\n(S the dog)\n", "gold.txt:2: (S ...) mixes words"),
])
def test_bad_gold_trees_and_skip_bad(tmp_path, text, message):
    gold = tmp_path / "gold.txt"
    gold.write_text(text + "(S (NN ok) (VBD fine))\n")
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_gold(str(gold), TagFilter())
    kept, skipped = read_gold(str(gold), TagFilter(), skip_bad=True)
    assert kept[-1].words == ["ok", "fine"] and skipped >= 1


def test_sentence_far_longer_than_bptt_is_parsed_whole(tiny_model):
    words = ("the old man saw a dog near the river " * 60).split()  # 540 words, bptt is 12
    parsed = read_sentences(tiny_model, [words, words[:7]])
    assert trees.leaves(parsed[0].tree(2)) == words
    alone = read_sentences(tiny_model, [words[:7]])[0]
    torch.testing.assert_close(torch.tensor(parsed[1].forget), torch.tensor(alone.forget), rtol=1e-5, atol=1e-6)


# --- interruptions ---------------------------------------------------------------------------

def test_sigterm_saves_last_and_resume_continues(tmp_path, monkeypatch):
    original = train_module.train_step
    calls = {"n": 0}

    def step(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(*args, **kwargs)

    monkeypatch.setattr(train_module, "train_step", step)
    out = tmp_path / "run"
    train(tiny_config(train={"epochs": 1}), out, **QUIET)
    state = torch.load(out / "last.pt", weights_only=True)["training_state"]
    assert state["epoch"] == 1 and state["position"]["start"] > 0 and state["step"] == 5
    monkeypatch.setattr(train_module, "train_step", original)
    train(tiny_config(train={"epochs": 1}), out, resume=True, **QUIET)
    assert torch.load(out / "last.pt", weights_only=True)["training_state"]["epoch"] == 2


def run_training(out, extra=()):
    return subprocess.Popen([sys.executable, "-m", "grammar_induce", "train", "--config",
                             str(ROOT / "configs" / "tiny.toml"), "--out", str(out), "--quiet",
                             "--device", "cpu", "--epochs", "4", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.slow
def test_sigkill_at_any_moment_leaves_loadable_files_and_resume_matches(tmp_path):
    straight = tmp_path / "straight"
    assert run_training(straight).wait() == 0
    out = tmp_path / "killed"
    first = True
    for delay in (0.2, 0.5, 0.9):
        process = run_training(out, () if first else ("--resume",))
        first = first and not (out / "last.pt").exists()
        deadline = time.time() + 60
        while not (out / "metrics.jsonl").exists() and time.time() < deadline and process.poll() is None:
            time.sleep(0.05)
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        for name in ("best.pt", "last.pt"):
            if (out / name).exists():
                checkpoint.read(out / name)  # never corrupt
        for line in (out / "metrics.jsonl").read_text().splitlines():
            json.loads(line)  # only whole lines
        if not (out / "last.pt").exists():
            first = True
    while True:
        if (out / "last.pt").exists() and \
                torch.load(out / "last.pt", weights_only=True)["training_state"]["epoch"] > 4:
            break
        assert run_training(out, ("--resume",) if (out / "last.pt").exists() else ("--force",)).wait() == 0
    a = torch.load(straight / "last.pt", weights_only=True)["state_dict"]
    b = torch.load(out / "last.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    epochs = [json.loads(line)["epoch"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3, 4]


# --- fuzzing the readers ---------------------------------------------------------------------

TREE_ALPHABET = st.sampled_from(list("()( )NPVBDTS -\n\tab.,'\"\\é苹\x00"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(TREE_ALPHABET, max_size=60) | st.text(max_size=40))
def test_fuzz_gold_reader_returns_trees_or_our_error(tmp_path, text):
    path = tmp_path / "fuzz.txt"
    path.write_text(text, encoding="utf-8")
    for skip_bad in (False, True):
        try:
            gold, _ = read_gold(str(path), TagFilter(keep=None), skip_bad=skip_bad)
        except InputError:
            continue
        assert all(g.words == trees.leaves(g.tree) for g in gold)


@settings(max_examples=300, deadline=None)
@given(text=st.text(TREE_ALPHABET, max_size=60))
def test_fuzz_bracket_parser_returns_a_tree_or_our_error(text):
    try:
        tree = trees.parse_brackets(text)
    except trees.TreeSyntaxError:
        return
    assert trees.parse_brackets(trees.to_brackets(tree)) == tree


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=80))
def test_fuzz_corpus_reader_returns_sentences_or_our_error(tmp_path, data):
    path = tmp_path / "corpus.txt"
    path.write_bytes(data)
    try:
        sentences, blank = read_corpus(path, Tokenizer())
    except InputError:
        return
    assert sentences and all(sentence for sentence in sentences) and blank >= 0


# --- what real users do (each of these once went wrong) ---------------------------------------

def one_line_error(result, message):
    assert result.exit_code == 1, result.output
    assert message in result.output and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_brackets_typed_as_words_survive_parsing_and_rescoring(tiny_run, tmp_path):
    result = cli("parse", "--model", tiny_run / "best.pt", "a ( b ) c [ d ] { e }")
    assert result.exit_code == 0, result.output
    assert trees.leaves(trees.parse_brackets(result.output.strip())) == "a ( b ) c [ d ] { e }".split()
    gold = tmp_path / "gold.txt"
    gold.write_text("(S (NP (DT the) (NN dog)) (VP (VBD saw) (-LRB- -LRB-) (NP (DT a) (NN cat)) (-RRB- -RRB-)))\n")
    saved = tmp_path / "saved.txt"
    first = cli("evaluate", "--model", tiny_run / "best.pt", "--gold", gold, "--punct-tags", "PU",
                "--save-trees", saved, "--quiet")
    assert first.exit_code == 0, first.output
    assert "-LRB-" in saved.read_text()
    again = cli("evaluate", "--pred", saved, "--gold", gold, "--punct-tags", "PU")
    assert again.exit_code == 0, again.output


def test_eos_and_unk_typed_by_a_user_are_ordinary_unknown_words(tiny_model):
    typed = read_sentences(tiny_model, ["the dog <eos> saw a cat".split(), "the dog <unk> saw a cat".split()])
    unknown = read_sentences(tiny_model, ["the dog qqqq saw a cat".split()])[0]
    for parsed in typed:  # a batch of two against a batch of one: equal to float32 rounding, not bit for bit
        for got, expected in zip(parsed.forget, unknown.forget):
            assert got == pytest.approx(expected, rel=1e-5, abs=1e-6)
        assert len(trees.leaves(parsed.tree(2))) == 6


def test_a_byte_order_mark_does_not_become_part_of_a_word(tiny_run, tmp_path):
    text = tmp_path / "in.txt"
    text.write_bytes("\ufeffthe dog ran\n".encode())
    result = cli("parse", "--model", tiny_run / "best.pt", "--input", text, "--format", "json")
    assert json.loads(result.output) == json.loads(cli("parse", "--model", tiny_run / "best.pt", "--format", "json",
                                                       "the dog ran").output)
    text.write_bytes(b"the\x00dog ran\n")
    one_line_error(cli("parse", "--model", tiny_run / "best.pt", "--input", text), "in.txt:1: control character U+0000")


def test_chinese_gold_scored_with_the_english_tag_filter_says_so(tmp_path):
    gold = tmp_path / "ctb.txt"
    gold.write_text("(IP (NP (NR 张三)) (VP (VV 喜欢) (NP (NN 苹果))) (PU 。))\n"
                    "(IP (NP (PN 我们)) (VP (VV 学习) (NP (NN 中文) (CD 3))) (PU 。))\n")
    pred = tmp_path / "pred.txt"
    pred.write_text("苹果\n(中文 3)\n")  # what survives the PTB filter: the NN and CD leaves
    result = cli("evaluate", "--pred", pred, "--gold", gold)
    assert result.exit_code == 0, result.output
    assert "dropped 67% of the gold leaves" in result.output and "--treebank ctb" in result.output


def test_saved_trees_of_a_length_limited_evaluation_can_be_rescored(tiny_run, tmp_path):
    saved = tmp_path / "t.txt"
    first = cli("evaluate", "--model", tiny_run / "best.pt", "--max-length", 10, "--save-trees", saved, "--quiet")
    assert first.exit_code == 0, first.output
    again = cli("evaluate", "--pred", saved, "--max-length", 10)
    assert again.exit_code == 0, again.output
    main_row = next(line for line in first.output.splitlines() if "*" in line).split("*")[1].split()
    assert next(line for line in again.output.splitlines() if "*" in line).split("*")[1].split() == main_row


def test_labelled_predictions_are_recognised(tmp_path):
    gold = tmp_path / "gold.txt"
    gold.write_text("(S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))) (. .))\n")
    pred = tmp_path / "pred.txt"
    pred.write_text("(S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))))\n")
    result = cli("evaluate", "--pred", pred, "--gold", gold)
    assert result.exit_code == 0 and "100.0" in result.output, result.output
    pred.write_text("(S (NP (DT the) (NN cow)) (VP (VBD saw) (NP (DT a) (NN cat))))\n")
    one_line_error(cli("evaluate", "--pred", pred, "--gold", gold), "(for labelled trees, add --pred-format ptb)")


def test_outputs_and_run_directories_that_cannot_be_used_are_refused_first(tiny_run, tmp_path):
    one_line_error(cli("parse", "--model", tiny_run / "best.pt", "--output", tmp_path, "a b"), "is a folder, not a file")
    one_line_error(cli("parse", "--model", tiny_run / "best.pt", "--output", "/proc/trees.txt", "a b"),
                   "cannot write in /proc")
    file = tmp_path / "file"
    file.write_text("")
    one_line_error(cli("train", "--config", ROOT / "configs" / "tiny.toml", "--out", file), "is a file, not a run directory")


def test_a_deeply_nested_config_and_absurd_sizes_are_one_line_errors(tmp_path):
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 100000 + "]" * 100000 + "\n")
    one_line_error(cli("train", "--config", deep, "--out", tmp_path / "r"), "nested too deeply")
    out = tmp_path / "huge"
    one_line_error(cli("train", "--config", ROOT / "configs" / "tiny.toml", "--out", out, "--quiet",
                       "--set", "model.emb_size=400000", "--set", "model.hidden_size=400000"), "not enough memory")
    assert not out.exists()


def test_non_finite_settings_are_refused_naming_set(tmp_path):
    one_line_error(cli("train", "--config", ROOT / "configs" / "tiny.toml", "--out", tmp_path / "r",
                       "--set", "train.lr=nan"), "--set train.lr=nan: train.lr must be a finite number, got nan")
    one_line_error(cli("train", "--config", ROOT / "configs" / "tiny.toml", "--out", tmp_path / "r",
                       "--set", "train.clip=inf"), "--set train.clip=inf: train.clip must be a finite number")
    one_line_error(cli("train", "--config", ROOT / "configs" / "tiny.toml", "--out", tmp_path / "r",
                       "--set", "train.lr=0"), "train.lr must be positive")
    assert not (tmp_path / "r").exists()


def test_a_run_stopped_by_nan_before_any_epoch_can_start_again(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(train_module.TrainingStopped, match="no epoch had finished, so nothing was kept"):
        train(tiny_config(train={"epochs": 1, "lr": 1e38, "clip": 0.0}), out, **QUIET)
    train(tiny_config(train={"epochs": 1}), out, **QUIET)  # no --force needed
    assert (out / "best.pt").exists()


def test_checkpoint_messages_name_the_problem(tiny_run, tmp_path):
    one_line_error(cli("parse", "--model", tiny_run, "a b"),
                   f"is a folder, not a checkpoint file (did you mean {tiny_run / 'best.pt'}?)")
    payload = torch.load(tiny_run / "best.pt", weights_only=True)
    payload["state_dict"]["layers.1.hh.weight"] = torch.zeros(3, 3)
    wrong = tmp_path / "wrong.pt"
    torch.save(payload, wrong)
    one_line_error(cli("parse", "--model", wrong, "a b"), "size mismatch for layers.1.hh.weight")
    evil = tmp_path / "evil.pt"
    torch.save({"format_version": 1, "config": RunsCode(tmp_path / "pwned")}, evil)
    result = cli("parse", "--model", evil, "a b")
    one_line_error(result, "holds Python objects, not only plain data")
    assert "weights_only=False" not in result.output


def test_every_option_has_help_and_the_tool_a_version():
    for name, command in main.commands.items():
        for param in command.params:
            if isinstance(param, click.Option) and param.name != "help":
                assert param.help, f"{name} {param.opts[0]} has no help"
    assert cli("--version").output.startswith("grammar-induce, version ")


@pytest.mark.slow
def test_output_to_dev_stdout_writes_to_standard_output(tiny_run):
    result = subprocess.run([sys.executable, "-m", "grammar_induce", "parse", "--model", str(tiny_run / "best.pt"),
                             "--output", "/dev/stdout", "the dog ran"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert trees.leaves(trees.parse_brackets(result.stdout.strip())) == ["the", "dog", "ran"]
    assert os.path.islink("/dev/stdout") or not os.path.isfile("/dev/stdout")
