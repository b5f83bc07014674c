"""log p(T -> w) at a batch's words, for training: the emission's last layer, its softmax over the vocabulary and the
reading at the words in one autograd function.

At rank 128 the emission is nine tenths of a training step (issue 80): a (T, s) x (s, V) product forward, two
backward, and five passes over the (T, V) log-probabilities (log_softmax, the reading, a zeroed gradient, the
scatter back, log_softmax's backward). Here the bias is added in the product, the reading is an index_select, and the
backward writes the logits' gradient from the log-probabilities without a zeroed (T, V) gradient, exactly:
d/dlogit[T, w] = g(T, w) - softmax(T, w) * sum_w' g(T, w'), g being the gradient at the words (summed where a word
comes again). `dtype` is the products' (bfloat16 where the run's precision says so: the three (T, s) x (s, V)
products in bfloat16, accumulated in float32, their operands cast once; None: the inputs' own); the softmax and
everything else are in the inputs' dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor


def word_log_probs(hidden: Tensor, weight: Tensor, bias: Tensor, words: Tensor, dtype: torch.dtype | None = None
                   ) -> Tensor:
    """log softmax_w(hidden @ weight.T + bias)[T, words] as (B, n, T), for `hidden` (T, s), `weight` (V, s), `bias`
    (V,), `words` (B, n) ids."""
    return _WordLogProbs.apply(hidden, weight, bias, words, dtype)


def at_words(log_probs: Tensor, words: Tensor) -> Tensor:
    """`log_probs` (T, V) read at `words` (B, n) as (B, n, T) (index_select: a tenth of the time of `[:, words]`)."""
    return log_probs.index_select(1, words.reshape(-1)).view(len(log_probs), *words.shape).permute(1, 2, 0)


class _WordLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor, words: Tensor, dtype: torch.dtype | None) -> Tensor:
        low = dtype or hidden.dtype
        hidden_low, weight_low = hidden.to(low), weight.to(low)  # each cast once, kept for the backward's products
        logits = torch.addmm(bias.to(low), hidden_low, weight_low.t()).to(hidden.dtype)  # (T, V), the bias added in
        log_probs = torch.log_softmax(logits, -1)
        ctx.save_for_backward(hidden_low, weight_low, log_probs, words)
        return at_words(log_probs, words)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor, None, None]:
        hidden_low, weight_low, log_probs, words = ctx.saved_tensors
        by_word = grad.permute(2, 0, 1).reshape(len(log_probs), -1)  # (T, B n)
        grad_logits = log_probs.exp().mul_(-by_word.sum(1, keepdim=True))
        grad_logits.index_add_(1, words.reshape(-1), by_word)
        grad_low = grad_logits.to(weight_low.dtype)
        grad_hidden = (grad_low @ weight_low).to(log_probs.dtype)
        grad_weight = (grad_low.t() @ hidden_low).to(log_probs.dtype)
        return grad_hidden, grad_weight, grad_logits.sum(0), None, None
