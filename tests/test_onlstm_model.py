import math

import pytest
import torch

from grammar_induce.families.kind import count_parameters
from grammar_induce.families.onlstm import native
from grammar_induce.families.onlstm.decoder import cross_entropy
from grammar_induce.families.onlstm.model import ONLSTMLanguageModel, cumax, embedding_dropout, keep_mask, paper_layer
from grammar_induce.families.onlstm.products import RepeatedProduct
from grammar_induce.families.onlstm.recurrence import _Recurrence, recurrence
from grammar_induce.families.onlstm.settings import ONLSTMConfig

from . import paper_onlstm
from .paper_onlstm import reference_distances

torch.set_default_dtype(torch.float32)

NO_C_STEPS = "no C compiler here: the model uses its tensor-op steps"
needs_c_steps = pytest.mark.skipif(native.library(torch.float32) is None, reason=NO_C_STEPS)


def random_layer(seed=0, batch=3, inp=5, hidden=8, chunk=2, steps=1, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    n = hidden // chunk
    gates = 4 * hidden + 2 * n

    def r(*shape):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).requires_grad_()

    return {"x": r(steps, batch, inp), "h": r(batch, hidden), "c": r(batch, hidden), "w_ih": r(gates, inp),
                "b_ih": r(gates), "w_hh": r(gates, hidden), "b_hh": r(gates), "chunk": chunk, "n": n}


def fast(p):
    xproj = p["x"] @ p["w_ih"].T + p["b_ih"] + p["b_hh"]
    return recurrence(xproj, p["h"], p["c"], p["w_hh"], p["n"])


def test_one_step_of_the_paper_cell_by_hand_and_the_engine_agrees():
    """Two levels of one unit, gate logits chosen so every quantity is easy by hand:
    master-forget softmax (1/2, 1/2) -> cumax (1/2, 1); master-input softmax (1, 0) -> 1 - cumax (0, 0);
    so the overlap w = 0, f^ = (1/2, 1) and i^ = (0, 0): c' = f^ * c, h = sigmoid(o) * tanh(c')."""
    big = 30.0  # softmax([30, -30]) is (1, 0) to double precision
    gates = torch.tensor([[big, -big, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    # columns: master input (2) | master forget (2) | o (2) | candidate (2) | i (2) | f (2)
    c = torch.tensor([[0.8, -0.4]], dtype=torch.float64)
    zero = torch.zeros(12, dtype=torch.float64)
    hs, c_last, dist_f, dist_i = paper_layer(gates[None], (torch.zeros(1, 2, dtype=torch.float64), c),
                                             torch.eye(12, dtype=torch.float64), zero,
                                             torch.zeros(12, 2, dtype=torch.float64), zero, chunk_size=1)
    c_by_hand = torch.tensor([[0.4, -0.4]], dtype=torch.float64)
    torch.testing.assert_close(c_last, c_by_hand)
    torch.testing.assert_close(hs[0], 0.5 * torch.tanh(c_by_hand))
    torch.testing.assert_close(dist_f[0], torch.tensor([0.25], dtype=torch.float64))  # 1 - mean(1/2, 1)
    torch.testing.assert_close(dist_i[0], torch.tensor([0.0], dtype=torch.float64))
    fast_hs, fast_c, fast_f, fast_i = recurrence(gates[None], torch.zeros(1, 2, dtype=torch.float64), c,
                                                 torch.zeros(12, 2, dtype=torch.float64), 2)
    for a, b in zip((fast_hs[0], fast_c, fast_f[0], fast_i[0]), (hs[0], c_last, dist_f[0], dist_i[0])):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_distances_are_expected_levels_over_n():
    logits = torch.randn(4, 6, dtype=torch.float64)
    p = torch.softmax(logits, -1)
    n = 6
    expected = (p * torch.arange(n, dtype=torch.float64)).sum(-1) / n
    torch.testing.assert_close(1 - cumax(logits).mean(-1), expected)  # forget: 1 - mean(f~)
    torch.testing.assert_close((1 - cumax(logits)).mean(-1), expected)  # input: mean(i~)


@pytest.fixture(params=["C step", "tensor ops"])
def backward_loop(request, monkeypatch):
    """Runs a gradient test through each of _Recurrence's backward loops."""
    if request.param == "tensor ops":
        monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")
    elif native.library(torch.float64) is None:
        pytest.skip(NO_C_STEPS)
    assert native.usable(torch.zeros(1, dtype=torch.float64)) == (request.param == "C step")
    return request.param


def test_fast_layer_equals_reference_values_and_gradients(backward_loop):
    p = random_layer(seed=1, steps=7, batch=4, hidden=12, chunk=3)
    ref = paper_layer(p["x"], (p["h"], p["c"]), p["w_ih"], p["b_ih"], p["w_hh"], p["b_hh"], p["chunk"])
    out = fast(p)
    weights = [torch.randn_like(r) for r in ref]
    params = [p[k] for k in ("x", "h", "c", "w_ih", "b_ih", "w_hh", "b_hh")]
    grads_ref = torch.autograd.grad(sum((r * w).sum() for r, w in zip(ref, weights)), params)
    grads_out = torch.autograd.grad(sum((r * w).sum() for r, w in zip(out, weights)), params)
    for a, b in zip(ref, out):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    for a, b in zip(grads_ref, grads_out):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_gradcheck_of_the_recurrence(backward_loop):
    p = random_layer(seed=2, steps=4, batch=2, hidden=6, chunk=2)
    xproj = (p["x"] @ p["w_ih"].T).detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda x, h, c, w: _Recurrence.apply(x, None, None, h, c, w, p["n"]),
                                    (xproj, p["h"], p["c"], p["w_hh"]))
    # with the input map inside the layer, and both biases
    assert torch.autograd.gradcheck(lambda x, w_ih, b, h, c, w: _Recurrence.apply(x, w_ih, b, h, c, w, p["n"]),
                                    (p["x"], p["w_ih"], p["b_ih"], p["h"], p["c"], p["w_hh"]))


def test_no_product_for_a_gradient_at_h0_that_is_not_asked_for(backward_loop, monkeypatch):
    """Truncated backpropagation detaches h0: the backward then skips the last step's product by the hidden map (the
    gradient at h0 is all it gives), and every other gradient is the same."""
    steps = 5
    p = random_layer(seed=3, steps=steps, batch=2, hidden=6, chunk=2)
    calls, call = [], RepeatedProduct.__call__
    monkeypatch.setattr(RepeatedProduct, "__call__", lambda self, x: calls.append(x.shape) or call(self, x))
    params = [p[k] for k in ("x", "c", "w_ih", "b_ih", "w_hh", "b_hh")]
    def backward_products(inputs):  # the forward's products may be folded into its gate sums (addmm)
        loss = fast(p)[0].sum()
        before = len(calls)
        return torch.autograd.grad(loss, inputs), len(calls) - before

    with_h0, made_with_h0 = backward_products([*params, p["h"]])
    p["h"] = p["h"].detach()
    without_h0, made_without_h0 = backward_products(params)
    assert (made_with_h0, made_without_h0) == (steps, steps - 1)
    for a, b in zip(with_h0, without_h0):
        assert torch.equal(a, b)


def tiny_model(wdrop=0.3, seed=0):
    torch.manual_seed(seed)
    cfg = ONLSTMConfig(emb_size=8, hidden_size=12, chunk_size=4, n_layers=3, wdrop=wdrop)
    return ONLSTMLanguageModel(20, cfg)


@pytest.mark.parametrize("scale_every_step", [True, False])
def test_model_distances_match_the_reference_in_evaluation(scale_every_step):
    model = tiny_model().eval()
    tokens = torch.randint(0, 20, (9, 3))
    out = model(tokens)
    ref = reference_distances(model, tokens, scale_every_step)
    assert out.distances.forget.shape == (3, 9, 3)
    torch.testing.assert_close(out.distances.forget, ref.forget)
    torch.testing.assert_close(out.distances.input, ref.input)
    torch.testing.assert_close(model.distances(tokens).forget, ref.forget)


def test_dropconnect_scales_weight_in_evaluation_and_masks_in_training():
    model = tiny_model(wdrop=0.25)
    layer = model.layers[0]
    layer.eval()
    torch.testing.assert_close(layer.recurrent_weight(), layer.hh.weight * 0.75)
    layer.train()
    masked = layer.recurrent_weight()
    kept = masked != 0
    torch.testing.assert_close(masked[kept], layer.hh.weight[kept])  # unscaled where kept
    assert 0.1 < (~kept).float().mean().item() < 0.4


def test_keep_mask_is_zeros_and_ones_of_the_weight_dtype_at_rate_one_minus_p():
    torch.manual_seed(0)
    weight = torch.empty(300, 200, dtype=torch.float64)
    mask = keep_mask(weight, 0.3)
    assert mask.dtype == torch.float64 and mask.shape == weight.shape
    assert set(mask.unique().tolist()) == {0.0, 1.0}
    assert abs(mask.mean().item() - 0.7) < 0.01  # 60000 draws: standard error 0.002


def test_embedding_dropout_on_the_rows_looked_up_is_the_papers_on_the_whole_matrix():
    """The same draws drop the same word types: equal outputs, and equal gradients to float32's rounding (a row's
    mask multiplies each use of it, not their sum); a dropped type gets no gradient."""
    embedding = torch.nn.Embedding(50, 8)
    tokens = torch.randint(0, 50, (30, 4), generator=torch.Generator().manual_seed(1))
    results = []
    for dropout in (embedding_dropout, paper_onlstm.embedding_dropout):
        torch.manual_seed(7)
        out = dropout(embedding, tokens, 0.3, True)
        (grad,) = torch.autograd.grad((out * torch.arange(out.numel()).view(out.shape).sin()).sum(), embedding.weight)
        results.append((out, grad))
    (ours, our_grad), (paper, paper_grad) = results
    assert torch.equal(ours, paper)
    torch.testing.assert_close(our_grad, paper_grad, rtol=1e-6, atol=1e-6)
    dropped = (ours == 0).all(-1)
    assert dropped.any() and not dropped.all()
    assert (our_grad[tokens[dropped]] == 0).all()
    assert torch.equal(embedding_dropout(embedding, tokens, 0.3, False), embedding(tokens))


def test_cross_entropy_matches_torch_in_value_and_gradient():
    torch.manual_seed(0)
    logits = torch.randn(40, 25, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 25, (40,))
    weights = torch.rand(40, 25, dtype=torch.float64)  # logits enter the loss through another op, as in the model
    ours = cross_entropy(logits * weights, targets)
    (grad_ours,) = torch.autograd.grad(3.0 * ours, logits)
    theirs = torch.nn.functional.cross_entropy(logits * weights, targets)
    (grad_theirs,) = torch.autograd.grad(3.0 * theirs, logits)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=0)
    torch.testing.assert_close(grad_ours, grad_theirs, rtol=1e-10, atol=1e-14)


def test_cross_entropy_refuses_a_second_backward_instead_of_reusing_its_spent_buffer():
    logits = torch.randn(6, 5, requires_grad=True)
    loss = cross_entropy(logits * 2.0, torch.tensor([0, 1, 2, 3, 4, 0]))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_decoder_is_tied_and_last_layer_has_embedding_size():
    model = tiny_model()
    assert model.decoder.weight is model.embedding.weight
    assert [layer.hidden_size for layer in model.layers] == [12, 12, 8]
    out = model.eval()(torch.zeros(5, 2, dtype=torch.long))
    assert out.logits.shape == (5, 2, 20) and out.top_output.shape == (5, 2, 8)


def test_parameter_count_of_the_paper_model():
    cfg = ONLSTMConfig()  # emb 400, hidden 1150, chunk 10
    with torch.device("meta"):
        model = ONLSTMLanguageModel(10000, cfg)
    layer = lambda i, h: (i + h + 2) * (4 * h + 2 * (h // 10))  # two maps with biases
    expected = 10000 * 400 + 10000 + layer(400, 1150) + layer(1150, 1150) + layer(1150, 400)
    assert count_parameters(model) == expected
    assert math.isclose(expected / 1e6, 25.2, abs_tol=0.05)


def test_the_paper_style_training_loss_is_the_models_without_dropout():
    """The benchmark's baseline (reference_training_loss) computes what training computes."""
    from grammar_induce.families.onlstm.recipe import lm_loss

    from .conftest import tiny_config
    from .paper_onlstm import reference_training_loss

    no_dropout = {name: 0.0 for name in ("dropout", "dropouth", "dropouti", "dropoute", "wdrop")}
    config = tiny_config(model=no_dropout)
    torch.manual_seed(0)
    model = ONLSTMLanguageModel(30, config.model).train()
    tokens = torch.randint(0, 30, (9, 3))
    ours, _, _ = lm_loss(model, tokens[:-1], tokens[1:], model.init_hidden(3), config)
    ours_grads = torch.autograd.grad(ours, list(model.parameters()))
    theirs = reference_training_loss(model, tokens[:-1], tokens[1:], config.train.alpha, config.train.beta)
    theirs_grads = torch.autograd.grad(theirs, list(model.parameters()))
    torch.testing.assert_close(ours, theirs)
    for a, b in zip(ours_grads, theirs_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
