"""log p(T -> w) at a batch's words, for training: the emission's last layer, its softmax over the vocabulary and the
reading at the words in one autograd function.

At rank 128 the emission is nine tenths of a training step (issue 80): a (T, s) x (s, V) product forward, two
backward, and five passes over the (T, V) log-probabilities (log_softmax, the reading, a zeroed gradient, the
scatter back, log_softmax's backward). Here the forward keeps the logits and their log normaliser only, and the
backward writes the logits' gradient in one pass, exactly: d/dlogit[T, w] = g(T, w) - softmax(T, w) * sum_w' g(T, w'),
g being the gradient at the words (summed where a word comes again). `dtype` is the products' (bfloat16 where the run's
precision says so: the three (T, s) x (s, V) products in bfloat16, accumulated in float32; everything else in
float32;
None: the inputs' own).
"""

from __future__ import annotations

import torch
from torch import Tensor


def word_log_probs(hidden: Tensor, weight: Tensor, bias: Tensor, words: Tensor, dtype: torch.dtype | None = None
                   ) -> Tensor:
    """log softmax_w(hidden @ weight.T + bias)[T, words] as (B, n, T), for `hidden` (T, s), `weight` (V, s), `bias`
    (V,), `words` (B, n) ids."""
    return _WordLogProbs.apply(hidden, weight, bias, words, dtype)


def _product(a: Tensor, b: Tensor, dtype: torch.dtype | None) -> Tensor:
    """a @ b, in `dtype` (None: a's) and returned in a's."""
    return a @ b if dtype is None else (a.to(dtype) @ b.to(dtype)).to(a.dtype)


class _WordLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor, words: Tensor, dtype: torch.dtype | None) -> Tensor:
        low = dtype or hidden.dtype  # the bias added in the product
        logits = torch.addmm(bias.to(low), hidden.to(low), weight.t().to(low)).to(hidden.dtype)  # (T, V)
        normaliser = torch.logsumexp(logits, -1)  # (T,)
        ctx.save_for_backward(hidden, weight, logits, normaliser, words)
        ctx.dtype = dtype
        return logits[:, words].permute(1, 2, 0) - normaliser  # (B, n, T)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor, None, None]:
        hidden, weight, logits, normaliser, words = ctx.saved_tensors
        at_words = grad.permute(2, 0, 1).reshape(len(hidden), -1)  # (T, B n)
        grad_logits = (logits - normaliser[:, None]).exp_().mul_(-at_words.sum(1, keepdim=True))
        grad_logits.index_add_(1, words.reshape(-1), at_words)
        grad_hidden = _product(grad_logits, weight, ctx.dtype)
        grad_weight = _product(grad_logits.t(), hidden, ctx.dtype)
        return grad_hidden, grad_weight, grad_logits.sum(0), None, None
