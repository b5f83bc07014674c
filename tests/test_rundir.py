
import json
import signal
import subprocess
import sys
import time

import pytest
import torch

from grammar_induce.errors import InputError
from grammar_induce.runtime import rundir
from grammar_induce.workflows.train import train

from .conftest import QUIET, ROOT, invoke, tiny_config


def test_a_second_run_into_a_held_directory_is_refused_naming_the_holder(tmp_path):
    out = tmp_path / "run"
    with rundir.RunDirectory(out, resume=False, force=False):
        assert "process" in (out / rundir.LOCK_FILE).read_text()
        for resume, force in ((False, True), (False, False)):
            with pytest.raises(InputError, match=r"run: in use by process \d+ on .*, started 20"):
                rundir.check(out, resume, force)
            with pytest.raises(InputError, match="in use by process"):
                train(tiny_config(), out, resume=resume, force=force, **QUIET)
    assert not (out / rundir.LOCK_FILE).exists()


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
        "f.write('process 1 on elsewhere'); f.flush(); print('held', flush=True); time.sleep(60)"),
        str(out / rundir.LOCK_FILE)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(InputError, match="in use by process 1 on elsewhere"):
        rundir.check(out, resume=False, force=True)
    holder.kill()
    holder.wait()
    assert (out / rundir.LOCK_FILE).exists() and rundir.lock_holder(out) is None
    train(tiny_config(run={"epochs": 1}), out, force=True, **QUIET)
    assert (out / "best.pt").exists()


def test_a_failed_start_leaves_no_run_directory(tmp_path):
    out = tmp_path / "new"
    with pytest.raises(InputError, match="missing.txt: cannot read"):
        train(tiny_config(data={"train": str(tmp_path / "missing.txt")}), out, **QUIET)
    assert not out.exists()
    with pytest.raises(RuntimeError), rundir.RunDirectory(out, resume=False, force=False):
        raise RuntimeError("allocation failed")  # past every check: say, the model cannot be built
    assert not out.exists()


def test_a_file_is_not_a_run_directory(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(InputError, match="file: is a file, not a run directory"):
        rundir.check(path, resume=False, force=True)


def test_resuming_from_a_copy_of_best_pt_says_so(tiny_run, tmp_path):
    out = tmp_path / "copy"
    out.mkdir()
    (out / "last.pt").write_bytes((tiny_run / "best.pt").read_bytes())
    with pytest.raises(InputError, match=r"last.pt: holds no training state to resume from \(a copy of best.pt\?\)"):
        train(tiny_config(), out, resume=True, **QUIET)


def test_a_last_pt_from_an_unknown_training_state_version_gets_a_clear_message(tiny_run, tmp_path):
    payload = torch.load(tiny_run / "last.pt", weights_only=True)
    payload["training_state"]["version"] = 99
    out = tmp_path / "future"
    out.mkdir()
    torch.save(payload, out / "last.pt")
    with pytest.raises(InputError, match="training state version 99; this grammar-induce resumes version 1"):
        train(tiny_config(), out, resume=True, **QUIET)


def test_a_last_pt_written_before_the_state_had_a_version_still_resumes(tiny_run, tmp_path):
    payload = torch.load(tiny_run / "last.pt", weights_only=True)
    del payload["training_state"]["version"]
    out = tmp_path / "old"
    out.mkdir()
    torch.save(payload, out / "last.pt")
    (out / "metrics.jsonl").write_text((tiny_run / "metrics.jsonl").read_text())
    result = train(tiny_config(run={"epochs": 3}), out, resume=True, **QUIET)
    assert [r["epoch"] for r in result.epochs] == [3]


def test_metrics_lines_are_whole_and_trimmed_to_the_resumed_epoch(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for epoch in (1, 2, 3):
        rundir.append_metrics(path, {"epoch": epoch})
    rundir.append_metrics(path, {"epoch": 4, "partial": 0.5})  # of an epoch the last.pt resumed does not reach
    with open(path, "a") as f:
        f.write('{"epoch": 4')  # half a line from a kill
    rundir.trim_metrics(path, next_epoch=3)
    assert [json.loads(line)["epoch"] for line in path.read_text().splitlines()] == [1, 2]


def test_the_partial_line_of_the_epoch_resumed_stays_when_metrics_are_trimmed(tmp_path):
    """The line a limit wrote inside an epoch (its validation made best.pt) disappeared on --resume: issue 70,
    class 14."""
    path = tmp_path / "metrics.jsonl"
    rundir.append_metrics(path, {"epoch": 1})
    rundir.append_metrics(path, {"epoch": 2, "partial": 0.3, "stopped_by": "max_minutes"})
    rundir.append_metrics(path, {"epoch": 2})  # the whole epoch 2 of a resume killed before last.pt moved on
    rundir.trim_metrics(path, next_epoch=2)
    assert [json.loads(line).get("partial") for line in path.read_text().splitlines()] == [None, 0.3]


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_training_exits_with_the_shells_code_after_saving(tmp_path, sig, code):
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "grammar_induce", "train", "--config",
                                str(ROOT / "configs" / "tiny.toml"), "--out", str(out), "--quiet",
                                "--device", "cpu", "--epochs", "100000"], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (out / "metrics.jsonl").exists() and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(sig)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == code
    assert "continue with --resume" in output
    assert torch.load(out / "last.pt", weights_only=True)["training_state"]["position"] is not None


def test_train_expands_a_tilde_as_distill_does_and_names_the_run_by_its_absolute_path(tmp_path, monkeypatch):
    """`--out=~/run` (a `~` the shell did not expand) is the home folder's run, as distill's `--out` is: never a
    folder literally named `~`."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    result = invoke("train", "--config", ROOT / "configs" / "tiny.toml", "--out=~/run", "--max-steps", "2", "--quiet")
    assert result.exit_code == 0, result.output
    assert f"model in {tmp_path / 'home' / 'run' / 'best.pt'}" in result.stdout
    assert not (tmp_path / "~").exists()
