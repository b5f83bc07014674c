"""The fast recurrence engine: one ON-LSTM layer over a whole sequence as one autograd Function.

families/onlstm/model.py writes the cell as the paper does (`paper_layer`, one step at a time through autograd);
this module computes the same function fast. The input projection of all steps is one matrix
product (done by the caller, or under bf16 training with the layer: `recurrence_with_input_map`), the
hidden-to-hidden weight gradient one matrix product per batch, the per-step products run on the hidden map laid out
once per sequence (families/onlstm/products.py),
and backpropagation through time is written out. Each time step's element-wise work, forward
and backward, exists in tensor ops (any device, `_forward_step`, `_backward_coefficients`) and
as one call into C on a CPU (onlstm_step.c, see native.py); `_time_steps` chooses. Under bf16 the C steps read
the products' bfloat16 results (and, in training, the bfloat16 input map with the biases apart) and write the next
products' bfloat16 inputs, so that nothing is converted between steps. DropConnect's mask is applied in one C pass
too (`drop_connect`: the same masks as the tensor ops, from the same draws).

A change to the cell's maths touches together: model.paper_layer (the readable cell, which the
tests hold this engine to, values and gradients), `_forward_step` and `_backward_coefficients`
here, and forward_step/backward_step in onlstm_step.c.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ...runtime.draws import keep_mask, keep_threshold, random_bits
from . import graphs, native
from .products import RepeatedProduct, left_operand, linear_operand, linear_product

State = list[tuple[Tensor, Tensor]]  # per layer: h (B, H), c (B, H)


# Master gates are kept stacked as (..., 2, n) = [input, forget] so that one fused op serves
# both: master = cumsum(softmax) * sign + offset gives [1 - cumax(l_i), cumax(l_f)].
def _sign_offset(x: Tensor) -> tuple[Tensor, Tensor]:
    """sign [[-1], [1]] and offset [[1], [0]] on x's device, made by fill kernels (no copy from host memory: a CUDA
    graph records them)."""
    sign, offset = x.new_ones(2, 1), x.new_zeros(2, 1)
    sign[0], offset[0] = -1.0, 1.0
    return sign, offset


class _Gradients(NamedTuple):
    """What backpropagation through a layer's steps gives."""

    gates: Tensor | None  # (T, B, G) the gate logits' gradients, in the state's dtype (None where not asked for)
    gates_reduced: Tensor | None  # the same in the products' dtype where it is not the state's (as products read them)
    bias: Tensor  # (G) their sum over steps and batch: the biases' gradient
    h0: Tensor | None  # (B, H), None where not asked for
    c0: Tensor  # (B, n, C)


class _TimeSteps(NamedTuple):
    forward: Callable[..., _Forward]  # (xproj, bias, h0, c0, weight, n, save) -> _Forward: _run_forward with a loop
    backward_loop: Callable[..., _Gradients]  # see _backward_loop


def _time_steps(state: Tensor) -> _TimeSteps:
    """The C steps where they can run on the state's device and dtype (see native.py); on a GPU the tensor-op steps
    replayed from CUDA graphs (families/onlstm/graphs.py, unless turned off); else the tensor-op steps. Chosen here only.
    Fixed arguments are bound once, not per step."""
    if native.usable(state):
        loop = functools.partial(_native_forward_loop, native.library(state.dtype).forward_step)
        return _TimeSteps(functools.partial(_run_forward, loop=loop), _native_backward_loop)
    if graphs.enabled(state.device):
        return _GRAPHED
    return _TimeSteps(_tensor_forward, _backward_loop)


def _tensor_forward(xproj: Tensor, bias: Tensor | None, h0: Tensor, c0: Tensor, weight: Tensor, n: int,
                    save: bool) -> _Forward:
    """_run_forward with the tensor-op steps (their constants made inside: a graph records them)."""
    return _run_forward(xproj, bias, h0, c0, weight, n, functools.partial(_forward_loop, *_sign_offset(h0)), save)


REPLAYED = graphs.Replayed()  # the graphs of this process's layers, by shape


def _graphed_forward(xproj: Tensor, bias: Tensor | None, h0: Tensor, c0: Tensor, weight: Tensor, n: int,
                     save: bool) -> _Forward:
    return REPLAYED(("forward", n, save), lambda *inputs: _tensor_forward(*inputs, n, save),
                    (xproj, bias, h0, c0, weight))


def _graphed_backward(c0, weight, cs, probs, acts, grad_hs, grad_c_last, grad_dist_f, grad_dist_i, n,
                      full: bool = True, h0: bool = True) -> _Gradients:
    return REPLAYED(("backward", n, full, h0), lambda *inputs: _backward_loop(*inputs, n, full, h0),
                    (c0, weight, cs, probs, acts, grad_hs, grad_c_last, grad_dist_f, grad_dist_i))


_GRAPHED = _TimeSteps(_graphed_forward, _graphed_backward)


class _Forward(NamedTuple):
    hs: Tensor  # (T+1, B, H): h0..hT, one buffer, so h_{t-1} for all t is a view
    hs_in: Tensor  # hs in the products' dtype, as they read it (hs itself when that is the state's)
    cs: Tensor  # (T, B, n, C)
    probs: Tensor  # (T, B, 2, n): the master softmaxes
    acts: Tensor | None  # (T, B, 4, n, C) when saved: o, tanh(candidate), i, f of each step (i^, f^ and tanh(c) the
    # backward computes again from the master gates and cs: cheaper than writing them and reading them back)


def _run_forward(xproj: Tensor, bias: Tensor | None, h0: Tensor, c0: Tensor, weight: Tensor, n: int,
                 loop: Callable[..., None], save: bool) -> _Forward:
    """The time loop of one layer (`loop`: _forward_loop's or _native_forward_loop's steps, with their constants
    bound: (xproj, bias, hidden_map, c0, hs, hs_in, cs, probs, acts) -> None).

    xproj: (T, B, G) input projection, G = 2n + 4H with columns [master input | master forget | o | candidate | i |
    f], in the state's dtype or the products' (bfloat16 under bf16 training); `bias` (G), where given, is added to it
    in the state's dtype (both layers' biases). weight: (G, H) hidden map, in the dtype its products run in; the
    state (h0, c0) and everything element-wise stay in theirs (float32). Saves the activations when `save`.
    """
    steps, batch, _ = xproj.shape
    hidden_size = h0.shape[-1]
    chunk = hidden_size // n
    hs = h0.new_empty(steps + 1, batch, hidden_size)
    hs[0] = h0
    hs_in = hs if weight.dtype == hs.dtype else hs.new_empty(hs.shape, dtype=weight.dtype)
    if hs_in is not hs:
        hs_in[0] = h0
    cs = h0.new_empty(steps, batch, n, chunk)
    probs = h0.new_empty(steps, batch, 2, n)
    acts = h0.new_empty(steps if save else 1, batch, 4, n, chunk)  # one step's, rewritten, when not saved
    loop(xproj, bias, RepeatedProduct(weight, batch, uses=steps), c0.reshape(batch, n, chunk).contiguous(), hs,
         hs_in, cs, probs, acts)
    return _Forward(hs, hs_in, cs, probs, acts if save else None)


def _forward_loop(sign: Tensor, offset: Tensor, xproj: Tensor, bias: Tensor | None, hidden_map: RepeatedProduct,
                  c0: Tensor, hs: Tensor, hs_in: Tensor, cs: Tensor, probs: Tensor, acts: Tensor) -> None:
    """The steps in tensor ops (_forward_step), writing hs[1:], hs_in[1:], cs, probs and acts (see _Forward; acts
    of one step only when it has one). Each op is a kernel launch on a GPU, which bounds its pace: the biases are
    added to every step's input map at once, and where the products run in the state's dtype (and the weight is not
    laid out for MKL or oneDNN) a step's product is added into its gate logits by the product itself (addmm)."""
    batch, n, chunk = c0.shape
    logits = xproj.to(cs.dtype) if bias is None else xproj.to(cs.dtype) + bias  # (T, B, G), in the state's dtype
    fused = hidden_map.packed is None and hidden_map.weight.dtype == cs.dtype
    c = c0
    for t, x_t in enumerate(logits.unbind(0)):
        # a reduced product is added in float32 (the sum converts it: no kernel of its own)
        gates = torch.addmm(x_t, hs_in[t], hidden_map.weight.t()) if fused else x_t + hidden_map(hs_in[t])
        _forward_step(sign, offset, gates, c, probs[t], acts[t % len(acts)], cs[t], hs[t + 1].view(batch, n, chunk),
                      None if hs_in is hs else hs_in[t + 1])
        c = cs[t]


def _forward_step(sign: Tensor, offset: Tensor, gates: Tensor, c_prev: Tensor, probs: Tensor, a: Tensor, c: Tensor,
                  h: Tensor, h_reduced: Tensor | None) -> None:
    """One step in tensor ops: from the gate logits (B, G) and c_prev (B, n, C), writes the master softmaxes probs
    (B, 2, n), the activations a (B, 4, n, C), c and h (B, n, C), and h in the products' dtype into h_reduced (B, H)
    where given. sign and offset are _sign_offset's."""
    batch, _, n, chunk = a.shape
    torch.ops.aten._softmax.out(gates[:, : 2 * n].view(batch, 2, n), -1, False, out=probs)
    master = torch.addcmul(offset, probs.cumsum(-1), sign)  # [i~, f~] (B, 2, n)  eqs. 8-9
    overlap = (master[:, 0] * master[:, 1])[:, None, :, None]  # w = f~ * i~ (B, 1, n, 1)  eq. 10
    pre = gates[:, 2 * n :].view(batch, 4, n, chunk)
    torch.sigmoid(pre, out=a)
    torch.tanh(pre[:, 1], out=a[:, 1])
    gate_in, gate_forget = _gates_hat(master, overlap, a[:, 2:4])
    torch.addcmul(gate_forget * c_prev, gate_in, a[:, 1], out=c)  # eq. 13
    torch.mul(a[:, 0], torch.tanh(c), out=h)  # eq. 14
    if h_reduced is not None:
        h_reduced.copy_(h.reshape(h_reduced.shape))


def _gates_hat(master: Tensor, overlap: Tensor, gates: Tensor) -> tuple[Tensor, Tensor]:
    """[i^, f^] = [i, f] * w + ([i~, f~] - w)  eqs. 11-12, as [i~, f~] + w * ([i, f] - 1), for master (..., 2, n),
    overlap w (..., 1, n, 1) and gates [i, f] (..., 2, n, C)."""
    return torch.addcmul(master.unsqueeze(-1), overlap, gates - 1.0).unbind(-3)


def _native_forward_loop(forward_step, xproj: Tensor, bias: Tensor | None, hidden_map: RepeatedProduct, c0: Tensor,
                         hs: Tensor, hs_in: Tensor, cs: Tensor, probs: Tensor, acts: Tensor) -> None:
    """_forward_loop with each step one call to onlstm_step.c's forward_step (CPU; all arrays contiguous; xproj and
    the products in the state's dtype or bfloat16, the conversions done in C). Every step's addresses are worked out
    before the loop: a step is then a product and a call, with no tensor made for it in Python."""
    steps, batch, _ = xproj.shape
    n, chunk = c0.shape[1:]
    x, x_bf16 = _step_addresses(xproj, cs.dtype)
    c_prev = [c0.data_ptr(), *_addresses(cs)[:-1]]
    h_reduced = _addresses(hs_in)[1:] if hs_in is not hs else [None] * steps
    inputs, bias_address = hs_in.unbind(0), _pointer(bias)
    for t, (probs_t, acts_t, c, h) in enumerate(zip(_addresses(probs), _addresses(acts, steps), _addresses(cs),
                                                    _addresses(hs)[1:])):
        product = hidden_map(inputs[t])  # held while C reads it
        forward_step(batch, n, chunk, x[t], x_bf16[t], bias_address, *_as_state_or_bf16(product, cs.dtype), c_prev[t],
                     probs_t, acts_t, c, h, h_reduced[t])


def _addresses(x: Tensor, count: int | None = None) -> list[int]:
    """The address of each x[t] (x contiguous), repeated over `count` steps where x has fewer (one step's buffer)."""
    base, length, step = x.data_ptr(), x.shape[0], x[0].numel() * x.element_size()  # not len(x) per step: slow in torch
    return [base + (t % length) * step for t in range(length if count is None else count)]


def _step_addresses(x: Tensor, state_dtype: torch.dtype) -> tuple[list, list]:
    """_as_state_or_bf16 of each x[t]: a list of addresses, and one of Nones."""
    state, _ = _as_state_or_bf16(x, state_dtype)
    nones = [None] * len(x)
    return (_addresses(x), nones) if state is not None else (nones, _addresses(x))


def _pointer(x: Tensor | None) -> int | None:
    return None if x is None else x.data_ptr()


def _as_state_or_bf16(x: Tensor, state_dtype: torch.dtype) -> tuple[int | None, int | None]:
    """A C step's pair of pointers for an array given in the state's dtype or in bfloat16 (the other one NULL)."""
    if x.dtype == state_dtype:
        return x.data_ptr(), None
    if x.dtype != torch.bfloat16:
        raise TypeError(f"the C steps take {state_dtype} or bfloat16 arrays, not {x.dtype}")
    return None, x.data_ptr()


def _masters(probs: Tensor) -> Tensor:
    """Softmaxes (..., 2, n) -> [master input, master forget] (..., 2, n)."""
    sign, offset = _sign_offset(probs)
    return torch.addcmul(offset, probs.cumsum(-1), sign)


def _distances(probs: Tensor) -> tuple[Tensor, Tensor]:
    """Softmaxes (T, B, 2, n) -> forget distance 1 - mean(f~) and input distance mean(i~), each (T, B).

    A cumax's mean is a weighted sum, mean_j sum_{k<=j} p_k = sum_k p_k (n - k) / n, so both are 1 - probs @ w: one
    product, not a cumulative sum and a mean (1.1 against 0.05 ms for a 1,150-unit layer's 70 x 20 steps)."""
    n = probs.shape[-1]
    levels_above = torch.arange(n, 0, -1, dtype=probs.dtype, device=probs.device) / n  # (n - k) / n for k = 0..n-1
    distances = 1.0 - probs @ levels_above  # (T, B, 2): [mean(i~), 1 - mean(f~)]
    return distances[..., 1], distances[..., 0]


def backward_map(weight: Tensor, rows: int, steps: int) -> Callable[[Tensor], Tensor]:
    """g -> g @ weight for the `rows` gate gradients of each of `steps` steps, run in the weight's dtype (a layer's
    weights set the product dtype), the result in it too (the float32 sum it goes into converts it on the way: no
    kernel of its own); the weight laid out once for all (families/onlstm/products.py)."""
    step = RepeatedProduct(weight, rows, uses=steps, transposed=True)
    return lambda g: step(g.to(weight.dtype))


def reduced_product(x: Tensor, weight: Tensor, dtype: torch.dtype) -> Tensor:
    """x @ weight.t() in a reduced `dtype`, inputs and result (the weight converted by linear_product)."""
    return linear_product(x.to(dtype).reshape(-1, x.shape[-1]), weight).view(*x.shape[:-1], -1)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, dtype: torch.dtype | None, full_rows: int = 0) -> Tensor:
    """F.linear; with a reduced `dtype`, the product in it, but for the first `full_rows` outputs, and
    the bias added in float32. A reduced product is rounded to `dtype` once (torch has no CPU product
    with bfloat16 inputs and a float32 result)."""
    if dtype is None:
        return F.linear(x, weight, bias)
    out = reduced_product(x, weight[full_rows:], dtype).float()
    if full_rows:
        out = torch.cat([x @ weight[:full_rows].t(), out], dim=-1)
    return out if bias is None else out + bias


class _Recurrence(torch.autograd.Function):
    """One ON-LSTM layer over a sequence, with backpropagation through time written out.

    Everything the backward pass needs that does not depend on the incoming gradient is
    computed for all steps at once before the loop, so each step is a handful of kernels.
    With `input_weight`, the layer's input map is part of it (x (T, B, I) -> xproj = x @ input_weight.t(), in x's
    dtype: the weight is converted as it is laid out for the product, families/onlstm/products.py's `linear_operand`), so that
    both weights' gradients are products with the gate gradients laid out gates by tokens, one copy for the two where a
    transposed left operand is slow (`left_operand`); the input weight's gradient comes in its own dtype.
    """

    @staticmethod
    def forward(ctx, x, input_weight, bias, h0, c0, weight, n):
        steps = _time_steps(h0)
        xproj, input_operand = x, None
        if input_weight is not None:
            x_by_tokens = x.reshape(-1, x.shape[-1])
            input_operand = linear_operand(x_by_tokens, input_weight)  # (I, G) in x's dtype
            xproj = (x_by_tokens @ input_operand).view(*x.shape[:2], -1)
            ctx.input_weight_dtype = input_weight.dtype
        run = steps.forward(xproj.contiguous(), bias, h0, c0, weight, n, save=True)
        ctx.save_for_backward(x if input_weight is not None else None, input_operand, h0, c0, weight, run.hs_in, run.cs,
                              run.probs, run.acts)
        ctx.n, ctx.backward_loop, ctx.xproj_dtype, ctx.has_bias = n, steps.backward_loop, xproj.dtype, bias is not None
        return (run.hs[1:], run.cs[-1].reshape(c0.shape)) + _distances(run.probs)

    @staticmethod
    def backward(ctx, grad_hs, grad_c_last, grad_dist_f, grad_dist_i):
        x, input_operand, h0, c0, weight, hs_in, cs, probs, acts = ctx.saved_tensors
        # the gate gradients in the state's dtype are needed where products read them so, or the input map is in it
        full = weight.dtype == acts.dtype or ctx.xproj_dtype != weight.dtype
        grads = ctx.backward_loop(c0, weight, cs, probs, acts, grad_hs, grad_c_last, grad_dist_f, grad_dist_i, ctx.n,
                                  full, h0=ctx.needs_input_grad[3])  # truncated backpropagation detaches h0
        reduced = grads.gates.to(weight.dtype) if grads.gates_reduced is None else grads.gates_reduced  # as products read them
        by_tokens = reduced.view(-1, reduced.shape[-1])
        by_gates = left_operand(by_tokens.t())  # (G, T*B), for the weights' gradients
        grad_weight = by_gates @ hs_in[:-1].reshape(-1, hs_in.shape[-1])  # sum over steps of dg_t^T h_{t-1}, one product
        grad_xproj = reduced if ctx.xproj_dtype == weight.dtype else grads.gates.to(ctx.xproj_dtype)
        grad_x = grad_input_weight = None
        if input_operand is not None:  # through the input map, in x's dtype (that of the products)
            grad_x = (grad_xproj.reshape(by_tokens.shape) @ input_operand.t()).view(x.shape)
            grad_input_weight = (by_gates @ x.reshape(-1, x.shape[-1])).to(ctx.input_weight_dtype)
        return (grad_xproj if input_operand is None else grad_x, grad_input_weight,
                grads.bias if ctx.has_bias else None, None if grads.h0 is None else grads.h0.view(h0.shape),
                grads.c0.reshape(c0.shape), grad_weight, None)


def _backward_loop(c0, weight, cs, probs, acts, grad_hs, grad_c_last, grad_dist_f, grad_dist_i, n,
                   full: bool = True, h0: bool = True) -> _Gradients:
    """Backward through time in tensor ops (the gate gradients in the state's dtype whatever `full` says); the
    gradient at h0, the last step's product by the hidden map, only with `h0`."""
    steps, batch, _ = grad_hs.shape
    coef = _backward_coefficients(c0, cs, probs, acts, n)
    sign = _sign_offset(probs)[0]
    # d(distance)/d[i~, f~] (input distance is mean(i~), forget distance is 1 - mean(f~)), with the sign of cumax's
    # way back folded in: (T, B, 2, 1)
    signed_dist = torch.stack([grad_dist_i, -grad_dist_f], dim=-1).unsqueeze(-1) * (sign / n)
    lower = torch.ones(n, n, dtype=probs.dtype, device=probs.device).tril()  # x @ lower = reversed cumsum
    grad_gates = acts.new_empty(steps, batch, weight.shape[0])  # (T, B, G)
    dh = torch.zeros_like(grad_hs[0])
    dc = grad_c_last.reshape(batch, n, -1).clone()
    to_hidden = backward_map(weight, batch, steps)
    for t in range(steps - 1, -1, -1):
        out = grad_gates[t]
        d_acts = out[:, 2 * n :].view(batch, 4, n, -1)
        dh = (grad_hs[t] + dh).view(batch, n, -1)
        dc = torch.addcmul(dc, dh, coef.dc_from_h[t])
        torch.mul(dh, coef.d_out[t], out=d_acts[:, 0])
        torch.mul(dc.unsqueeze(1), coef.d_rest[t], out=d_acts[:, 1:])
        sums = (coef.sum_terms[t] @ dc.unsqueeze(-1)).squeeze(-1)  # (B, n, 3): each term summed against dc over C
        d_master = torch.addcmul(sums[..., :2], sums[..., 2:], coef.master_swapped[t]).transpose(1, 2)
        d_probs = torch.addcmul(signed_dist[t], d_master, sign) @ lower  # (B, 2, n)
        # the softmax's backward (its out= form writes nothing through a strided view: a copy)
        out[:, : 2 * n].view(batch, 2, n).copy_(torch._softmax_backward_data(d_probs, probs[t], -1, probs.dtype))
        dc = dc * coef.forget[t]
        dh = to_hidden(out) if t or h0 else None  # (B, H)
    return _Gradients(grad_gates, None, grad_gates.sum((0, 1)), None if dh is None else dh.to(acts.dtype), dc)


def _native_backward_loop(c0, weight, cs, probs, acts, grad_hs, grad_c_last, grad_dist_f, grad_dist_i, n,
                          full: bool = True, h0: bool = True) -> _Gradients:
    """_backward_loop with each step's element-wise work done by one call into onlstm_step.c (CPU), which also
    writes the gate gradients in the products' dtype where it is not the state's, keeps them in the state's only
    where that is the products' dtype or `full` asks for them, and sums them for the biases as it goes."""
    steps, batch, hidden = grad_hs.shape
    step = native.library(acts.dtype).backward_step
    grad_hs = grad_hs.contiguous()
    grad_dist = torch.stack([grad_dist_i, grad_dist_f], dim=-1).contiguous()  # (T, B, 2)
    c_prev = [c0.reshape(batch, hidden).contiguous().data_ptr(), *_addresses(cs)[:-1]]
    shape = (steps, batch, weight.shape[0])  # (T, B, G)
    reduced = None if weight.dtype == acts.dtype else acts.new_empty(shape, dtype=weight.dtype)
    grad_gates = acts.new_empty(shape) if reduced is None or full else None
    bias_rows = acts.new_zeros(shape[1:])  # each batch row's sum over steps
    dh = grad_hs.new_zeros(batch, hidden)
    dc = grad_c_last.reshape(batch, hidden).clone(memory_format=torch.contiguous_format)
    to_hidden = RepeatedProduct(weight, batch, uses=steps, transposed=True)
    products_read = (grad_gates if reduced is None else reduced).unbind(0)
    per_step = list(zip(_addresses(acts), _addresses(cs), c_prev, _addresses(probs), _addresses(grad_dist),
                        _addresses(grad_hs), _optional_addresses(grad_gates, steps),
                        _optional_addresses(reduced, steps)))
    for t in range(steps - 1, -1, -1):
        step(batch, n, hidden // n, *per_step[t][:6], *_as_state_or_bf16(dh, acts.dtype), dc.data_ptr(),
             *per_step[t][6:], bias_rows.data_ptr())  # updates dc, bias_rows; writes gate rows
        if t or h0:
            dh = to_hidden(products_read[t])
    return _Gradients(grad_gates, reduced, bias_rows.sum(0), dh.to(acts.dtype) if h0 else None, dc)


def _optional_addresses(x: Tensor | None, steps: int) -> list[int | None]:
    """_addresses of x, or a None for each step where there is no x."""
    return [None] * steps if x is None else _addresses(x)


class _Coefficients(NamedTuple):
    dc_from_h: Tensor  # (T, B, n, C): o * (1 - tanh(c)^2)
    d_out: Tensor  # (T, B, n, C): d(loss)/d(o logit) per unit dh
    d_rest: Tensor  # (T, B, 3, n, C): d(candidate, i, f logits) per unit dc
    sum_terms: Tensor  # (T, B, n, 3, C): [candidate, c_prev, d(c)/d(w)], summed over C against dc
    master_swapped: Tensor  # (T, B, n, 2): [f~, i~]
    forget: Tensor  # (T, B, n, C): f^, the carry of dc


def _backward_coefficients(c0: Tensor, cs: Tensor, probs: Tensor, acts: Tensor, n: int) -> _Coefficients:
    """The local derivatives of every step, computed for all steps at once, into few buffers."""
    steps, batch = cs.shape[:2]
    o, cand, i, f = acts.unbind(2)  # (T, B, n, C)
    master = _masters(probs)  # (T, B, 2, n)
    m_in, m_forget = master[:, :, 0, :, None], master[:, :, 1, :, None]  # (T, B, n, 1)
    overlap = m_in * m_forget
    gate_in, gate_forget = _gates_hat(master, overlap[:, :, None], acts[:, :, 2:4])  # as the forward computed them
    tanh_c = torch.tanh(cs)
    sum_terms = acts.new_empty(steps, batch, n, 3, cs.shape[-1])
    sum_terms[:, :, :, 0] = cand
    c_prev = sum_terms[:, :, :, 1]
    c_prev[0] = c0.view(batch, n, -1)
    c_prev[1:] = cs[:-1]
    torch.mul(c_prev, f - 1.0, out=sum_terms[:, :, :, 2]).addcmul_(cand, i - 1.0)  # d(c)/d(w)
    d_rest = acts.new_empty(steps, batch, 3, n, cs.shape[-1])
    torch.addcmul(gate_in, gate_in * cand, cand, value=-1.0, out=d_rest[:, :, 0])  # i^ (1 - cand^2)
    torch.mul(cand * overlap, torch.addcmul(i, i, i, value=-1.0), out=d_rest[:, :, 1])  # cand w i (1 - i)
    torch.mul(c_prev * overlap, torch.addcmul(f, f, f, value=-1.0), out=d_rest[:, :, 2])  # c_prev w f (1 - f)
    return _Coefficients(
        dc_from_h=torch.addcmul(o, o * tanh_c, tanh_c, value=-1.0),  # o (1 - tanh(c)^2)
        d_out=tanh_c * torch.addcmul(o, o, o, value=-1.0),  # tanh(c) o (1 - o)
        d_rest=d_rest,
        sum_terms=sum_terms,
        master_swapped=torch.stack([master[:, :, 1], master[:, :, 0]], dim=-1),
        forget=gate_forget,
    )


def recurrence(xproj: Tensor, h0: Tensor, c0: Tensor, weight: Tensor, n: int, bias: Tensor | None = None):
    """Run one layer: returns hs (T, B, H), c_last (B, H), forget and input distances (T, B). xproj (T, B, G) is the
    input map, in the state's dtype or the products' (see _run_forward), plus `bias` (G) where given."""
    if torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (xproj, bias, h0, c0, weight)):
        return _Recurrence.apply(xproj, None, bias, h0, c0, weight, n)
    run = _time_steps(h0).forward(xproj.contiguous(), bias, h0, c0, weight, n, save=False)
    return (run.hs[1:], run.cs[-1].reshape(c0.shape)) + _distances(run.probs)


def recurrence_with_input_map(x: Tensor, input_weight: Tensor, h0: Tensor, c0: Tensor, weight: Tensor, n: int,
                              bias: Tensor | None = None):
    """recurrence(x @ input_weight.t(), ...) for x (T, B, I), the input map and its gradients in x's dtype (the
    products'; the weight converted as it is laid out, its gradient in its own dtype), run with the layer (see
    _Recurrence)."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, input_weight, bias, h0, c0, weight)):
        return _Recurrence.apply(x, input_weight, bias, h0, c0, weight, n)
    xproj = linear_product(x.reshape(-1, x.shape[-1]), input_weight).view(*x.shape[:2], -1)
    return recurrence(xproj, h0, c0, weight, n, bias)


class _DropConnect(torch.autograd.Function):
    """DropConnect's mask (keep_mask's draw) applied in one C pass (onlstm_step.c's drop_connect), the result in the
    products' dtype; the gradient is the incoming one where kept, in the weight's dtype, in one pass too."""

    @staticmethod
    def forward(ctx, weight: Tensor, p: float, dtype: torch.dtype | None):
        bits, threshold = random_bits(weight), keep_threshold(p)
        out = torch.empty(weight.shape, dtype=dtype or weight.dtype)
        reduced = out.dtype != weight.dtype
        native.library(weight.dtype).drop_connect(weight.numel(), weight.data_ptr(), bits.data_ptr(), threshold,
                                                  None if reduced else out.data_ptr(), out.data_ptr() if reduced else None)
        ctx.save_for_backward(bits)
        ctx.threshold, ctx.weight_dtype = threshold, weight.dtype
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (bits,) = ctx.saved_tensors
        grad = grad.contiguous()
        out = torch.empty(grad.shape, dtype=ctx.weight_dtype)
        reduced = grad.dtype != ctx.weight_dtype
        native.library(ctx.weight_dtype).drop_connect_backward(
            bits.numel(), None if reduced else grad.data_ptr(), grad.data_ptr() if reduced else None, bits.data_ptr(),
            ctx.threshold, out.data_ptr())
        return out, None, None


def drop_connect(weight: Tensor, p: float, dtype: torch.dtype | None) -> Tensor:
    """weight * keep_mask(weight, p) (unscaled, as the paper's code) in `dtype` (None: the weight's): one C pass on a
    CPU, the same masks from the same random draws, else tensor ops."""
    if native.usable(weight) and weight.is_contiguous() and dtype in (None, torch.bfloat16):
        return _DropConnect.apply(weight, p, dtype)
    masked = weight * keep_mask(weight, p)
    return masked if dtype is None else masked.to(dtype)


class _ScaleSteps(torch.autograd.Function):
    """x * mask (x (T, B, D) in the state's dtype, mask (1, B, D) shared by the steps) written in bfloat16 in one C
    pass (onlstm_step.c's scale_steps); the gradient, grad * mask in x's dtype, in one pass too."""

    @staticmethod
    def forward(ctx, x: Tensor, mask: Tensor):
        x, mask = x.contiguous(), mask.contiguous()
        out = torch.empty(x.shape, dtype=torch.bfloat16)
        native.library(x.dtype).scale_steps(x.shape[0], mask.numel(), x.data_ptr(), None, mask.data_ptr(), None,
                                            out.data_ptr())
        ctx.save_for_backward(mask)
        ctx.x_dtype = x.dtype
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (mask,) = ctx.saved_tensors
        grad = grad.contiguous()  # bfloat16, as the result (autograd gives a gradient its tensor's dtype)
        out = torch.empty(grad.shape, dtype=ctx.x_dtype)
        native.library(ctx.x_dtype).scale_steps(grad.shape[0], mask.numel(), None, grad.data_ptr(), mask.data_ptr(),
                                                out.data_ptr(), None)
        return out, None


def scale_steps(x: Tensor, mask: Tensor, dtype: torch.dtype | None) -> Tensor:
    """x * mask (x (T, B, D), mask (1, B, D) shared over steps: locked dropout's) in `dtype` (None: x's): one C pass
    each way on a CPU into bfloat16 (the multiply and the conversion of the tensor ops, the same numbers), else tensor
    ops."""
    if dtype is None or dtype == x.dtype:
        return x * mask
    if dtype == torch.bfloat16 and native.usable(x) and mask.dtype == x.dtype and mask.shape == (1, *x.shape[1:]):
        return _ScaleSteps.apply(x, mask)
    return (x * mask).to(dtype)
