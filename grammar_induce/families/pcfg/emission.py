"""log p(T -> w) at a batch's words, for training: the emission's last layer, its softmax over the vocabulary and the
reading at the words in one autograd function.

At rank 128 the emission is nine tenths of a training step (issue 80): a (T, s) x (s, V) product forward, two
backward, and five passes over the (T, V) log-probabilities (log_softmax, the reading, a zeroed gradient, the
scatter back, log_softmax's backward). Here the bias is added in the product, the reading is an index_select, and the
backward writes the logits' gradient from the log-probabilities without a zeroed (T, V) gradient, exactly:
d/dlogit[T, w] = g(T, w) - softmax(T, w) * sum_w' g(T, w'), g being the gradient at the words (summed where a word
comes again). `dtype` is the products' (bfloat16 where the run's precision says so: the three (T, s) x (s, V)
products in bfloat16, accumulated in float32, their operands cast once; None: the inputs' own); the softmax and
everything else are in the inputs' dtype. With bfloat16 products on a CPU, the passes over the logits are two C loops
(emission.c: one forward, one backward, which also writes the gradient in bfloat16 for the products and the bias's
sums): the same maths, the logits kept as the product gives them (bfloat16) instead of their log-probabilities.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor

from ...runtime import native

SOURCE = Path(__file__).with_name("emission.c")
LONG, INT, POINTER = ctypes.c_long, ctypes.c_int, ctypes.c_void_p


def word_log_probs(hidden: Tensor, weight: Tensor, bias: Tensor, words: Tensor, dtype: torch.dtype | None = None
                   ) -> Tensor:
    """log softmax_w(hidden @ weight.T + bias)[T, words] as (B, n, T), for `hidden` (T, s), `weight` (V, s), `bias`
    (V,), `words` (B, n) ids."""
    return _WordLogProbs.apply(hidden, weight, bias, words, dtype)


def at_words(log_probs: Tensor, words: Tensor) -> Tensor:
    """`log_probs` (T, V) read at `words` (B, n) as (B, n, T) (index_select: a tenth of the time of `[:, words]`)."""
    return log_probs.index_select(1, words.reshape(-1)).view(len(log_probs), *words.shape).permute(1, 2, 0)


@functools.cache
def library() -> ctypes.CDLL | None:
    return native.load_procedures(SOURCE, {"forward": [LONG] * 3 + [POINTER] * 5 + [INT],
                                           "backward": [LONG] * 3 + [POINTER] * 7 + [INT]}, threads=True)


def _in_c(logits: Tensor) -> ctypes.CDLL | None:
    """emission.c where it runs these logits (bfloat16 on a CPU, native code enabled and built), else None."""
    usable = logits.dtype == torch.bfloat16 and logits.device.type == "cpu" and native.enabled()
    return library() if usable else None


class _WordLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor, words: Tensor, dtype: torch.dtype | None) -> Tensor:
        low = dtype or hidden.dtype
        hidden_low, weight_low = hidden.to(low), weight.to(low)  # each cast once, kept for the backward's products
        logits = torch.addmm(bias.to(low), hidden_low, weight_low.t())  # (T, V), the bias added in
        ctx.c = _in_c(logits)
        if ctx.c is None:
            log_probs = torch.log_softmax(logits.to(hidden.dtype), -1)
            ctx.save_for_backward(hidden_low, weight_low, log_probs, words)
            return at_words(log_probs, words)
        flat = words.reshape(-1).contiguous()
        rows, vocab = logits.shape
        log_z, found = logits.new_empty(rows, dtype=torch.float32), logits.new_empty(rows, len(flat), dtype=torch.float32)
        threads = torch.get_num_threads()
        scratch = logits.new_empty(threads, vocab, dtype=torch.float32)
        ctx.c.forward(rows, vocab, len(flat), logits.data_ptr(), flat.data_ptr(), log_z.data_ptr(), found.data_ptr(),
                      scratch.data_ptr(), threads)
        ctx.save_for_backward(hidden_low, weight_low, logits, flat, log_z)
        return found.view(rows, *words.shape).permute(1, 2, 0).to(hidden.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor, None, None]:
        if ctx.c is not None:
            return _backward_in_c(ctx.c, grad, *ctx.saved_tensors)
        hidden_low, weight_low, log_probs, words = ctx.saved_tensors
        by_word = grad.permute(2, 0, 1).reshape(len(log_probs), -1)  # (T, B n)
        grad_logits = log_probs.exp().mul_(-by_word.sum(1, keepdim=True))
        grad_logits.index_add_(1, words.reshape(-1), by_word)
        grad_low = grad_logits.to(weight_low.dtype)
        grad_hidden = (grad_low @ weight_low).to(log_probs.dtype)
        grad_weight = (grad_low.t() @ hidden_low).to(log_probs.dtype)
        return grad_hidden, grad_weight, grad_logits.sum(0), None, None


def _backward_in_c(c: ctypes.CDLL, grad: Tensor, hidden_low: Tensor, weight_low: Tensor, logits: Tensor, words: Tensor,
                   log_z: Tensor) -> tuple[Tensor, Tensor, Tensor, None, None]:
    """The backward of the C forward: the logits' gradient written in bfloat16 by emission.c, then the products."""
    rows, vocab = logits.shape
    by_word = grad.permute(2, 0, 1).reshape(rows, -1).float().contiguous()  # (T, B n)
    threads = torch.get_num_threads()
    grad_low = torch.empty_like(logits)
    bias_parts, scratch = (logits.new_zeros(threads, vocab, dtype=torch.float32) for _ in range(2))
    c.backward(rows, vocab, len(words), logits.data_ptr(), words.data_ptr(), log_z.data_ptr(), by_word.data_ptr(),
               grad_low.data_ptr(), bias_parts.data_ptr(), scratch.data_ptr(), threads)
    grad_hidden = (grad_low @ weight_low).to(grad.dtype)
    grad_weight = (grad_low.t() @ hidden_low).to(grad.dtype)
    return grad_hidden, grad_weight, bias_parts.sum(0).to(grad.dtype), None, None
