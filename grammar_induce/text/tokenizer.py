"""Text in, token ids out: tokenizers, normalisation, vocabulary, stream batching.

torch is imported where a tensor is made, so scoring a file of trees never loads it.
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ..errors import InputError
from ..messages import plural
from ..trees import OPENING, PTB_ESCAPES
from .nltk_treebank import treebank_tokenizer

if TYPE_CHECKING:
    from torch import Tensor

    from ..config import DataConfig

UNK = "<unk>"
EOS = "<eos>"
_DIGITS = re.compile(r"[0-9]+")
_NUMBER = re.compile(r"[+-]?[0-9][0-9,.:/]*")  # 3.5, 1,000, 9/11: a number the PTB LM text writes as N
# Tokens without a letter or digit that the Penn Treebank's words keep (the LM text has $ & # ',
# the gold trees tag % as a noun); every other such token is punctuation to the treebank tokenizer.
SYMBOL_WORDS = frozenset("$ & # ' %".split())
SPECIAL_WORDS = frozenset({UNK, EOS})
BRACKET_NAMES = frozenset(PTB_ESCAPES.values())  # -LRB-, -RCB-: brackets as the Penn Treebank writes them  # read as they are, never split or normalised
NUMBER_WORD = "N"  # a number, in text normalised with replace_digits: it stays N
_AMPERSAND = re.compile(r"[A-Za-z]+&[A-Za-z]+")  # AT&T, S&L: one word, as the Penn Treebank writes them
# a sentence's last word and its period in the middle of a line ("rose." before "Analysts"): the treebank
# tokenizer splits only the line's final period; abbreviations (Mr., Inc., U.S., etc.) are left alone
_SENTENCE_END = re.compile(r"(?:[a-z]{2,}|[0-9]+|%)\.")
_ABBREVIATIONS = frozenset("etc vs cf viz approx".split())
# one token whatever a splitter makes of it: a web address, an e-mail address, a number with a decimal point
# or thousands separators (ASCII, after width folding: ８,９９９ and １２．５ too); a final . , ; : ! ? ) stays out
_WHOLE = re.compile(r"(?:https?://|www\.)[!-~]*[A-Za-z0-9/#=_&%+~-]|[A-Za-z0-9.+_-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
                    r"\.[A-Za-z]{2,}"
                    r"|[0-9]+(?:[.,][0-9]+)+")
_WHOLE_HINT = re.compile(r"@|://|www\.|[0-9][.,][0-9]")  # what every match of _WHOLE holds (one scan of a line)


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
        tokens, is_word = self.read(line)
        return [self.normalize(token) for token, word in zip(tokens, is_word) if word]

    def read(self, line: str, known: Collection[str] = ()) -> tuple[list[str], list[bool]]:
        """A line's tokens as written, and which of them a model reads: all but punctuation set aside (a
        line of nothing but punctuation is read whole). `known`: the model's vocabulary, whose words the
        treebank tokenizer keeps whole (`s&l`, `<unk>`)."""
        return self.read_tokens(self.split(line, known))

    def read_tokens(self, tokens: list[str]) -> tuple[list[str], list[bool]]:
        """`read` of a line split already (pre-tokenized text, another library's tokens)."""
        if not self.sets_punctuation_aside:  # once a line, not once a token
            return tokens, [True] * len(tokens)
        is_word = [_reads_as_word(t) for t in tokens]
        return tokens, is_word if any(is_word) else [True] * len(tokens)

    def split(self, line: str, known: Collection[str] = ()) -> list[str]:
        """Every token as written, punctuation included."""
        if self.kind == "whitespace":
            return line.split()
        if self.kind == "char":
            return [ch for ch in line if not ch.isspace()]
        if self.kind == "treebank":
            return _treebank_split(line, lambda chunk: chunk in SPECIAL_WORDS or _AMPERSAND.fullmatch(chunk)
                                   or self.normalize(chunk) in known)
        return _jieba_split(line, self.fold_width)

    def is_word(self, token: str) -> bool:
        """False for punctuation when it is set aside: a token with no letter, digit or CJK character,
        except the symbols the Penn Treebank keeps as words."""
        return not self.sets_punctuation_aside or _reads_as_word(token)

    @property
    def sets_punctuation_aside(self) -> bool:
        """Whether punctuation is set aside: asked for, or the treebank tokenizer's way."""
        return self.punctuation_aside or self.kind == "treebank"

    def normalize(self, word: str) -> str:
        if word in SPECIAL_WORDS or (self.replace_digits and word == NUMBER_WORD):
            return word
        if self.fold_width:
            word = unicodedata.normalize("NFKC", word)
        if self.kind == "treebank":
            word = word.translate(STRAIGHT_QUOTES)  # it’s, dog’s: the model knows 's
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

    def splits_like(self, other: Tokenizer) -> bool:
        """Whether the two split a line into the same tokens and set the same ones aside (their normalisation, the
        case, digits and width of each word, may differ: each model normalises its own copy of the tokens)."""
        return (self.kind == other.kind and self.sets_punctuation_aside == other.sets_punctuation_aside
                and (self.kind != "jieba" or self.fold_width == other.fold_width))  # jieba segments folded text


def tokenizer_of(data: DataConfig, normalize: bool = True) -> Tokenizer:
    """The tokenizer a config's [data] describes; with normalize=False without its lowercasing, digit
    mapping and width folding (how a run reads text that is normalised already, such as the PTB LM text). Such text
    is tokenized already too: for the Penn Treebank tokenizer that is the whitespace split with punctuation set aside
    (its raw-text rules would cut a line's last `u.s.` into `u.s .`)."""
    if not normalize:
        kind = "whitespace" if data.tokenizer == "treebank" else data.tokenizer
        return Tokenizer(kind, punctuation_aside=data.punctuation_aside or data.tokenizer == "treebank")
    return Tokenizer(data.tokenizer, data.lowercase, data.replace_digits, data.punctuation_aside, data.fold_width)


# Curly quotes as the straight ones nltk's tables know, one character for one (a token's span is the same in both)
STRAIGHT_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})


def _treebank_split(line: str, keep_whole) -> list[str]:
    """English split the Penn Treebank way, each token as typed (quotes stay the characters typed, not
    `` and ''); a whitespace-separated chunk that `keep_whole` accepts is not split; a sentence's final
    period in the middle of the line is split off when a capitalised word follows."""
    tokenizer = treebank_tokenizer()
    plain = line.translate(STRAIGHT_QUOTES)  # split as if typed straight; the tokens keep the quotes typed
    try:
        spans = _opening_quotes_apart(plain, _kept_whole(plain, list(tokenizer.span_tokenize(plain))))
    except ValueError:  # nltk could not find a token it rewrote in the text: its tokens as they are
        return tokenizer.tokenize(line)
    tokens = [line[a:b] for a, b in spans]
    if any(start <= end for (_, end), (start, _) in itertools.pairwise(spans)):  # pieces of one chunk touch
        tokens = _chunks_kept_whole(line, spans, tokens, keep_whole)
    if "." not in line:  # nothing for _split_period
        return tokens
    return [piece for k, token in enumerate(tokens)
            for piece in (_split_period(token, tokens[k + 1 : k + 3]) if token[-1] == "." else (token,))]


_CLITICS = frozenset("'s 'll 're 've 'd 'm 'em 'n 't".split())  # an apostrophe's words the treebank keeps whole


def _opening_quotes_apart(line: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Token spans with an opening single quote split from the word it opens (`'Hello` -> `'` `Hello`, as nltk
    already splits a closing one): a ' at a word's start after a space, a bracket or the line's start, before a
    letter, unless the token is one the treebank keeps whole (`'s`, `'ll`, `'n`, ...; `'80s` starts with a digit)."""
    if "'" not in line:
        return spans
    apart = []
    for a, b in spans:
        opens = (line[a] == "'" and b - a > 1 and line[a + 1].isalpha() and line[a:b].lower() not in _CLITICS
                 and (a == 0 or line[a - 1].isspace() or line[a - 1] in "([{"))
        apart += [(a, a + 1), (a + 1, b)] if opens else [(a, b)]
    return apart


def _chunks_kept_whole(line: str, spans: list[tuple[int, int]], tokens: list[str], keep_whole) -> list[str]:
    """`tokens` (those of `spans`) with each whitespace-separated chunk of several that `keep_whole` accepts made
    one token again."""
    kept: list[str] = []
    first = 0  # the first span of a chunk: spans that touch were one whitespace-separated chunk
    for k in range(1, len(spans) + 1):
        if k == len(spans) or spans[k][0] > spans[k - 1][1]:
            chunk = line[spans[first][0] : spans[k - 1][1]]
            if k - first > 1 and keep_whole(chunk):
                kept.append(chunk)
            else:
                kept += tokens[first:k]
            first = k
    return kept


def _kept_whole(line: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Token spans with the pieces of one of `_WHOLE`'s matches (an address, a number) joined into one; a piece
    running past the match keeps its rest as a token of its own."""
    if not _WHOLE_HINT.search(line):  # most lines
        return spans
    for match in _WHOLE.finditer(line):
        start, end = match.span()
        inside = [k for k, (a, b) in enumerate(spans) if a < end and b > start]
        if len(inside) < 2:
            continue
        first, last = spans[inside[0]], spans[inside[-1]]
        pieces = [(first[0], start)] * (first[0] < start) + [(start, end)] + [(end, last[1])] * (last[1] > end)
        spans[inside[0] : inside[-1] + 1] = pieces
    return spans


def _split_period(token: str, after: list[str]) -> list[str]:
    """`rose.` -> `rose` `.` when the next word (after a closing quote or bracket) is capitalised (`N`, the PTB
    text's number, is not: `nov. N` stays)."""
    if not _SENTENCE_END.fullmatch(token) or token[:-1] in _ABBREVIATIONS:  # most tokens: no final period
        return [token]
    following = next((t for t in after if _has_word_character(t)), "")
    if following[:1].isupper() and following != NUMBER_WORD:
        return [token[:-1], "."]
    return [token]


_ENDS = frozenset(". ? ! \u3002 \uff01 \uff1f".split())  # a sentence's last mark (English, Chinese)
_QUOTED_ENDS = frozenset("? !".split())  # inside quotes they end the quotation, not the sentence
_WIDE_ENDS = frozenset("\u3002 \uff01 \uff1f".split())  # Chinese: whatever follows starts a sentence
# what stays with the sentence it closes (what opens the next one: trees.OPENING)
_CLOSING = frozenset("'' ) ] } -RRB- -RSB- -RCB- \u201d \u2019 \u00bb \u300d \u300f \u300b \u3009 \uff09 \uff3d "
                     "\uff5d \u3011".split())


def sentence_starts(tokens: list[str]) -> list[int]:
    """Where each sentence after the first begins, in a line of tokens: after a sentence's last mark (. ? ! or a
    Chinese one) and the closing quotes and brackets after it (they stay with their sentence), where the next word
    starts with a capital letter (maybe after an opening quote or bracket; `Mr.`, `U.S.` are one token each, so
    they end nothing); after a Chinese mark, wherever a word follows."""
    starts = []
    for k, token in enumerate(tokens[:-1]):
        if token not in _ENDS or not any(_has_word_character(t) for t in tokens[:k]):
            continue
        start = k + 1
        while start < len(tokens) and (tokens[start] in _CLOSING or _closes(tokens, start)):
            start += 1
        if token in _QUOTED_ENDS and start > k + 1 and _is_quote(tokens[k + 1]):
            continue  # `"Why?" He shrugged.`: a question or exclamation a quote closes goes on (the treebanks' way)
        opening = start
        while opening < len(tokens) and (tokens[opening] in OPENING or tokens[opening] in ("'", '"')):
            opening += 1
        word = tokens[opening] if opening < len(tokens) else ""
        if not _has_word_character(word) or start in starts:
            continue
        if token in _WIDE_ENDS or word[:1].isupper():
            starts.append(start)
    return starts


def _is_quote(token: str) -> bool:
    return token in ("''", '"', "'", "\u201d", "\u2019", "\u00bb")


def _closes(tokens: list[str], k: int) -> bool:
    """Whether tokens[k] is a straight quote that closes one opened before it (an odd number of them before)."""
    return tokens[k] in ("'", '"') and sum(t == tokens[k] for t in tokens[:k]) % 2 == 1


@functools.lru_cache(maxsize=1 << 16)
def _reads_as_word(token: str) -> bool:
    """Not punctuation: a symbol the Penn Treebank keeps as a word, or a token with a letter, digit or CJK character
    that is not a bracket written the Penn Treebank way (-LRB- reads as the `(` it stands for)."""
    return token in SYMBOL_WORDS or (_has_word_character(token) and token not in BRACKET_NAMES)


def _has_word_character(token: str) -> bool:
    """Whether a token has a letter, a digit or a CJK character (in any width): a word, not punctuation."""
    return any(ch.isalnum() for ch in unicodedata.normalize("NFKC", token))


def _jieba_split(line: str, fold_width: bool) -> list[str]:
    """Chinese words by jieba, each as typed. With `fold_width`, jieba reads full-width digits and letters as
    their ASCII twins (it splits `１２日` digit by digit otherwise); the tokens keep the typed characters."""
    folded = "".join(f if len(f := unicodedata.normalize("NFKC", c)) == 1 else c for c in line)
    seen = folded if fold_width else line
    spans, at = [], 0
    for piece in _jieba().lcut(seen):  # the pieces spell the line, character for character
        spans.append((at, at + len(piece)))
        at += len(piece)
    return [token for a, b in _kept_whole(folded, spans) for token in line[a:b].split()]


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
