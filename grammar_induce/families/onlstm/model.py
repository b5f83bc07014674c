"""The ON-LSTM language model of Shen et al., "Ordered Neurons" (ICLR 2019): embedding, layers,
the AWD-LSTM dropouts, a decoder tied to the embedding.

The maths follows the paper's reference code (yikangshen/Ordered-Neurons, ON_LSTM.py and
model.py) equation for equation. `paper_layer` is the cell as the paper writes it, one step at
a time; ONLSTMLayer computes the same function with the fast engine in recurrence.py (the tests
hold the two together, values and gradients).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...config import ConfigError
from ..family import Family, Yields
from ..kind import ModelKind
from ..reading import Reading, model_order
from .decoder import decoder_cross_entropy
from .recipe import AWDRecipe
from .recurrence import State, drop_connect, keep_mask, linear, recurrence, recurrence_with_input_map, scale_steps
from .settings import AWDTrainConfig, ONLSTMConfig


class Distances(NamedTuple):
    forget: Tensor  # (L, T, B): 1 - mean(master forget), the expected split level / n
    input: Tensor  # (L, T, B): mean(master input)


class LMOutput(NamedTuple):
    logits: Tensor | None  # (T, B, V); None when the model was given targets
    hidden: State
    distances: Distances | None  # None for a model without master gates
    top_output: Tensor  # (T, B, E): last layer's output before output dropout (for AR/TAR)
    ce: Tensor | None = None  # the mean cross entropy against the targets, when given


def cumax(x: Tensor) -> Tensor:
    """cumax(x) = cumsum(softmax(x)) over the last dimension (paper eq. 6)."""
    return torch.cumsum(torch.softmax(x, dim=-1), dim=-1)


def paper_layer(
    x: Tensor, state: tuple[Tensor, Tensor], w_ih: Tensor, b_ih: Tensor, w_hh: Tensor, b_hh: Tensor, chunk_size: int,
    hh_scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The ON-LSTM cell as the paper writes it (eqs. 6-14), one step at a time through autograd:
    x (T, B, I) -> hs (T, B, H), c_last (B, H), forget and input distances (T, B).

    ONLSTMLayer runs the same function fast (recurrence.py); the tests hold the two together.

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


class ONLSTMLayer(nn.Module):
    """One ON-LSTM layer: input map I -> 4H+2n, hidden map H -> 4H+2n, DropConnect on the latter."""

    def __init__(self, input_size: int, hidden_size: int, chunk_size: int, wdrop: float = 0.0):
        super().__init__()
        self.hidden_size = hidden_size
        self.n_levels = hidden_size // chunk_size
        gate_size = 4 * hidden_size + 2 * self.n_levels
        self.ih = nn.Linear(input_size, gate_size)
        self.hh = nn.Linear(hidden_size, gate_size)
        self.wdrop = wdrop

    def recurrent_weight(self, dtype: torch.dtype | None = None) -> Tensor:
        """DropConnect as the paper's code: one mask per batch, unscaled; weight * (1-p) in evaluation. In `dtype`
        (None: the weight's)."""
        weight = self.hh.weight
        if self.wdrop and self.training:
            return drop_connect(weight, self.wdrop, dtype)
        if self.wdrop:
            weight = weight * (1.0 - self.wdrop)
        return weight if dtype is None else weight.to(dtype)

    def input_dtype(self, products: torch.dtype | None) -> torch.dtype | None:
        """The dtype this layer reads its input in, given that of its products (None: float32): in training, theirs."""
        return products if self.training else None

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor], products: torch.dtype | None = None):
        """`products`: the dtype of the matrix products (None: float32, as the paper; see runtime/precision.py)."""
        h0, c0 = state
        bias = self.ih.bias + self.hh.bias
        dtype = products
        if dtype is None:  # full precision, as the paper
            xproj = F.linear(x, self.ih.weight, bias)  # (T, B, G)
            return recurrence(xproj, h0, c0, self.recurrent_weight(), self.n_levels)
        # Products in `dtype`, everything else in float32. Training rounds every product, and the input map goes to
        # the recurrence as it is, in `dtype`: its steps add the biases in float32. In evaluation (validation,
        # parsing) the master gates' logits (the first 2n rows of the input map, 5% of its work) stay float32:
        # their rounding decides near-ties between splits, so it changes trees.
        if self.training:
            return recurrence_with_input_map(x.to(dtype), self.ih.weight, h0, c0, self.recurrent_weight(dtype),
                                             self.n_levels, bias)  # the weight converted as it is laid out
        xproj = linear(x, self.ih.weight, bias, dtype, 2 * self.n_levels)
        return recurrence(xproj, h0, c0, self.recurrent_weight(dtype), self.n_levels)


def locked_dropout(x: Tensor, p: float, training: bool, dtype: torch.dtype | None = None) -> Tensor:
    """Variational dropout: one mask per sequence, shared over time. x: (T, B, D). Where a mask is applied, the
    result is in `dtype` (None: x's): that of the products reading it, the mask and the conversion one pass."""
    if not training or not p:
        return x
    mask = x.new_empty(1, x.shape[1], x.shape[2]).bernoulli_(1.0 - p) / (1.0 - p)
    return scale_steps(x, mask, dtype)


def embedding_dropout(embedding: nn.Embedding, tokens: Tensor, p: float, training: bool) -> Tensor:
    """Word-type dropout: drop whole rows of the embedding matrix (Gal & Ghahramani, 2016). The paper's code scales
    the whole matrix by a mask drawn per row and looks the tokens up in it; here the rows looked up are scaled by
    their mask (the same draws, the same numbers), which spares two passes over the matrix a batch (10,000 x 400 at
    the paper's size, for 1,400 tokens)."""
    weight = embedding.weight
    if not (training and p):
        return F.embedding(tokens, weight)
    mask = weight.new_empty(weight.shape[0], 1).bernoulli_(1.0 - p) / (1.0 - p)
    return F.embedding(tokens, weight) * F.embedding(tokens, mask)


class LSTMLayer(nn.Module):
    """One layer of the AWD-LSTM baseline: torch's LSTM with DropConnect on its hidden-to-hidden weight,
    scaled as AWD-LSTM's WeightDrop (mask / (1 - p) in training, the plain weight in evaluation)."""

    def __init__(self, input_size: int, hidden_size: int, wdrop: float = 0.0):
        super().__init__()
        self.hidden_size = hidden_size
        self.lstm = nn.LSTM(input_size, hidden_size)
        self.wdrop = wdrop

    def input_dtype(self, products: torch.dtype | None) -> None:
        """None: torch's LSTM reads float32 whatever its products' dtype."""

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor], products: torch.dtype | None = None):
        """torch's LSTM runs in float32 whatever `products` says (in bfloat16 it would keep its cell in bfloat16)."""
        h0, c0 = state
        weights = {}
        if self.training and self.wdrop:
            weight = self.lstm.weight_hh_l0
            weights["weight_hh_l0"] = weight * keep_mask(weight, self.wdrop) / (1.0 - self.wdrop)
        hs, (_, c) = torch.func.functional_call(self.lstm, weights, (x, (h0[None], c0[None])))
        return hs, c[0], None, None


class LanguageModel(ModelKind):
    """Embedding -> stack of recurrent layers (emb -> H -> ... -> H -> emb) -> decoder tied to the embedding,
    with the AWD-LSTM dropouts. Layers map (x (T, B, I), (h0, c0)) to (hs (T, B, H), c_last, forget and
    input distances (T, B) or None)."""

    ORDERED = False  # whether its layers order their neurons (master gates): they give distances

    def __init__(self, vocab_size: int, config: ONLSTMConfig, make_layer: Callable[[int, int], nn.Module]):
        super().__init__()
        self.config = config
        sizes = config.layer_sizes
        self.embedding = nn.Embedding(vocab_size, config.emb_size)  # made first: the seed gives the same weights
        self.layers = nn.ModuleList(make_layer(sizes[k], sizes[k + 1]) for k in range(config.n_layers))
        self.decoder = nn.Linear(config.emb_size, vocab_size)
        self.decoder.weight = self.embedding.weight
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def init_hidden(self, batch_size: int) -> State:
        weight = self.embedding.weight
        return [
            (weight.new_zeros(batch_size, layer.hidden_size), weight.new_zeros(batch_size, layer.hidden_size))
            for layer in self.layers
        ]

    def run_stack(self, tokens: Tensor, hidden: State | None = None, n_layers: int | None = None,
                  products: torch.dtype | None = None) -> tuple[Tensor, State, Distances | None]:
        """tokens (T, B) -> last layer output (T, B, E), new state, distances (L, T, B) if the layers give them.

        With `n_layers`, only the lowest layers run (their outputs and distances do not depend
        on the layers above). `products`: the dtype of the matrix products (None: float32; runtime/precision.py).
        """
        cfg = self.config
        hidden = hidden if hidden is not None else self.init_hidden(tokens.shape[1])
        x = embedding_dropout(self.embedding, tokens, cfg.dropoute, self.training)  # (T, B, E)
        x = locked_dropout(x, cfg.dropouti, self.training, self.layers[0].input_dtype(products))
        new_hidden, forget, inp = [], [], []
        for k, layer in enumerate(self.layers[:n_layers]):
            hs, c_last, dist_f, dist_i = layer(x, hidden[k], products)  # (T, B, H_k)
            new_hidden.append((hs[-1], c_last))
            forget.append(dist_f)
            inp.append(dist_i)
            above = self.layers[k + 1] if k < len(self.layers) - 1 else None
            x = hs if above is None else locked_dropout(hs, cfg.dropouth, self.training, above.input_dtype(products))
        distances = Distances(torch.stack(forget), torch.stack(inp)) if self.ORDERED else None
        return x, new_hidden, distances

    def forward(self, tokens: Tensor, hidden: State | None = None, products: torch.dtype | None = None,
                targets: Tensor | None = None) -> LMOutput:
        """The next-token logits of (T, B) `tokens`; with (T, B) `targets`, their mean cross entropy instead (the
        decoder and the loss then run together: decoder.py)."""
        top, new_hidden, distances = self.run_stack(tokens, hidden, products=products)
        top_dropped = locked_dropout(top, self.config.dropout, self.training, products)  # the decoder's products
        if targets is not None:
            ce = decoder_cross_entropy(top_dropped.reshape(-1, top.shape[-1]), self.decoder.weight, self.decoder.bias,
                                       targets.reshape(-1), products)
            return LMOutput(None, new_hidden, distances, top, ce)
        logits = linear(top_dropped, self.decoder.weight, self.decoder.bias, products)  # (T, B, V)
        return LMOutput(logits, new_hidden, distances, top)


class ONLSTMLanguageModel(LanguageModel):
    ORDERED = True

    def __init__(self, vocab_size: int, config: ONLSTMConfig):
        super().__init__(vocab_size, config,
                         lambda input_size, size: ONLSTMLayer(input_size, size, config.chunk_size, config.wdrop))

    @classmethod
    def check_config(cls, config: ONLSTMConfig) -> None:
        """Master gates work on chunks of neurons: chunk_size divides every layer's size."""
        for name in ("emb_size", "hidden_size"):
            if getattr(config, name) % config.chunk_size:
                raise ConfigError(f"model.chunk_size {config.chunk_size} does not divide model.{name} "
                                  f"{getattr(config, name)}")

    def distances(self, tokens: Tensor, hidden: State | None = None, n_layers: int | None = None,
                  products: torch.dtype | None = None) -> Distances:
        """Per-token distances (of the lowest `n_layers` layers, default all) without the decoder, for parsing."""
        return self.run_stack(tokens, hidden, n_layers, products)[2]

    @property
    def parse_layers(self) -> int:
        return self.config.n_layers

    def read(self, tokens: Tensor, words: Sequence[Sequence[str]], n_layers: int | None = None,
             products: torch.dtype | None = None) -> list[Reading]:
        """Each sentence's distances of every layer (up to `n_layers`), in reading order: those of the
        `<eos>` on either side dropped, so distance t belongs to word t."""
        distances = self.distances(tokens.t().to(self.device), n_layers=n_layers, products=products)
        longest, direction = len(words[-1]), self.config.direction
        forget = distances.forget[:, 1 : longest + 1].permute(2, 0, 1).tolist()  # (B, L, T) as lists
        inp = distances.input[:, 1 : longest + 1].permute(2, 0, 1).tolist()
        return [Reading(list(w), {"forget": [model_order(d[: len(w)], direction) for d in f],
                                  "input": [model_order(d[: len(w)], direction) for d in i]}, direction)
                for w, f, i in zip(words, forget, inp)]


class LSTMLanguageModel(LanguageModel):
    """The AWD-LSTM baseline (Merity et al., ICLR 2018) with the same embedding, dropouts and decoder."""

    def __init__(self, vocab_size: int, config: ONLSTMConfig):
        super().__init__(vocab_size, config, lambda input_size, size: LSTMLayer(input_size, size, config.wdrop))


FAMILY = Family("onlstm", "an ON-LSTM language model", ONLSTMLanguageModel, ONLSTMConfig, AWDTrainConfig,
                Yields(distances=("forget", "input")), recipe=AWDRecipe,  # the master forget and input gates
                bf16_parts="matrix products (input maps, hidden maps, decoder) in bfloat16, in evaluation the input "
                           "maps' master-gate rows in float32")
LSTM_FAMILY = Family("lstm", "an lstm language model", LSTMLanguageModel, ONLSTMConfig, AWDTrainConfig,
                     recipe=AWDRecipe, bf16_parts="the decoder's products in bfloat16, torch's LSTM layers in float32")
