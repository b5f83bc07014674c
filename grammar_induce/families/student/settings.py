"""The distilled student's [model] sizes (distill sets them from its options)."""

from __future__ import annotations

from dataclasses import dataclass

from ...config import ModelConfig, at_least, probabilities


@dataclass(frozen=True)
class StudentConfig(ModelConfig):
    emb_size: int = 400
    hidden_size: int = 1150  # per direction, and of the span MLP
    n_layers: int = 3  # of the BiLSTM
    dropout: float = 0.45

    def validate(self) -> None:
        super().validate()
        at_least(1, "model", self, "emb_size", "hidden_size", "n_layers")
        probabilities("model", self, "dropout")
