"""The ON-LSTM family's settings (and the AWD-LSTM baseline's): its [model] sizes and dropouts and its [train] keys
of the paper's recipe (families/onlstm/recipe.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...config import DIRECTIONS, ConfigError, ModelConfig, TrainConfig, at_least, probabilities


@dataclass(frozen=True)
class ONLSTMConfig(ModelConfig):
    emb_size: int = 400
    hidden_size: int = 1150
    chunk_size: int = 10
    n_layers: int = 3
    dropout: float = 0.45  # locked dropout on the last layer's output
    dropouth: float = 0.3  # locked dropout between layers
    dropouti: float = 0.5  # locked dropout on the embedding output
    dropoute: float = 0.1  # word-type dropout on the embedding matrix
    wdrop: float = 0.45  # DropConnect on hidden-to-hidden weights
    direction: str = "forward"  # forward | backward: read each sentence left to right or right to left

    def validate(self) -> None:
        super().validate()
        if self.direction not in DIRECTIONS:
            raise ConfigError(f"model.direction must be forward or backward, got {self.direction!r}")
        at_least(1, "model", self, "emb_size", "hidden_size", "chunk_size", "n_layers")
        probabilities("model", self, "dropout", "dropouth", "dropouti", "dropoute", "wdrop")

    @property
    def reading_order(self) -> str:
        return self.direction

    @property
    def layer_sizes(self) -> list[int]:
        """Input size of the first layer, then each layer's hidden size (emb -> H ... H -> emb)."""
        return [self.emb_size] + [self.hidden_size] * (self.n_layers - 1) + [self.emb_size]


@dataclass(frozen=True)
class AWDTrainConfig(TrainConfig):
    """The AWD-LSTM recipe's (Merity et al., the ON-LSTM paper's code): SGD at lr 30 on batches of 20 rows, the
    gradient norm clipped at 0.25, averaged SGD later."""

    batch_size: int = 20
    lr: float = 30.0
    clip: float = 0.25
    eval_batch_size: int = 10
    test_batch_size: int = 1
    bptt: int = 70
    weight_decay: float = 1.2e-6
    alpha: float = 2.0  # activation regularisation
    beta: float = 1.0  # temporal activation regularisation
    nonmono: int = 5  # averaged SGD once validation is worse than the best of more than this many epochs back
    RESUMABLE: ClassVar[frozenset[str]] = TrainConfig.RESUMABLE | {"weight_decay", "alpha", "beta", "nonmono"}

    def validate(self) -> None:
        super().validate()
        at_least(1, "train", self, "eval_batch_size", "test_batch_size", "bptt")
        at_least(0, "train", self, "weight_decay", "alpha", "beta", "nonmono")
