"""The one interface every model kind has (`ModelKind`): what the rest of the code may ask of a model.

A kind is a torch module built from (vocabulary size, ModelConfig). It reads a batch of sentences as rows
of token ids and yields, per sentence, a reading (`Reading`): every layer's distances (`YIELDS =
"distances"`), or a tree of its own (`"trees"`); a plain language model yields neither (`"nothing"`).
Its name is stored in its checkpoint (config `model.kind`) and looked up in registry.KINDS on load.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import Tensor, nn

from ..files import SettingError
from ..runtime.precision import FULL_PARTS
from .reading import Reading, middle_layer


class ModelKind(nn.Module):
    NAME: ClassVar[str]  # stored in the checkpoint: config model.kind
    YIELDS: ClassVar[str]  # "distances" | "trees" | "nothing"
    DESCRIPTION: ClassVar[str]  # how messages name a model of this kind: "an ON-LSTM language model"
    SEARCH: ClassVar[str] = ""  # a kind that yields trees: how it finds them ("CKY"), for its evaluation row and notes
    BF16_PARTS: ClassVar[str] = ""  # what bf16 training runs in bfloat16, for the training log
    FP32_PARTS: ClassVar[str] = FULL_PARTS  # and what stays float32
    LABELS: ClassVar[bool] = False  # its readings carry induced labels of its tree's spans (Reading.labels)
    # a kind that yields trees: the longest line its own search parses exactly, and what it does with longer ones
    # (None: the CKY's, structs.EXACT_LIMIT, past which it splits greedily)
    LONGEST: ClassVar[tuple[int, str] | None] = None

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def parse_layers(self) -> int:
        """How many layers there are to parse with (a kind that yields its own trees has one)."""
        return 1 if self.YIELDS == "trees" else 0

    def parse_layer(self, asked: int | None) -> int:
        """The layer a parse reads: the one asked for (checked), else the middle one (the paper's 2 of 3); a
        kind that yields its own trees has one, whatever is asked (the command line notes that)."""
        if self.YIELDS == "trees":
            return 1
        n_layers = self.parse_layers
        layer = middle_layer(n_layers) if asked is None else asked
        if not 1 <= layer <= n_layers:
            raise SettingError("layer", f"{layer} is out of range: the model has layers 1 to {n_layers}")
        return layer

    def read(self, tokens: Tensor, words: Sequence[Sequence[str]], n_layers: int | None = None,
             products: torch.dtype | None = None) -> list[Reading]:
        """Each sentence's reading. `tokens`: (B, T) ids of `<eos> w1 ... wn <eos>` in the model's order (a
        backward model's reversed), padded with `<eos>`, the rows sorted by length (the longest last);
        `words`: each row's words in reading order. `n_layers`: only the lowest layers are needed;
        `products`: the dtype of the matrix products (None: float32)."""
        raise NotImplementedError(f"{self.DESCRIPTION} yields nothing to parse with")
