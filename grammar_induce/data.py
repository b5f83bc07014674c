"""Text in, token ids out: tokenizers, normalisation, vocabulary, stream batching.

torch is imported where a tensor is made, so scoring a file of trees never loads it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .files import InputError, read_lines

if TYPE_CHECKING:
    from torch import Tensor

UNK = "<unk>"
EOS = "<eos>"
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class Tokenizer:
    kind: str = "whitespace"
    lowercase: bool = False
    replace_digits: bool = False

    def __call__(self, line: str) -> list[str]:
        return [self.normalize(word) for word in self.split(line)]

    def split(self, line: str) -> list[str]:
        if self.kind == "whitespace":
            return line.split()
        if self.kind == "char":
            return [ch for ch in line if not ch.isspace()]
        return [word for word in _jieba().lcut(line) if word.strip()]

    def normalize(self, word: str) -> str:
        if self.lowercase:
            word = word.lower()
        if self.replace_digits:
            word = _DIGITS.sub("N", word)
        return word

    def to_dict(self) -> dict:
        return asdict(self)


def _jieba():
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    return jieba


class Vocab:
    """Words <-> ids. Ids 0 and 1 are `<unk>` and `<eos>`; the rest by frequency, then alphabetically."""

    def __init__(self, words: list[str]):
        self.words = list(words)
        self.index = {word: k for k, word in enumerate(self.words)}
        if self.words[:2] != [UNK, EOS] or len(self.index) != len(self.words):
            raise ValueError("a vocabulary starts with <unk>, <eos> and has no repeated word")

    @classmethod
    def build(cls, counts: Counter, max_size: int = 0, min_freq: int = 1) -> Vocab:
        ranked = sorted((w for w, c in counts.items() if c >= min_freq and w not in (UNK, EOS)), key=lambda w: (-counts[w], w))
        if max_size:
            ranked = ranked[: max(0, max_size - 2)]
        return cls([UNK, EOS] + ranked)

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, words: Iterable[str]) -> list[int]:
        return [self.index.get(word, 0) for word in words]

    def encode_user_words(self, words: Iterable[str]) -> list[int]:
        """Ids of words a user wrote to parse: `<eos>` there is an unknown word, not the end of the sentence."""
        return [0 if word == EOS else self.index.get(word, 0) for word in words]


def read_corpus(path: str | Path, tokenizer: Tokenizer) -> tuple[list[list[str]], int]:
    """One sentence per line; blank lines are skipped and counted. Returns (sentences, blank lines)."""
    sentences, blank = [], 0
    for _, line in read_lines(path):
        if words := tokenizer(line):
            sentences.append(words)
        else:
            blank += 1
    if not sentences:
        raise InputError(f"{path}: no sentences (the file is empty or has only blank lines)")
    return sentences, blank


def build_vocab(sentences: list[list[str]], max_size: int = 0, min_freq: int = 1) -> Vocab:
    return Vocab.build(Counter(word for sentence in sentences for word in sentence), max_size, min_freq)


def encode_stream(sentences: list[list[str]], vocab: Vocab) -> Tensor:
    """All sentences as one id stream, each followed by `<eos>` as in the paper's code. (N,)"""
    import torch

    eos = vocab.index[EOS]
    ids = [i for sentence in sentences for i in (*vocab.encode(sentence), eos)]
    return torch.tensor(ids, dtype=torch.long)


def batchify(stream: Tensor, batch_size: int) -> Tensor:
    """Cut a stream into `batch_size` rows, dropping the remainder; returns (T, B).

    With the stream a b c ... x and batch size 4:
        a g m s
        b h n t
        c i o u
        d j p v
        e k q w
        f l r x
    Columns are independent; the hidden state is carried down each column across batches.
    """
    steps = stream.numel() // batch_size
    if steps < 2:
        raise InputError(f"the corpus has {stream.numel()} tokens, too few for batch size {batch_size}")
    return stream[: steps * batch_size].view(batch_size, steps).t()  # a view: a memory-mapped stream stays mapped


def get_batch(source: Tensor, start: int, seq_len: int) -> tuple[Tensor, Tensor]:
    """Inputs source[start:start+L] and next-token targets, both (L, B), as int64 (the source may be
    a memory-mapped view of narrower ids)."""
    import torch

    seq_len = min(seq_len, source.shape[0] - 1 - start)
    inputs, targets = source[start : start + seq_len], source[start + 1 : start + 1 + seq_len]
    return inputs.to(torch.long).contiguous(), targets.to(torch.long).contiguous()
