"""DistributedDataParallel on the CPU with gloo: two processes equal one with the same global batch."""

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from grammar_induce.runtime.distributed import World
from grammar_induce.workflows.train import train

from .conftest import QUIET, tiny_config

NO_DROPOUT = {"dropout": 0.0, "dropouth": 0.0, "dropouti": 0.0, "dropoute": 0.0, "wdrop": 0.0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank: int, size: int, port: int, out: str, resume: bool, epochs: int = 2, max_steps: int = 40,
           direction: str = "forward") -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    config = tiny_config(model={**NO_DROPOUT, "direction": direction}, run={"epochs": epochs, "max_steps": max_steps})
    train(config, Path(out), resume=resume, **QUIET)


def run_two(out: Path, resume: bool, epochs: int = 2, max_steps: int = 40, direction: str = "forward") -> None:
    mp.start_processes(worker, args=(2, free_port(), str(out), resume, epochs, max_steps, direction), nprocs=2,
                       start_method="spawn")


def test_split_rows_and_gather():
    rows = torch.arange(24).view(3, 8)
    assert World(0, 2).split_rows(rows).tolist() == [[0, 1, 2, 3], [8, 9, 10, 11], [16, 17, 18, 19]]
    assert World(1, 2).split_rows(rows)[:, 0].tolist() == [4, 12, 20]


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_two_processes_train_like_one(tmp_path, direction):
    single = tmp_path / "single"
    torch.set_num_threads(1)
    train(tiny_config(model={**NO_DROPOUT, "direction": direction}, run={"epochs": 2, "max_steps": 40}), single,
          **QUIET)
    double = tmp_path / "double"
    run_two(double, resume=False, direction=direction)
    a = torch.load(single / "last.pt", weights_only=True)
    b = torch.load(double / "last.pt", weights_only=True)
    assert not any(k.startswith("module.") for k in b["state_dict"])
    for key in a["state_dict"]:
        torch.testing.assert_close(a["state_dict"][key], b["state_dict"][key], rtol=1e-4, atol=1e-5)
    assert a["training_state"]["step"] == b["training_state"]["step"] == 40
    assert abs(a["training_state"]["best"] - b["training_state"]["best"]) < 1e-4


@pytest.mark.slow
def test_checkpoints_move_between_one_and_two_processes(tmp_path):
    out = tmp_path / "run"
    run_two(out, resume=False, epochs=1, max_steps=0)
    train(tiny_config(model=NO_DROPOUT, run={"epochs": 2}), out, resume=True, **QUIET)
    run_two(out, resume=True, epochs=3, max_steps=0)
    state = torch.load(out / "last.pt", weights_only=True)["training_state"]
    assert state["epoch"] == 4
    assert [line.count('"epoch"') for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 1, 1]


def parse_worker(rank: int, size: int, port: int, model: str, lines: str, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from grammar_induce.cli import main

    main(["parse", "--model", model, "--input", lines, "--output", out, "--batch-size", "2", "--device", "cpu"],
         standalone_mode=False)


@pytest.mark.slow
def test_parsing_under_torchrun_splits_the_input_and_writes_it_whole_in_order(tiny_run, tmp_path):
    from click.testing import CliRunner

    from grammar_induce.cli import main

    lines = tmp_path / "in.txt"
    words = "the dog saw a cat near the old river".split()
    lines.write_text("".join(" ".join(words[: 1 + k % 9]) + ("\n\n" if k % 13 == 0 else "\n") for k in range(300)))
    one = tmp_path / "one.txt"
    result = CliRunner().invoke(main, ["parse", "--model", str(tiny_run / "best.pt"), "--input", str(lines),
                                       "--output", str(one), "--batch-size", "2"])
    assert result.exit_code == 0, result.output
    two = tmp_path / "two.txt"
    mp.start_processes(parse_worker, args=(2, free_port(), str(tiny_run / "best.pt"), str(lines), str(two)),
                       nprocs=2, start_method="spawn")
    assert two.read_text() == one.read_text() and len(one.read_text().splitlines()) == 300 + 24  # 24 blank lines
