"""The distilled student's [model] sizes and [train] section, with distill's defaults (its options read them here)."""

from __future__ import annotations

from dataclasses import dataclass

from ...config import ConfigError, ModelConfig, TrainConfig, at_least, probabilities

KEEPS = ("agreement", "last")
EPOCHS_PER_ROUND = 2  # distill's run.epochs, each round


@dataclass(frozen=True)
class StudentConfig(ModelConfig):
    emb_size: int = 200
    hidden_size: int = 200  # per direction, and of the span MLP
    n_layers: int = 2  # of the BiLSTM
    dropout: float = 0.3

    def validate(self) -> None:
        super().validate()
        at_least(1, "model", self, "emb_size", "hidden_size", "n_layers")
        probabilities("model", self, "dropout")


@dataclass(frozen=True)
class StudentTrainConfig(TrainConfig):
    """Adam on batches of sentences, the gradient norm clipped at 5; `keep`: which epoch a round keeps (the one whose
    trees agree best with the targets on held-out text, or the last); `round`: the distillation round (its log's);
    `soft`: the weight of the soft-target loss (the teachers' span marginals) beside the hard one (their trees)."""

    batch_size: int = 32  # sentences per optimizer step
    lr: float = 2e-3
    clip: float = 5.0
    keep: str = "agreement"
    round: int = 1
    soft: float = 0.0

    def validate(self) -> None:
        super().validate()
        at_least(1, "train", self, "round")
        if not 0.0 <= self.soft <= 1.0:  # a weight: 1 is the marginals alone
            raise ConfigError(f"train.soft must be from 0 to 1, got {self.soft}")
        if self.keep not in KEEPS:
            raise ConfigError(f"train.keep must be one of {', '.join(KEEPS)}, got {self.keep!r}")
