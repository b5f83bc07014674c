"""The TN-PCFG's [model] sizes (the paper's: 250 nonterminals, 500 preterminals, rank 500, symbol dimension 256) and
its [train] optimiser's (the paper's: batches of 4 sentences, Adam at 1e-3, the gradient norm clipped at 3)."""

from __future__ import annotations

from dataclasses import dataclass

from ...config import ModelConfig, at_least
from ..sentences import SentenceTrainConfig


@dataclass(frozen=True)
class PCFGConfig(ModelConfig):
    nonterminals: int = 250
    preterminals: int = 500
    rank: int = 500  # of the binary rule tensor's decomposition
    symbol_dim: int = 256  # symbol embeddings and the rule MLPs

    def validate(self) -> None:
        super().validate()
        at_least(1, "model", self, "nonterminals", "preterminals", "rank", "symbol_dim")


@dataclass(frozen=True)
class PCFGTrainConfig(SentenceTrainConfig):
    """The whole-sentence recipe's keys (families/sentences.py) with the TN-PCFG paper's optimiser: not the AWD-LSTM's
    lr 30, at which a grammar diverges."""

    batch_size: int = 4
    lr: float = 1e-3
    clip: float = 3.0
