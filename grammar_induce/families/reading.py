"""What a model kind yields for one sentence (`Reading`): every layer's distances, or a tree of its own; and
how it is read (reading order vs a model's, the middle layer). torch-free: the decoders, the combiners and
the command line's choices read it without loading a model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import trees
from ..trees import Tree

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
class Reading:
    """One model's reading of one sentence, in reading order: its distances by name, per layer (an ON-LSTM's
    `forget` and `input` master gates, a StructFormer's `parser` ones), or its own tree (a kind that yields trees,
    as the distilled student does). A method given no name reads the first distances the model has."""

    words: list[str]
    distances: dict[str, list[list[float]]] = field(default_factory=dict)  # name -> per layer, per word
    direction: str = "forward"
    parsed_tree: Tree | None = None  # the model's own tree: it has no distances
    labels: dict[tuple[int, int], str] | None = None  # the own tree's spans' induced labels (a PCFG's `NT-k`)
    heads: list[int] | None = None  # dependency heads, per word: 1-based, 0 for the root (a StructFormer's): a tree
    argmax_heads: list[int] | None = None  # each word's most probable head alone, as the paper's UAS reads them
    decoder: str = "paper"  # what its distances are read with unless a decoder is asked for (its family's Yields.decoder)
    # the own tree's spans' probabilities under the model (a PCFG's span marginal, a student's CRF marginal), asked for
    confidence: dict[tuple[int, int], float] | None = None
    # every span's probability under the model, asked for: (n+1, n+1), [i, j] the span of words i..j-1 (j - i >= 2;
    # a tensor, float32 on the CPU: the one field a torch-free reader never touches)
    marginals: Tensor | None = None
    # with chart constraints, asked for: the share of the grammar's probability of the sentence (over all its trees)
    # that the trees of kept spans carry (1.0: the pruning lost none of it)
    kept_mass: float | None = None

    @property
    def n_layers(self) -> int:
        return len(next(iter(self.distances.values()), [])) or 1  # a tree of its own is one layer, for the choice

    @property
    def has_gaps(self) -> bool:
        """Whether there are gap scores between words to average (distances give them; a tree does not)."""
        return self.parsed_tree is None

    def to_dict(self) -> dict[str, list[list[float]]]:
        """What an output record shows of the reading beside its tree: every layer's distances of each name it
        has; nothing for a tree of its own (an empty list would read as a sentence of no words)."""
        if self.parsed_tree is not None:
            return {}
        return {name: rows for name, rows in self.distances.items() if rows}

    def layer_distances(self, layer: int, name: str | None = None) -> list[float]:
        """One layer's distances of `name` (None: the first the model has); `layer` counts from 1."""
        return self.distances[name or next(iter(self.distances))][layer - 1]

    def gaps(self, layer: int, name: str | None = None) -> list[float]:
        """The scores of the gaps between words (none for a tree of its own)."""
        if self.parsed_tree is not None:
            return []
        return trees.gap_scores(self.layer_distances(layer, name), self.direction)

    def tree(self, layer: int, name: str | None = None, decoder: str | None = None) -> Tree:
        """The tree of one layer's distances by `decoder` (None: the reading's own); or the model's own tree."""
        if self.parsed_tree is not None:
            return self.parsed_tree
        return trees.decode(self.layer_distances(layer, name), self.words, self.direction, decoder or self.decoder)


def model_order(items: list, direction: str) -> list:
    """Reading order <-> a model's order (its own inverse): a backward model reads right to left."""
    return items[::-1] if direction == "backward" else items


def middle_layer(n_layers: int) -> int:
    """The paper parses with the middle layer: 2 of 3."""
    return (n_layers + 1) // 2
