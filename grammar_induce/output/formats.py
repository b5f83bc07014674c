"""Output formats: one table from a format's name to a pure function of a parsed sentence. No torch.

Words that are brackets are written as the Penn Treebank writes them (-LRB-, -RRB-) wherever
a format would otherwise read them as structure.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from .. import trees
from ..trees import Tree


@dataclass(frozen=True)
class MemberResult:
    """What one model of an ensemble made of a sentence: what its reading shows (`Reading.to_dict`: every layer's
    distances of each kind, in reading order) and its tree."""

    direction: str
    values: dict[str, list[list[float]]]  # per kind, per layer run, per word; none for a tree of its own
    tree: Tree
    source: str = ""  # the model's checkpoint file
    layer: int = 0  # the layer its tree came from, counted from 1
    gaps: list[float] = field(default_factory=list)  # that layer's scores of the gaps between words
    heads: list[int] | None = None  # dependency heads per word, 1-based, 0 for a root (a kind that has them)
    # with chart constraints, asked for (`prune_mass`): the share of the model's probability of the sentence that
    # the trees of its kept spans carry (a line of several sentences: their product)
    kept_mass: float | None = None

    def distances(self, name: str | None = None) -> list[list[float]]:
        """Every layer's distances of `name` (None: the first the model has; none for a tree of its own)."""
        return self.values.get(name or next(iter(self.values), ""), [])

    @property
    def forget(self) -> list[list[float]]:
        """Every layer's forget distances: the Python API's name (`parser.analyse(...).members[0].forget`); none
        for a model that makes trees of its own."""
        return self.values.get("forget", [])

    @property
    def input(self) -> list[list[float]]:
        return self.values.get("input", [])


class Span(NamedTuple):
    """One constituent of a parsed sentence: words start..end-1, its induced label and how sure the parser is of
    it (inference/ensemble.confidences says what the number is for each kind of model)."""

    start: int
    end: int
    label: str | None
    confidence: float | None


@dataclass(frozen=True)
class SentenceResult:
    words: list[str]  # what the models read, as written
    tree: Tree | None  # None for an empty line; over every token, punctuation included
    members: list[MemberResult] = field(default_factory=list)  # their trees are over `words`
    tokens: list[str] | None = None  # every token as written, when punctuation was set aside
    is_word: list[bool] | None = None  # per token: one of `words` (else punctuation)
    read: list[str] | None = None  # `words` as the models read them (lowercased, numbers as N, ...)
    labels: dict[tuple[int, int], str] | None = None  # induced labels of the tree's spans over `words` (asked for)
    confidence: dict[tuple[int, int], float] | None = None  # how sure each span over `words` is (asked for)
    calibrated: str | None = None  # the confidences were mapped by a calibration map fitted on these gold trees

    @property
    def spans(self) -> list[Span]:
        """The tree's constituents of two or more words (the whole sentence too), over `words`, end exclusive, in
        order, each with its induced label and its confidence where they were asked for (else None)."""
        found = sorted(set(self.confidence or {}) | set(self.labels or {}))
        return [Span(i, j, (self.labels or {}).get((i, j)), (self.confidence or {}).get((i, j))) for i, j in found]

    def token_heads(self) -> list[tuple[int, str]]:
        """Each token's head (its 1-based token number, 0 for the root) and relation: a word's head is the one its
        model gave (`root` at 0, else `dep`); a punctuation token set aside hangs from the word before it (the first
        token's from the word after), `punct`. Only for a result with heads."""
        heads, tokens = self.heads, self.tokens or self.words
        is_word = self.is_word or [True] * len(tokens)
        at = [k for k, word in enumerate(is_word) if word]  # each word's token
        found, words_before = [], 0
        for k in range(len(tokens)):
            if is_word[k]:
                head = heads[words_before]
                words_before += 1
                found.append((0, "root") if head == 0 else (at[head - 1] + 1, "dep"))
            else:
                found.append(((at[max(words_before - 1, 0)] + 1 if at else 0), "punct"))
        return found

    def to_dict(self) -> dict:
        """A line of `--format jsonl`, one schema for every line: `tokens` (every token as written),
        `words` (what the models read, normalised: the distances and members' trees are per word), `tree`
        (over every token; null for a blank line), and what one model's reading shows (every layer's `forget`
        and `input` distances, those it has; nothing for a model that makes trees of its own; `heads`, per word,
        where it has dependencies; `kept_mass`, where chart constraints were asked to say it), or per member of an
        ensemble its `direction`, `layer`, reading and tree; with
        induced labels, `labels`: [start, end, label] per span of words (end exclusive); with confidences, `spans`:
        {start, end, label, confidence} per span of words (the whole sentence too), and `calibrated` (the gold trees
        the calibration map was fitted on) where they were mapped."""
        record: dict = {"tokens": self.tokens or self.words, "words": self.read or self.words}
        if self.tree is None:
            return record | {"tree": None}
        if self.labels:
            record["labels"] = [[i, j, label] for (i, j), label in sorted(self.labels.items())]
        if self.confidence is not None:
            record["spans"] = [{"start": s.start, "end": s.end, "label": s.label,
                                "confidence": round(s.confidence, 4)} for s in self.spans]
            if self.calibrated is not None:
                record["calibrated"] = self.calibrated
        if len(self.members) == 1:
            member = self.members[0]
            return record | member.values | _heads(member) | _kept(member) | {"tree": self.tree}
        return record | {"tree": self.tree, "members": [  # a member of its own trees has no layer nor direction
            ({"direction": m.direction, "layer": m.layer} if m.values else {}) | m.values | _heads(m) | _kept(m)
            | {"tree": m.tree} for m in self.members]}

    @property
    def heads(self) -> list[int] | None:
        """The dependency heads of the first member that has them."""
        return next((m.heads for m in self.members if m.heads is not None), None)

    def token_row(self, row: list[float]) -> list[float | None]:
        """A per-word row (distances) spread over every token, None at punctuation (needs `is_word`)."""
        values = iter(row)
        return [next(values) if word else None for word in self.is_word]


def _heads(member: MemberResult) -> dict[str, list[int]]:
    return {} if member.heads is None else {"heads": member.heads}


def _kept(member: MemberResult) -> dict[str, float]:
    return {} if member.kept_mass is None else {"kept_mass": round(member.kept_mass, 6)}


def to_conll(result: SentenceResult) -> str:
    """The dependency trees in CoNLL-U's ten columns, a token a line (ID, FORM, HEAD and DEPREL filled; the rest
    `_`; `SentenceResult.token_heads`), a block (ending in a blank line) per sentence of the line: each of a line's
    sentences is a tree of its own, numbered from 1."""
    tokens = result.tokens or result.words
    heads = result.token_heads()
    blocks = []
    for start, end in _sentence_blocks(heads):
        rows = [f"{k - start + 1}\t{tokens[k]}\t_\t_\t_\t_\t{head - start if head else 0}\t{relation}\t_\t_"
                for k, (head, relation) in zip(range(start, end), heads[start:end])]
        blocks.append("\n".join(rows) + "\n")
    return "\n".join(blocks)


def _sentence_blocks(heads: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """The token ranges that are trees of their own: the smallest runs that no head link crosses."""
    reach = list(range(1, len(heads) + 1))  # for each token, the end of the run it must share with its head
    for k, (head, _) in enumerate(heads):
        if head:
            low, high = sorted((k, head - 1))
            reach[low] = max(reach[low], high + 1)
    blocks, start, end = [], 0, 0
    for k in range(len(heads)):
        end = max(end, reach[k])
        if end == k + 1:
            blocks.append((start, end))
            start = end
    return blocks


def to_jsonl(result: SentenceResult) -> str:
    """A jsonl line: the record's trees written by trees.to_json (json.dumps recurses once a level, and a tree is as
    deep as a long line may be), the rest by json.dumps."""
    record = result.to_dict()
    found: list[Tree] = []

    def held(tree: Tree) -> str:  # a NUL is no character of text (the readers refuse it): no word looks like this
        found.append(tree)
        return f"\0tree{len(found) - 1}"

    if record.get("tree") is not None:
        record["tree"] = held(record["tree"])
    for member in record.get("members", []):
        member["tree"] = held(member["tree"])
    line = json.dumps(record, ensure_ascii=False)
    for k, tree in enumerate(found):
        line = line.replace(json.dumps(f"\0tree{k}"), trees.to_json(tree), 1)
    return line


DRAWN_DEPTH = 120  # levels: a deeper tree is not drawn (nltk's drawing recurses per level) but written in PTB form


def to_ascii(result: SentenceResult) -> str:
    """The tree drawn in text, its nodes X or their induced labels; a tree too deep to draw in its PTB form, after a
    line saying so."""
    import nltk
    from nltk.tree import TreePrettyPrinter

    levels = trees.depth(result.tree)
    if levels > DRAWN_DEPTH:
        return f"(a tree of {levels} levels, too deep to draw: its PTB form)\n{to_ptb(result)}"
    drawn = nltk.Tree.fromstring(to_ptb(result))
    wide: dict[str, str] = {}  # a wide character (CJK) -> two narrow stand-ins while nltk lays the drawing out
    for position in drawn.treepositions("leaves"):  # the words as written, not as -LRB- and the like
        drawn[position] = _narrowed(trees.unescape(drawn[position]), wide)
    text = TreePrettyPrinter(drawn).text().rstrip("\n")
    for char, stand_in in wide.items():
        text = text.replace(stand_in, char)
    return text


_STAND_IN = 0xF0000  # a private-use plane: no text the tools read holds it


def _narrowed(word: str, wide: dict[str, str]) -> str:
    """`word` with each character a terminal shows two columns wide replaced by two narrow ones (nltk counts one
    column a character, so a drawing of Chinese words came out misaligned); `wide` keeps the stand-ins."""
    out = []
    for char in word:
        if unicodedata.east_asian_width(char) in ("W", "F"):
            if char not in wide:
                wide[char] = chr(_STAND_IN + len(wide)) + chr(_STAND_IN - 1)
            out.append(wide[char])
        else:
            out.append(char)
    return "".join(out)


def _tree_format(render_tree: Callable[[Tree], str]) -> Callable[[SentenceResult], str]:
    return lambda result: render_tree(result.tree)


def to_ptb(result: SentenceResult) -> str:
    return trees.to_ptb(result.tree, result.labels, result.is_word)


RENDERERS: dict[str, Callable[[SentenceResult], str]] = {
    "brackets": _tree_format(trees.to_brackets),
    "ptb": to_ptb,
    "json": _tree_format(trees.to_json),
    "jsonl": to_jsonl,
    "ascii": to_ascii,
    "conll": to_conll,
}
LABELLED = ("ptb", "jsonl", "ascii")  # the formats that show induced labels (`parse --labels`)
PICTURES = ("svg", "html")  # drawn by `draw`, not line by line
FORMATS = (*RENDERERS, *PICTURES)
DEPENDENCY = ("conll",)  # the formats that need a model with dependency heads
CONFIDENT = ("jsonl", *PICTURES)  # the formats that show each constituent's confidence (`parse --confidence`)
ALL_LAYERS = frozenset({"jsonl"})  # formats that print every layer's distances, so every layer must run


def render(result: SentenceResult, fmt: str) -> str:
    """One sentence in an output format; an empty sentence is an empty line (in jsonl, a record with no tree)."""
    return RENDERERS[fmt](result) if result.tree is not None or fmt == "jsonl" else ""


def render_lines(results: Iterable[SentenceResult], fmt: str) -> Iterator[str]:
    """Results as lines of an output format (without newlines); an empty line for an empty sentence."""
    return (render(result, fmt) for result in results)
