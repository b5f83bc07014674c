"""StructFormer's [model] sizes and its masked-LM recipe's [train] keys (the paper's code's defaults)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...config import ConfigError, ModelConfig, TrainConfig, at_least, probabilities


@dataclass(frozen=True)
class StructFormerConfig(ModelConfig):
    hidden_size: int = 512
    n_layers: int = 8
    heads: int = 8  # attention heads a layer
    parser_layers: int = 3  # the parser network's convolutions
    conv_size: int = 9  # their width in words
    dropout: float = 0.1
    dropatt: float = 0.0  # dropout on the attention weights
    position_embedding: bool = True  # learnt positions (the paper's README command: --pos_emb)

    def validate(self) -> None:
        super().validate()
        at_least(1, "model", self, "hidden_size", "n_layers", "heads", "parser_layers", "conv_size")
        probabilities("model", self, "dropout", "dropatt")
        if self.hidden_size % self.heads:
            raise ConfigError(f"model.heads {self.heads} does not divide model.hidden_size {self.hidden_size}")


@dataclass(frozen=True)
class MaskedLMTrainConfig(TrainConfig):
    batch_size: int = 4096  # tokens a batch (sentences of neighbouring lengths)
    lr: float = 3e-4
    clip: float = 0.25  # the paper's code's default
    weight_decay: float = 1.2e-6  # Adam's L2
    max_length: int = 400  # the longest training sentence
    mask_rate: float = 0.3  # the share of words masked
    RESUMABLE: ClassVar[frozenset[str]] = TrainConfig.RESUMABLE | {"weight_decay"}

    def validate(self) -> None:
        super().validate()
        at_least(1, "train", self, "max_length")
        at_least(0, "train", self, "weight_decay")
        if not 0.0 < self.mask_rate < 1.0:
            raise ConfigError(f"train.mask_rate must be in (0, 1), got {self.mask_rate}")
