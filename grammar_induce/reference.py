"""A plain per-step ON-LSTM, written as the paper's code writes it, to check the fast path against.

Nothing in the tool runs on it: the tests compare `model.py` with it (values and gradients)
and `scripts/benchmark.py` times it as the baseline: the one-sentence-at-a-time parser, and
training as the paper's code trains (per-step layers through autograd).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .model import Distances, ONLSTMLanguageModel, cumax, embedding_dropout, locked_dropout


def reference_layer(
    x: Tensor, state: tuple[Tensor, Tensor], w_ih: Tensor, b_ih: Tensor, w_hh: Tensor, b_hh: Tensor, chunk_size: int,
    hh_scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """x (T, B, I) -> hs (T, B, H), c_last (B, H), forget and input distances (T, B).

    With `hh_scale`, the hidden map is `w_hh * hh_scale`, recomputed at every step as the
    paper's LinearDropConnect does in evaluation.
    """
    hidden_size = w_hh.shape[1]
    n = hidden_size // chunk_size
    h, c = state
    c = c.view(-1, n, chunk_size)
    t_input = F.linear(x, w_ih, b_ih)
    outputs, dist_f, dist_i = [], [], []
    for t in range(x.shape[0]):
        step_weight = w_hh if hh_scale is None else w_hh * hh_scale
        gates = t_input[t] + F.linear(h, step_weight, b_hh)
        l_in, l_forget = gates[:, : 2 * n].chunk(2, 1)
        o, cand, i, f = gates[:, 2 * n :].view(-1, 4 * n, chunk_size).chunk(4, 1)
        m_in = 1.0 - cumax(l_in)
        m_forget = cumax(l_forget)
        dist_f.append(1.0 - m_forget.sum(-1) / n)
        dist_i.append(m_in.sum(-1) / n)
        m_in, m_forget = m_in[:, :, None], m_forget[:, :, None]
        o, cand, i, f = torch.sigmoid(o), torch.tanh(cand), torch.sigmoid(i), torch.sigmoid(f)
        overlap = m_forget * m_in
        f = f * overlap + (m_forget - overlap)
        i = i * overlap + (m_in - overlap)
        c = f * c + i * cand
        h = (o * torch.tanh(c)).view(-1, hidden_size)
        outputs.append(h)
    return torch.stack(outputs), c.reshape(-1, hidden_size), torch.stack(dist_f), torch.stack(dist_i)


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
        x, _, dist_f, dist_i = reference_layer(
            x, (zeros, zeros), params[p + "ih.weight"], params[p + "ih.bias"], w_hh, params[p + "hh.bias"],
            cfg.chunk_size, hh_scale=scale,
        )
        forget.append(dist_f)
        inp.append(dist_i)
    return Distances(torch.stack(forget), torch.stack(inp))


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
        x = reference_layer(x, (zeros, zeros), params[p + "ih.weight"], params[p + "ih.bias"], w_hh,
                            params[p + "hh.bias"], cfg.chunk_size)[0]
        if k < cfg.n_layers - 1:
            x = locked_dropout(x, cfg.dropouth, True)
    logits = F.linear(locked_dropout(x, cfg.dropout, True), model.decoder.weight, model.decoder.bias)
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
    return loss + alpha * x.pow(2).mean() + beta * (x[1:] - x[:-1]).pow(2).mean()
