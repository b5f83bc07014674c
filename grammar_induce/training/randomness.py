"""A training run's random state in one shape, kept by the training loop (training/loop.py) in last.pt for every
recipe: the run's Python generator (the draws a recipe makes in Python: the ON-LSTM's BPTT lengths), torch's CPU
generator (dropout, masks, sampling) and, on a GPU, the CUDA generator of the run's device. A resumed run sets all
three as they were, so that it goes on as the run it continues would have."""

from __future__ import annotations

import random
from typing import Any

import torch


def saved(python: random.Random, device: torch.device) -> dict[str, Any]:
    _, internal, gauss_next = python.getstate()
    state = {"python": list(internal), "gauss_next": gauss_next, "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore(state: dict[str, Any], python: random.Random, device: torch.device) -> None:
    """Set the generators from `saved`'s dict (or a recipe's of before this shape, which held some of them under the
    same keys: what it lacks keeps the run's seed)."""
    if "python" in state:
        python.setstate((3, tuple(state["python"]), state.get("gauss_next")))
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def of_training_state(training_state: dict[str, Any]) -> dict[str, Any]:
    """The saved generators: the loop's (`random`), or, in a last.pt of before the loop kept them, the recipe's
    (`rng`: the same keys, some of them)."""
    return training_state.get("random") or training_state.get("rng") or {}
