"""StructFormer (Shen, Tay, Zheng, Bahri, Metzler and Courville, "StructFormer: Joint Unsupervised Induction of
Dependency and Constituency Structure from Masked Language Modeling", ACL 2021): a masked language model whose
self-attention is constrained by a dependency structure that a small parser network predicts.

    parser:    h = tanh(LN(conv_9(h))) x parser_layers over the word embeddings (no positions)
               distance[t] = w . tanh(LN(conv_2(h)))[t]   (the gap after word t)
               height[t]   = w . tanh(LN(W h[t]))
    structure: the parent distribution p(h | t) of structure.py, from the calibrated distances and heights
    attention: each layer l and head k weighs two relations, "t's parent" and "t's child":
               mask_lk = a_lk,parent p(h|t) + a_lk,child p(t|h),  a_lk = softmax over the two
               attention(t, s) = sigmoid(q_t . k_s / sqrt(d)) * mask_lk(t, s)      (a sigmoid, not a softmax)
    encoder:   pre-norm Transformer layers (LeakyReLU, 4x feed-forward), a final LayerNorm, the output layer tied
               to the embedding; the loss is cross entropy at the masked words.

Sizes, initialisation and masking follow the paper's code (google-research/structformer, its README's command:
position embeddings on, 8 layers of 512 with 8 heads, 3 parser layers, convolutions of 9). Trees: the distances
give the constituency tree (the gap decoder, as the paper splits at its largest distance), the parent
distribution the dependency heads."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...runtime.draws import keep_threshold, random_bits
from ..family import Family, Yields
from ..kind import ModelKind
from ..reading import Reading
from . import structure
from .recipe import MaskedLMRecipe
from .settings import MaskedLMTrainConfig, StructFormerConfig

POSITIONS = 500  # the paper's position embedding table; a longer sentence trains no position past it
LONG_PARENTS = 64  # words: a longer batch reads its parent distribution in O(L^2) memory (structure.parents_long)


class Dropout(nn.Dropout):
    """nn.Dropout's maths (each value zeroed with probability p, the rest scaled by 1 / (1 - p)), its mask from 16
    random bits a value drawn in C (runtime/draws.py; p resolved to 1/65536): torch's bernoulli_ was 30% of a training
    step on a CPU."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        keep = random_bits(x) >= keep_threshold(self.p)
        return torch.where(keep, x * (1.0 / (1.0 - self.p)), x.new_zeros(()))


class Conv1d(nn.Module):
    """A convolution over the words that keeps their number (an even kernel looks one word ahead: kernel 2 sees
    word t and t + 1, the gap after t)."""

    def __init__(self, size: int, kernel: int):
        super().__init__()
        self.shift = kernel % 2 == 0
        self.conv = nn.Conv1d(size, size, kernel, padding=kernel // 2 if self.shift else (kernel - 1) // 2)

    def forward(self, x: Tensor) -> Tensor:  # (B, L, H)
        y = self.conv(x.transpose(1, 2)).transpose(1, 2)
        return y[:, 1:] if self.shift else y


class MaskedAttention(nn.Module):
    """Multi-head self-attention whose weights are sigmoid(q . k / sqrt(d)) times a mask (the dependency
    relations), not a softmax."""

    def __init__(self, size: int, heads: int, dropatt: float):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.out = (nn.Linear(size, size) for _ in range(4))
        self.drop = Dropout(dropatt)
        for linear in (self.q, self.k, self.v, self.out):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, x: Tensor, mask: Tensor, visible: Tensor) -> Tensor:
        """x (B, L, H); mask (B, heads, L, L); visible (B, 1, 1, L): 0 at words, -inf at padding."""
        batch, length, size = x.shape

        def split(t: Tensor) -> Tensor:
            return t.view(batch, length, self.heads, size // self.heads).transpose(1, 2)
        q, k, v = split(self.q(x) * (size // self.heads) ** -0.5), split(self.k(x)), split(self.v(x))
        weights = self.drop(torch.sigmoid(q @ k.transpose(-1, -2) + visible) * mask.to(q.dtype))
        return self.out((weights @ v).transpose(1, 2).reshape(batch, length, size))


class Layer(nn.Module):
    def __init__(self, size: int, heads: int, dropout: float, dropatt: float):
        super().__init__()
        self.attention = MaskedAttention(size, heads, dropatt)
        self.feed_forward = nn.Sequential(nn.LayerNorm(size), nn.Linear(size, 4 * size), nn.LeakyReLU(),
                                          Dropout(dropout), nn.Linear(4 * size, size))
        self.norm = nn.LayerNorm(size)
        self.drop1, self.drop2 = Dropout(dropout), Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor, visible: Tensor) -> Tensor:
        x = x + self.drop1(self.attention(self.norm(x), mask, visible))
        return x + self.drop2(self.feed_forward(x))


def products_context(device: torch.device, products: torch.dtype | None) -> contextlib.AbstractContextManager:
    """bfloat16 products: the linear layers, convolutions and attention under autocast (LayerNorm, softmax, the
    structure and the loss stay float32)."""
    if products is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=products)


class StructFormer(ModelKind):
    """`hidden_size`, `n_layers`, `heads`, `parser_layers`, `conv_size`, `dropout`, `dropatt` and
    `position_embedding` of the model config (the paper's: 512, 8, 8, 3, 9, 0.1, 0, true)."""


    def __init__(self, vocab_size: int, config: StructFormerConfig):
        super().__init__()
        self.config = config
        size = config.hidden_size
        self.pad, self.mask = vocab_size, vocab_size + 1  # two rows past the vocabulary: padding and the mask
        self.embedding = nn.Embedding(vocab_size + 2, size)
        self.positions = nn.Embedding(POSITIONS, size) if config.position_embedding else None
        self.layers = nn.ModuleList(Layer(size, config.heads, config.dropout, config.dropatt)
                                    for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(size)
        self.drop = Dropout(config.dropout)
        self.output = nn.Linear(size, vocab_size + 2)
        self.output.weight = self.embedding.weight
        self.parser = nn.ModuleList(nn.Sequential(Conv1d(size, config.conv_size),
                                                  nn.LayerNorm(size, elementwise_affine=False), nn.Tanh())
                                    for _ in range(config.parser_layers))
        self.distance_net = nn.Sequential(Conv1d(size, 2), nn.LayerNorm(size, elementwise_affine=False), nn.Tanh(),
                                          nn.Linear(size, 1))
        self.height_net = nn.Sequential(nn.Linear(size, size), nn.LayerNorm(size, elementwise_affine=False),
                                        nn.Tanh(), nn.Linear(size, 1))
        self.relation_logits = nn.Parameter(torch.randn(config.n_layers, config.heads, 2) * 0.1)  # parent, child
        self.log_scales = nn.Parameter(torch.zeros(2))  # the distance sigmoid's and the head softmax's
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        if self.positions is not None:
            nn.init.uniform_(self.positions.weight, -0.1, 0.1)
        nn.init.zeros_(self.output.bias)

    @property
    def parse_layers(self) -> int:
        return 1

    def distances_and_heights(self, ids: Tensor, words: Tensor, per_sentence: bool) -> tuple[Tensor, Tensor]:
        """The parser network: (B, L) distances (of the gap after each word, calibrated) and heights, in float32.
        `words`: (B, L) true at words, false at padding."""
        h = self.embedding(ids)
        for layer in self.parser:
            h = layer(h.masked_fill(~words[..., None], 0))
        last_gap = F.pad(words[:, 1:], (0, 1), value=False)
        height = self.height_net(h).squeeze(-1).float().masked_fill(~words, -structure.BIG)
        distance = self.distance_net(h).squeeze(-1).float().masked_fill(~last_gap, structure.BIG)
        return structure.calibrate(distance, height, words, per_sentence), height

    def attention_masks(self, parent: Tensor) -> Tensor:
        """(layers, B, heads, L, L): each layer's and head's mix of the parent and child relations."""
        relations = torch.stack([parent, parent.transpose(1, 2)], dim=1)  # (B, 2, L, L)
        return torch.einsum("lkr,brij->lbkij", self.relation_logits.softmax(-1), relations)

    def encode(self, ids: Tensor, products: torch.dtype | None = None) -> Tensor:
        """The top layer's states (B, L, H), normalised and dropped out as the output layer reads them, of (B, L) ids
        (padded with `self.pad`, masked words `self.mask`)."""
        words = ids != self.pad
        distance, height = self.distances_and_heights(ids, words, per_sentence=False)
        with torch.autocast(ids.device.type, enabled=False):  # the structure's sums in float32, not as products
            parent = structure.parents(distance, height, self.log_scales.exp())
        masks = self.attention_masks(parent)
        x = self.embedding(ids)
        if self.positions is not None:
            x = x + self.positions(torch.arange(ids.shape[1], device=ids.device).clamp(max=POSITIONS - 1))
        visible = torch.zeros(words.shape, device=ids.device).masked_fill(~words, float("-inf"))[:, None, None]
        for layer, mask in zip(self.layers, masks):
            x = layer(x, mask, visible)
        return self.drop(self.norm(x))

    def forward(self, ids: Tensor, products: torch.dtype | None = None) -> Tensor:
        """Logits (B, L, V + 2) at every position."""
        with products_context(ids.device, products):
            return self.output(self.encode(ids, products))

    def masked_loss(self, ids: Tensor, targets: Tensor, products: torch.dtype | None = None) -> tuple[Tensor, int]:
        """(the summed cross entropy at the masked words, how many): `targets` holds each masked word's id and
        `self.pad` elsewhere. The output layer runs at the masked words only (the same loss, a third of the
        work)."""
        chosen = targets != self.pad
        with products_context(ids.device, products):
            logits = self.output(self.encode(ids, products)[chosen])
        loss = F.cross_entropy(logits.float(), targets[chosen], reduction="sum")
        return loss, int(chosen.sum())

    @torch.no_grad()
    def read(self, tokens: Tensor, words: Sequence[Sequence[str]], n_layers: int | None = None,
             products: torch.dtype | None = None) -> list[Reading]:
        """Each sentence's distances (as a distance per word before it, the ON-LSTM's convention, so the same
        decoders read them) and dependency heads; the parser network alone, one sentence's calibration each."""
        lengths = [len(w) for w in words]
        ids = tokens[:, 1 : max(lengths) + 1].to(self.device).clone()
        positions = torch.arange(ids.shape[1], device=ids.device)
        real = positions[None, :] < torch.tensor(lengths, device=ids.device)[:, None]
        ids[~real] = self.pad
        with products_context(ids.device, products):
            distance, height = self.distances_and_heights(ids, real, per_sentence=True)
        scales = self.log_scales.exp()
        if ids.shape[1] > LONG_PARENTS:
            parent = structure.parents_long(distance, height, scales)
        else:
            parent = structure.parents(distance, height, scales)
        tree_heads = structure.tree_heads_of(parent, height, lengths)
        argmax_heads = structure.heads_of(parent, height, lengths)
        return [Reading(list(w), {"parser": [before_each_word(row[: n - 1])]}, heads=h, argmax_heads=a)
                for w, row, n, h, a in zip(words, distance.tolist(), lengths, tree_heads, argmax_heads)]


def before_each_word(gaps: list[float]) -> list[float]:
    """The distances of the gaps after words 1..n-1 as distances of words 2..n (the gap before each), and the
    first word's below them all, so that neither decoder splits before it."""
    return [min(gaps, default=0.0) - 1.0] + gaps


FAMILY = Family(
    "structformer", "a StructFormer masked language model", StructFormer, StructFormerConfig, MaskedLMTrainConfig,
    # its distances are its parser network's, one set, not a layer's, read with the gap decoder unless asked otherwise
    Yields(distances=("parser",), layered=False, heads=True, decoder="gap"), recipe=MaskedLMRecipe,
    bf16_parts="the linear layers, convolutions and attention products in bfloat16 (autocast)",
    fp32_parts="LayerNorms, the structure (distances, heights, parents), softmaxes, the loss and the weights in float32")
