"""Replaying work from CUDA graphs (families/onlstm/graphs.py), tested on the CPU with its stand-in recorder: a graph per
shape from the second use, inputs copied in, outputs copied out, the oldest dropped; and the ON-LSTM's recurrence
through it equal to the tensor-op steps, values and gradients, over changing step counts (the CUDA recording itself is
checked by tests/test_gpu.py on a GPU)."""

import warnings
from typing import NamedTuple

import pytest
import torch

from grammar_induce.families.onlstm import graphs
from grammar_induce.families.onlstm import recurrence as engine
from grammar_induce.workflows.train import train

from .conftest import QUIET, tiny_config


class Pair(NamedTuple):
    total: torch.Tensor
    same: torch.Tensor
    nothing: None


def pair(x: torch.Tensor, y: torch.Tensor) -> Pair:
    total = x + 2 * y
    return Pair(total, total, None)


def test_a_graph_is_made_on_a_shapes_second_use_and_gives_each_calls_own_values():
    replayed = graphs.Replayed(graphs.record_eager, budget=2**30)
    gen = torch.Generator().manual_seed(0)
    calls = [(torch.randn(3, 4, generator=gen), torch.randn(3, 4, generator=gen)) for _ in range(4)]
    first = replayed(("pair",), pair, calls[0])
    assert not replayed.graphs  # a shape seen once runs as it is
    results = [replayed(("pair",), pair, inputs) for inputs in calls[1:]]
    assert len(replayed.graphs) == 1
    for (x, y), got in zip(calls, [first, *results]):
        torch.testing.assert_close(got.total, x + 2 * y)
        assert got.same is got.total and got.nothing is None  # one output given twice stays one tensor
    graph = next(iter(replayed.graphs.values()))
    assert all(result.total is not graph.outputs.total for result in results)  # copies: the next replay overwrites
    results[0].total.zero_()  # a caller's changes reach neither the graph nor the other results
    torch.testing.assert_close(results[1].total, calls[2][0] + 2 * calls[2][1])


def test_graphs_are_kept_per_key_shape_and_layout_within_their_budget():
    x, y = torch.ones(2, 3), torch.ones(2, 3)
    one = 3 * x.numel() * x.element_size()  # a graph of `pair` holds its two inputs and one output
    replayed = graphs.Replayed(graphs.record_eager, budget=2 * one, from_use=1)
    replayed(("a",), pair, (x, y))
    replayed(("b",), pair, (x, y))  # another key
    assert len(replayed.graphs) == 2 and replayed.held == 2 * one
    transposed = torch.ones(3, 2).t()  # the same shape laid out otherwise: past the budget, it runs as it is
    for _ in range(2):
        torch.testing.assert_close(replayed(("b",), pair, (transposed, y)).total, torch.full((2, 3), 3.0))
    assert len(replayed.graphs) == 2 and len(replayed.declined) == 1
    assert next(iter(replayed.declined))[1][1] == (1, 2)  # declined by its layout
    torch.testing.assert_close(replayed(("a",), pair, (2 * x, y)).total, torch.full((2, 3), 4.0))  # kept ones replay


def test_a_recording_that_fails_warns_once_and_everything_runs_as_it_is():
    def refuse(fn, device):
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    replayed = graphs.Replayed(refuse, budget=2**30, from_use=1)
    x, y = torch.ones(2, 3), torch.full((2, 3), 2.0)
    with pytest.warns(UserWarning, match=r"could not be recorded here \(operation not permitted when stream is "
                                          r"capturing\): the time steps run kernel by kernel"):
        first = replayed(("a",), pair, (x, y))
    torch.testing.assert_close(first.total, torch.full((2, 3), 5.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        torch.testing.assert_close(replayed(("b",), pair, (y, x)).total, torch.full((2, 3), 4.0))
    assert not replayed.graphs


def test_the_sign_and_offset_constants_are_made_on_the_device_as_the_cell_needs_them():
    sign, offset = engine._sign_offset(torch.zeros(3, dtype=torch.float64))
    assert sign.tolist() == [[-1.0], [1.0]] and offset.tolist() == [[1.0], [0.0]] and sign.dtype == torch.float64


@pytest.fixture
def graphed_on_cpu(monkeypatch):
    """The recurrence's graphed steps on CPU tensors: the stand-in recorder, graphs from a shape's first use."""
    monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")
    monkeypatch.setattr(graphs, "enabled", lambda device: True)
    replayed = graphs.Replayed(graphs.record_eager, budget=2**30, from_use=1)
    monkeypatch.setattr(engine, "REPLAYED", replayed)
    return replayed


def layer_run(steps: int, seed: int, weight_dtype: torch.dtype | None = None, device: str = "cpu"
              ) -> list[torch.Tensor]:
    """One layer's outputs and gradients (inputs, states, weight, bias) for random inputs of `steps` steps."""
    gen = torch.Generator().manual_seed(seed)
    batch, hidden, n = 3, 24, 4
    gates = 4 * hidden + 2 * n
    inputs = [torch.randn(steps, batch, gates, generator=gen), torch.randn(batch, hidden, generator=gen),
              torch.randn(batch, hidden, generator=gen), torch.randn(gates, hidden, generator=gen) * 0.3,
              torch.randn(gates, generator=gen)]
    inputs = [x.to(device).requires_grad_() for x in inputs]
    xproj, h0, c0, weight, bias = inputs
    product_weight = weight if weight_dtype is None else weight.to(weight_dtype)
    outputs = engine.recurrence(xproj, h0, c0, product_weight, n, bias)
    weights = [torch.randn(o.shape, generator=gen) for o in outputs]
    grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(outputs, weights)), inputs)
    return [o.detach() for o in outputs] + list(grads)


@pytest.mark.parametrize("weight_dtype", [None, torch.bfloat16])
def test_the_recurrence_replayed_from_graphs_equals_its_tensor_op_steps(graphed_on_cpu, weight_dtype, monkeypatch):
    cases = [(5, 0), (7, 1), (5, 2), (7, 3), (5, 4)]  # shapes come back with new values
    got = [layer_run(steps, seed, weight_dtype) for steps, seed in cases]
    assert {key[0][0] for key in graphed_on_cpu.graphs} == {"forward", "backward"} and len(graphed_on_cpu.graphs) == 4
    monkeypatch.setattr(graphs, "enabled", lambda device: False)
    for (steps, seed), values in zip(cases, got):
        for a, b in zip(values, layer_run(steps, seed, weight_dtype)):
            torch.testing.assert_close(a, b)


def test_evaluation_through_graphs_equals_the_steps(graphed_on_cpu, monkeypatch):
    gen = torch.Generator().manual_seed(5)
    xproj, h0, c0 = torch.randn(6, 2, 104, generator=gen), torch.randn(2, 24, generator=gen), torch.randn(2, 24, generator=gen)
    weight = torch.randn(104, 24, generator=gen) * 0.3
    with torch.no_grad():
        replayed = [engine.recurrence(xproj * k, h0, c0, weight, 4) for k in (1.0, 0.5)]
        assert [key[0] for key in graphed_on_cpu.graphs] == [("forward", 4, False)]
        monkeypatch.setattr(graphs, "enabled", lambda device: False)
        for k, outputs in zip((1.0, 0.5), replayed):
            for a, b in zip(outputs, engine.recurrence(xproj * k, h0, c0, weight, 4)):
                torch.testing.assert_close(a, b)


def test_a_tiny_onlstm_trains_through_graphs_as_through_the_steps(graphed_on_cpu, tmp_path, monkeypatch):
    config = tiny_config(run={"epochs": 1, "max_steps": 6, "precision": "fp32"})
    train(config, tmp_path / "graphed", **QUIET)
    assert graphed_on_cpu.graphs
    monkeypatch.setattr(graphs, "enabled", lambda device: False)
    train(config, tmp_path / "steps", **QUIET)
    a, b = (torch.load(tmp_path / name / "last.pt", weights_only=True)["state_dict"] for name in ("graphed", "steps"))
    for key in a:
        torch.testing.assert_close(a[key], b[key], msg=key)


def test_a_tensor_op_time_step_launches_thirteen_kernels_forward_and_twelve_backward():
    """What a GPU launches per step (graphs or not): the biases added to all steps at once, the product added into
    the gate logits by addmm, the softmax written in place, and the backward's sums as one batched product and
    softmax's own backward (31 before: 16 and 15). scripts/bench/step_kernels.py counts them."""
    import subprocess
    import sys

    from .conftest import ROOT

    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench" / "step_kernels.py")], capture_output=True, text=True,
                         check=True)
    assert run.stdout.strip() == "kernels a time step: forward 13, backward 12, in all 25"
