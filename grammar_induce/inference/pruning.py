"""Chart constraints for a PCFG's parse (Roark, Hollingshead and Bodenstab 2012): a fast span parser (a distilled
student, which scores every span in microseconds) reads each sentence first, and the grammar's inside and outside
passes run over the spans it finds likely only: its CRF marginal at least `threshold`, every span of its best tree
(so a tree is always left), the whole sentence. The grammar's two products of rank r x 2r per span are most of a
parse; a span left out costs none of them (structures/rank_cfg.py). A pruned parse sums the trees made of kept spans
alone: its marginals are those of that restricted distribution, exactly. The pruner reads in bfloat16 where the
device computes it natively, whatever the grammar's precision: its marginals only choose the spans (on the NLTK
sample 4 of 3,914 trees changed, F1 the same to 0.01; its BiLSTM twice as fast, docs/performance.md)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import SettingError
from ..families.checkpoint import LoadedModel
from ..families.pretrained import shown
from ..runtime.precision import bf16_hardware

THRESHOLD = 1e-3  # the default: the NLTK sample's F1 unchanged (docs/performance.md, issue 80)


@dataclass(frozen=True)
class Pruning:
    """The pruner (a model whose family yields span marginals), the marginal a span needs to be kept, and whether each
    reading says what share of the grammar's probability its kept spans carry (`kept_mass`: one more inside pass, over
    the whole chart; `Reading.kept_mass`)."""

    pruner: LoadedModel
    threshold: float = THRESHOLD
    kept_mass: bool = False

    def __post_init__(self) -> None:
        if not self.pruner.family.yields.marginals:
            raise SettingError("prune", f"{shown(self.pruner.source)} ({self.pruner.family.description}) has no span "
                               "marginals to prune a chart with: give a distilled student (en, zh)")
        if not 0 <= self.threshold < 1:
            raise SettingError("prune_threshold", f"must be at least 0 and below 1, not {self.threshold!r}")

    def keep(self, words: Sequence[Sequence[str]], tokens: Tensor) -> list[Tensor]:
        """Each sentence's chart constraints, (n+1, n+1) booleans ([i, j]: the span of words i..j-1 may be used),
        from the pruner's reading of `words` (sorted by length, the longest last, as a batch is; `tokens`: their rows
        in the pruner's vocabulary, as the member path makes them). A sentence the pruner reads without marginals
        (past its exact search's length) keeps every span."""
        return self.pruner.model.likely_spans(tokens, words, self.threshold, self.products)

    @functools.cached_property
    def products(self) -> torch.dtype | None:
        """The pruner's dtype: bfloat16 where its device has native bfloat16 units, else float32 (None)."""
        return torch.bfloat16 if bf16_hardware(self.pruner.model.device) else None
