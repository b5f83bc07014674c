"""A family's training recipe (`Recipe`, an abstract base: what an optimizer step is, how held-out text is scored),
the figure the loop keeps best.pt by (`Score`: which way is better), and what a recipe and the loop hand each other
(`TrainingText`, `EpochPosition`, `Step`). The loop itself is training/loop.py."""

from __future__ import annotations

import contextlib
import math
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

from ..config import ConfigError
from ..runtime import rundir
from .kind import ModelKind

if TYPE_CHECKING:
    from ..config import Config
    from ..runtime.distributed import World
    from ..text.tokenizer import Tokenizer, Vocab
    from .focus import SpanVotes


@dataclass
class EpochPosition:
    """How far an epoch has come; saved when it is interrupted (or every run.checkpoint_minutes), so --resume
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
class Score:
    """What the loop keeps best.pt by: a recipe's held-out figure (a perplexity's loss, where lower is better; the
    student's agreement, where higher is), which says the run diverged (a step's loss or the figure), what the
    metrics line records of it (None: no held-out text), and how the log says an epoch's line. `keep`: "best" (the
    best figure's epoch) or "last" (every epoch's, a fixed budget)."""

    record: Callable[[float | None], dict[str, Any]]
    higher_is_better: bool = False
    # the best model's loss on the test text as the run's result records it (a perplexity for a language model)
    test: Callable[[float], dict[str, Any]] = lambda loss: {"test_ppl": round(exp_loss(loss), 3)}
    diverged: Callable[[float], bool] = perplexity_overflows
    line: Callable[[dict[str, Any]], str] = rundir.format_record
    keep: str = "best"

    def keeps(self, new: float, best: float | None) -> bool:
        """Whether a model of figure `new` replaces the best one so far (of figure `best`; None: none yet)."""
        if best is None or self.keep == "last":
            return True
        return new > best if self.higher_is_better else new < best


PERPLEXITY = Score(lambda loss: {"valid_ppl": None if loss is None else round(exp_loss(loss), 3)})


class Recipe(ABC):
    """A family's training recipe. What a recipe must say: how it sets up its optimizer (`setup`), how an epoch
    begins (`begin_epoch`) and steps (`steps`), how held-out text scores the model (`held_out`) and the log's line
    on it (`describe`); with defaults, what some recipes change (`pause`, `validation_weights`, `after_validation`,
    `epoch_record`, `state_dict`/`load_state_dict`, `finish`) and its `score`. `train` also asks a recipe to read
    its text, probe a step and score a saved model's held-out text (`read_text`, `probe`, `held_out_loss`); a recipe
    run otherwise (distill's) is handed its text. The loop (training/loop.py) owns everything else: the run folder
    and its lock, the resume state and the random generators, signals, step and time limits, validation each epoch,
    best.pt and last.pt, the log. A new run builds the model under `torch.manual_seed(run.seed)` and then the
    recipe; a resumed one loads both."""

    UNIT: ClassVar[str]  # what an epoch's progress bar counts
    optimizer: torch.optim.Optimizer
    text: TrainingText
    # the run's Python generator, for the draws a recipe makes in Python as it goes (the ON-LSTM's BPTT lengths): set by
    # the loop, which keeps it in last.pt with torch's generators (training/randomness.py); a recipe saves none of them
    rng: random.Random
    PARALLEL: ClassVar[bool] = False  # whether it runs under torchrun (data-parallel processes)
    PHASE: ClassVar[str]  # the optimizer phase of a new run (recorded in each epoch's line)
    score: Score = PERPLEXITY

    def __init__(self, config: Config, model: ModelKind, text: TrainingText, device: torch.device, world: World,
                 phase: str | None):
        """`phase`: the saved run's (None: a new run, in PHASE). The recipe's own parts (its optimizer, ...) are
        made by `setup`."""
        self.config, self.model, self.text, self.device, self.world = config, model, text, device, world
        self.setup(phase or self.PHASE)

    @abstractmethod
    def setup(self, phase: str) -> None:
        """Make the optimizer (of `phase`) and whatever else the recipe keeps."""

    @classmethod
    def read_text(cls, config: Config, world: World, vocab: Vocab | None) -> TrainingText:
        """The config's files (data.train, .valid, .test) as this recipe trains on them; the vocabulary from the
        training file unless given (on resume)."""
        raise ConfigError(f"{cls.__name__} is not trained from a config's files")

    @classmethod
    def probe(cls, model: ModelKind, config: Config, vocab_size: int) -> Callable[[torch.dtype | None], None]:
        """One training step's forward and backward on random ids of a batch's shape (`auto` precision times it)."""
        raise ConfigError(f"{cls.__name__} has no training step to probe")

    @classmethod
    def held_out_loss(cls, model: ModelKind, ids: Tensor, config: Config, part: str) -> float:
        """Mean loss per unit of a file's ids (the `<eos>`-separated stream) under a trained model, as the recipe
        measures its held-out `part` ("valid" or "test": a recipe may batch them differently)."""
        raise ConfigError(f"{cls.__name__} scores no held-out file")

    @abstractmethod
    def held_out(self, model: ModelKind, part: str, products: torch.dtype | None) -> float:
        """The run's held-out text `part` ("valid", where `has` it, each epoch; "test" under best.pt's `model`) as the
        score reads it (a loss per unit, or what the recipe's score says); `products`: the matrix products' dtype."""

    @abstractmethod
    def describe(self) -> str:
        """The log's line on the model and its text."""

    @abstractmethod
    def begin_epoch(self, epoch: int, position: EpochPosition) -> int:
        """Make the epoch's batches and start from `position`; returns the epoch's length in UNITs."""

    @abstractmethod
    def steps(self, position: EpochPosition) -> Iterator[Step]:
        """The epoch's optimizer steps from `position`, one per `next` (the loop may stop between any two)."""

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
