"""A TN-PCFG's rule distributions, as its model builds them (model.py) and as drawing (sampling.py) and reading
its symbols (inspection.py) take them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ...structures.rank_cfg import Leaves

LEAF_BLOCK = 1024  # words whose leaves are made at a time
BUILDING = threading.Lock()  # the leaves are made by one thread


@dataclass
class Grammar:
    """The rule distributions, as probabilities (emission as log-probabilities, read per word)."""

    root: Tensor  # (NT,) p(S -> A)
    emission: Tensor  # (T, V) log p(T -> w)
    head: Tensor  # (NT, r) U
    left: Tensor  # (NT + T, r) V
    right: Tensor  # (NT + T, r) W
    _leaves: dict = field(default_factory=dict, repr=False, compare=False)  # by the products' dtype

    def word_leaves(self, products: torch.dtype | None = None) -> Leaves:
        """Every word's values as a left and a right child (V, 2r), made once a products' dtype for as long as the
        grammar is kept (a parse's: model.built_grammar), where a batch's words' would be a (B n, T) x (T, 2r)
        product a batch."""
        with BUILDING:  # by one thread while others wait (two lanes' first batches ask at once)
            if products not in self._leaves:  # a block of words at a time, written in place: no (V, T) table beside it
                self._leaves[products] = self._made_leaves(products)
            return self._leaves[products]

    def _made_leaves(self, products: torch.dtype | None) -> Leaves:
        nt, vocab = self.head.shape[0], self.emission.shape[1]
        found = None
        for start in range(0, vocab, LEAF_BLOCK):
            words = self.emission[:, start : start + LEAF_BLOCK].t()
            block = Leaves.of(words, self.left[nt:], self.right[nt:], products)
            if found is None:
                found = Leaves(block.scale.new_empty(vocab), block.values.new_empty(vocab, block.values.shape[1]))
            found.scale[start : start + LEAF_BLOCK] = block.scale
            found.values[start : start + LEAF_BLOCK] = block.values
        return found
