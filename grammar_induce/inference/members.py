"""Sentences in, each model's distances out: batched runs of trained models over word lists.

A sentence is fed as `<eos> w1 ... wn <eos>` from a zero state in evaluation mode (a backward
model gets the words reversed), and the distances at the two `<eos>` positions are dropped, so
distance t belongs to word t in reading order.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..files import InputError
from ..models.checkpoint import LoadedModel
from ..text.tokenizer import EOS
from .ensemble import Parsed


def check_members(models: list[LoadedModel]) -> None:
    """Every model must have distances, and all must split and normalise words alike."""
    for loaded in models:
        if not loaded.model.has_distances and not is_student(loaded):
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
    model, direction = loaded.model, loaded.config.model.direction
    order = sorted((k for k, s in enumerate(sentences) if s), key=lambda k: len(sentences[k]))
    results: list[Parsed | None] = [None] * len(sentences)
    for first in range(0, len(order), batch_size):
        batch = order[first : first + batch_size]
        words = [sentences[k] for k in batch]
        tokens = token_rows(loaded, [_model_order(w, direction) for w in words])  # (B, T)
        if is_student(loaded):
            for k, tree in zip(batch, student_trees(model, tokens, words)):
                results[k] = Parsed(sentences[k], [], [], direction, tree)
        else:
            _add_distances(results, batch, words, model.distances(tokens.t().to(model.device), n_layers=n_layers,
                                                                  products=products), direction)
        if progress is not None:
            progress(len(batch))
    return results


STUDENT_CELLS = 1 << 24  # floats of a student's span scores at a time (64 MB): long lines go fewer at a time


def student_trees(model, tokens: torch.Tensor, words: list[list[str]]) -> list:
    """A student's CKY trees of a batch, in parts small enough that its (B, N+1, N+1) span scores
    fit in STUDENT_CELLS (the rows are sorted by length, the longest last)."""
    per_row = (len(words[-1]) + 1) ** 2
    step = max(1, STUDENT_CELLS // per_row)
    found = []
    for start in range(0, len(words), step):
        part = words[start : start + step]
        rows = tokens[start : start + step, : len(part[-1]) + 2]
        found += model.trees(rows.to(model.device), [len(w) for w in part], part)
    return found


def is_student(loaded: LoadedModel) -> bool:
    """A span parser distilled from other models (student.py): its trees come from CKY."""
    return getattr(loaded.model, "is_student", False)


def token_rows(loaded: LoadedModel, sentences: list[list[str]]) -> torch.Tensor:
    """(B, T) ids of `<eos> w1 ... wn <eos>` per sentence, padded with `<eos>` to the longest."""
    vocab, tokenizer = loaded.vocab, loaded.tokenizer
    eos = vocab.index[EOS]
    longest = max(len(s) for s in sentences)
    rows = [[eos, *vocab.encode_user_words(tokenizer.normalize(w) for w in s)] for s in sentences]
    return torch.tensor([row + [eos] * (longest + 2 - len(row)) for row in rows])


def _add_distances(results: list[Parsed | None], batch: list[int], words: list[list[str]], distances,
                   direction: str) -> None:
    longest = len(words[-1])
    forget = distances.forget[:, 1 : longest + 1].permute(2, 0, 1).tolist()  # (B, L, T) as lists
    inp = distances.input[:, 1 : longest + 1].permute(2, 0, 1).tolist()
    for column, (k, sentence) in enumerate(zip(batch, words)):
        n = len(sentence)
        results[k] = Parsed(sentence, [_model_order(d[:n], direction) for d in forget[column]],
                            [_model_order(d[:n], direction) for d in inp[column]], direction)


def _model_order(items: list, direction: str) -> list:
    """Reading order <-> the model's order (its own inverse)."""
    return items[::-1] if direction == "backward" else items
