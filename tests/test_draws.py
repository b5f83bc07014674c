"""The C draws are torch's own: the same values and the same generator state after, and torch draws where they
cannot run."""

import pytest
import torch

from grammar_induce.runtime import draws


def torch_draw(count: int) -> torch.Tensor:
    return torch.randint(draws.LOW, draws.HIGH, (count,), dtype=torch.int64)


def test_the_c_draws_run_here_and_agree_with_torch():
    assert draws._library() is not None and draws._agrees_with_torch()


@pytest.mark.parametrize("counts", [(1,), (311, 1, 312), (2500, 7, 1000)])  # within a state and across regenerations
def test_the_same_values_and_the_same_state_after_as_torch(counts):
    """Draws in sequence from the default generator, then another kind of draw: each equals torch's from the same
    seed, so the state is left as torch leaves it."""
    torch.manual_seed(2019)
    ours = [draws.full_range_int64(count) for count in counts] + [torch.rand(5)]
    torch.manual_seed(2019)
    theirs = [torch_draw(count) for count in counts] + [torch.rand(5)]
    for got, want in zip(ours, theirs):
        assert torch.equal(got, want)


def test_a_fresh_seed_and_a_large_draw():
    """The first word after seeding regenerates the state; a draw of many blocks."""
    torch.manual_seed(7)
    got = draws.full_range_int64(100_003)
    torch.manual_seed(7)
    assert torch.equal(got, torch_draw(100_003))
    assert got.min() < -(2**62) and got.max() > 2**62  # the full range


def test_torch_draws_where_the_c_code_is_turned_off(monkeypatch):
    monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")
    monkeypatch.setattr(draws, "_draw", lambda *args: pytest.fail("the C draw ran"))
    torch.manual_seed(3)
    got = draws.full_range_int64(10)
    torch.manual_seed(3)
    assert torch.equal(got, torch_draw(10))


def test_a_torch_whose_state_disagrees_keeps_torch_draws(monkeypatch):
    """Where the saved state is not laid out as the C code reads it, the check before first use fails and torch
    draws."""
    draws._agrees_with_torch.cache_clear()
    monkeypatch.setattr(draws, "NEXT", draws.LEFT)  # reading the wrong field: the draws no longer agree
    try:
        assert not draws._agrees_with_torch()
        torch.manual_seed(4)
        got = draws.full_range_int64(1000)
        torch.manual_seed(4)
        assert torch.equal(got, torch_draw(1000))
    finally:
        draws._agrees_with_torch.cache_clear()
