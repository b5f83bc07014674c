"""What a model kind yields for one sentence (`Reading`): every layer's distances, or a tree of its own; and
how it is read (reading order vs a model's, the middle layer). torch-free: the decoders, the combiners and
the command line's choices read it without loading a model."""

from __future__ import annotations

from dataclasses import dataclass

from .. import trees
from ..trees import Tree

DISTANCES = ("forget", "input")  # the kinds of distances a language model's reading has, per layer


@dataclass(frozen=True)
class Reading:
    """One model's reading of one sentence, in reading order: per-layer distances (a language model with
    master gates), or its own tree (a kind that yields trees, as the distilled student does)."""

    words: list[str]
    forget: list[list[float]]  # per layer, per word
    input: list[list[float]]
    direction: str = "forward"
    parsed_tree: Tree | None = None  # the model's own tree: it has no distances
    labels: dict[tuple[int, int], str] | None = None  # the own tree's spans' induced labels (a PCFG's `NT-k`)
    heads: list[int] | None = None  # dependency heads, per word: 1-based, 0 for the root (a StructFormer's): a tree
    argmax_heads: list[int] | None = None  # each word's most probable head alone, as the paper's UAS reads them
    decoder: str = "paper"  # the decoder its distances are read with unless one is asked for (its kind's DECODER)
    # the own tree's spans' probabilities under the model (a PCFG's span marginal, a student's CRF marginal), asked for
    confidence: dict[tuple[int, int], float] | None = None

    @property
    def n_layers(self) -> int:
        return len(self.forget) or 1  # a tree of its own is one layer, for the layer choice

    @property
    def has_gaps(self) -> bool:
        """Whether there are gap scores between words to average (distances give them; a tree does not)."""
        return self.parsed_tree is None

    def to_dict(self) -> dict[str, list[list[float]]]:
        """What an output record shows of the reading beside its tree: every layer's distances of each kind it
        has; nothing for a tree of its own (an empty list would read as a sentence of no words)."""
        if self.parsed_tree is not None:
            return {}
        return {kind: getattr(self, kind) for kind in DISTANCES if getattr(self, kind)}

    def distances(self, layer: int, kind: str = "forget") -> list[float]:
        """One layer's distances; `layer` counts from 1."""
        return getattr(self, kind)[layer - 1]

    def gaps(self, layer: int, kind: str = "forget") -> list[float]:
        """The scores of the gaps between words (none for a tree of its own)."""
        if self.parsed_tree is not None:
            return []
        return trees.gap_scores(self.distances(layer, kind), self.direction)

    def tree(self, layer: int, kind: str = "forget", decoder: str | None = None) -> Tree:
        """The tree of one layer's distances by `decoder` (None: the reading's own); or the model's own tree."""
        if self.parsed_tree is not None:
            return self.parsed_tree
        return trees.decode(self.distances(layer, kind), self.words, self.direction, decoder or self.decoder)


def model_order(items: list, direction: str) -> list:
    """Reading order <-> a model's order (its own inverse): a backward model reads right to left."""
    return items[::-1] if direction == "backward" else items


def middle_layer(n_layers: int) -> int:
    """The paper parses with the middle layer: 2 of 3."""
    return (n_layers + 1) // 2
