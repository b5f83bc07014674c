"""clip_and_step makes the update of clip_grad_norm_ then step(), for fused and plain optimizers, in place of it."""

import pytest
import torch

from grammar_induce.families.onlstm.asgd import ASGD
from grammar_induce.runtime.clipping import clip_and_step, total_norm


def test_a_clipped_step_by_hand():
    """Gradient (3, 4): norm 5, clipped to norm 1 (less the epsilon's share), one plain SGD step at learning rate 1."""
    p = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
    p.grad = torch.tensor([3.0, 4.0])
    clip_and_step(torch.optim.SGD([p], lr=1.0), [p], 1.0)
    scale = 1.0 / (5.0 + 1e-6)
    assert torch.allclose(p.grad, torch.tensor([3.0, 4.0]) * scale)
    assert torch.allclose(p.detach(), torch.tensor([1 - 3 * scale, 1 - 4 * scale]))


def test_the_norm_of_all_gradients_together():
    grads = [torch.tensor([[1.0, 2.0], [2.0, 0.0]]), torch.tensor([4.0])]  # 1 + 4 + 4 + 16 = 25
    assert total_norm(grads).item() == pytest.approx(5.0)


def model_and_batch(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.Tanh(), torch.nn.Linear(13, 3))
    return model, torch.randn(11, 7)


def step_both_ways(make_optimizer, max_norm: float, loss_scale: float) -> tuple[list, list]:
    """Parameters and gradients after a step of ours and one of clip_grad_norm_ then step(), from the same start."""
    results = []
    for ours in (True, False):
        model, x = model_and_batch(0)
        optimizer = make_optimizer(model.parameters())
        for _ in range(2):  # the second step with the optimizer's state (momentum, Adam's moments)
            optimizer.zero_grad()
            (model(x).pow(2).sum() * loss_scale).backward()
            if ours:
                clip_and_step(optimizer, model.parameters(), max_norm)
            else:
                if max_norm:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                optimizer.step()
        results.append(([p.detach().clone() for p in model.parameters()], [p.grad.clone() for p in model.parameters()]))
    return results[0], results[1]


OPTIMIZERS = {
    "fused SGD": lambda ps: torch.optim.SGD(ps, lr=0.5, weight_decay=1e-3, fused=True),
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.5, weight_decay=1e-3, momentum=0.9),
    "ASGD": lambda ps: torch.optim.ASGD(ps, lr=0.5, t0=0, lambd=0.0, weight_decay=1e-3),
    "our ASGD": lambda ps: ASGD(ps, lr=0.5, t0=0, lambd=0.0, weight_decay=1e-3),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
    "fused Adam": lambda ps: torch.optim.Adam(ps, lr=0.01, fused=True),
}


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("max_norm, loss_scale", [(0.25, 1.0), (1e4, 1.0), (0.0, 1.0), (0.25, 1e-6)])
def test_the_same_update_as_clip_grad_norm_then_step(name, max_norm, loss_scale):
    """Clipped (norm far above 0.25), not clipped (far below 1e4, or 0: no clipping), and a tiny gradient: the same
    parameters and gradients, to float32's rounding (the scale is divided by in the fused kernels, multiplied by
    otherwise)."""
    (ours, our_grads), (theirs, their_grads) = step_both_ways(OPTIMIZERS[name], max_norm, loss_scale)
    for got, want in zip(ours + our_grads, theirs + their_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_the_fused_optimizer_keeps_no_scale_after_the_step():
    model, x = model_and_batch(1)
    optimizer = OPTIMIZERS["fused SGD"](model.parameters())
    model(x).sum().backward()
    clip_and_step(optimizer, model.parameters(), 0.25)
    assert not hasattr(optimizer, "grad_scale")
    assert total_norm([p.grad for p in model.parameters()]).item() == pytest.approx(0.25, rel=1e-5)
