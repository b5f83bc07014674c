"""Self-contained checkpoints as plain data, written atomically and loaded without pickle code.

A checkpoint holds the format version, the config as a dict, the vocabulary as a list of
strings, the tokenizer settings and the weights; `last.pt` adds the training state.
"""

from __future__ import annotations

import functools
import io
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..config import Config, ConfigError
from ..errors import InputError
from ..files import atomic_write, is_zip
from ..messages import clipped
from ..text.tokenizer import Tokenizer, Vocab
from . import registry
from .family import Family
from .kind import ModelKind

FORMAT_VERSION = 1


WORDS_REMEMBERED = 1 << 16  # word forms whose ids a loaded model keeps (see LoadedModel.word_id)


@dataclass
class LoadedModel:
    model: ModelKind  # of the kind its config names (registry.py)
    vocab: Vocab
    tokenizer: Tokenizer
    config: Config
    source: str = ""  # the checkpoint file, for messages
    provenance: dict[str, Any] | None = None  # how it was made, where that is not the config (a student's teachers)

    @functools.cached_property
    def family(self) -> Family:
        """Its family (what its readings yield, how messages name it), by the kind its config names (looked up
        once)."""
        return registry.family_of(self.config.model.kind)

    @functools.cached_property
    def word_id(self) -> Callable[[str], int]:
        """A word as a user wrote it -> the id the model reads (normalised by its tokenizer; `<eos>` and unknown
        words as `<unk>`), the last WORDS_REMEMBERED forms' kept: a parse looks the same words up again and again
        (token ids 27.3 -> 2.5 us a sentence of PTB). The vocabulary and tokenizer are the model's for good."""
        vocab, normalize = self.vocab, self.tokenizer.normalize

        @functools.lru_cache(maxsize=WORDS_REMEMBERED)
        def word_id(word: str) -> int:
            return vocab.encode_user_words([normalize(word)])[0]

        return word_id


def save(path: Path, model: ModelKind, vocab: Vocab, tokenizer: Tokenizer, config: Config,
         training_state: dict[str, Any] | None = None, provenance: dict[str, Any] | None = None) -> None:
    payload = {
        "format_version": FORMAT_VERSION,
        "config": config.to_dict(),
        "vocab": vocab.words,
        "tokenizer": tokenizer.to_dict(),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }
    if training_state is not None:
        payload["training_state"] = training_state
    if provenance is not None:
        payload["provenance"] = provenance
    buffer = io.BytesIO()  # serialized whole first: a full disk is then an OSError, not torch's "unexpected pos"
    torch.save(payload, buffer)
    atomic_write(path, lambda f: f.write(buffer.getbuffer()))


def read(path: Path) -> dict[str, Any]:
    """The raw checkpoint dict, refusing anything but our own plain-data format."""
    path = Path(path)
    if path.is_dir():
        hint = f" (did you mean {path / 'best.pt'}?)" if (path / "best.pt").is_file() else ""
        raise InputError(f"{path}: is a folder, not a checkpoint file{hint}")
    if not path.is_file():
        raise InputError(f"{path}: no such checkpoint file")
    _check_stored_crcs(path)
    try:
        with warnings.catch_warnings():  # torch's warnings about a foreign file's pickle protocol
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many types for foreign or corrupt files
        raise InputError(f"{path}: not a grammar-induce checkpoint or corrupt ({_load_failure(e, path)})") from None
    if not isinstance(payload, dict) or "format_version" not in payload:
        raise InputError(f"{path}: not a grammar-induce checkpoint")
    if payload["format_version"] != FORMAT_VERSION:
        raise InputError(
            f"{path}: checkpoint format version {payload['format_version']}, this grammar-induce reads {FORMAT_VERSION}"
        )
    return payload


def _check_stored_crcs(path: Path) -> None:
    """Refuse a zip (as torch saves) whose bytes no longer match the CRC stored with each of its files: flipped bytes
    in the weights would otherwise load, and parse, silently. (Reading the file once more costs about as
    much as loading it.)"""
    if not is_zip(path):
        return  # not ours: torch.load says what it is
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise InputError(f"{path}: not a grammar-induce checkpoint or corrupt (not a whole zip archive: "
                         f"{clipped(str(e), 120)})") from None
    if bad is not None:
        raise InputError(f"{path}: damaged checkpoint ({bad.rsplit('/', 1)[-1]} does not match the CRC stored with it: "
                         "the file was changed or corrupted after it was written)")


def _load_failure(error: Exception, path: Path) -> str:
    """Why torch.load refused a file, in one line. torch's own advice for a file holding Python
    objects (re-run with weights_only=False) is the wrong advice for a file from a stranger."""
    text = str(error).strip()
    if "GLOBAL" in text or "Unsupported global" in text:  # a pickled class or function
        return "it holds Python objects, not only plain data; they are refused because loading them could run code"
    if not is_zip(path) or "Weights only load failed" in text or isinstance(error, (KeyError, EOFError)):
        return "not a torch file"
    return clipped(text, 200) if text else type(error).__name__


def _mismatch(error: Exception) -> str:
    """The informative line of a load_state_dict error (its first line only names the model class)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    detail = next((line for line in lines if line.startswith(("size mismatch", "Missing key", "Unexpected key"))),
                  lines[0] if lines else type(error).__name__)
    return clipped(detail, 300)


def load(path: Path, device: str | torch.device = "cpu") -> LoadedModel:
    payload = read(path)
    try:
        config = registry.CONFIGS.from_dict(payload["config"], source=str(path), saved=True)
        vocab = Vocab(payload["vocab"])
        tokenizer = Tokenizer(**payload["tokenizer"])
        model = registry.family_of(config.model.kind).build(len(vocab), config.model)
        model.load_state_dict(payload["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError, ConfigError) as e:
        raise InputError(f"{path}: damaged checkpoint ({_mismatch(e).removeprefix(f'{path}: ')})") from None
    model.to(device).eval()
    return LoadedModel(model, vocab, tokenizer, config, str(path), payload.get("provenance"))
