"""Text in, token ids out: tokenizers, normalisation, vocabulary, stream batching.

torch is imported where a tensor is made, so scoring a file of trees never loads it.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .files import InputError, plural, read_lines

if TYPE_CHECKING:
    from torch import Tensor

    from .config import DataConfig

UNK = "<unk>"
EOS = "<eos>"
_DIGITS = re.compile(r"[0-9]+")
_NUMBER = re.compile(r"[+-]?[0-9][0-9,.:/]*")  # 3.5, 1,000, 9/11: a number the PTB LM text writes as N
# Tokens without a letter or digit that the Penn Treebank's words keep (the LM text has $ & # ',
# the gold trees tag % as a noun); every other such token is punctuation to the treebank tokenizer.
SYMBOL_WORDS = frozenset("$ & # ' %".split())


@dataclass(frozen=True)
class Tokenizer:
    """How a line becomes words: split (whitespace, jieba, char, or treebank: English text split the
    Penn Treebank way), then normalised. The treebank tokenizer, and any other with `punctuation_aside`,
    sets punctuation aside: the model never reads it (the PTB LM text has none), and parsing puts it
    back into the tree."""

    kind: str = "whitespace"
    lowercase: bool = False
    replace_digits: bool = False  # digit runs -> N; with the treebank tokenizer, a whole number -> N
    punctuation_aside: bool = False  # always so for the treebank tokenizer
    fold_width: bool = False  # full-width forms (Ａ, １, ％) read as their ASCII twins (Unicode NFKC)

    def __call__(self, line: str) -> list[str]:
        """The words a model reads: split, punctuation set aside, normalised."""
        return [self.normalize(token) for token in self.split(line) if self.is_word(token)]

    def split(self, line: str) -> list[str]:
        """Every token as written, punctuation included."""
        if self.kind == "whitespace":
            return line.split()
        if self.kind == "char":
            return [ch for ch in line if not ch.isspace()]
        if self.kind == "treebank":
            return _treebank_tokenizer().tokenize(line)
        return [word for word in _jieba().lcut(line) if word.strip()]

    def is_word(self, token: str) -> bool:
        """False for punctuation when it is set aside: a token with no letter, digit or CJK character,
        except the symbols the Penn Treebank keeps as words."""
        if not (self.punctuation_aside or self.kind == "treebank"):
            return True
        return token in SYMBOL_WORDS or any(ch.isalnum() for ch in unicodedata.normalize("NFKC", token))

    def normalize(self, word: str) -> str:
        if self.fold_width:
            word = unicodedata.normalize("NFKC", word)
        if self.lowercase:
            word = word.lower()
        if self.replace_digits:
            if self.kind != "treebank":
                word = _DIGITS.sub("N", word)
            elif _NUMBER.fullmatch(word):  # "1980s" and "10-year" stay, as in the PTB LM text
                word = "N"
        return word

    def to_dict(self) -> dict:
        return asdict(self)


def tokenizer_of(data: DataConfig, normalize: bool = True) -> Tokenizer:
    """The tokenizer a config's [data] describes; with normalize=False without its lowercasing, digit
    mapping and width folding (how a run reads text that is normalised already, such as the PTB LM text)."""
    if not normalize:
        return Tokenizer(data.tokenizer, punctuation_aside=data.punctuation_aside)
    return Tokenizer(data.tokenizer, data.lowercase, data.replace_digits, data.punctuation_aside, data.fold_width)


@functools.cache
def _treebank_tokenizer():
    from nltk.tokenize import TreebankWordTokenizer  # needs no downloaded data

    return TreebankWordTokenizer()


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


def batchify(stream: Tensor, batch_size: int, source: str = "the corpus") -> Tensor:
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
        raise InputError(f"{source}: {plural(stream.numel(), 'token')} (with one <eos> per sentence), too few for "
                         f"batch size {batch_size}: it needs at least {2 * batch_size}")
    return stream[: steps * batch_size].view(batch_size, steps).t()  # a view: a memory-mapped stream stays mapped


def get_batch(source: Tensor, start: int, seq_len: int) -> tuple[Tensor, Tensor]:
    """Inputs source[start:start+L] and next-token targets, both (L, B), as int64 (the source may be
    a memory-mapped view of narrower ids)."""
    import torch

    seq_len = min(seq_len, source.shape[0] - 1 - start)
    inputs, targets = source[start : start + seq_len], source[start + 1 : start + 1 + seq_len]
    return inputs.to(torch.long).contiguous(), targets.to(torch.long).contiguous()
