"""The language model's loss: mean cross entropy of the decoder's logits, as F.cross_entropy computes it.

`cross_entropy` takes logits made already. `decoder_cross_entropy` makes them too (float32 products: `F.linear`,
then `cross_entropy`), and under reduced-precision products runs them with the loss: at the paper's size the
logits are (1,400 x 10,000) a training batch, and converting them to float32, adding the bias, the log-softmax
and their gradient each pass over 56 MB. Here the bfloat16 logits are one product as before, then read a block
of rows at a time, each block's float32 work done while it is in the cache, the gradient too where one is wanted:
the mean's gradient, (softmax - one-hot) / rows, written over the block's logits in bfloat16, as the plain ops round
it (the backward scales the products it feeds, linear in it, by the incoming gradient where that is not 1). On a
CPU that is one C call, a row at a time (onlstm_step.c's cross_entropy_with_gradient; cross_entropy_rows without the
gradient).
The same loss and gradients as the plain ops (tests/test_precision.py holds them together).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from . import native
from .products import linear_operand, transposed_left_product

BLOCK_FLOATS = 1 << 18  # float32 log-probabilities of a block of rows (1 MB): a cache's worth


class _CrossEntropy(torch.autograd.Function):
    """Mean cross entropy whose backward turns the saved log-probabilities into the gradient in place.

    The same function as F.cross_entropy; its backward allocates and zero-fills a (N, V) buffer
    for the one-hot term and makes another for the softmax gradient, which on a CPU costs as
    much as the log-softmax itself at a 10k vocabulary.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor) -> Tensor:
        log_probs = torch.log_softmax(logits, dim=-1)
        ctx.save_for_backward(log_probs, targets)
        return -log_probs.gather(1, targets[:, None]).mean()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        log_probs, targets = ctx.saved_tensors
        return _softmax_minus_one_hot(log_probs, targets).mul_(grad / targets.shape[0]), None


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross entropy of logits (N, V) against targets (N,), as F.cross_entropy."""
    if torch.is_grad_enabled() and logits.requires_grad:
        return _CrossEntropy.apply(logits, targets)
    return F.cross_entropy(logits, targets)


def _softmax_minus_one_hot(log_probs: Tensor, targets: Tensor) -> Tensor:
    """softmax - one-hot of the targets: the summed cross entropy's gradient, made in `log_probs`' place."""
    grad_logits = log_probs.exp_()  # softmax, in place: nothing needs the log-probabilities after this
    return grad_logits.scatter_add_(1, targets[:, None], grad_logits.new_full((targets.shape[0], 1), -1.0))


class _DecoderCrossEntropy(torch.autograd.Function):
    """Mean cross entropy of `inputs @ weight.T + bias`, the product in a reduced dtype and the rest in float32,
    a block of rows at a time, the gradient made with the loss `with_gradient` (see the module's docstring)."""

    @staticmethod
    def forward(ctx, inputs: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, dtype: torch.dtype,
                with_gradient: bool) -> Tensor:
        reduced_inputs = inputs.to(dtype)
        weight_by_inputs = linear_operand(reduced_inputs, weight)  # (E, V) in `dtype`
        logits = reduced_inputs @ weight_by_inputs  # (N, V) in `dtype`, rounded once (`recurrence.linear`)
        targets = targets.contiguous()
        if with_gradient:  # the logits become the mean's gradient
            total, ctx.grad_bias = _loss_and_gradient(logits, bias, targets)
            ctx.save_for_backward(reduced_inputs, weight_by_inputs, logits)
            ctx.dtypes = inputs.dtype, weight.dtype
        else:
            total = _loss(logits, bias, targets)
        return -total / targets.shape[0]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        reduced_inputs, weight_by_inputs, grad_logits = ctx.saved_tensors
        grads = [(grad_logits @ weight_by_inputs.t()).to(ctx.dtypes[0]),
                 transposed_left_product(grad_logits, reduced_inputs, ctx.dtypes[1]), ctx.grad_bias]
        scale = grad.item()  # the products are linear in grad_logits: scaled after them (1 as a loss's backward starts)
        return *(grads if scale == 1 else [g.mul(scale) for g in grads]), None, None, None


def _loss(logits: Tensor, bias: Tensor, targets: Tensor) -> Tensor:
    """The summed log-probabilities of the targets under `logits + bias` (logits (N, V), reduced)."""
    kernels = _native_kernels(logits, bias)
    if kernels is not None:  # two passes over each row in C, the second in the cache
        picked = bias.new_empty(len(targets))
        kernels.cross_entropy_rows(*logits.shape, logits.data_ptr(), bias.data_ptr(), targets.data_ptr(),
                                   picked.data_ptr())
        return picked.sum()
    total = logits.new_zeros((), dtype=torch.float32)
    for rows, block_targets in _blocks(logits, targets):
        total += torch.log_softmax(rows.float() + bias, dim=-1).gather(1, block_targets[:, None]).sum()
    return total


def _loss_and_gradient(logits: Tensor, bias: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """_loss, and the gradient of its mean over rows with respect to the logits, written over them in their dtype
    ((softmax - one-hot) / rows), with its sum over rows (the bias's gradient)."""
    kernels = _native_kernels(logits, bias)
    scale = 1 / len(targets)
    if kernels is not None:
        parts = max(1, min(torch.get_num_threads(), len(targets)))
        picked, grad_bias = bias.new_empty(len(targets)), torch.empty_like(bias)
        scratch = bias.new_empty(parts, 2, logits.shape[1])
        kernels.cross_entropy_with_gradient(*logits.shape, parts, logits.data_ptr(), bias.data_ptr(),
                                            targets.data_ptr(), scale, picked.data_ptr(), scratch.data_ptr(),
                                            grad_bias.data_ptr())
        return picked.sum(), grad_bias
    total, grad_bias = logits.new_zeros((), dtype=torch.float32), torch.zeros_like(bias)
    for rows, block_targets in _blocks(logits, targets):
        log_probs = torch.log_softmax(rows.float() + bias, dim=-1)
        total += log_probs.gather(1, block_targets[:, None]).sum()
        block = _softmax_minus_one_hot(log_probs, block_targets).mul_(scale)
        grad_bias += block.sum(0)
        rows.copy_(block)
    return total, grad_bias


def _native_kernels(logits: Tensor, bias: Tensor):
    """onlstm_step.c's loss kernels where they run (bfloat16 logits, a float32 bias, on a CPU), else None."""
    usable = logits.dtype == torch.bfloat16 and bias.dtype == torch.float32 and native.usable(bias)
    return native.library(torch.float32) if usable and bias.is_contiguous() else None


def _blocks(logits: Tensor, targets: Tensor):
    size = max(1, BLOCK_FLOATS // logits.shape[1])
    return zip(logits.split(size), targets.split(size))


def decoder_cross_entropy(inputs: Tensor, weight: Tensor, bias: Tensor, targets: Tensor,
                          dtype: torch.dtype | None) -> Tensor:
    """Mean cross entropy of the decoder's logits `inputs @ weight.T + bias` ((N, E) inputs, (N,) targets), the
    product in `dtype` (None: float32, as `F.linear` then `cross_entropy`)."""
    if dtype is None:
        return cross_entropy(F.linear(inputs, weight, bias), targets)
    with_gradient = torch.is_grad_enabled() and any(x.requires_grad for x in (inputs, weight, bias))
    return _DecoderCrossEntropy.apply(inputs, weight, bias, targets, dtype, with_gradient)
