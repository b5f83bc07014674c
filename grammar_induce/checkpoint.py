"""Self-contained checkpoints as plain data, written atomically and loaded without pickle code.

A checkpoint holds the format version, the config as a dict, the vocabulary as a list of
strings, the tokenizer settings and the weights; `last.pt` adds the training state.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import config as config_module
from .config import Config, ConfigError
from .data import Tokenizer, Vocab
from .files import InputError, atomic_write
from .model import LanguageModel, build_model

FORMAT_VERSION = 1


@dataclass
class LoadedModel:
    model: LanguageModel
    vocab: Vocab
    tokenizer: Tokenizer
    config: Config
    source: str = ""  # the checkpoint file, for messages


def save(path: Path, model: LanguageModel, vocab: Vocab, tokenizer: Tokenizer, config: Config,
         training_state: dict[str, Any] | None = None) -> None:
    payload = {
        "format_version": FORMAT_VERSION,
        "config": config.to_dict(),
        "vocab": vocab.words,
        "tokenizer": tokenizer.to_dict(),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }
    if training_state is not None:
        payload["training_state"] = training_state
    atomic_write(path, lambda f: torch.save(payload, f))


def read(path: Path) -> dict[str, Any]:
    """The raw checkpoint dict, refusing anything but our own plain-data format."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such checkpoint file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many types for foreign or corrupt files
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"{path}: not a grammar-induce checkpoint or corrupt ({first_line[:200]})") from None
    if not isinstance(payload, dict) or "format_version" not in payload:
        raise InputError(f"{path}: not a grammar-induce checkpoint")
    if payload["format_version"] != FORMAT_VERSION:
        raise InputError(
            f"{path}: checkpoint format version {payload['format_version']}, this grammar-induce reads {FORMAT_VERSION}"
        )
    return payload


def load(path: Path, device: str | torch.device = "cpu") -> LoadedModel:
    payload = read(path)
    try:
        config = config_module.from_dict(payload["config"], source=str(path))
        vocab = Vocab(payload["vocab"])
        tokenizer = Tokenizer(**payload["tokenizer"])
        model = build_model(len(vocab), config.model)
        model.load_state_dict(payload["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError, ConfigError) as e:
        raise InputError(f"{path}: damaged checkpoint ({str(e).splitlines()[0][:200]})") from None
    model.to(device).eval()
    return LoadedModel(model, vocab, tokenizer, config, str(path))
