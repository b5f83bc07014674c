"""The training text read the plain way, all in memory: the oracle the token cache (text/corpus.py) is checked
against. The tool itself reads training files only through the cache."""

from collections import Counter
from pathlib import Path

import torch
from torch import Tensor

from grammar_induce.errors import InputError
from grammar_induce.files import read_lines
from grammar_induce.text.tokenizer import EOS, Tokenizer, Vocab


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
    eos = vocab.index[EOS]
    ids = [i for sentence in sentences for i in (*vocab.encode(sentence), eos)]
    return torch.tensor(ids, dtype=torch.long)
