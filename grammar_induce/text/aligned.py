"""Trees aligned with a training text, a tree (or none) for each of its lines, as parse-focusing reads its teachers'
(families/focus.py): each tree's spans over the words the training reads, its leaves checked against them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .. import trees
from ..errors import InputError
from ..messages import plural
from .predicted import predicted_trees
from .tokenizer import Tokenizer

Spans = frozenset[tuple[int, int]]


def spans_over(tree: trees.Tree, words: Sequence[str], reader: Tokenizer, where: str, line: str) -> Spans:
    """The spans (two or more words, the whole sentence aside) of a tree whose leaves are the words `words` of the
    training text `line` (punctuation the training sets aside may be among its leaves, and is not counted); a tree of
    other words is an InputError naming `where`."""
    leaves = trees.leaves(tree)
    kept = [k for k, leaf in enumerate(leaves) if reader.is_word(leaf)] or list(range(len(leaves)))

    def compared(word: str) -> str:
        # The training words are read already, a tree's leaves may be or not (parse prints words as typed, a model
        # teacher's are the words it was given), and reading a read word again need not leave it (the digit mark N
        # of 一九九N年 is lowercased): read twice, every side is as it stays.
        return reader.normalize(reader.normalize(word))

    read = [compared(leaves[k]) for k in kept]
    if read != [compared(word) for word in words]:
        differ = next((k for k, (a, b) in enumerate(zip(read, words)) if a != compared(b)),
                      min(len(read), len(words)))
        read = [leaves[k] for k in kept]
        detail = (f"{plural(len(read), 'word')} against {len(words)}" if len(read) != len(words)
                  else f"word {differ + 1} is {read[differ]!r} against {words[differ]!r}")
        raise InputError(f"{where}: the tree's words are not those of {line} ({detail})")
    position = {k: p for p, k in enumerate(kept)}  # a leaf's word index; punctuation takes the next word's
    following, index = [], len(kept)
    for k in reversed(range(len(leaves))):
        index = position.get(k, index)
        following.append(index)
    following.reverse()
    found = set()
    for i, j in trees.spans(tree):
        start, end = following[i], following[j] if j < len(leaves) else len(kept)
        if end - start >= 2 and (start, end) != (0, len(kept)):
            found.add((start, end))
    return frozenset(found)


def file_spans(path: Path, train: str, lines: list[tuple[int, list[str]]], reader: Tokenizer,
               keep: Sequence[bool]) -> list[Spans | None]:
    """Each training sentence's (each line with words) spans in a file of trees aligned with the training file's
    lines (brackets, json or jsonl, as parse writes them; a blank line or a null tree: none), read only where `keep`
    (per sentence); a file of another length, or a tree of other words, is refused naming the line."""
    found = predicted_trees(path, None)
    if len(found) != len(lines):
        raise InputError(f"{path}: {plural(len(found), 'tree')} for the {plural(len(lines), 'line')} of {train}: "
                         "a focus file has a tree (or a blank line) for each line of the training text, in order")
    spans: list[Spans | None] = []
    for (lineno, text), (n, words) in zip(found, lines):
        if not words:
            continue
        tree = parse_tree_line(text, f"{path}:{lineno}") if keep[len(spans)] else None
        spans.append(None if tree is None else _file_tree_spans(tree, text, words, reader, f"{path}:{lineno}",
                                                                f"{train}:{n}"))
    return spans


def _file_tree_spans(tree: trees.Tree, text: object, words: Sequence[str], reader: Tokenizer, where: str,
                     line: str) -> Spans:
    """A file tree's spans: read as brackets, or, where its leaves are not the line's words, as a labelled PTB tree
    (what `parse --format ptb` writes: `(S (NP (X The) (X dog)) ...)`, its labels no words)."""
    try:
        return spans_over(tree, words, reader, where, line)
    except InputError:
        labelled = _labelled(text, where)
        if labelled is None:
            raise
        return spans_over(labelled, words, reader, where, line)


def _labelled(text: object, where: str) -> trees.Tree | None:
    """A labelled PTB tree's unlabelled tree over its words (every leaf kept, unary chains collapsed); None where
    the text does not read as one."""
    from .treebank import TagFilter, parse_bracketed, preprocess

    if not isinstance(text, str):
        return None
    try:
        return preprocess(parse_bracketed(text, where), TagFilter(keep=None), where)
    except InputError:
        return None


def parse_tree_line(text: object, where: str) -> trees.Tree | None:
    """A tree from its bracket text or nested lists (None for a blank line); a malformed one is refused naming
    `where`."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    try:
        return trees.parse_brackets(text) if isinstance(text, str) else trees.from_nested(text)
    except (trees.TreeSyntaxError, TypeError, ValueError) as e:
        raise InputError(f"{where}: malformed tree ({e})") from None
