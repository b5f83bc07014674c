"""A weight laid out once for many products gives the plain products' values, and falls back where it cannot pack."""

import gc
import weakref

import pytest
import torch

from grammar_induce.families.onlstm import products
from grammar_induce.families.onlstm.products import (
    RepeatedProduct,
    copies_linear_weight,
    left_operand,
    linear_operand,
    linear_product,
    swaps_transposed_left,
    transposed_copy,
    transposed_left_product,
)
from grammar_induce.runtime import precision

BF16 = torch.bfloat16
ROUNDING = 1e-4  # float32 sums of a few hundred terms of size ~1, added in another order: ~1e-5 apart


def random(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("rows, out, inp", [(20, 483, 115), (3, 7, 5), (64, 800, 200)])
def test_float32_products_equal_the_plain_ones(rows, out, inp):
    weight, x = random(out, inp), random(rows, inp, seed=1)
    step = RepeatedProduct(weight, rows)
    if torch.backends.mkl.is_available():
        assert step.packed is not None  # laid out once, by MKL
    for seed in range(3):  # the same packed weight, several products
        x = random(rows, inp, seed=seed + 1)
        torch.testing.assert_close(step(x), x @ weight.t(), rtol=1e-5, atol=ROUNDING)


@pytest.mark.parametrize("rows, out, inp", [(20, 483, 115), (64, 800, 200)])
def test_bfloat16_products_are_the_rounded_float_product(rows, out, inp):
    """bfloat16 inputs, float32 sums, the result rounded to bfloat16 once: the products agree to one rounding."""
    weight, x = random(out, inp, dtype=BF16), random(rows, inp, dtype=BF16, seed=1)
    got = RepeatedProduct(weight, rows)(x)
    assert got.dtype == BF16
    want = x.float() @ weight.float().t()
    torch.testing.assert_close(got.float(), want, rtol=2**-8, atol=1e-3)


def test_a_transposed_weight_gives_x_times_the_weight():
    weight = random(483, 115)  # (in, out): a recurrence's hidden map read backwards
    step = RepeatedProduct(weight, 20, transposed=True)
    x = random(20, 483, seed=1)
    torch.testing.assert_close(step(x), x @ weight, rtol=1e-5, atol=ROUNDING)
    bf16 = RepeatedProduct(weight.to(BF16), 20, transposed=True)(x.to(BF16))
    torch.testing.assert_close(bf16.float(), x.to(BF16).float() @ weight.to(BF16).float(), rtol=2**-8, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, BF16, torch.int16, torch.float64])
# within a block, across blocks' and strips' edges (rows and columns), split over threads (from 65,536 elements)
@pytest.mark.parametrize("shape", [(1, 1), (3, 200), (130, 67), (483, 115), (300, 257)])
def test_transposed_copy_is_the_transpose_exactly(dtype, shape, monkeypatch):
    x = random(*shape).mul(1000).to(dtype)
    for native in ("1", "0"):  # the C copy (2- and 4-byte elements) and torch's
        monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", native)
        got = transposed_copy(x)
        assert got.shape == shape[::-1] and got.is_contiguous() and torch.equal(got, x.t())
    assert torch.equal(transposed_copy(x.t()), x)  # a non-contiguous input


@pytest.mark.parametrize("shape", [(1, 1), (3, 200), (130, 67), (483, 115), (300, 257)])
def test_a_converting_transposed_copy_rounds_as_torch_converts(shape, monkeypatch):
    """float32 -> bfloat16 (and back) converted in the copy's pass: the entries of `.t().to(dtype)`, rounding ties to
    even, infinities and the largest floats as torch rounds them; a NaN stays a NaN (its bits may differ)."""
    x = random(*shape).mul(1000)
    flat = x.view(-1)
    edges = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 3.0e38, 3.4e38, float("inf"), float("-inf"),
                          1e-40, float("nan")])  # ties to even, each way; overflow to infinity; a denormal; NaN
    flat[: min(len(flat), len(edges))] = edges[: len(flat)]
    for native in ("1", "0"):  # the C copy and torch's
        monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", native)
        reduced = transposed_copy(x, BF16)
        assert reduced.dtype == BF16 and reduced.shape == shape[::-1] and reduced.is_contiguous()
        torch.testing.assert_close(reduced, x.t().to(BF16), rtol=0, atol=0, equal_nan=True)
        back = transposed_copy(reduced, torch.float32)
        assert back.dtype == torch.float32 and back.shape == shape
        torch.testing.assert_close(back, x.to(BF16).float(), rtol=0, atol=0, equal_nan=True)


def test_few_uses_run_the_plain_product():
    weight, x = random(40, 10), random(4, 10, seed=1)
    step = RepeatedProduct(weight, 4, uses=3)  # laying out would cost more than it saves
    assert step.packed is None and torch.equal(step(x), x @ weight.t())


def test_other_row_counts_and_weights_with_gradients_run_the_plain_product():
    weight = random(30, 10)
    step = RepeatedProduct(weight, 4)
    x = random(7, 10, seed=1)  # not the rows it was laid out for
    assert torch.equal(step(x), x @ weight.t())
    trained = weight.clone().requires_grad_()
    assert RepeatedProduct(trained, 4).packed is None  # the packed products have no gradient
    with torch.no_grad():
        assert RepeatedProduct(trained, 4).packed is not None or not torch.backends.mkl.is_available()


def test_float64_runs_the_plain_product():
    weight, x = random(12, 5).double(), random(3, 5, seed=1).double()
    step = RepeatedProduct(weight, 3)
    assert step.packed is None and torch.equal(step(x), x @ weight.t())


def test_dropped_at_once_not_at_the_next_cycle_collection():
    """No reference cycle: a packed weight (tens of MB at a recurrence's size, one per layer and batch) is freed
    when its product is dropped (a bound method kept on the object once held each of them until a collection)."""
    step = RepeatedProduct(random(30, 10), 4)
    gone = weakref.ref(step)
    gc.disable()
    try:
        del step
        assert gone() is None
    finally:
        gc.enable()


def on_units(monkeypatch, units: str | None, onednn_uses_them: bool = True) -> None:
    """As on a CPU with these bfloat16 units, which oneDNN multiplies on unless ONEDNN_MAX_CPU_ISA holds it below
    them (as the suite's AVX2 run does, whatever the machine)."""
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda: units)
    monkeypatch.setattr(products, "_onednn_bfloat16", lambda: onednn_uses_them)


@pytest.mark.parametrize(("units", "onednn_uses_them", "copied"), [
    ("AMX + AVX-512 BF16", True, True), ("AVX-512 BF16", True, True), ("AVX-512 BF16", False, False),
    ("Arm BF16", True, False), (None, False, False)])
def test_a_transposed_bfloat16_left_operand_is_copied_contiguous_where_onednn_multiplies_on_bf16_units(
        units, onednn_uses_them, copied, monkeypatch):
    """oneDNN multiplies a transposed bfloat16 left operand slowly on AMX and on AVX-512 BF16, and the contiguous copy
    slowly where it emulates bfloat16; MKL (float32) reads either; Arm's units are unmeasured: the same values either
    way, a copy where it pays."""
    on_units(monkeypatch, units, onednn_uses_them)
    tokens_by_gates = random(70, 48)
    bf16 = tokens_by_gates.to(BF16).t()
    got = left_operand(bf16)
    assert torch.equal(got, bf16)
    assert got.is_contiguous() if copied else got is bf16
    view = tokens_by_gates.t()
    assert left_operand(view) is view
    plain = random(48, 70, dtype=BF16)
    assert left_operand(plain) is plain  # contiguous already


@pytest.mark.parametrize("units", ["AMX + AVX-512 BF16", "AVX-512 BF16"])
def test_a_product_of_a_transposed_left_operand_is_the_plain_one_in_either_order(units, monkeypatch):
    """a.t() @ b: on AMX, where the narrower b makes (b.t() @ a) transposed the cheaper copies, that; else as it is.
    The same products either way (each entry a float32 sum of the same bfloat16 products, in an order oneDNN
    chooses, rounded once to bfloat16): contiguous, to that rounding."""
    on_units(monkeypatch, units)
    tokens_by_words, tokens_by_features = random(70, 300, dtype=BF16), random(70, 40, dtype=BF16, seed=1)
    wide = swaps_transposed_left(tokens_by_words, tokens_by_features)
    assert wide == ("AMX" in units) and not swaps_transposed_left(tokens_by_features, tokens_by_words)
    assert not swaps_transposed_left(tokens_by_words.float(), tokens_by_features.float())  # MKL reads either
    for a, b in ((tokens_by_words, tokens_by_features), (tokens_by_features, tokens_by_words)):
        got = transposed_left_product(a, b)
        assert got.is_contiguous() and got.dtype == BF16
        torch.testing.assert_close(got.float(), a.float().t() @ b.float(), rtol=1e-2, atol=1e-2)
        in_float = transposed_left_product(a, b, torch.float32)  # converted in the copy's pass where there is one
        assert in_float.is_contiguous() and in_float.dtype == torch.float32 and torch.equal(in_float, got.float())


@pytest.mark.parametrize("units", ["AMX + AVX-512 BF16", "AVX-512 BF16"])
def test_a_linear_maps_product_copies_its_weight_only_where_amx_multiplies_it_slowly(units, monkeypatch):
    """x @ weight.t(): on AMX, for a weight of SLOW_TRANSPOSED_RIGHT_FROM rows or more and ROWS_FOR_A_COPY inputs or
    more, on a contiguous copy of weight.t(); else as it is. The same products either way, to bfloat16's rounding."""
    on_units(monkeypatch, units)
    monkeypatch.setattr(products, "SLOW_TRANSPOSED_RIGHT_FROM", 40)
    monkeypatch.setattr(products, "ROWS_FOR_A_COPY", 6)
    weight, narrow = random(40, 24, dtype=BF16), random(39, 24, dtype=BF16)
    x, few = random(6, 24, dtype=BF16, seed=1), random(5, 24, dtype=BF16, seed=2)
    assert copies_linear_weight(x, weight) == ("AMX" in units)
    assert not copies_linear_weight(x, narrow) and not copies_linear_weight(few, weight)
    assert not copies_linear_weight(x.float(), weight.float())
    for inputs, w in ((x, weight), (x, narrow), (few, weight)):
        got = linear_product(inputs, w)
        assert got.shape == (len(inputs), len(w)) and got.dtype == BF16
        torch.testing.assert_close(got.float(), inputs.float() @ w.float().t(), rtol=1e-2, atol=1e-2)
        operand = linear_operand(inputs, w.float())  # a float32 weight: converted as it is laid out (or viewed)
        assert operand.dtype == BF16 and torch.equal(operand, w.t())
        assert operand.is_contiguous() == copies_linear_weight(inputs, w)
        assert torch.equal(linear_product(inputs, w.float()), got)  # the same operand's values, so the same product
