"""The loop keeps every recipe's random generators in one shape (training/randomness.py), and a last.pt written when
recipes kept their own resumes the same."""

from __future__ import annotations

import shutil

import torch

from grammar_induce.families import checkpoint
from grammar_induce.workflows.train import train

from .conftest import QUIET, tiny_config
from .test_structformer import tiny_structformer_config


def saved_state(run) -> dict:
    return torch.load(run / "last.pt", weights_only=True)["training_state"]


def test_every_recipe_s_last_pt_holds_the_generators_in_one_shape(tmp_path):
    configs = {"onlstm": tiny_config(run={"max_steps": 2}),
               "pcfg": tiny_config(model={"kind": "pcfg", "nonterminals": 4, "preterminals": 4, "rank": 4,
                                          "symbol_dim": 8}, train={"batch_size": 4, "lr": 0.01}, run={"max_steps": 2}),
               "structformer": tiny_structformer_config(max_steps=2)}
    for name, config in configs.items():
        train(config, tmp_path / name, **QUIET)
        state = saved_state(tmp_path / name)
        assert set(state["random"]) == {"python", "gauss_next", "torch"}, name  # "cuda" too on a GPU
        assert "rng" not in state, name


def test_a_last_pt_with_the_recipe_s_own_generators_resumes_as_before(tmp_path):
    run = tmp_path / "run"
    train(tiny_config(run={"max_steps": 3}), run, **QUIET)
    old = tmp_path / "old"
    shutil.copytree(run, old)
    payload = torch.load(old / "last.pt", weights_only=True)
    payload["training_state"]["rng"] = payload["training_state"].pop("random")  # as the ON-LSTM recipe saved it
    torch.save(payload, old / "last.pt")
    for folder in (run, old):
        train(tiny_config(run={"max_steps": 6}), folder, resume=True, **QUIET)
    a, b = (checkpoint.load(folder / "last.pt").model.state_dict() for folder in (run, old))
    assert all(torch.equal(a[k], b[k]) for k in a)
