
import json
import math
import os
import random
import signal
import time
from pathlib import Path

import pytest
import torch

from grammar_induce.config import Config, ConfigError, RunConfig
from grammar_induce.errors import InputError
from grammar_induce.families import checkpoint
from grammar_induce.families.onlstm import native
from grammar_induce.families.onlstm import recipe as awd
from grammar_induce.families.onlstm.recipe import averaged_weights, sample_seq_len
from grammar_induce.messages import Messages
from grammar_induce.output import draw
from grammar_induce.runtime import precision
from grammar_induce.runtime.distributed import World
from grammar_induce.text.tokenizer import Tokenizer
from grammar_induce.training.loop import TrainingStopped
from grammar_induce.workflows.train import train

from .conftest import QUIET, ROOT, invoke, one_line_error, run_training, tiny_config, well_formed
from .plain_corpus import read_corpus


def test_run_directory_contents(tiny_run):
    lines = [json.loads(line) for line in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [1, 2]
    assert set(lines[0]) == {"epoch", "train_loss", "valid_ppl", "lr", "phase", "tokens_per_s", "seconds"}
    assert all(math.isfinite(r["valid_ppl"]) and r["tokens_per_s"] > 0 for r in lines)
    payload = torch.load(tiny_run / "last.pt", weights_only=True)
    assert payload["format_version"] == checkpoint.FORMAT_VERSION
    assert payload["vocab"][:2] == ["<unk>", "<eos>"] and payload["training_state"]["epoch"] == 3
    best = torch.load(tiny_run / "best.pt", weights_only=True)
    assert "training_state" not in best
    assert (tiny_run / "config.toml").read_text().startswith("[model]")


def test_best_is_the_lowest_validation(tiny_run, tiny_model):
    from grammar_induce.families.onlstm.recipe import evaluate_loss
    from grammar_induce.text.tokenizer import batchify

    from .plain_corpus import encode_stream

    lines = [json.loads(line) for line in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    cfg = tiny_model.config
    valid = batchify(encode_stream(read_corpus(cfg.data.valid, Tokenizer())[0], tiny_model.vocab), cfg.train.eval_batch_size)
    ppl = math.exp(evaluate_loss(tiny_model.model, valid, cfg.train.bptt))
    assert ppl == pytest.approx(min(r["valid_ppl"] for r in lines), rel=1e-4)


def test_sequence_length_sampling():
    rng = random.Random(0)
    lengths = [sample_seq_len(rng, 70) for _ in range(20000)]
    assert min(lengths) >= 5
    half = sum(1 for n in lengths if n < 52) / len(lengths)
    assert 0.03 < half < 0.07  # about 5% draw bptt / 2
    long = [n for n in lengths if n >= 52]
    assert sum(long) / len(long) == pytest.approx(69.5, abs=0.3)  # int() truncates N(70, 5)


def test_switch_to_asgd_follows_the_nonmono_rule():
    assert not awd.should_average([3.0, 2.9, 2.8], 2.7, nonmono=2)
    assert not awd.should_average([3.0, 2.9], 3.5, nonmono=2)  # too little history
    assert awd.should_average([3.0, 2.9, 2.8], 3.1, nonmono=2)  # worse than 3.0, more than 2 back
    assert not awd.should_average([3.0, 2.9, 2.8], 2.95, nonmono=2)


def test_validation_uses_averaged_weights_then_restores():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.ASGD(model.parameters(), lr=0.1, t0=0, lambd=0.0)
    for _ in range(3):
        opt.zero_grad()
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
    current = [p.detach().clone() for p in model.parameters()]
    with averaged_weights(model, opt, active=True):
        for p in model.parameters():
            assert torch.equal(p, opt.state[p]["ax"])
    for p, c in zip(model.parameters(), current):
        assert torch.equal(p, c)


def test_resume_is_exact_after_interruptions(tmp_path, monkeypatch):
    """A run interrupted (SIGINT) inside epoch 1, at the epoch boundary and inside epoch 2,
    and resumed each time, ends with the same weights as an uninterrupted run."""
    config = tiny_config(train={"nonmono": 0}, run={"epochs": 2})
    train(config, tmp_path / "straight", **QUIET)

    original_step = awd.train_step
    interrupt_at = {4, 30, 33}  # 30 steps make one epoch of this config
    calls = {"n": 0}

    def step_then_maybe_interrupt(*args, **kwargs):
        result = original_step(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] in interrupt_at:
            os.kill(os.getpid(), signal.SIGINT)
        return result

    monkeypatch.setattr(awd, "train_step", step_then_maybe_interrupt)
    out = tmp_path / "interrupted"
    train(config, out, **QUIET)
    resumes = 0
    while torch.load(out / "last.pt", weights_only=True)["training_state"]["epoch"] <= 2:
        train(config, out, resume=True, **QUIET)
        resumes += 1
    assert resumes == 3
    a = torch.load(tmp_path / "straight" / "last.pt", weights_only=True)
    b = torch.load(out / "last.pt", weights_only=True)
    for key in a["state_dict"]:
        assert torch.equal(a["state_dict"][key], b["state_dict"][key]), key
    metrics_a = (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
    metrics_b = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["valid_ppl"] for x in metrics_a] == [json.loads(x)["valid_ppl"] for x in metrics_b]


def test_existing_run_directory_is_refused(tiny_run):
    from grammar_induce.errors import InputError

    with pytest.raises(InputError, match="run directory exists.*--resume or --force"):
        train(tiny_config(), tiny_run, **QUIET)


def test_nan_loss_stops_with_a_clear_message_keeping_last_good_state(tmp_path):
    out = tmp_path / "run"
    train(tiny_config(run={"epochs": 1}), out, **QUIET)
    before = (out / "last.pt").read_bytes()
    with pytest.raises(TrainingStopped, match="loss became nan"):
        train(tiny_config(train={"lr": 1e38, "clip": 0.0}, run={"epochs": 2}), out, resume=True, **QUIET)
    assert (out / "last.pt").read_bytes() == before


def test_the_log_says_whether_cpu_time_steps_run_in_c(monkeypatch):
    model = torch.nn.Linear(2, 2)
    monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")
    assert awd.time_step_note(model).startswith(", time steps as tensor ops")
    monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "1")
    if native.library(torch.float32) is not None:
        assert awd.time_step_note(model) == ", time steps in C"


def test_a_backward_model_learns_each_sentence_right_to_left(tiny_backward_run):
    from grammar_induce.runtime.distributed import World
    from grammar_induce.text.tokenizer import EOS, Vocab

    loaded = checkpoint.load(tiny_backward_run / "best.pt")
    assert loaded.config.model.direction == "backward"
    corpus = awd.read_stream(loaded.config, World(), Vocab(loaded.vocab.words))
    sentences, _ = read_corpus(loaded.config.data.train, Tokenizer())
    stream = [w for s in sentences for w in (*reversed(s), EOS)]
    batch = loaded.config.train.batch_size
    steps = len(stream) // batch
    first_column = [loaded.vocab.words[i] for i in corpus.train[:, 0].tolist()]
    assert first_column == [w if w in loaded.vocab.index else "<unk>" for w in stream[:steps]]


def test_keep_epochs_keeps_the_last_n_epoch_models(tmp_path):
    out = tmp_path / "run"
    train(tiny_config(run={"epochs": 4, "keep_epochs": 2}), out, **QUIET)
    assert sorted(p.name for p in out.glob("epoch-*.pt")) == ["epoch-3.pt", "epoch-4.pt"]
    last_valid = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["valid_ppl"]
    from grammar_induce.text.tokenizer import batchify

    from .plain_corpus import encode_stream

    snapshot = checkpoint.load(out / "epoch-4.pt")
    cfg = snapshot.config
    valid = batchify(encode_stream(read_corpus(cfg.data.valid, Tokenizer())[0], snapshot.vocab), cfg.train.eval_batch_size)
    ppl = math.exp(awd.evaluate_loss(snapshot.model, valid, cfg.train.bptt))
    assert ppl == pytest.approx(last_valid, rel=1e-4)  # the model as validated in that epoch
    train(tiny_config(run={"epochs": 1}), out, force=True, **QUIET)
    assert not list(out.glob("epoch-*.pt"))  # --force clears the old snapshots


def test_the_result_records_best_pt_on_the_test_text_as_the_recipe_scores_it(tmp_path):
    """The loop keeps best.pt's test figure as the recipe's score records it (a language model's: its perplexity, the
    same as `perplexity` measures on the file), and none without a test text (issue 82: the loop names no figure)."""
    from dataclasses import replace

    from grammar_induce.workflows.train import perplexity

    config = tiny_config(run={"epochs": 1})
    config = replace(config, data=replace(config.data, test=config.data.valid))
    result = train(config, tmp_path / "tested", **QUIET)
    expected = perplexity(checkpoint.load(tmp_path / "tested" / "best.pt"), config.data.valid, "test")
    assert set(result.test) == {"test_ppl"} and result.test_ppl == pytest.approx(expected, rel=1e-4)
    untested = train(tiny_config(run={"epochs": 1}), tmp_path / "untested", **QUIET)
    assert untested.test == {} and untested.test_ppl is None


def test_the_lstm_baseline_trains_and_cannot_parse(tmp_path):
    from grammar_induce.errors import InputError
    from grammar_induce.families.onlstm.model import LSTMLanguageModel
    from grammar_induce.inference.ensemble import ParseOptions
    from grammar_induce.inference.members import Members
    from grammar_induce.inference.parsing import parse

    out = tmp_path / "lstm"
    result = train(tiny_config(model={"kind": "lstm"}, run={"epochs": 2}), out, **QUIET)
    assert result.best_valid_ppl is not None and result.best_valid_ppl < 105  # below the vocabulary size
    loaded = checkpoint.load(out / "best.pt")
    assert isinstance(loaded.model, LSTMLanguageModel)
    with pytest.raises(InputError, match="lstm language model has no distances"):
        parse(Members.of([loaded], ParseOptions()), ["a b"])


def test_training_refuses_a_data_file_that_is_a_file_of_its_run_directory(run_copy):
    config = tiny_config(data={"train": str(run_copy / "metrics.jsonl")})
    kept = (run_copy / "metrics.jsonl").read_bytes()
    with pytest.raises(InputError, match="is also an input"):
        train(config, run_copy, force=True, **QUIET)
    assert (run_copy / "metrics.jsonl").read_bytes() == kept


def test_training_goes_on_and_keeps_its_state_when_a_picture_fails(tmp_path, monkeypatch):
    def broken(*args):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(draw, "write_curves", broken)
    messages = Messages()
    result = train(tiny_config(run={"epochs": 2}), tmp_path / "run", quiet=True, messages=messages)
    assert len(result.epochs) == 2
    assert (tmp_path / "run" / "last.pt").exists() and (tmp_path / "run" / "best.pt").exists()
    assert messages.notes == ["could not write curves.svg (ZeroDivisionError: float division by zero); training goes on"] * 2


def test_a_diverging_run_stops_keeping_last_pt_and_its_curves(tmp_path):
    """lr 3000 without clipping sends the loss past a float's perplexity (or to NaN) within an epoch: the run stops
    at that step, last.pt and the curves as the last good epoch left them."""
    out = tmp_path / "run"
    train(tiny_config(run={"epochs": 1}), out, **QUIET)
    before = (out / "last.pt").read_bytes()
    with pytest.raises(TrainingStopped, match=r"the training loss became \S+ at step \d+ of epoch 2; .*last.pt keeps "
                                              r"the last good state \(lr 3000 with sgd: try a lower lr or clip\)"):
        train(tiny_config(train={"lr": 3000.0, "clip": 0.0}, run={"epochs": 2}), out, resume=True, **QUIET)
    assert (out / "last.pt").read_bytes() == before
    well_formed((out / "curves.svg").read_text())


def test_a_validation_past_a_float_perplexity_stops_the_run_before_best_pt(tmp_path, monkeypatch):
    monkeypatch.setattr(awd.AWDRecipe, "held_out", lambda self, model, part, products: 800.0)
    out = tmp_path / "run"
    with pytest.raises(TrainingStopped, match=r"the validation loss became 800 after epoch 1; nothing had been saved yet"):
        train(tiny_config(run={"epochs": 1}), out, **QUIET)
    assert not (out / "best.pt").exists()


def test_a_loss_has_diverged_where_its_perplexity_is_past_a_float_or_it_is_not_a_number():
    from grammar_induce.families.recipe import PERPLEXITY
    from grammar_induce.families.student.model import FAMILY as STUDENT

    per_word = PERPLEXITY.diverged
    assert [per_word(x) for x in (7.0, 709.0, 710.0, math.inf, math.nan)] == [False, False, True, True, True]
    config = Config(model=STUDENT.model_config(kind="student"), data=tiny_config().data, train=STUDENT.train_config(),
                    run=RunConfig())
    student = STUDENT.distilled_by(config, torch.nn.Linear(1, 1), None, torch.device("cpu"), World(), None)
    per_tree = student.score.diverged  # a long sentence's tree can cost hundreds of nats
    assert [per_tree(x) for x in (-0.5, 710.0, 1e30, math.inf, math.nan)] == [False, False, False, True, True]


def test_resume_refuses_a_change_to_the_model_tokenizer_or_data_naming_key_and_values(tmp_path):
    out = tmp_path / "run"
    train(tiny_config(run={"epochs": 1}), out, **QUIET)
    last = (out / "last.pt").read_bytes()
    with pytest.raises(InputError, match=r"cannot change data.tokenizer \(the run has 'whitespace', now 'char'\)"):
        train(tiny_config(run={"epochs": 2}, data={"tokenizer": "char"}), out, resume=True, **QUIET)
    one_line_error(invoke("train", "--out", out, "--resume", "--set", "model.hidden_size=32"),
                   "cannot change model.hidden_size")
    one_line_error(invoke("train", "--out", out, "--resume", "--set", "train.batch_size=2"), "cannot change train.batch_size")
    assert (out / "last.pt").read_bytes() == last
    assert invoke("train", "--out", out, "--resume", "--epochs", "2", "--quiet").exit_code == 0  # safe to change


def test_sigterm_saves_last_and_resume_continues(tmp_path, monkeypatch):
    original = awd.train_step
    calls = {"n": 0}

    def step(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(*args, **kwargs)

    monkeypatch.setattr(awd, "train_step", step)
    out = tmp_path / "run"
    train(tiny_config(run={"epochs": 1}), out, **QUIET)
    state = torch.load(out / "last.pt", weights_only=True)["training_state"]
    assert state["epoch"] == 1 and state["position"]["start"] > 0 and state["step"] == 5
    monkeypatch.setattr(awd, "train_step", original)
    train(tiny_config(run={"epochs": 1}), out, resume=True, **QUIET)
    assert torch.load(out / "last.pt", weights_only=True)["training_state"]["epoch"] == 2


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
    runs = []  # what each run after the kills said, for the message of a failure
    while True:
        if (out / "last.pt").exists() and \
                torch.load(out / "last.pt", weights_only=True)["training_state"]["epoch"] > 4:
            break
        process = run_training(out, ("--resume",) if (out / "last.pt").exists() else ("--force",))
        runs.append(process.stderr.read().decode()[-600:])
        assert process.wait() == 0, runs[-1]
    a = torch.load(straight / "last.pt", weights_only=True)["state_dict"]
    b = torch.load(out / "last.pt", weights_only=True)["state_dict"]
    differ = {k: float((a[k] - b[k]).abs().max()) for k in a if not torch.equal(a[k], b[k])}
    assert not differ, (f"weights differ (max abs difference by key): {differ}; metrics "
                        f"{(out / 'metrics.jsonl').read_text()}; straight {(straight / 'metrics.jsonl').read_text()}; "
                        f"the runs after the kills said: {runs}")
    epochs = [json.loads(line)["epoch"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3, 4]


def test_a_run_stopped_by_nan_before_any_epoch_can_start_again(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(TrainingStopped, match="nothing had been saved yet, so the run can start again"):
        train(tiny_config(train={"lr": 1e38, "clip": 0.0}, run={"epochs": 1}), out, **QUIET)
    train(tiny_config(run={"epochs": 1}), out, **QUIET)  # no --force needed
    assert (out / "best.pt").exists()


def test_a_run_killed_inside_an_epoch_resumes_from_the_last_periodic_save_to_the_same_weights(tmp_path, monkeypatch):
    """run.checkpoint_minutes: last.pt inside an epoch (here after every step); a run that dies without a
    chance to save (not a signal: an error) resumes from the last one to the weights of a run never stopped."""
    config = tiny_config(train={"nonmono": 0}, run={"epochs": 2, "checkpoint_minutes": 1e-9})
    train(config, tmp_path / "straight", **QUIET)
    original, calls = awd.train_step, {"n": 0}

    def dies_at_step_40(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 40:  # inside epoch 1
            raise RuntimeError("the machine went away")
        return original(*args, **kwargs)

    monkeypatch.setattr(awd, "train_step", dies_at_step_40)
    out = tmp_path / "killed"
    with pytest.raises(RuntimeError):
        train(config, out, **QUIET)
    state = torch.load(out / "last.pt", weights_only=True)["training_state"]
    assert state["step"] == 39 and state["position"]["hidden"] is not None  # saved after the step before
    monkeypatch.undo()
    train(config, out, resume=True, **QUIET)
    a, b = (torch.load(path / "last.pt", weights_only=True)["state_dict"] for path in (tmp_path / "straight", out))
    assert all(torch.equal(a[k], b[k]) for k in a)


def _records(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_a_step_limit_inside_an_epoch_keeps_its_place_and_resume_finishes_it(tmp_path):
    """max_steps stops inside the epoch (30 steps make one here): the metrics line says partial and which limit,
    last.pt holds the position, no epoch is counted and no phase moves; --resume with the limit lifted finishes the
    same epoch, to the weights of a run never stopped."""
    straight = tmp_path / "straight"
    train(tiny_config(run={"epochs": 1}), straight, **QUIET)
    out = tmp_path / "limited"
    said = []
    result = train(tiny_config(run={"epochs": 1, "max_steps": 12}), out, quiet=True, messages=Messages(say=said.append))
    assert result.limited_by == "max_steps" and result.stopped_by is None
    [record] = _records(out)
    assert record["epoch"] == 1 and record["stopped_by"] == "max_steps" and 0 < record["partial"] < 1
    state = torch.load(out / "last.pt", weights_only=True)["training_state"]
    assert state["epoch"] == 1 and state["step"] == 12 and state["position"] is not None and state["val_history"] == []
    assert (out / "best.pt").exists()
    assert any("stopped by the step limit (max_steps 12) in epoch 1" in line and "--resume finishes it" in line
               for line in said)
    resumed = train(tiny_config(run={"epochs": 1, "max_steps": 0}), out, resume=True, **QUIET)
    assert resumed.limited_by is None
    partial, record = _records(out)  # the line of the stop stays (its validation made best.pt), the whole epoch's after
    assert partial["partial"] < 1 and partial["stopped_by"] == "max_steps"
    assert "partial" not in record and record["epoch"] == 1
    a, b = (torch.load(run / "last.pt", weights_only=True) for run in (straight, out))
    assert b["training_state"]["step"] == a["training_state"]["step"] > 12 and b["training_state"]["epoch"] == 2
    for key in a["state_dict"]:
        assert torch.equal(a["state_dict"][key], b["state_dict"][key]), key


def test_a_resume_with_its_steps_spent_trains_nothing_and_says_so(tmp_path):
    out = tmp_path / "run"
    config = tiny_config(run={"epochs": 1, "max_steps": 5})
    train(config, out, **QUIET)
    before = torch.load(out / "last.pt", weights_only=True)
    said = []
    result = train(config, out, resume=True, quiet=True, messages=Messages(say=said.append))
    after = torch.load(out / "last.pt", weights_only=True)
    assert result.limited_by == "max_steps" and after["training_state"]["step"] == 5
    assert all(torch.equal(before["state_dict"][k], after["state_dict"][k]) for k in before["state_dict"])
    assert any("nothing to train: the run has taken 5 steps, its max_steps (5)" in line for line in said)
    done = tmp_path / "done"
    train(tiny_config(run={"epochs": 1}), done, **QUIET)
    said.clear()
    train(tiny_config(run={"epochs": 1}), done, resume=True, quiet=True, messages=Messages(say=said.append))
    assert any("nothing to train: the run has finished its 1 epochs" in line for line in said)


def test_a_time_budget_counts_this_runs_time_and_stops_inside_the_epoch(tmp_path, monkeypatch):
    """A budget spent after one step stops there (not at the epoch's end, not as a whole epoch); a resume gets the
    budget again and trains on from the same place (one more step), rather than ending at once."""
    out = tmp_path / "run"
    config = tiny_config(run={"epochs": 1, "max_minutes": 1e-9})
    result = train(config, out, **QUIET)
    assert result.limited_by == "max_minutes"
    assert torch.load(out / "last.pt", weights_only=True)["training_state"]["step"] == 1
    assert _records(out)[0]["stopped_by"] == "max_minutes"
    train(config, out, resume=True, **QUIET)
    state = torch.load(out / "last.pt", weights_only=True)["training_state"]
    assert state["step"] == 2 and state["epoch"] == 1 and state["position"] is not None
    first, record = _records(out)  # each stop's partial record is kept (the first made best.pt), the resumed run's after
    assert record["partial"] > first["partial"] > 0


def test_the_limit_flags_take_0_to_lift_a_configs_limit(tmp_path):
    tiny = (ROOT / "configs" / "tiny.toml").read_text().replace("epochs = 2", "epochs = 1\nmax_steps = 3")
    tiny = tiny.replace("../data/", str(ROOT / "data") + "/")
    (tmp_path / "limited.toml").write_text(tiny)
    result = invoke("train", "--config", tmp_path / "limited.toml", "--max-steps", "0", "--max-minutes", "0", "--quiet",
                    "--device", "cpu", "--out", tmp_path / "r")
    assert result.exit_code == 0, result.output
    assert "partial" not in _records(tmp_path / "r")[0]
    assert torch.load(tmp_path / "r" / "last.pt", weights_only=True)["training_state"]["step"] > 3


def test_resume_refuses_a_last_pt_of_another_kind_than_the_run(tmp_path):
    """A PCFG's last.pt copied into an ON-LSTM run folder: --resume would train the PCFG there, rewriting the run's
    config.toml and metrics; it is refused, naming both kinds, and the folder is left as it was."""
    run = tmp_path / "run"
    train(tiny_config(run={"epochs": 1, "max_steps": 3}), run, **QUIET)
    pcfg = tmp_path / "pcfg"
    train(tiny_config(model={"kind": "pcfg", "nonterminals": 4, "preterminals": 6, "rank": 8, "symbol_dim": 16},
                      train={"lr": 0.01}, run={"epochs": 1, "max_steps": 2}), pcfg, **QUIET)
    (run / "last.pt").write_bytes((pcfg / "last.pt").read_bytes())
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"}
    result = invoke("train", "--out", run, "--resume", "--quiet")
    message = one_line_error(result, "holds a TN-PCFG (pcfg), but the run in")
    assert "trains an ON-LSTM language model (onlstm) (config.toml)" in message  # issue 81, class 14: no "a onlstm"
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"} == before


def test_resume_says_what_it_does_not_read(tmp_path):
    import grammar_induce as gi

    run = tmp_path / "run"
    train(tiny_config(run={"epochs": 1, "max_steps": 3}), run, **QUIET)
    lines = []
    gi.train(ROOT / "configs" / "quickstart.toml", run, resume=True, settings={"run.max_steps": 4},
             log=lines.append)
    assert any(line.startswith("note: ") and "quickstart.toml is not read: a resumed run goes on with the config it "
               "was started with" in line for line in lines)
    other = tmp_path / "other.txt"
    other.write_text((ROOT / "data" / "synthetic" / "train.txt").read_text())
    lines.clear()
    gi.train(None, run, resume=True, settings={"run.max_steps": 5, "data.train": str(other)}, log=lines.append)
    assert any("the training text changed inside epoch 1" in line and str(other) in line for line in lines)


@pytest.mark.parametrize("kwargs, message", [
    ({"settings": [("run.epochs", 1)]}, "settings take a dict of section.key -> value"),
    ({"overrides": "run.epochs=1"}, "overrides take a list of 'section.key=value' strings"),
    ({"resume": "no"}, "resume must be True or False, not 'no'"),
    ({"settings": {"train.lr": float("nan")}}, "settings train.lr must be a finite number"),
    ({"settings": {"bogus.lr": 1}}, "settings are keyed section.key"),
    ({"settings": {"run.epochs": -1}}, "settings run.epochs must be positive, got -1"),  # a range: not the file's
    ({"overrides": ["run.max_minutes=-2"]}, "overrides run.max_minutes=-2: run.max_minutes must not be negative"),
])
def test_gi_train_refuses_arguments_of_the_wrong_kind_in_their_own_words(tmp_path, kwargs, message):
    import grammar_induce as gi
    from grammar_induce.errors import SettingError

    with pytest.raises(SettingError) as raised:
        gi.train(ROOT / "configs" / "tiny.toml", tmp_path / "run", log=None, **kwargs)
    assert message in str(raised.value) and "tiny.toml" not in str(raised.value)
    assert not (tmp_path / "run").exists()


def test_api_and_command_line_errors_name_what_was_given_where_it_was_given(tmp_path):
    """Issue 70, classes 10 and 11: a --set value is the --set's fault, a flag's the flag's (not `--settings`), a
    typo in a config file's model.kind the file's (not --set model.kind); the API's errors are ValueError or
    TypeError in its own words (a bad device is `device ...`, not `--device ...`)."""
    import grammar_induce as gi
    from grammar_induce.errors import SettingError

    from .conftest import invoke

    config = str(ROOT / "configs" / "tiny.toml")
    said = invoke("train", "--config", config, "--out", str(tmp_path / "a"), "--set", "run.max_minutes=-1")
    assert said.exit_code == 1 and "--set run.max_minutes=-1: run.max_minutes must not be negative" in said.output
    said = invoke("train", "--config", config, "--out", str(tmp_path / "a"), "--init", config)
    assert "--settings" not in said.output
    typo = tmp_path / "typo.toml"
    typo.write_text('[model]\nkind = "onlsm"\n')
    said = invoke("train", "--config", str(typo), "--out", str(tmp_path / "b"))
    assert said.exit_code == 1 and f"{typo}: model.kind must be one of" in said.output and "--set" not in said.output
    with pytest.raises(TypeError, match="log takes a function of one str"):
        gi.train(config, tmp_path / "c", log=5)
    with pytest.raises(ValueError, match="^device tpu: expected auto, cpu, cuda or cuda:N"):
        gi.load("ptb", device="tpu")
    assert "--device tpu: expected auto" in invoke("parse", "--device", "tpu", "a b").output
    with pytest.raises(SettingError):
        gi.train(config, tmp_path / "d", settings={"run.max_minutes": -3}, log=None)


def test_ctrl_c_in_gi_train_reaches_the_caller_after_last_pt_is_saved(tmp_path, monkeypatch, ctrl_c_raises):
    import grammar_induce as gi

    original = awd.train_step

    def step_then_interrupt(*args, **kwargs):
        result = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return result

    monkeypatch.setattr(awd, "train_step", step_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        gi.train(ROOT / "configs" / "tiny.toml", tmp_path / "run", settings={"run.device": "cpu"}, log=None)
    assert torch.load(tmp_path / "run" / "last.pt", weights_only=True)["training_state"]["position"] is not None


@pytest.mark.parametrize("device, message", [("mps", "grammar-induce runs on cpu or cuda, not mps"),
                                             ("cuda:7", "torch sees"), ("tpu", "expected auto, cpu, cuda or cuda:N")])
def test_a_device_this_tool_cannot_use_is_one_line_in_every_command(tmp_path, device, message):
    import grammar_induce as gi
    from grammar_induce.errors import InputError

    for args in (["parse", "--model", "ptb", "a b c"], ["evaluate", "--model", "ptb", "--max-length", "5"],
                 ["train", "--config", ROOT / "configs" / "tiny.toml", "--out", tmp_path / "r"]):
        one_line_error(invoke(*args, "--device", device), message)
    with pytest.raises(InputError, match=message):
        gi.load("ptb", device=device)
    assert not (tmp_path / "r").exists()


def test_resume_under_auto_keeps_the_precision_the_run_chose(tmp_path, monkeypatch):
    """`auto` times fp32 against bf16; measured again on resume it can choose the other where the two are near (the
    tiny model: as often as not on a busy machine), and the resumed run would not go on as the straight run."""
    choices = iter(["fp32", "bf16"])
    monkeypatch.setattr(precision, "bf16_hardware", lambda device: "bf16 units")
    monkeypatch.setattr(precision, "measure", lambda probe, device: next(choices))
    out = tmp_path / "run"
    train(tiny_config(run={"epochs": 1, "precision": "auto"}), out, **QUIET)
    assert 'precision = "fp32"' in (out / "config.toml").read_text()
    lines: list[str] = []
    train(tiny_config(run={"epochs": 2, "precision": "auto"}), out, resume=True, quiet=True,
          messages=Messages(say=lines.append))
    assert 'precision = "fp32"' in (out / "config.toml").read_text()
    assert "precision auto -> fp32 (auto: kept from the run resumed): everything in float32" in lines
    assert next(choices) == "bf16"  # measured once: by the run that started


def test_a_kind_that_train_does_not_make_is_refused_naming_those_it_makes(tmp_path):
    with pytest.raises(ConfigError, match=r"model.kind 'student': train makes onlstm, lstm, pcfg, structformer; a "
                                          r".* is made otherwise \(a student: by distill\)"):
        train(tiny_config(model={"kind": "student"}), tmp_path / "run", **QUIET)
    assert not (tmp_path / "run").exists()


def test_an_epoch_position_saved_before_tokens_read_were_counted_apart_resumes():
    """last.pt files written before the loss's units and the tokens read were two counts keep resuming: their one
    count was the loss's units."""
    from grammar_induce.training.state import RESUME_VERSION, TrainState

    old = {"version": RESUME_VERSION, "epoch": 19, "step": 7, "best_loss": 4.4, "val_history": [4.5, 4.4],
           "phase": "adam", "elapsed": 9.0,
           "position": {"start": 78, "hidden": None, "loss_sum": 361.5, "tokens": 915, "seconds": 167.3}}
    position = TrainState.from_dict(old, Path("last.pt")).position
    assert (position.start, position.units, position.tokens, position.loss_sum) == (78, 915, 915, 361.5)
    again = TrainState.from_dict(TrainState.from_dict(old, Path("last.pt")).to_dict(), Path("last.pt")).position
    assert again == position


def test_a_best_loss_saved_before_scores_had_a_direction_resumes_as_the_figure_it_was(tmp_path):
    """A last.pt of before kept the best as a loss (`best_loss`: a student's agreement negated); resumed, a score where
    higher is better reads it as the agreement it was, and a new last.pt keeps the figure itself (`best`)."""
    from grammar_induce.families.recipe import PERPLEXITY, Score
    from grammar_induce.training.state import TrainState

    old = {"version": 1, "epoch": 3, "step": 7, "best_loss": -0.625, "val_history": [], "phase": "adam",
           "elapsed": 1.0, "position": None}
    state = TrainState.from_dict(old, Path("last.pt"))
    assert (state.best, state.saved_as_loss) == (-0.625, True)
    saved = state.to_dict()
    assert saved["best"] == -0.625 and "best_loss" not in saved
    assert TrainState.from_dict(saved, Path("last.pt")).saved_as_loss is False
    state.read_best_as(higher_is_better=True)
    assert (state.best, state.saved_as_loss) == (0.625, False)
    perplexity = TrainState.from_dict({**old, "best_loss": 4.4}, Path("last.pt"))
    perplexity.read_best_as(higher_is_better=False)
    assert perplexity.best == 4.4
    agreement = Score(lambda f: {"valid_agreement_f1": f}, higher_is_better=True)
    assert agreement.keeps(0.7, 0.625) and not agreement.keeps(0.6, 0.625) and agreement.keeps(0.1, None)
    assert PERPLEXITY.keeps(4.0, 4.4) and not PERPLEXITY.keeps(4.5, 4.4)
    assert Score(agreement.record, higher_is_better=True, keep="last").keeps(0.1, 0.9)
