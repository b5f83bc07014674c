"""The TN-PCFG's [model] sizes (the paper's: 250 nonterminals, 500 preterminals, rank 500, symbol dimension 256)."""

from __future__ import annotations

from dataclasses import dataclass

from ...config import ModelConfig, at_least


@dataclass(frozen=True)
class PCFGConfig(ModelConfig):
    nonterminals: int = 250
    preterminals: int = 500
    rank: int = 500  # of the binary rule tensor's decomposition
    symbol_dim: int = 256  # symbol embeddings and the rule MLPs

    def validate(self) -> None:
        super().validate()
        at_least(1, "model", self, "nonterminals", "preterminals", "rank", "symbol_dim")
