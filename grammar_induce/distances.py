"""Sentences in, each model's distances out: batched runs of trained models over word lists.

A sentence is fed as `<eos> w1 ... wn <eos>` from a zero state in evaluation mode (a backward
model gets the words reversed), and the distances at the two `<eos>` positions are dropped, so
distance t belongs to word t in reading order.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .checkpoint import LoadedModel
from .data import EOS
from .ensemble import Parsed
from .files import InputError


def check_members(models: list[LoadedModel]) -> None:
    """Every model must have distances, and all must split and normalise words alike."""
    for loaded in models:
        if not loaded.model.has_distances:
            raise InputError(f"{loaded.source}: a {loaded.config.model.kind} language model has no distances "
                             "to parse with (train an ON-LSTM: model.kind = \"onlstm\")")
    first = models[0]
    for loaded in models[1:]:
        if loaded.tokenizer != first.tokenizer:
            raise InputError(f"{loaded.source}: tokenizer {loaded.tokenizer.to_dict()} differs from "
                             f"{first.source}'s {first.tokenizer.to_dict()}; ensemble members must share it")


@torch.no_grad()
def parse_words(loaded: LoadedModel, sentences: list[list[str]], batch_size: int = 64,
                progress: Callable[[int], object] | None = None, n_layers: int | None = None,
                products: torch.dtype | None = None) -> list[Parsed | None]:
    """Distances of every layer (or of layers 1 to `n_layers`) for each sentence (a list of words as written).

    Sentences are sorted by length and padded at the end: the model reads from the start, so
    padding never changes the distances of earlier positions. Empty sentences get None. `products`: the
    dtype of the matrix products (None: float32; see precision.py).
    """
    model, vocab, tokenizer = loaded.model, loaded.vocab, loaded.tokenizer
    direction = loaded.config.model.direction
    eos = vocab.index[EOS]
    order = sorted((k for k, s in enumerate(sentences) if s), key=lambda k: len(sentences[k]))
    results: list[Parsed | None] = [None] * len(sentences)
    for first in range(0, len(order), batch_size):
        batch = order[first : first + batch_size]
        longest = len(sentences[batch[-1]])
        rows = [[eos, *vocab.encode_user_words(tokenizer.normalize(w) for w in _model_order(sentences[k], direction))]
                for k in batch]
        tokens = torch.tensor([row + [eos] * (longest + 2 - len(row)) for row in rows]).t()  # (T, B)
        distances = model.distances(tokens.to(model.device), n_layers=n_layers, products=products)  # (L, T, B) each
        forget = distances.forget[:, 1 : longest + 1].permute(2, 0, 1).tolist()  # (B, L, T) as lists
        inp = distances.input[:, 1 : longest + 1].permute(2, 0, 1).tolist()
        for column, k in enumerate(batch):
            n = len(sentences[k])
            results[k] = Parsed(sentences[k], [_model_order(d[:n], direction) for d in forget[column]],
                                [_model_order(d[:n], direction) for d in inp[column]], direction)
        if progress is not None:
            progress(len(batch))
    return results


def _model_order(items: list, direction: str) -> list:
    """Reading order <-> the model's order (its own inverse)."""
    return items[::-1] if direction == "backward" else items
