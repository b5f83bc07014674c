"""Our ASGD (its update in one C pass) steps as torch's ASGD steps, shares its state, and falls back to it."""

import pytest
import torch

from grammar_induce.families.onlstm import asgd
from grammar_induce.families.onlstm.asgd import ASGD

PAPER = {"lr": 30.0, "t0": 0, "lambd": 0.0, "weight_decay": 1.2e-6}  # as the recipe makes it (onlstm/recipe.py)
DECAYING = {"lr": 0.5, "t0": 2, "lambd": 0.01, "alpha": 0.75, "weight_decay": 0.01}  # every term at work

needs_c = pytest.mark.skipif(asgd._library() is None, reason="no C compiler here")


def weights(dtype=torch.float32) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=gen, dtype=dtype, requires_grad=True) for shape in ((300, 70), (70,))]


def run(optimizer_class, options: dict, steps: int = 5, params=None, optimizer=None):
    """Weights and the optimizer after `steps` steps on the same random gradients."""
    params = weights() if params is None else params
    optimizer = optimizer_class(params, **options) if optimizer is None else optimizer
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)
        optimizer.step()
    return params, optimizer


def assert_same(ours, theirs):
    (our_params, our_optimizer), (their_params, their_optimizer) = ours, theirs
    for mine, yours in zip(our_params, their_params):
        scale = yours.detach().abs().max()
        torch.testing.assert_close(mine.detach(), yours.detach(), rtol=0, atol=1e-6 * scale)
        mine_state, your_state = our_optimizer.state[mine], their_optimizer.state[yours]
        torch.testing.assert_close(mine_state["ax"], your_state["ax"], rtol=0, atol=1e-6 * scale)
        for key in ("step", "eta", "mu"):
            assert mine_state[key].dtype == your_state[key].dtype and mine_state[key].item() == your_state[key].item()


@needs_c
@pytest.mark.parametrize("options", [PAPER, DECAYING], ids=["paper", "decaying"])
def test_the_same_steps_as_torchs_asgd(options):
    """Five steps: the average is copied while mu is 1 (steps 1 and 2 at t0 = 0), then moves by mu; the weights and
    averages to float32's rounding (the update's terms may be fused), the step, eta and mu exactly."""
    assert_same(run(ASGD, options), run(torch.optim.ASGD, options))


@needs_c
def test_the_update_by_hand():
    """One weight, one step: g = 2 + 0.5 * 1 = 2.5, w = 1 * (1 - 0.1 * 0.2) - 0.2 * 2.5 = 0.48, and the average
    copies it (mu is 1 at the first step); then eta = 0.2 / (1 + 0.1 * 0.2)^0.75 and mu = 1 / max(1, 1 - 0)."""
    w = torch.nn.Parameter(torch.tensor([1.0]))
    w.grad = torch.tensor([2.0])
    optimizer = ASGD([w], lr=0.2, lambd=0.1, t0=0, weight_decay=0.5)
    optimizer.step()
    state = optimizer.state[w]
    assert w.item() == pytest.approx(0.48) and state["ax"].item() == pytest.approx(0.48)
    assert state["eta"].item() == pytest.approx(0.2 / 1.02**0.75) and state["mu"].item() == 1.0


@needs_c
def test_a_state_saved_by_either_resumes_in_the_other():
    """Three steps in one, the state saved and loaded into the other, two more: as five steps in torch's."""
    theirs = run(torch.optim.ASGD, PAPER)
    for first, second in ((ASGD, torch.optim.ASGD), (torch.optim.ASGD, ASGD)):
        params, optimizer = run(first, PAPER, steps=3)
        resumed = second(params, **PAPER)
        resumed.load_state_dict(optimizer.state_dict())
        gen = torch.Generator().manual_seed(1)  # the last two steps take the gradients of steps 4 and 5 in `run`
        draws = [[torch.randn(p.shape, generator=gen) for p in params] for _ in range(5)]
        for grads in draws[3:]:
            for p, g in zip(params, grads):
                p.grad = g
            resumed.step()
        assert_same((params, resumed), theirs)


def test_torchs_step_where_the_c_pass_cannot_run(monkeypatch):
    """Without the C code, or for float64 weights, torch's own update: the same numbers as torch's ASGD exactly, and
    a clipping scale divides the gradients first."""
    monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")
    assert_same(run(ASGD, DECAYING), run(torch.optim.ASGD, DECAYING))
    monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "1")
    ours = run(ASGD, DECAYING, params=weights(torch.float64))
    theirs = run(torch.optim.ASGD, DECAYING, params=weights(torch.float64))
    for mine, yours in zip(ours[0], theirs[0]):
        assert torch.equal(mine, yours)
    monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")
    w = torch.nn.Parameter(torch.tensor([1.0]))
    w.grad = torch.tensor([2.0])
    optimizer = ASGD([w], lr=0.25, lambd=0.0, t0=0)
    optimizer.grad_scale = torch.tensor(4.0)
    optimizer.step()
    assert w.grad.item() == 0.5 and w.item() == pytest.approx(1 - 0.25 * 0.5)
