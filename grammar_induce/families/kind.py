"""The model contract (`ModelKind`): what the rest of the code may ask of a model, whatever its family. A model is a
torch module built from (vocabulary size, its family's ModelConfig); it reads a batch of sentences as rows of token
ids and yields, per sentence, a `Reading`. What its readings hold (a tree of its own, distances by name, labels,
heads) is its family's `Yields` (families/family.py), not the module's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from .. import trees
from ..config import ModelConfig
from .reading import Reading


class ModelKind(nn.Module):
    ADAPTS: ClassVar[frozenset[str]] = frozenset()  # model keys a trained model to start from may differ in (`adopt`)

    def adopt(self, state: dict[str, Tensor], theirs: dict[str, Any]) -> dict[str, Tensor]:
        """A trained model's weights (`train.init`; `theirs`: its model config) as this model's, where the two differ
        in ADAPTS keys only (as they stand: none differ)."""
        return state

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:
        """Refuse, as a ConfigError, sizes this kind cannot be built with (the config's own checks are the
        ones every kind shares)."""

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def parse_layers(self) -> int:
        """How many layers there are to read distances of (0: none; a kind that yields its own trees is read once)."""
        return 0

    def read(self, tokens: Tensor, words: Sequence[Sequence[str]], n_layers: int | None = None,
             products: torch.dtype | None = None) -> list[Reading]:
        """Each sentence's reading. `tokens`: (B, T) ids of `<eos> w1 ... wn <eos>` in the model's order (a
        backward model's reversed), padded with `<eos>`, the rows sorted by length (the longest last);
        `words`: each row's words in reading order. `n_layers`: only the lowest layers are needed;
        `products`: the dtype of the matrix products (None: float32). A family whose Yields has `confidence` takes
        `confidence=True` too: its tree's spans' probabilities (`Reading.confidence`); one with `marginals`,
        `marginals=True`: every span's (`Reading.marginals`); one `prunable`, `keep=` chart constraints per sentence
        and `kept_mass=True`: the share of its probability the kept spans carry (`Reading.kept_mass`)."""
        raise NotImplementedError(f"{type(self).__name__} yields nothing to parse with")

    def likely_spans(self, tokens: Tensor, words: Sequence[Sequence[str]], threshold: float,
                     products: torch.dtype | None = None) -> list[Tensor]:
        """Each sentence's spans this model finds likely, as chart constraints for another model's parse
        (inference/pruning.py): (n+1, n+1) booleans on the CPU, [i, j] for the span of words i..j-1 whose marginal is at
        least `threshold`, each span of its tree and the whole sentence; every span where it reads a sentence without
        marginals. Rows and words as `read` takes them; a family whose Yields has `marginals` answers (this: from its
        readings; a kind may answer faster)."""
        found = []
        for reading in self.read(tokens, words, None, products, marginals=True):
            n = len(reading.words)
            if reading.marginals is None:
                found.append(torch.ones(n + 1, n + 1, dtype=torch.bool))
                continue
            keep = reading.marginals >= threshold
            starts, ends = zip(*trees.spans(reading.parsed_tree, whole=True)) if n >= 2 else ((), ())
            keep[list(starts), list(ends)] = True  # its tree's spans, at once
            found.append(keep)
        return found


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
