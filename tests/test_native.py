import platform

import pytest
import torch

from grammar_induce.families.onlstm import native
from grammar_induce.families.onlstm.recurrence import (
    _native_backward_loop,
    _time_steps,
    drop_connect,
    recurrence,
    recurrence_with_input_map,
    scale_steps,
)
from grammar_induce.runtime import memory
from grammar_induce.workflows.train import train

from .conftest import QUIET, tiny_config
from .test_onlstm_model import fast, needs_c_steps, random_layer


def layer_values_float32(native_on: bool, monkeypatch) -> list[torch.Tensor]:
    """Outputs and input gradients of a float32 layer, with or without the C steps."""
    monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "1" if native_on else "0")
    gen = torch.Generator().manual_seed(3)
    steps, batch, hidden, n = 9, 5, 60, 6
    inputs = [torch.randn(steps, batch, 4 * hidden + 2 * n, generator=gen), torch.randn(batch, hidden, generator=gen),
              torch.randn(batch, hidden, generator=gen), torch.randn(4 * hidden + 2 * n, hidden, generator=gen) * 0.2]
    inputs = [x.requires_grad_() for x in inputs]
    outputs = recurrence(*inputs, n)
    weights = [torch.randn(o.shape, generator=gen) for o in outputs]
    grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(outputs, weights)), inputs)
    return [o.detach() for o in outputs] + list(grads)


@needs_c_steps
def test_c_steps_and_tensor_ops_agree_in_float32(monkeypatch):
    for got, want in zip(layer_values_float32(True, monkeypatch), layer_values_float32(False, monkeypatch)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@needs_c_steps
def test_loading_the_c_steps_leaves_denormals_alone():
    """They are compiled with -ffast-math; linked with it, loading them would flush denormals process-wide."""
    tiny = torch.tensor([1e-39])  # below float32's smallest normal, 1.2e-38
    assert (tiny * 1.5).item() > 0


@pytest.mark.parametrize("missing", ["compiler", "writable cache"])
def test_without_a_compiler_or_cache_the_model_falls_back_to_tensor_ops(missing, monkeypatch, tmp_path):
    if missing == "compiler":
        monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no cached build either
    else:
        (tmp_path / "a-file").write_text("")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))  # the cache folder cannot be made
    native.library.cache_clear()
    try:
        assert native.library(torch.float32) is None
        assert not native.usable(torch.zeros(1))
        p = random_layer(seed=4, steps=3)
        torch.autograd.grad(sum(o.sum() for o in fast(p)), [p["w_hh"]])  # runs, through the tensor-op loop
    finally:
        native.library.cache_clear()


@needs_c_steps
def test_a_compiler_without_openmp_builds_the_steps_without_threads(monkeypatch, tmp_path):
    """The steps split a batch's rows over torch's threads where the compiler has OpenMP, and run on one without it:
    the same values either way, to float rounding (each row is computed as alone; the two builds may order a sum
    differently). The failed OpenMP build is tried once, not again in every process."""
    compiler, attempts = tmp_path / "cc-without-openmp", tmp_path / "openmp-attempts"
    compiler.write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && echo >> {attempts} && exit 1; done\n'
                        'exec cc "$@"\n')
    compiler.chmod(0o755)
    with_threads = layer_values_float32(True, monkeypatch)
    monkeypatch.setenv("CC", str(compiler))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    native.library.cache_clear()
    try:
        assert native.library(torch.float32) is not None
        assert list((tmp_path / "grammar-induce").glob("onlstm_step_*.so"))  # built here, without OpenMP
        for got, want in zip(layer_values_float32(True, monkeypatch), with_threads):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        native.library.cache_clear()  # as a new process would
        assert native.library(torch.float32) is not None
        assert attempts.read_text() == "\n"  # one attempt, in the first load
    finally:
        native.library.cache_clear()


@needs_c_steps
@pytest.mark.parametrize("native_on", [True, False])
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_drop_connect_keeps_entries_unscaled_at_rate_one_minus_p_and_masks_the_gradient(native_on, dtype, monkeypatch):
    """In C (one pass) and in tensor ops: kept entries unscaled (rounded once to bfloat16 where
    asked), about 1 - p of them kept, the gradient the incoming one where kept and 0 elsewhere, in float32."""
    monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "1" if native_on else "0")
    torch.manual_seed(0)
    weight = torch.randn(300, 200, requires_grad=True)
    masked = drop_connect(weight, 0.3, dtype)
    assert masked.dtype == (dtype or torch.float32)
    kept = masked != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.01  # 60000 draws: standard error 0.002
    assert torch.equal(masked, torch.where(kept, weight.detach(), 0.0).to(masked.dtype))
    grad = torch.randn(300, 200).to(masked.dtype)
    masked.backward(grad)
    assert weight.grad.dtype == torch.float32
    assert torch.equal(weight.grad, torch.where(kept, grad.float(), 0.0))


@needs_c_steps
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_drop_connect_in_c_and_in_tensor_ops_draw_the_same_masks(dtype, monkeypatch):
    """The same random draws give the same masks: training gives the same numbers with and without the C code."""
    weight = torch.randn(64, 50, requires_grad=True)
    grad = torch.randn(64, 50).to(dtype or torch.float32)
    results = []
    for native_on in ("1", "0"):
        monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", native_on)
        torch.manual_seed(5)
        masked = drop_connect(weight, 0.5, dtype)
        masked.backward(grad)
        results.append((masked, weight.grad))
        weight.grad = None
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


@needs_c_steps
@pytest.mark.parametrize("native_on", [True, False])
def test_locked_dropouts_mask_into_bfloat16_is_the_tensor_ops_multiply_then_rounding(native_on, monkeypatch):
    """scale_steps (locked dropout's mask, shared by the steps, written in bfloat16 for the products in one pass each
    way) gives what x * mask then .to(bfloat16) gives, and its gradient: one rounded multiply per element, so the
    same numbers. 3 x 5 x 400 entries cross the C code's threshold for threads."""
    monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "1" if native_on else "0")
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(3, 5, 400, generator=gen, requires_grad=True)
    mask = torch.empty(1, 5, 400).bernoulli_(0.7, generator=gen) / 0.7
    grad = torch.randn(3, 5, 400, generator=gen).to(torch.bfloat16)
    ours = scale_steps(x, mask, torch.bfloat16)
    (ours_grad,) = torch.autograd.grad(ours, x, grad)
    plain = (x * mask).to(torch.bfloat16)
    (plain_grad,) = torch.autograd.grad(plain, x, grad)
    assert ours.dtype == torch.bfloat16 and ours_grad.dtype == torch.float32
    assert torch.equal(ours, plain) and torch.equal(ours_grad, plain_grad)
    assert torch.equal(scale_steps(x, mask, None), x * mask)


@needs_c_steps
def test_the_c_steps_bfloat16_copies_are_torchs_rounding():
    """Under bf16 the C steps write h and the gate gradients in bfloat16 for the next products: rounded as torch
    rounds (to nearest even, NaN kept), so no conversion runs between steps and the numbers are those it would give."""
    gen = torch.Generator().manual_seed(8)
    steps, batch, hidden, n = 5, 3, 40, 4
    xproj = torch.randn(steps, batch, 4 * hidden + 2 * n, generator=gen, requires_grad=True)
    h0, c0 = torch.randn(batch, hidden, generator=gen), torch.randn(batch, hidden, generator=gen)
    weight = (torch.randn(4 * hidden + 2 * n, hidden, generator=gen) * 0.2).to(torch.bfloat16)
    run = _time_steps(h0).forward(xproj.detach(), None, h0, c0, weight, n, save=True)
    assert run.hs_in.dtype == torch.bfloat16 and torch.equal(run.hs_in, run.hs.to(torch.bfloat16))
    grad_hs = torch.randn(steps, batch, hidden, generator=gen)
    grad_hs[1, 0, :3] = torch.tensor([float("nan"), 3.0e38, -1.0e-40])
    zeros = torch.zeros(steps, batch)
    grads = _native_backward_loop(c0, weight, run.cs, run.probs, run.acts, grad_hs, torch.zeros(batch, hidden), zeros,
                                  zeros, n)
    reduced, grad_gates = grads.gates_reduced, grads.gates
    assert reduced.dtype == torch.bfloat16 and grad_gates.isnan().any()
    torch.testing.assert_close(reduced, grad_gates.to(torch.bfloat16), rtol=0, atol=0, equal_nan=True)  # NaN's bits vary


@needs_c_steps
def test_the_c_steps_sum_the_bias_gradient_and_keep_float_gate_gradients_only_when_asked():
    """The biases' gradient summed step by step in C is the gate gradients' sum; under bf16 the float gate gradients
    are left out where not asked for (`full=False`), the bfloat16 ones the same."""
    gen = torch.Generator().manual_seed(9)
    steps, batch, hidden, n = 6, 4, 40, 4
    xproj = torch.randn(steps, batch, 4 * hidden + 2 * n, generator=gen)
    h0, c0 = torch.randn(batch, hidden, generator=gen), torch.randn(batch, hidden, generator=gen)
    weight = (torch.randn(4 * hidden + 2 * n, hidden, generator=gen) * 0.2).to(torch.bfloat16)
    run = _time_steps(h0).forward(xproj, None, h0, c0, weight, n, save=True)
    grad_hs, grad_dist = torch.randn(steps, batch, hidden, generator=gen), torch.randn(2, steps, batch, generator=gen)

    def backward(full: bool):
        return _native_backward_loop(c0, weight, run.cs, run.probs, run.acts, grad_hs, torch.zeros(batch, hidden),
                                     *grad_dist, n, full)

    kept, left_out = backward(True), backward(False)
    assert left_out.gates is None
    torch.testing.assert_close(kept.bias, kept.gates.sum((0, 1)), rtol=1e-5, atol=1e-6)
    for got, want in zip(left_out[1:], kept[1:]):
        assert torch.equal(got, want)


@needs_c_steps
def test_under_bf16_the_input_map_inside_the_layer_gives_the_gradients_of_the_one_outside():
    """bf16 training runs the input map with the layer (`recurrence_with_input_map`), both weights' gradients from
    one copy of the gate gradients laid out gates by tokens: the same gradients as the input map run before the
    layer by autograd, to bfloat16's rounding (oneDNN may sum the two layouts in another order)."""
    gen = torch.Generator().manual_seed(11)
    steps, batch, inp, hidden, n = 6, 4, 24, 40, 4
    gates = 4 * hidden + 2 * n

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).requires_grad_()

    x, w_ih, bias, h0, c0, w_hh = r(steps, batch, inp), r(gates, inp, scale=0.2), r(gates), r(batch, hidden), \
        r(batch, hidden), r(gates, hidden, scale=0.2)
    leaves = (x, w_ih, bias, h0, c0, w_hh)
    weights = [torch.randn(shape, generator=gen) for shape in ((steps, batch, hidden), (batch, hidden), (steps, batch),
                                                                (steps, batch))]

    def gradients(inside: bool) -> list[torch.Tensor]:
        bf16 = torch.bfloat16
        if inside:
            outputs = recurrence_with_input_map(x.to(bf16), w_ih.to(bf16), h0, c0, w_hh.to(bf16), n, bias)
        else:
            outputs = recurrence(x.to(bf16) @ w_ih.to(bf16).t(), h0, c0, w_hh.to(bf16), n, bias)
        return list(torch.autograd.grad(sum((o * w).sum() for o, w in zip(outputs, weights)), leaves))

    for got, want in zip(gradients(True), gradients(False)):
        assert got.abs().sum() > 0
        torch.testing.assert_close(got, want, rtol=2**-7, atol=1e-3)


def test_the_command_line_asks_glibc_to_keep_freed_memory(monkeypatch):
    """A command's process is its own: its batches reuse what the last one freed (a library call leaves it alone)."""
    from click.testing import CliRunner

    from grammar_induce.cli import main

    asked = []
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: asked.append(True))
    assert CliRunner().invoke(main, ["models"]).exit_code == 0 and asked == [True]


def test_training_on_a_cpu_asks_glibc_to_keep_freed_memory(monkeypatch, tmp_path):
    """Training on a CPU keeps freed memory for the next step (runtime/memory.py; its effect, page faults a step, is
    measured by scripts/bench/benchmark.py's training cases, not here). Where the C library is glibc, it takes the setting."""
    asked, keep_freed_memory = [], memory.keep_freed_memory
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: asked.append(True))
    train(tiny_config(run={"epochs": 1}), tmp_path / "run", **QUIET)
    assert asked == [True]
    if platform.libc_ver()[0] == "glibc":
        assert keep_freed_memory() is True
