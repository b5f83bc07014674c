"""A TN-PCFG's rule distributions, as its model builds them (model.py) and as drawing (sampling.py) and reading
its symbols (inspection.py) take them."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class Grammar:
    """The rule distributions, as probabilities (emission as log-probabilities, read per word)."""

    root: Tensor  # (NT,) p(S -> A)
    emission: Tensor  # (T, V) log p(T -> w)
    head: Tensor  # (NT, r) U
    left: Tensor  # (NT + T, r) V
    right: Tensor  # (NT + T, r) W
