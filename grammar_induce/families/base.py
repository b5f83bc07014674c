"""The one interface every model kind has (`ModelKind`): what the rest of the code may ask of a model; and what
a family that trains itself gives `train` (`Trainer`: its recipe, run by the one loop, families/training.py).

A kind is a torch module built from (vocabulary size, ModelConfig). It reads a batch of sentences as rows
of token ids and yields, per sentence, a reading (`Reading`): every layer's distances of the kinds it has
(`DISTANCES`), or a tree of its own (`OWN_TREES`); a plain language model yields neither.
Its name is stored in its checkpoint (config `model.kind`) and looked up in registry.KINDS on load.
A kind that `train` makes names its recipe (`TRAINER`); one made otherwise (the student: by distill) has none.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor, nn

from ..config import ModelConfig, TrainConfig
from ..errors import SettingError
from ..runtime import rundir
from ..runtime.precision import FULL_PARTS
from .reading import Reading, middle_layer

if TYPE_CHECKING:
    from ..config import Config
    from ..runtime.distributed import World
    from ..text.tokenizer import Tokenizer, Vocab
    from .focus import SpanVotes


class ModelKind(nn.Module):
    NAME: ClassVar[str]  # stored in the checkpoint: config model.kind
    OWN_TREES: ClassVar[bool] = False  # it makes trees of its own (a PCFG, a student): no layers, no distances
    # the names of the distances its readings carry (Reading.distances; an ON-LSTM's forget and input master gates),
    # the first read unless another is asked for
    DISTANCES: ClassVar[tuple[str, ...]] = ()
    LAYERED: ClassVar[bool] = True  # its distances are a layer's each (an evaluation row a layer), or one set
    DESCRIPTION: ClassVar[str]  # how messages name a model of this kind: "an ON-LSTM language model"
    SEARCH: ClassVar[str] = ""  # a kind that yields trees: how it finds them ("CKY"), for its evaluation row and notes
    BF16_PARTS: ClassVar[str] = ""  # what bf16 training runs in bfloat16, for the training log
    FP32_PARTS: ClassVar[str] = FULL_PARTS  # and what stays float32
    LABELS: ClassVar[bool] = False  # its readings carry induced labels of its tree's spans (Reading.labels)
    CONFIDENCE: ClassVar[bool] = False  # read(..., confidence=True) gives its tree's spans their probabilities
    DEPENDENCIES: ClassVar[bool] = False  # its readings carry dependency heads (Reading.heads)
    DECODER: ClassVar[str] = "paper"  # the decoder its distances are read with unless one is asked for
    # a kind that yields trees: the longest line its own search parses exactly, and what it does with longer ones
    # (None: the CKY's, cky.EXACT_LIMIT, past which it splits greedily)
    LONGEST: ClassVar[tuple[int, str] | None] = None
    TRAINER: ClassVar[type[Trainer] | None] = None  # the recipe `train` fits it with (None: made otherwise)
    DISTILLED_BY: ClassVar[type[Trainer] | None] = None  # the recipe `distill` fits it with (the student's)
    # the [model] and [train] sections its config is read with (its family's ModelConfig and TrainConfig subclasses,
    # in its folder's settings.py); a key of neither is an error naming the key and the family
    CONFIG: ClassVar[tuple[type[ModelConfig], type[TrainConfig]]] = ModelConfig, TrainConfig
    # parsing on a CPU reads two batches at a time, a thread each (runtime/threads.py): it pays for a small model
    # whose reading is much Python, not for one whose products keep both cores busy
    READS_IN_LANES: ClassVar[bool] = False

    @classmethod
    def check_config(cls, config: ModelConfig) -> None:
        """Refuse, as a ConfigError, sizes this kind cannot be built with (the config's own checks are the
        ones every kind shares)."""

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def parse_layers(self) -> int:
        """How many layers there are to parse with (a kind that yields its own trees has one)."""
        return 1 if self.OWN_TREES else 0

    def parse_layer(self, asked: int | None) -> int:
        """The layer a parse reads: the one asked for (checked), else the middle one (the paper's 2 of 3); a
        kind that yields its own trees has one, whatever is asked (the command line notes that)."""
        if self.OWN_TREES:
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
        `products`: the dtype of the matrix products (None: float32). A kind with CONFIDENCE takes `confidence=True`
        too: its tree's spans' probabilities (`Reading.confidence`)."""
        raise NotImplementedError(f"{self.DESCRIPTION} yields nothing to parse with")


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@dataclass
class EpochPosition:
    """How far an epoch has come; saved when it is interrupted (or every train.checkpoint_minutes), so --resume
    continues inside it."""

    start: int = 0  # where the next step begins, in the recipe's units (a token row, a batch)
    hidden: list[tuple[Tensor, Tensor]] | None = None  # what a recipe carries between steps (an LM's state), on the CPU
    loss_sum: float = 0.0
    units: int = 0  # this process's units of loss so far (tokens, words and ends, masked words, batches)
    tokens: int = 0  # this process's tokens read so far (what tokens a second count)
    seconds: float = 0.0


@dataclass(frozen=True)
class Step:
    """One optimizer step's outcome: its loss summed over the units it covered, how many, the tokens it read (a
    masked LM's loss covers only the masked ones), how far it moved the epoch, and the progress bar's figures."""

    loss_sum: float
    units: int
    tokens: int
    advance: int
    shown: dict[str, str]


@dataclass
class TrainingText:
    """The text a recipe trains on, read with the run's vocabulary; `train`, `valid` and `test` are the recipe's
    own (a stream's batch rows, sentences' ids)."""

    tokenizer: Tokenizer
    vocab: Vocab
    train: Any
    valid: Any
    test: Any
    notes: list[str]  # lines for the log about the text (skipped lines, the token cache)
    focus: SpanVotes | None = None  # the teachers' span votes of each training sentence (families/focus.py), if focused


def perplexity_overflows(loss: float) -> bool:
    """Not a number, or a perplexity past what a float holds (e^709 a word: nothing that learns gets there, an Adam
    step at an SGD learning rate does)."""
    return math.isnan(loss) or math.isinf(exp_loss(loss))


@dataclass(frozen=True)
class Measure:
    """How the loop treats a recipe's held-out figure (a loss: lower is better) and its steps' losses: which is
    better (`better(new, best)`: best.pt), which says the run diverged, what the metrics line records of it (None:
    no held-out text) and how the log says an epoch's line."""

    record: Callable[[float | None], dict[str, Any]]
    better: Callable[[float, float], bool] = lambda new, best: new < best
    diverged: Callable[[float], bool] = perplexity_overflows
    line: Callable[[dict[str, Any]], str] = rundir.format_record


PERPLEXITY = Measure(lambda loss: {"valid_ppl": None if loss is None else round(exp_loss(loss), 3)})


class Trainer:
    """A family's training recipe: eight hooks (`__init__`, `read_text`, `probe`, `held_out_loss`, `held_out`,
    `describe`, `begin_epoch`, `steps`), a few with defaults for what some recipes change (`pause`,
    `validation_weights`, `after_validation`, `epoch_record`, `state_dict`/`load_state_dict`, `finish`) and a
    `measure`. The loop (families/training.py) owns everything else: the run folder and its lock, the resume state
    and the random generators, signals, step and time limits, validation each epoch, best.pt and last.pt, the log. A
    new run builds the model under `torch.manual_seed(train.seed)` and then the recipe; a resumed one loads both."""

    UNIT: ClassVar[str]  # what an epoch's progress bar counts
    optimizer: torch.optim.Optimizer
    text: TrainingText
    # the run's Python generator, for the draws a recipe makes in Python as it goes (the ON-LSTM's BPTT lengths): set by
    # the loop, which keeps it in last.pt with torch's generators (runtime/randomness.py); a recipe saves none of them
    rng: random.Random
    PARALLEL: ClassVar[bool] = False  # whether it runs under torchrun (data-parallel processes)
    PHASE: ClassVar[str]  # the optimizer phase of a new run (recorded in each epoch's line)
    measure: Measure = PERPLEXITY

    def __init__(self, config: Config, model: ModelKind, text: TrainingText, device: torch.device, world: World,
                 phase: str | None):
        """`phase`: the saved run's (None: a new run, in PHASE)."""
        raise NotImplementedError

    @classmethod
    def read_text(cls, config: Config, world: World, vocab: Vocab | None) -> TrainingText:
        """The config's files (data.train, .valid, .test) as this recipe trains on them; the vocabulary from the
        training file unless given (on resume)."""
        raise NotImplementedError

    @classmethod
    def probe(cls, model: ModelKind, config: Config, vocab_size: int) -> Callable[[torch.dtype | None], None]:
        """One training step's forward and backward on random ids of a batch's shape (`auto` precision times it)."""
        raise NotImplementedError

    @classmethod
    def held_out_loss(cls, model: ModelKind, ids: Tensor, config: Config, part: str) -> float:
        """Mean loss per unit of a file's ids (the `<eos>`-separated stream) under a trained model, as the recipe
        measures its held-out `part` ("valid" or "test": a recipe may batch them differently)."""
        raise NotImplementedError

    def held_out(self, model: ModelKind, part: str, products: torch.dtype | None) -> float:
        """The run's held-out text `part` ("valid", where `has` it, each epoch; "test" under best.pt's `model`) as the
        measure reads it (a loss per unit); `products`: the matrix products' dtype."""
        raise NotImplementedError

    def describe(self) -> str:
        """The log's line on the model and its text."""
        raise NotImplementedError

    def begin_epoch(self, epoch: int, position: EpochPosition) -> int:
        """Make the epoch's batches and start from `position`; returns the epoch's length in UNITs."""
        raise NotImplementedError

    def steps(self, position: EpochPosition) -> Iterator[Step]:
        """The epoch's optimizer steps from `position`, one per `next` (the loop may stop between any two)."""
        raise NotImplementedError

    def pause(self, position: EpochPosition) -> EpochPosition:
        """`position` with what resuming inside the epoch needs (collective under torchrun)."""
        return position

    def validation_weights(self, phase: str) -> contextlib.AbstractContextManager:
        """The weights validation reads (ASGD's averages, for one)."""
        return contextlib.nullcontext()

    def after_validation(self, phase: str, history: list[float], val_loss: float) -> tuple[str, str | None]:
        """The phase after an epoch validated at `val_loss`, and a line saying so if it changed (it may switch
        optimizers); `history` (kept in last.pt) is the recipe's: by default every epoch's validation loss."""
        history.append(val_loss)
        return phase, None

    def epoch_record(self, epoch: int, stats: dict[str, float]) -> dict[str, Any]:
        """What an epoch's metrics line adds to the loop's figures (`stats`: the epoch's train_loss, seconds)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state (and a schedule's), for last.pt. The random generators are the loop's to keep."""
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])

    def finish(self) -> None:
        """Let go of what holds the process group (a DDP wrapper) before it closes."""

    def has(self, part: str) -> bool:
        """Whether the run has held-out text `part` ("valid", "test")."""
        held = getattr(self.text, part)
        return held is not None and len(held) > 0

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]


def exp_loss(loss: float) -> float:
    """A perplexity, infinite past what a float holds (a diverged run's)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf
