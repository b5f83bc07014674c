"""A family is what the rest of the code knows of a model kind, as one frozen object (`Family`): its name (stored
in a checkpoint as config `model.kind`), its model class, the config sections it is read with, the recipe that
trains it (`train`'s, or `distill`'s), and what its readings yield (`Yields`). Each family's model module ends
with its `FAMILY`; families/registry.py holds them by name. "Does it do X?" is asked of the family, never of a
name compared."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..config import ModelConfig, TrainConfig
from ..runtime.precision import FULL_PARTS

if TYPE_CHECKING:
    from .kind import ModelKind
    from .recipe import Recipe


@dataclass(frozen=True)
class Yields:
    """What a family's readings give (families/reading.py) and how they are read unless a user asks otherwise."""

    own_trees: bool = False  # trees of its own (a PCFG, a student): no layers, no distances
    distances: tuple[str, ...] = ()  # the names of its distances (Reading.distances), the first read unless asked
    layered: bool = True  # its distances are a layer's each (an evaluation row a layer), or one set
    labels: bool = False  # induced labels of its tree's spans (Reading.labels)
    confidence: bool = False  # read(..., confidence=True) gives its tree's spans their probabilities
    # read(..., marginals=True) gives every span's probability, a chart (Reading.marginals): what a marginal-sum
    # ensemble adds and a student learns as soft targets
    marginals: bool = False
    prunable: bool = False  # read(..., keep=...) runs its search over chart constraints' spans alone (a PCFG's)
    heads: bool = False  # dependency heads (Reading.heads)
    decoder: str = "paper"  # the decoder its distances are read with unless one is asked for
    search: str = ""  # a family that yields trees: how it finds them ("CKY"), for its evaluation row and notes
    # a family that yields trees: the longest line its own search parses exactly, and what it does with longer ones
    # (None: the CKY's, cky.EXACT_LIMIT, past which it splits greedily)
    longest: tuple[int, str] | None = None


@dataclass(frozen=True)
class GrammarTools:
    """What a family whose models are grammars (`model.grammar()`: its rule distributions) offers beyond parsing."""

    samples: Callable[..., Iterator]  # (grammar, vocab words, generator, max_length): sentences drawn, each with `.ptb`
    symbols: Callable[..., list]  # (grammar, vocab words, top): its symbols with their top rules or words


@dataclass(frozen=True)
class Family:
    """One model kind, whole. `recipe`: what `train` fits it with (None: made otherwise); `distilled_by`: what
    `distill` fits it with (the student's). `bf16_parts`/`fp32_parts`: what bf16 runs in bfloat16 and what stays
    float32, for the logs. `lanes`: when parsing on a CPU reads two batches at a time, a thread each
    (runtime/threads.py): "always" (a small model whose reading is much Python), "pruned" (when its chart is pruned:
    the pruned parse is many small steps, where the whole chart's products keep both cores busy) or "never"."""

    name: str
    description: str  # how messages name a model of it: "an ON-LSTM language model"
    model: type[ModelKind]
    model_config: type[ModelConfig]
    train_config: type[TrainConfig]
    yields: Yields = field(default_factory=Yields)
    recipe: type[Recipe] | None = None
    distilled_by: type[Recipe] | None = None
    bf16_parts: str = ""
    fp32_parts: str = FULL_PARTS
    lanes: Literal["always", "pruned", "never"] = "never"
    grammar: GrammarTools | None = None  # a grammar's tools: `sample` draws from it, `grammar-induce grammar` reads it

    @property
    def is_distilled(self) -> bool:
        """Whether `distill` makes it (the student), not `train`."""
        return self.distilled_by is not None

    def build(self, vocab_size: int, config: ModelConfig) -> ModelKind:
        """A new model of this family (its sizes checked by the model class: a ConfigError)."""
        self.model.check_config(config)
        return self.model(vocab_size, config)
