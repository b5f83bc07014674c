"""A TN-PCFG's rule distributions, as its model builds them (model.py) and as drawing (sampling.py) and reading
its symbols (inspection.py) take them."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from ...structures.rank_cfg import Leaves

LEAF_BLOCK = 1024  # words whose leaves are made at a time


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
        if products not in self._leaves:  # a block of words at a time: no (V, T) table of probabilities beside it
            nt = self.head.shape[0]
            blocks = [Leaves.of(words, self.left[nt:], self.right[nt:], products)
                      for words in self.emission.t().split(LEAF_BLOCK)]
            self._leaves[products] = Leaves(torch.cat([b.scale for b in blocks]), torch.cat([b.values for b in blocks]))
        return self._leaves[products]
