"""Sentences in, trees out: batched distances from a trained model, then the greedy split.

A sentence is fed as `<eos> w1 ... wn <eos>` from a zero state in evaluation mode, and the
distances at the two `<eos>` positions are dropped, so distance t belongs to word t.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from .checkpoint import LoadedModel
from .data import EOS
from .trees import Tree, tree_from_distances

DISTANCE_KINDS = ("forget", "input")


@dataclass(frozen=True)
class Parsed:
    words: list[str]
    forget: list[list[float]]  # per layer, per word
    input: list[list[float]]

    def tree(self, layer: int, kind: str = "forget") -> Tree:
        """The tree from one layer's distances; `layer` counts from 1."""
        return tree_from_distances(getattr(self, kind)[layer - 1], self.words)


def check_layer(layer: int, n_layers: int) -> None:
    from .data import InputError

    if not 1 <= layer <= n_layers:
        raise InputError(f"--layer {layer} is out of range: the model has layers 1 to {n_layers}")


def middle_layer(n_layers: int) -> int:
    """The paper parses with the middle layer: 2 of 3."""
    return (n_layers + 1) // 2


@torch.no_grad()
def parse_words(loaded: LoadedModel, sentences: list[list[str]], batch_size: int = 64,
                progress=None, n_layers: int | None = None) -> list[Parsed]:
    """Distances of every layer (or of layers 1 to `n_layers`) for each sentence (a list of words as written).

    Sentences are sorted by length and padded on the right: the model reads left to right,
    so padding never changes the distances of earlier positions. Empty sentences get None.
    """
    model, vocab, tokenizer = loaded.model, loaded.vocab, loaded.tokenizer
    device = model.embedding.weight.device
    eos = vocab.index[EOS]
    order = sorted((k for k, s in enumerate(sentences) if s), key=lambda k: len(sentences[k]))
    results: list[Parsed | None] = [None] * len(sentences)
    for first in range(0, len(order), batch_size):
        batch = order[first : first + batch_size]
        longest = len(sentences[batch[-1]])
        rows = [[eos, *vocab.encode(tokenizer.normalize(w) for w in sentences[k])] for k in batch]
        tokens = torch.tensor([row + [eos] * (longest + 2 - len(row)) for row in rows]).t()  # (T, B)
        distances = model.distances(tokens.to(device), n_layers=n_layers)  # (L, T, B) each
        forget = distances.forget[:, 1 : longest + 1].permute(2, 0, 1).tolist()  # (B, L, T) as lists
        inp = distances.input[:, 1 : longest + 1].permute(2, 0, 1).tolist()
        for column, k in enumerate(batch):
            n = len(sentences[k])
            results[k] = Parsed(sentences[k], [d[:n] for d in forget[column]], [d[:n] for d in inp[column]])
        if progress is not None:
            progress(len(batch))
    return results


def render(parsed: Parsed | None, fmt: str, layer: int, kind: str) -> str:
    """One sentence in an output format; an empty sentence is an empty line."""
    from . import trees

    if parsed is None:
        return ""
    tree = parsed.tree(layer, kind)
    if fmt == "brackets":
        return trees.to_brackets(tree)
    if fmt == "ptb":
        return trees.to_ptb(tree)
    if fmt == "json":
        return trees.to_json(tree)
    if fmt == "jsonl":
        record = {"tokens": parsed.words, "forget": parsed.forget, "input": parsed.input, "tree": tree}
        return json.dumps(record, ensure_ascii=False)
    return _ascii(tree)


def _ascii(tree: Tree) -> str:
    import nltk
    from nltk.tree import TreePrettyPrinter

    from .trees import to_ptb

    return TreePrettyPrinter(nltk.Tree.fromstring(to_ptb(tree))).text().rstrip("\n")
