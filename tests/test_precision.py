"""bf16: matrix products in bfloat16, everything else in float32, close to float32; refused without the hardware."""

import pytest
import torch
from click.testing import CliRunner

from grammar_induce.cli import main
from grammar_induce.errors import UserError
from grammar_induce.families.onlstm import native
from grammar_induce.families.onlstm.recurrence import backward_map, linear, recurrence
from grammar_induce.inference.members import read_sentences
from grammar_induce.runtime import precision

from .conftest import ROOT, tiny_config
from .test_onlstm_model import needs_c_steps, random_layer
from .test_onlstm_model import tiny_model as small_model

BF16 = torch.bfloat16
CPU = torch.device("cpu")


@pytest.fixture
def with_bf16_units(monkeypatch):
    """This CPU reports bfloat16 units (where it lacks them, torch emulates the products: slow but the same maths)."""
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda: "AVX-512 BF16")


@pytest.fixture
def without_bf16_units(monkeypatch):
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda: None)


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).norm() / want.norm()).item()


def test_products_take_bfloat16_inputs_and_give_float32():
    gen = torch.Generator().manual_seed(0)
    a, w, b = (torch.randn(*shape, generator=gen) for shape in ((5, 7), (3, 7), (3,)))
    by_hand = (a.to(BF16).float() @ w.to(BF16).float().t()).to(BF16).float() + b  # rounded inputs, one rounded sum
    out = linear(a, w, b, BF16)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, by_hand, rtol=0, atol=1e-6)
    assert not torch.equal(out, linear(a, w, b, None))  # it really ran in bfloat16
    for steps in (1, 20):  # a plain product, and one on a weight laid out for 20 steps (the result in bfloat16)
        torch.testing.assert_close(backward_map(w.t().to(BF16), 5, steps)(a).float(), by_hand - b, rtol=0, atol=1e-6)
        torch.testing.assert_close(backward_map(w.t(), 5, steps)(a), a @ w.t(), rtol=1e-6, atol=1e-6)  # float32


def float32_layer(seed: int):
    p = random_layer(seed=seed, steps=6, batch=4, inp=10, hidden=16, chunk=4, scale=0.5)
    return {k: v.detach().float().requires_grad_() if isinstance(v, torch.Tensor) else v for k, v in p.items()}


def layer_outputs_and_gradients(p, weight_dtype):
    xproj = p["x"] @ p["w_ih"].T + p["b_ih"]
    out = recurrence(xproj, p["h"], p["c"], p["w_hh"].to(weight_dtype), p["n"])
    gen = torch.Generator().manual_seed(5)
    loss = sum((o * torch.randn(o.shape, generator=gen)).sum() for o in out)
    params = [p[k] for k in ("x", "h", "c", "w_ih", "b_ih", "w_hh")]
    return out, torch.autograd.grad(loss, params)


@pytest.mark.parametrize("steps", ["C step", "tensor ops"])
def test_a_bf16_layer_stays_close_to_float32_with_its_state_in_float32(steps, monkeypatch):
    if steps == "tensor ops":
        monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")
    p = float32_layer(seed=3)
    full, full_grads = layer_outputs_and_gradients(p, torch.float32)
    reduced, reduced_grads = layer_outputs_and_gradients(p, BF16)
    assert all(o.dtype == torch.float32 for o in reduced) and all(g.dtype == torch.float32 for g in reduced_grads)
    for got, want in zip(reduced, full):
        assert 0 < (got - want).abs().max() < 0.02
    for got, want in zip(reduced_grads, full_grads):
        assert relative_error(got, want) < 0.02


@pytest.mark.parametrize("steps", ["C step", "tensor ops"])
def test_a_bf16_input_map_given_with_its_bias_is_the_float32_sum(steps, monkeypatch):
    """bf16 training hands the recurrence its input map in bfloat16 and the biases apart (the steps add them in
    float32, as torch would): the same outputs and gradients as the float32 sum given whole."""
    if steps == "tensor ops":
        monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")
    p = float32_layer(seed=6)
    weight = p["w_hh"].to(BF16)
    gen = torch.Generator().manual_seed(7)
    results = []
    for apart in (True, False):
        xproj = p["x"].to(BF16) @ p["w_ih"].to(BF16).t()
        out = (recurrence(xproj, p["h"], p["c"], weight, p["n"], p["b_ih"]) if apart
               else recurrence(xproj.float() + p["b_ih"], p["h"], p["c"], weight, p["n"]))
        loss = sum((o * torch.randn(o.shape, generator=gen.manual_seed(7))).sum() for o in out)
        results.append((out, torch.autograd.grad(loss, [p[k] for k in ("x", "h", "c", "w_ih", "b_ih", "w_hh")])))
    (apart_out, apart_grads), (whole_out, whole_grads) = results
    for got, want in zip(apart_out, whole_out):
        assert torch.equal(got, want)
    for got, want in zip(apart_grads, whole_grads):  # the bias's sum over steps may be ordered otherwise
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


@needs_c_steps
def test_c_and_tensor_op_steps_agree_under_bf16(monkeypatch):
    p = float32_layer(seed=4)
    in_c, c_grads = layer_outputs_and_gradients(p, BF16)
    monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")
    in_ops, op_grads = layer_outputs_and_gradients(p, BF16)
    for a, b in zip(in_c + c_grads, in_ops + op_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def model_loss_and_gradients(model, tokens, resolved):
    model.zero_grad()
    out = model(tokens, products=precision.product_dtype(resolved))
    loss = torch.nn.functional.cross_entropy(out.logits.view(-1, out.logits.shape[-1]), tokens.reshape(-1))
    loss.backward()
    return out, loss.item(), {name: p.grad.clone() for name, p in model.named_parameters()}


def test_a_bf16_model_stays_close_to_float32_and_fp32_is_unchanged():
    model = small_model(wdrop=0.0).eval()  # no dropout: the same function each time
    tokens = torch.randint(0, 20, (9, 3), generator=torch.Generator().manual_seed(1))
    plain = model(tokens)
    full, full_loss, full_grads = model_loss_and_gradients(model, tokens, "fp32")
    assert torch.equal(full.logits, plain.logits) and torch.equal(full.distances.forget, plain.distances.forget)
    reduced, reduced_loss, reduced_grads = model_loss_and_gradients(model, tokens, "bf16")
    assert reduced.logits.dtype == reduced.distances.forget.dtype == torch.float32
    assert abs(reduced_loss - full_loss) < 0.01 * full_loss
    assert 0 < (reduced.distances.forget - full.distances.forget).abs().max() < 0.01
    for name, grad in reduced_grads.items():
        assert grad.dtype == torch.float32 and relative_error(grad, full_grads[name]) < 0.03, name


@pytest.mark.parametrize("vocab", [50, 1100])
@pytest.mark.parametrize("passes", ["C", "tensor ops"])
@pytest.mark.parametrize(("threads", "factor"), [(1, 1.0), (3, 2.0)])
def test_the_bf16_decoder_loss_is_the_plain_ops_loss(passes, vocab, threads, factor, monkeypatch):
    """decoder.py's cross entropy of bfloat16 logits, in C (a row at a time, the rows in parts for the threads: 23
    rows in 3 parts of 7, 8 and 8) or a few rows at a time in tensor ops (the last block short), against the plain
    ops (the product rounded to bfloat16, the bias and the loss in float32): the same loss, and the same gradients
    to a bfloat16 rounding, the loss's backward starting at 1 or at another factor (which scales the products)."""
    from grammar_induce.families.onlstm import decoder

    if passes == "tensor ops":
        monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")
    elif native.library(torch.float32) is None:
        pytest.skip("no C compiler here")
    monkeypatch.setattr(decoder, "BLOCK_FLOATS", 7 * vocab)  # 7 rows a block: 3 blocks of 7, 1 of 2
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    draw = torch.Generator().manual_seed(3)
    inputs, weight, bias = (torch.randn(*shape, generator=draw, requires_grad=True)
                            for shape in ((23, 16), (vocab, 16), (vocab,)))
    targets = torch.randint(0, vocab, (23,), generator=draw)
    plain = torch.nn.functional.cross_entropy((inputs.to(BF16) @ weight.to(BF16).t()).float() + bias, targets)
    ours = decoder.decoder_cross_entropy(inputs, weight, bias, targets, BF16)
    torch.testing.assert_close(ours, plain, rtol=1e-6, atol=0)
    for got, want in zip(torch.autograd.grad(factor * ours, (inputs, weight, bias)),
                         torch.autograd.grad(factor * plain, (inputs, weight, bias))):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-4)


def test_the_bf16_decoder_loss_makes_no_gradient_where_none_is_wanted(monkeypatch):
    """Without gradients (evaluation), the loss is the same and its gradient is not made with it."""
    from grammar_induce.families.onlstm import decoder

    draw = torch.Generator().manual_seed(4)
    shapes = ((9, 8), (30, 8), (30,))
    inputs, weight, bias = (torch.randn(*shape, generator=draw, requires_grad=True) for shape in shapes)
    targets = torch.randint(0, 30, (9,), generator=draw)
    wanted = decoder.decoder_cross_entropy(inputs, weight, bias, targets, BF16)

    def refuse(*args):
        raise AssertionError("a gradient made without being wanted")

    monkeypatch.setattr(decoder, "_loss_and_gradient", refuse)
    with torch.no_grad():
        torch.testing.assert_close(decoder.decoder_cross_entropy(inputs, weight, bias, targets, BF16), wanted.detach())
    frozen = [x.detach() for x in (inputs, weight, bias)]
    torch.testing.assert_close(decoder.decoder_cross_entropy(*frozen, targets, BF16), wanted.detach())


def test_a_model_given_targets_gives_the_cross_entropy_of_its_logits():
    model = small_model(wdrop=0.0).eval()
    tokens = torch.randint(0, 20, (9, 3), generator=torch.Generator().manual_seed(1))
    for products, tolerance in ((None, 1e-6), (BF16, 1e-4)):
        logits = model(tokens[:-1], products=products).logits
        plain = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[1:].reshape(-1))
        given = model(tokens[:-1], products=products, targets=tokens[1:])
        assert given.logits is None
        torch.testing.assert_close(given.ce, plain, rtol=tolerance, atol=0)


def test_bf16_is_refused_without_the_hardware_and_auto_falls_back(without_bf16_units):
    with pytest.raises(UserError, match="this CPU has no bfloat16 matrix hardware .* use fp32, or auto"):
        precision.resolve("bf16", CPU)
    assert precision.resolve("auto", CPU) == "fp32" and precision.resolve("fp32", CPU) == "fp32"
    assert precision.describe("auto", "fp32", CPU) == (
        "precision auto -> fp32: this CPU has no bfloat16 matrix hardware; everything in float32")


def test_bf16_and_auto_run_bf16_with_the_hardware(with_bf16_units):
    assert precision.resolve("bf16", CPU) == precision.resolve("auto", CPU) == "bf16"
    assert precision.describe("auto", "bf16", CPU).startswith("precision bf16 (AVX-512 BF16): matrix products")


def test_cpu_flags_name_the_bfloat16_units(monkeypatch):
    precision.cpu_bf16_units.cache_clear()
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx2", "avx512_bf16", "amx_bf16"})
    assert precision.cpu_bf16_units() == "AMX + AVX-512 BF16"
    precision.cpu_bf16_units.cache_clear()
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx2", "avx512f"})
    assert precision.cpu_bf16_units() is None
    precision.cpu_bf16_units.cache_clear()


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


TINY = ROOT / "configs" / "tiny.toml"


def test_train_refuses_bf16_without_the_hardware_before_making_the_run(tmp_path, without_bf16_units):
    result = run("train", "--config", TINY, "--out", tmp_path / "run", "--precision", "bf16", "--quiet")
    assert result.exit_code == 1 and not (tmp_path / "run").exists()
    assert result.output.startswith("Error: precision bf16: this CPU has no bfloat16 matrix hardware")
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(("units", "requested", "line", "recorded"), [
    ("AVX-512 BF16", "bf16", "precision bf16 (AVX-512 BF16): matrix products", "bf16"),
    (None, "auto", "precision auto -> fp32: this CPU has no bfloat16", "fp32"),
    (None, None, "precision fp32: everything in float32", "fp32"),
])
def test_the_training_log_says_which_precision_runs(tmp_path, monkeypatch, units, requested, line, recorded):
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda: units)
    out = tmp_path / "run"
    args = ["train", "--config", TINY, "--out", out, "--max-steps", 2, "--quiet", "--device", "cpu"]
    result = run(*args, *(["--precision", requested] if requested else []))
    assert result.exit_code == 0, result.output
    assert line in result.output
    assert f'precision = "{recorded}"' in (out / "config.toml").read_text()


def test_bf16_parsing_gives_nearly_the_trees_of_float32(tiny_model, with_bf16_units):
    from .test_parsing import SENTENCES

    sentences = [s for s in SENTENCES if s] * 3 + [("the dog saw a cat near the old river " * 3).split()]
    full = read_sentences(tiny_model, sentences)
    reduced = read_sentences(tiny_model, sentences, products=precision.product_dtype(precision.resolve("bf16", CPU)))
    agree = sum(a.tree(2) == b.tree(2) for a, b in zip(full, reduced))
    assert agree >= 0.9 * len(sentences)
    gaps = [abs(x - y) for a, b in zip(full, reduced) for x, y in zip(a.layer_distances(2), b.layer_distances(2))]
    assert 0 < max(gaps) < 0.02


def test_parse_refuses_bf16_without_the_hardware(tiny_run, without_bf16_units, tmp_path):
    output = tmp_path / "trees.txt"
    result = run("parse", "--model", tiny_run / "best.pt", "--precision", "bf16", "--output", output, "a b c")
    assert result.exit_code == 1 and "no bfloat16 matrix hardware" in result.output and not output.exists()


def test_train_config_rejects_unknown_precisions():
    from grammar_induce.config import ConfigError

    with pytest.raises(ConfigError, match="run.precision must be one of fp32, bf16, auto, got 'fp16'"):
        tiny_config(run={"precision": "fp16"})


def test_the_lstm_baseline_keeps_its_layers_and_state_in_float32_under_bf16(with_bf16_units):
    from grammar_induce.families.onlstm import recipe as awd
    from grammar_induce.families.registry import family_of

    config = tiny_config(model={"kind": "lstm"}, run={"precision": "bf16"})
    model = family_of("lstm").build(30, config.model).eval()  # no dropout: the same function twice
    tokens = torch.randint(0, 30, (8, 4), generator=torch.Generator().manual_seed(0))
    loss, _, hidden = awd.lm_loss(model, tokens[:-1], tokens[1:], model.init_hidden(4), config)
    assert all(state.dtype == torch.float32 for layer in hidden for state in layer)
    fp32_loss, _, _ = awd.lm_loss(model, tokens[:-1], tokens[1:], model.init_hidden(4), tiny_config(
        model={"kind": "lstm"}))
    assert abs(loss.item() - fp32_loss.item()) < 0.01 * fp32_loss.item()
    assert "torch's LSTM layers in float32" in precision.describe("bf16", "bf16", CPU, family_of("lstm").bf16_parts)


@pytest.mark.parametrize("slow, expected", [(BF16, "fp32"), (None, "bf16")])
def test_auto_measures_the_work_and_never_picks_the_slower_precision(with_bf16_units, monkeypatch, slow, expected):
    import time

    monkeypatch.setattr(precision, "MEASURED", {})
    ran = []

    def run(dtype):
        ran.append(dtype)
        time.sleep(0.02 if dtype == slow else 0.0)

    probe = precision.Probe(("toy", slow), run)
    assert precision.resolve("auto", CPU, probe) == expected
    assert ran.count(None) == ran.count(BF16) == precision.REPEATS + 1
    assert precision.resolve("auto", CPU, probe) == expected and len(ran) == 2 * (precision.REPEATS + 1)  # once
    line = precision.describe("auto", expected, CPU, probe=probe)
    assert line.startswith(f"precision {'auto -> fp32' if expected == 'fp32' else 'bf16'}") and "ms in bf16" in line


def test_auto_says_what_it_chose_for_a_parse_and_a_training_run(with_bf16_units, monkeypatch, tmp_path):
    from grammar_induce.messages import Messages
    from grammar_induce.workflows.train import train

    monkeypatch.setattr(precision, "MEASURED", {})
    lines = []

    train(tiny_config(run={"precision": "auto", "max_steps": 2}), tmp_path / "run", quiet=True,
          messages=Messages(say=lines.append))
    chosen = next(line for line in lines if line.startswith("precision "))
    assert "auto measured this work at" in chosen
    model = str(tmp_path / "run" / "best.pt")
    result = CliRunner().invoke(main, ["parse", "--model", model, "--precision", "auto", "the dog barked"])
    assert result.exit_code == 0 and "note: precision" in result.output and "auto measured this work at" in result.output
    # said once, when the models load (before the first tree), and by evaluate as by parse
    assert result.output.count("note: precision") == 1
    lines = result.output.splitlines()
    tree = next(k for k, line in enumerate(lines) if line.startswith("("))
    assert next(k for k, line in enumerate(lines) if line.startswith("note: precision")) < tree
    gold = ROOT / "grammar_induce" / "resources" / "synthetic" / "test.trees"
    result = CliRunner().invoke(main, ["evaluate", "--model", model, "--precision", "auto", "--gold", str(gold)])
    assert result.exit_code == 0 and result.output.count("note: precision") == 1, result.output
    assert "auto measured this work at" in result.output


@pytest.mark.parametrize(("rank", "said"), [("0", 1), ("1", 0)])
def test_under_torchrun_process_0_alone_says_what_loading_chose(tiny_run, monkeypatch, capsys, rank, said):
    from grammar_induce import cli

    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("WORLD_SIZE", "2")
    parser = cli._parser((str(tiny_run / "best.pt"),), (), "forget", None, None, None, None, 64, "auto", "cpu")
    assert parser.messages.notes[0].startswith("precision ")  # kept on every process
    assert capsys.readouterr().err.count("note: precision") == said


def test_a_resumed_auto_run_keeps_the_precision_it_was_trained_in_where_the_hardware_has_it(with_bf16_units,
                                                                                             monkeypatch, tmp_path):
    """Measured anew, `auto` could choose otherwise where the two are near in speed, and the resumed run would not go
    on as it would have without the stop: it keeps the run's (its last.pt's [run].precision), unmeasured; on a
    machine without the units it cannot keep bf16 and runs fp32."""
    from grammar_induce.messages import Messages
    from grammar_induce.workflows.train import train

    monkeypatch.setattr(precision, "measure", lambda probe, device: "bf16")
    run = tmp_path / "run"
    train(tiny_config(run={"precision": "auto", "max_steps": 1}), run, quiet=True)
    assert torch.load(run / "last.pt", weights_only=True)["config"]["run"]["precision"] == "bf16"

    def resumed(max_steps: int) -> str:
        lines = []
        train(tiny_config(run={"precision": "auto", "max_steps": max_steps}), run, resume=True, quiet=True,
              messages=Messages(say=lines.append))
        return next(line for line in lines if line.startswith("precision "))

    monkeypatch.setattr(precision, "measure", lambda probe, device: pytest.fail("a resumed run measured again"))
    assert resumed(2).startswith("precision bf16 (AVX-512 BF16) (auto: kept from the run resumed)")
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda: None)
    assert resumed(3).startswith("precision auto -> fp32: this CPU has no bfloat16 matrix hardware")
    assert torch.load(run / "last.pt", weights_only=True)["config"]["run"]["precision"] == "fp32"
