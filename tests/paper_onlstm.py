"""The paper's code as it runs, on grammar_induce.families.onlstm.model.paper_layer: the baselines the benchmark
(scripts/bench/benchmark.py) times and the tests compare with (the one-sentence-at-a-time parser, and training as
the paper's code trains: per-step layers through autograd). Nothing in the tool runs on it, so it lives here,
beside the tests, not in the package.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from grammar_induce.families.onlstm.model import (
    Distances,
    ONLSTMLanguageModel,
    locked_dropout,
    paper_layer,
)


@torch.no_grad()
def reference_distances(model: ONLSTMLanguageModel, tokens: Tensor, scale_every_step: bool = True) -> Distances:
    """Evaluation-mode distances (L, T, B) of `model`, recomputed step by step from its weights.

    The DropConnect weight scaling is redone at every step as in the paper's code, or, with
    `scale_every_step=False`, once per call.
    """
    params = dict(model.named_parameters())
    cfg = model.config
    x = F.embedding(tokens, params["embedding.weight"])
    forget, inp = [], []
    for k, size in enumerate(cfg.layer_sizes[1:]):
        zeros = x.new_zeros(tokens.shape[1], size)
        p = f"layers.{k}."
        w_hh, scale = params[p + "hh.weight"], 1.0 - cfg.wdrop
        if not scale_every_step:
            w_hh, scale = w_hh * scale, None
        x, _, dist_f, dist_i = paper_layer(
            x, (zeros, zeros), params[p + "ih.weight"], params[p + "ih.bias"], w_hh, params[p + "hh.bias"],
            cfg.chunk_size, hh_scale=scale,
        )
        forget.append(dist_f)
        inp.append(dist_i)
    return Distances(torch.stack(forget), torch.stack(inp))


def embedding_dropout(embedding: torch.nn.Embedding, tokens: Tensor, p: float, training: bool) -> Tensor:
    """The paper's word-type dropout: the whole embedding matrix scaled by a mask drawn per row, then looked up."""
    weight = embedding.weight
    if training and p:
        weight = weight * (weight.new_empty(weight.shape[0], 1).bernoulli_(1.0 - p) / (1.0 - p))
    return F.embedding(tokens, weight)


def reference_training_loss(model: ONLSTMLanguageModel, tokens: Tensor, targets: Tensor, alpha: float,
                            beta: float) -> Tensor:
    """One batch's training loss computed as the paper's code computes it: per-step layers through
    autograd (the input projection indexed inside the time loop), a DropConnect mask per batch,
    the AWD-LSTM dropouts, cross entropy plus AR and TAR; zero initial states."""
    params = dict(model.named_parameters())
    cfg = model.config
    x = locked_dropout(embedding_dropout(model.embedding, tokens, cfg.dropoute, True), cfg.dropouti, True)
    for k, size in enumerate(cfg.layer_sizes[1:]):
        zeros = x.new_zeros(tokens.shape[1], size)
        p = f"layers.{k}."
        w_hh = params[p + "hh.weight"]
        w_hh = w_hh.masked_fill(torch.rand_like(w_hh) < cfg.wdrop, 0.0)
        x = paper_layer(x, (zeros, zeros), params[p + "ih.weight"], params[p + "ih.bias"], w_hh,
                            params[p + "hh.bias"], cfg.chunk_size)[0]
        if k < cfg.n_layers - 1:
            x = locked_dropout(x, cfg.dropouth, True)
    logits = F.linear(locked_dropout(x, cfg.dropout, True), model.decoder.weight, model.decoder.bias)
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
    return loss + alpha * x.pow(2).mean() + beta * (x[1:] - x[:-1]).pow(2).mean()
