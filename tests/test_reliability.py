"""No input destroyed, no number silently wrong, no traceback: one test (or more) per case of the third
reliability round (issue 22; each failed on the code before it, 0e28d45, or 92ac91d for 4, 5 and 14)."""

import json
import math
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest
import torch
from click.testing import CliRunner

from grammar_induce.cli import main
from grammar_induce.config import Config
from grammar_induce.files import InputError, Messages
from grammar_induce.inference import voting
from grammar_induce.output import draw
from grammar_induce.text import corpus
from grammar_induce.workflows import train as train_module
from grammar_induce.workflows.train import train

from .conftest import QUIET, ROOT, tiny_config

GOLD = ROOT / "grammar_induce" / "resources" / "synthetic" / "test.trees"
LABELLED_GOLD = "( (S (NP-SBJ (DT The) (NN dog) (-NONE- *-1)) (, ,) (VP (VBD barked) (NP (DT a) (NN lot))) (. .)) )\n"


def cli(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def one_line_error(result, *messages):
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    error = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(error) == 1, result.output
    for message in messages:
        assert message in error[0], result.output
    return error[0]


@pytest.fixture
def run_copy(tiny_run, tmp_path) -> Path:
    """A copy of the tiny run that a test may damage."""
    copy = tmp_path / "run"
    shutil.copytree(tiny_run, copy)
    return copy


def well_formed(xml: str) -> ElementTree.Element:
    return ElementTree.fromstring(xml)


def no_temporary_files(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".") and (".tmp" in p.name or ".new" in p.name)]


# --- 1. an output that is an input ---------------------------------------------------------------

def test_an_output_that_is_one_of_the_inputs_is_refused_before_any_work(run_copy, tmp_path):
    best, metrics = (run_copy / "best.pt").read_bytes(), (run_copy / "metrics.jsonl").read_bytes()
    one_line_error(cli("parse", "--model", run_copy / "best.pt", "--output", run_copy / "best.pt", "a b"),
                   "--output is also an input")
    (tmp_path / "link.pt").symlink_to(run_copy / "best.pt")  # the same file through a link
    one_line_error(cli("parse", "--model", run_copy / "best.pt", "--output", tmp_path / "link.pt", "a b"), "is also an input")
    one_line_error(cli("plot", run_copy, "--output", run_copy / "metrics.jsonl"), "is also an input")
    one_line_error(cli("plot", run_copy, "--output", run_copy / "curves.svg"), "is also an input")
    assert (run_copy / "best.pt").read_bytes() == best and (run_copy / "metrics.jsonl").read_bytes() == metrics
    sentences = tmp_path / "s.txt"
    sentences.write_text("a b c\n")
    one_line_error(cli("parse", "--model", run_copy / "best.pt", "--input", sentences, "--output", sentences), "is also an input")
    assert sentences.read_text() == "a b c\n"
    pred = tmp_path / "pred.txt"
    assert cli("evaluate", "--model", run_copy / "best.pt", "--save-trees", pred, "--quiet").exit_code == 0
    saved = pred.read_text()
    one_line_error(cli("evaluate", "--pred", pred, "--save-trees", pred), "--save-trees is also an input")
    assert pred.read_text() == saved


def test_training_refuses_a_data_file_that_is_a_file_of_its_run_directory(run_copy):
    config = tiny_config(data={"train": str(run_copy / "metrics.jsonl")})
    kept = (run_copy / "metrics.jsonl").read_bytes()
    with pytest.raises(InputError, match="is also an input"):
        train(config, run_copy, force=True, **QUIET)
    assert (run_copy / "metrics.jsonl").read_bytes() == kept


# --- 2. side outputs never stop training ---------------------------------------------------------

def test_a_chart_of_a_diverged_run_is_a_sane_picture():
    for values in ([(1, 4.3e116)], [(1, math.inf), (2, math.nan), (3, 5.0)], [(1, math.nan)], [(1, 2.0), (2, 2.0)]):
        svg = draw.line_chart({"run": values}, "epoch", "ppl")
        well_formed(svg)
        assert "nan" not in svg and "inf" not in svg


def test_training_goes_on_and_keeps_its_state_when_a_picture_fails(tmp_path, monkeypatch):
    def broken(*args):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(draw, "write_curves", broken)
    messages = Messages()
    result = train(tiny_config(train={"epochs": 2}), tmp_path / "run", quiet=True, messages=messages)
    assert len(result.epochs) == 2
    assert (tmp_path / "run" / "last.pt").exists() and (tmp_path / "run" / "best.pt").exists()
    assert messages.notes == ["could not write curves.svg (ZeroDivisionError: float division by zero); training goes on"] * 2


def test_a_diverging_run_keeps_last_pt_and_its_curves(tmp_path):
    out = tmp_path / "run"
    config = tiny_config(train={"epochs": 1, "lr": 3000.0, "clip": 0.0})
    try:
        train(config, out, **QUIET)
    except train_module.TrainingStopped:  # the loss may overflow inside the epoch: nothing to check then
        pytest.skip("the loss became NaN inside the epoch")
    assert (out / "last.pt").exists()
    well_formed((out / "curves.svg").read_text())


# --- 3. resume refuses what changes the model --------------------------------------------------

def test_resume_refuses_a_change_to_the_model_tokenizer_or_data_naming_key_and_values(tmp_path):
    out = tmp_path / "run"
    train(tiny_config(train={"epochs": 1}), out, **QUIET)
    last = (out / "last.pt").read_bytes()
    with pytest.raises(InputError, match=r"cannot change data.tokenizer \(the run has 'whitespace', now 'char'\)"):
        train(tiny_config(train={"epochs": 2}, data={"tokenizer": "char"}), out, resume=True, **QUIET)
    one_line_error(cli("train", "--out", out, "--resume", "--set", "model.hidden_size=32"),
                   "cannot change model.hidden_size")
    one_line_error(cli("train", "--out", out, "--resume", "--set", "train.batch_size=2"), "cannot change train.batch_size")
    assert (out / "last.pt").read_bytes() == last
    assert cli("train", "--out", out, "--resume", "--epochs", "2", "--quiet").exit_code == 0  # safe to change


# --- 4, 5, 14: layers chosen once; agreement in pictures; auto with nothing to agree on ----------

@pytest.mark.slow
def test_every_option_parses_the_same_in_worker_processes_as_in_one(tiny_run, tiny_backward_run, tmp_path):
    from grammar_induce.models import checkpoint

    vocab = checkpoint.load(tiny_run / "best.pt").vocab.words[2:]
    rng = random.Random(0)
    lines = tmp_path / "in.txt"  # 3 chunks of 64 lines: short sentences, then long ones (whose layers agree otherwise)
    lines.write_text("".join(" ".join(rng.choice(vocab) for _ in range(rng.randint(2, 3) if k < 64 else
                                                                          rng.randint(15, 25))) + "\n"
                             for k in range(192)))
    models = ["--model", tiny_run / "best.pt", "--model", tiny_backward_run / "best.pt"]
    for options in (["--layer", "auto"], ["--layer", "auto", "--combine", "mean", "--decoder", "gap"],
                    ["--layer", "1", "--layer", "3", "--format", "jsonl"]):
        one = cli("parse", *models, "--input", lines, "--batch-size", "1", *options)
        two = cli("parse", *models, "--input", lines, "--batch-size", "1", "--workers", "2", *options)
        assert one.exit_code == 0 and two.exit_code == 0, two.output
        if "jsonl" not in options:
            assert one.stdout == two.stdout
            continue
        for a, b in zip(map(json.loads, one.stdout.splitlines()), map(json.loads, two.stdout.splitlines()), strict=True):
            assert a["tree"] == b["tree"] and [m["tree"] for m in a["members"]] == [m["tree"] for m in b["members"]]
            assert [m["layer"] for m in a["members"]] == [m["layer"] for m in b["members"]]
            # a worker has fewer threads: float32 sums may round in another order
            assert torch.allclose(torch.tensor(a["members"][0]["forget"]), torch.tensor(b["members"][0]["forget"]),
                                  rtol=1e-5, atol=1e-6)


def test_agreement_is_the_same_in_every_format(tiny_run):
    models = ["--model", tiny_run / "best.pt", "--model", tiny_run / "best.pt"]  # twins: they agree fully
    for fmt, sentences in (("brackets", ["a b c d", "c d e"]), ("html", ["a b c d", "c d e"]), ("svg", ["a b c d"])):
        table = cli("parse", *models, "--agreement", "--format", fmt, *sentences).stderr
        assert table.count("100.0") == 3, (fmt, table)  # each member, and the mean


def test_layer_auto_with_empty_or_only_blank_lines(tiny_run, tiny_backward_run):
    models = ["--model", tiny_run / "best.pt", "--model", tiny_backward_run / "best.pt", "--layer", "auto"]
    assert cli("parse", *models, "").exit_code == 0
    result = cli("parse", *models, "--input", "-", input="\n\n\n")
    assert result.exit_code == 0 and result.stdout == "\n\n\n"


# --- 6. pictures show what was asked -----------------------------------------------------------

def bar_titles(svg: str, layer: int) -> list[float]:
    root = well_formed(svg)
    return [float(rect.find("{*}title").text) for rect in root.iter("{http://www.w3.org/2000/svg}rect")
            if rect.get("data-layer") == str(layer)]


def test_pictures_draw_the_distances_and_layers_asked_for(tiny_run, tiny_backward_run):
    record = json.loads(cli("parse", "--model", tiny_run / "best.pt", "--format", "jsonl", "a b c d").stdout)
    svg = cli("parse", "--model", tiny_run / "best.pt", "--format", "svg", "--distance", "input", "a b c d").stdout
    assert bar_titles(svg, 2) == pytest.approx([round(d, 4) for d in record["input"][1]], abs=1e-4)
    models = ["--model", tiny_run / "best.pt", "--model", tiny_backward_run / "best.pt"]
    page = cli("parse", *models, "--layer", "1", "--layer", "3", "--format", "html", "a b c d").stdout
    assert page.count("L1 *") == 1 and page.count("L3 *") == 1
    auto = cli("parse", *models, "--layer", "auto", "--format", "jsonl", "a b c d", "b c d e")
    chosen = [m["layer"] for m in json.loads(auto.stdout.splitlines()[0])["members"]]
    assert f"--layer auto chose layer {chosen[0]} of" in auto.stderr
    page = cli("parse", *models, "--layer", "auto", "--format", "html", "a b c d", "b c d e").stdout
    assert page.count(f"L{chosen[1]} *") >= 2  # the second member's mark, on both sentences


# --- 7. token cache content ---------------------------------------------------------------------

def test_a_cache_entry_with_changed_ids_or_vocabulary_is_rebuilt(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("the dog barked\nthe cat sat on the mat\n" * 20)
    root = tmp_path / "cache"
    reader = corpus.training_reader(Config().data)
    entry = corpus.training_entry(str(text), reader, corpus.Limits(), root)
    ids, words = entry.ids.clone(), list(entry.vocab.words)
    (entry.path / "ids.bin").write_bytes(bytes((entry.path / "ids.bin").stat().st_size))  # zeroed, same size
    again = corpus.training_entry(str(text), reader, corpus.Limits(), root)
    assert torch.equal(again.ids, ids)
    meta = json.loads((again.path / "meta.json").read_text())
    meta["vocab"][2], meta["vocab"][3] = meta["vocab"][3], meta["vocab"][2]  # two words swapped
    (again.path / "meta.json").write_text(json.dumps(meta))
    assert corpus.training_entry(str(text), reader, corpus.Limits(), root).vocab.words == words


# --- 8, 9. rescoring; models that do not fit the gold ---------------------------------------------

def test_the_gold_trees_rescored_as_labelled_predictions_give_100(tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text(LABELLED_GOLD)
    for extra in ([], ["--pred-format", "ptb"]):
        result = cli("evaluate", "--pred", gold, "--gold", gold, "--json", tmp_path / "r.json", *extra)
        assert result.exit_code == 0, result.output
        assert json.loads((tmp_path / "r.json").read_text())["rows"]["predicted"]["sentence_f1"] == 1.0


def test_parse_output_of_text_with_punctuation_can_be_rescored(tiny_run, tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text(LABELLED_GOLD)
    for fmt in ("ptb", "brackets"):
        pred = tmp_path / f"pred.{fmt}"
        assert cli("parse", "--model", tiny_run / "best.pt", "--format", fmt, "--output", pred,
                   "The dog , barked a lot .").exit_code == 0
        result = cli("evaluate", "--pred", pred, "--gold", gold)
        assert result.exit_code == 0, result.output


def test_evaluate_says_how_many_gold_words_the_model_does_not_know(tiny_run, tmp_path):
    result = cli("evaluate", "--model", tiny_run / "best.pt", "--quiet")
    assert "gold words unknown to" in result.stdout and "note:" not in result.stdout
    gold = tmp_path / "gold.mrg"
    gold.write_text(LABELLED_GOLD)
    result = cli("evaluate", "--model", tiny_run / "best.pt", "--gold", gold, "--quiet")
    assert result.exit_code == 0 and "are unknown to" in result.stdout and "note:" in result.stdout


# --- 10. full disks ------------------------------------------------------------------------------

def run_limited(args: list, limit: int, cwd: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI in a process that cannot write a file past `limit` bytes (a full disk, for it)."""
    def limit_writes():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "grammar_induce", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, preexec_fn=limit_writes, env=env, timeout=300, check=False)


def assert_one_line_error(done: subprocess.CompletedProcess, message: str) -> None:
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert message in done.stderr and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_leaves_old_files_and_no_temporary_ones(run_copy, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    old = out / "trees.txt"
    old.write_text("old\n")
    sentences = tmp_path / "s.txt"
    sentences.write_text("a b c d e f g h\n" * 400)
    model = run_copy / "best.pt"
    done = run_limited(["parse", "--model", model, "--input", sentences, "--output", old], 4096, tmp_path)
    assert_one_line_error(done, f"{old}: cannot write")
    assert old.read_text() == "old\n"
    done = run_limited(["parse", "--model", model, "--input", sentences, "--format", "svg", "--output", out / "svgs"],
                       4096, tmp_path)
    assert_one_line_error(done, "cannot write")
    assert not (out / "svgs").exists()
    done = run_limited(["evaluate", "--model", model, "--quiet", "--report", out / "r.html"], 4096, tmp_path)
    assert_one_line_error(done, "r.html: cannot write")
    assert "sent F1" not in done.stdout and not (out / "r.html").exists()
    no_temporary_files(out)
    last = (run_copy / "last.pt").read_bytes()
    limit = (run_copy / "last.pt").stat().st_size // 2
    done = run_limited(["train", "--out", run_copy, "--resume", "--epochs", "3", "--quiet"], limit, tmp_path)
    assert_one_line_error(done, "cannot write")
    assert (run_copy / "last.pt").read_bytes() == last
    no_temporary_files(run_copy)
    cache = tmp_path / "cache"
    done = run_limited(["prepare", sentences], 1000, tmp_path, {corpus.CACHE_ENV: str(cache)})
    assert_one_line_error(done, "cannot write the corpus cache")
    assert not list(cache.glob(".build-*"))


# --- 11, 12, 13. config, metrics, seeds ------------------------------------------------------------

def test_a_binary_config_is_one_line(tmp_path):
    config = tmp_path / "c.toml"
    config.write_bytes(b"\xff\xfe\x00\x01binary")
    one_line_error(cli("train", "--config", config), "not a TOML file")


def test_plot_of_a_damaged_metrics_file(run_copy, tmp_path):
    metrics = run_copy / "metrics.jsonl"
    good = metrics.read_text().splitlines()
    metrics.write_bytes(good[0].encode() + b"\n\xff\xfe\n")
    one_line_error(cli("plot", run_copy, "--output", tmp_path / "c.svg"), "metrics.jsonl:2: not UTF-8")
    metrics.write_text(good[0] + '\n{"epoch": 2}\n')
    one_line_error(cli("plot", run_copy, "--output", tmp_path / "c.svg"), "metrics.jsonl:2: not a metrics record")
    record = json.loads(good[0])
    lines = [json.dumps({**record, "epoch": k, "valid_ppl": v, "train_loss": v}) for k, v in
             enumerate([5.0, math.nan, math.inf, 3.0], start=1)]
    metrics.write_text("\n".join(lines) + "\n")
    assert cli("plot", run_copy, "--output", tmp_path / "c.svg").exit_code == 0
    svg = (tmp_path / "c.svg").read_text()
    well_formed(svg)
    assert "nan" not in svg.lower() and "inf" not in svg.lower()


def test_seeds_out_of_range_are_refused_without_traceback(tmp_path):
    result = cli("train", "--seed", "99999999999999999999", "--out", tmp_path / "r")
    assert result.exit_code == 2 and "--seed" in result.output and not (tmp_path / "r").exists()
    one_line_error(cli("train", "--set", "train.seed=99999999999999999999", "--out", tmp_path / "r"),
                   "train.seed must be from 0 to 4294967295")


# --- 15, 16. long lines and worker caps ----------------------------------------------------------

def test_span_voting_past_its_exact_limit_is_greedy_and_says_so(tiny_run, tiny_backward_run, monkeypatch):
    words = [f"w{k}" for k in range(30)]
    members = [voting.trees.balanced(words), voting.trees.right_branching(words)]
    exact = voting.most_voted_tree(members)
    monkeypatch.setattr(voting.structs, "EXACT_LIMIT", 10)
    greedy = voting.most_voted_tree(members)
    assert voting.trees.leaves(greedy) == words and sorted(voting.trees.spans(greedy)) != []
    assert sum(s in voting.trees.spans(m) for m in members for s in voting.trees.spans(greedy)) <= \
        sum(s in voting.trees.spans(m) for m in members for s in voting.trees.spans(exact))
    result = cli("parse", "--model", tiny_run / "best.pt", "--model", tiny_backward_run / "best.pt", " ".join(words), "a b")
    assert result.exit_code == 0 and "1 line of more than 10 words: span voting split them greedily" in result.stderr


@pytest.mark.slow
def test_workers_are_capped_by_the_input_and_say_so(tiny_run):
    one = cli("parse", "--model", tiny_run / "best.pt", "a b c", "d e")
    four = cli("parse", "--model", tiny_run / "best.pt", "--workers", "4", "a b c", "d e")
    assert four.stdout == one.stdout
    assert "--workers 4 capped at 1: the input is 2 lines, 1 chunk of up to 4,096 lines" in four.stderr


# --- 17. SIGTERM and stale files --------------------------------------------------------------------

@pytest.mark.slow
def test_sigterm_in_parse_leaves_no_temporary_file(run_copy, tmp_path):
    out = tmp_path / "o.txt"
    process = subprocess.Popen([sys.executable, "-m", "grammar_induce", "parse", "--model", run_copy / "best.pt",
                                "--input", "-", "--output", out], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdin.write(b"a b c\n" * 5000)  # more than a chunk: it is parsed and written while stdin stays open
    process.stdin.flush()
    deadline = time.time() + 120
    while not list(tmp_path.glob(".o.txt.*.tmp")) and time.time() < deadline:
        time.sleep(0.1)
    assert list(tmp_path.glob(".o.txt.*.tmp"))
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 143
    assert not list(tmp_path.glob(".o.txt.*")) and not out.exists()


def test_what_killed_processes_left_is_removed_by_the_next_run(run_copy, tmp_path):
    dead = 2**22 + 12345  # above the default pid_max: no process has it
    stale_output = tmp_path / f".o.txt.{dead}.abcd.tmp"
    stale_output.write_text("partial")
    assert cli("parse", "--model", run_copy / "best.pt", "--output", tmp_path / "o.txt", "a b").exit_code == 0
    assert not stale_output.exists()
    root = Path(os.environ[corpus.CACHE_ENV])
    stale_build = root / f".build-{dead}-xyz"
    stale_build.mkdir(parents=True)
    (stale_build / "provisional.bin").write_bytes(b"\0" * 100)
    text = tmp_path / "new.txt"
    text.write_text("a fresh text nobody prepared\n")
    assert cli("prepare", text).exit_code == 0
    assert not stale_build.exists()


# --- 18. pipes -------------------------------------------------------------------------------------

def fifo_with(path: Path, text: str, times: int = 1) -> threading.Thread:
    """A named pipe that gives `text` to the first `times` readers."""
    os.mkfifo(path)

    def feed():
        for _ in range(times):
            with open(path, "w") as f:
                f.write(text)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return thread


def test_pipes_are_read_once(tiny_run, tmp_path):
    fifo_with(tmp_path / "in", "a b c\nd e\n")
    result = cli("parse", "--model", tiny_run / "best.pt", "--input", tmp_path / "in")
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 2, result.output
    text = (ROOT / "grammar_induce" / "resources" / "synthetic" / "train.txt").read_text()
    fifo_with(tmp_path / "prep", text)
    result = cli("prepare", tmp_path / "prep")
    assert result.exit_code == 0 and "sentences" in result.stdout, result.output
    fifo_with(tmp_path / "train", text)
    result = train(tiny_config(data={"train": str(tmp_path / "train")}, train={"max_steps": 2}), tmp_path / "run", **QUIET)
    assert result.epochs
    assert not list(Path(os.environ[corpus.CACHE_ENV]).glob(".stream-*"))


# --- 19. pictures are well-formed, one per file, in folders written whole ----------------------------

def test_svg_output_is_well_formed_and_each_file_one_picture(tiny_run, tmp_path):
    model = ["--model", tiny_run / "best.pt", "--format", "svg"]
    result = cli("parse", *model, "a \ufffe b \uffff c")
    assert result.exit_code == 0
    well_formed(result.stdout)
    one_line_error(cli("parse", *model, "a \x07 b"), "control character U+0007")
    one_line_error(cli("parse", *model, "a b", "c d"), "--format svg draws one sentence")
    assert cli("parse", *model, "--output", tmp_path / "one.svg", "a b c").exit_code == 0
    well_formed((tmp_path / "one.svg").read_text())
    folder = tmp_path / "svgs"
    assert cli("parse", *model, "--output", folder, "a b", "c d", "e f").exit_code == 0
    assert sorted(p.name for p in folder.iterdir()) == ["000001.svg", "000002.svg", "000003.svg"]
    assert cli("parse", *model, "--output", folder, "a b").exit_code == 0
    assert sorted(p.name for p in folder.iterdir()) == ["000001.svg"]  # no stale pictures kept
    (folder / "notes.txt").write_text("mine")
    one_line_error(cli("parse", *model, "--output", folder, "a b"), "holds files this output did not write (notes.txt)")
    assert (folder / "notes.txt").read_text() == "mine"
    one_line_error(cli("parse", "--model", tmp_path / "missing.pt", "--format", "svg", "--output", tmp_path / "new", "a"))
    assert not (tmp_path / "new").exists()
    page = cli("parse", "--model", tiny_run / "best.pt", "--format", "html", "a \ufffe b").stdout
    assert "\ufffe" not in page


# --- 20, 21. paths and small things -----------------------------------------------------------------

def test_train_names_its_run_directory_by_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("train", "--config", ROOT / "configs" / "tiny.toml", "--out=~/run", "--max-steps", "2", "--quiet")
    assert result.exit_code == 0, result.output
    assert f"model in {tmp_path / '~' / 'run' / 'best.pt'}" in result.stdout


def test_small_messages(tiny_run, tmp_path):
    noise = tmp_path / "noise.pt"
    noise.write_bytes(os.urandom(4096))
    message = one_line_error(cli("parse", "--model", noise, "a"), "not a torch file")
    assert "Python objects" not in message
    result = cli("parse", "--model", tiny_run / "best.pt", "--layer", "1,2", "a b")
    assert result.exit_code == 2 and "not '1,2'" in result.output and "--layer 1 --layer 2" in result.output
    valid = tmp_path / "valid.txt"
    valid.write_text("one\n")
    one_line_error(cli("train", "--config", ROOT / "configs" / "tiny.toml", "--valid", valid, "--out", tmp_path / "r"),
                   f"{valid}: 2 tokens")
    for flag in ("--max-steps", "--max-minutes"):
        assert cli("train", flag, "0", "--out", tmp_path / "r").exit_code == 2
    assert not (tmp_path / "r").exists()


def test_ctrl_c_in_parse_exits_130(tiny_run, monkeypatch):
    from grammar_induce import api

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api.Parser, "run", interrupted)
    result = cli("parse", "--model", tiny_run / "best.pt", "a b")
    assert result.exit_code == 130 and "Aborted" not in result.output


def test_options_without_effect_are_named(tiny_run, tmp_path):
    result = cli("parse", "--model", tiny_run / "best.pt", "--layer", "auto", "--agreement", "--combine", "mean", "a b")
    assert result.exit_code == 0
    assert "note: --combine, --agreement, --layer have no effect with one model" in result.stderr
    pred = tmp_path / "p.txt"
    assert cli("evaluate", "--model", tiny_run / "best.pt", "--save-trees", pred, "--quiet").exit_code == 0
    result = cli("evaluate", "--pred", pred, "--decoder", "gap")
    assert "note: --decoder has no effect with --pred" in result.stderr


def test_counts_are_plural_only_when_they_are_many(tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text(LABELLED_GOLD)
    result = cli("evaluate", "--pred", gold, "--gold", gold)
    assert "(1 sentence, 0 skipped)" in result.stdout
    one_line_error(cli("evaluate", "--pred", gold, "--gold", GOLD), "1 predicted tree for ")


def test_a_message_about_one_model_says_model(tiny_run):
    one_line_error(cli("parse", "--model", tiny_run / "best.pt", "--layer", "1", "--layer", "2", "a b"),
                   "--layer is given 2 times for 1 model:")


def test_json_and_report_to_one_path_are_refused(tiny_run, tmp_path):
    one_line_error(cli("evaluate", "--model", tiny_run / "best.pt", "--json", tmp_path / "x", "--report", tmp_path / "x"),
                   "given to both --json and --report")


def test_plot_legends_tell_runs_apart():
    labels = draw.legend_labels(["experiments/ptb-seed-1/forward-run", "experiments/ptb-seed-2/forward-run"])
    assert len(set(labels)) == 2 and all(len(label) <= 20 for label in labels)
    assert draw.legend_labels(["short"]) == ["short"]
