"""Gold trees: reading PTB-style files and nltk corpora, and the paper's preprocessing.

Preprocessing (as the paper's data_ptb.py): keep only leaves whose POS tag is a word tag
(which drops punctuation, traces, `$` and `#`), drop emptied nodes, collapse unary chains.
The result is an unlabeled tree (see `trees`) over the kept words.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from .. import trees
from ..errors import InputError
from ..files import read_lines
from ..messages import Messages, clipped, plural
from ..trees import Tree, leaves

# The 36 word tags of the paper's code; every other tag is dropped.
PTB_WORD_TAGS = frozenset(
    "CC CD DT EX FW IN JJ JJR JJS LS MD NN NNS NNP NNPS PDT POS PRP PRP$ RB RBR RBS RP SYM TO UH "
    "VB VBD VBG VBN VBP VBZ WDT WP WP$ WRB".split()
)
# The Penn Treebank's other tags: punctuation, symbols and traces, which the paper's code drops by not keeping them.
PTB_OTHER_TAGS = frozenset({"$", "#", "``", "''", ",", ".", ":", "-LRB-", "-RRB-", "-NONE-", "HYPH", "NFP", "AFX"})
# Tags to drop for other treebanks: keep every leaf whose tag is not listed.
DROP_PRESETS = {"ctb": frozenset({"PU", "-NONE-"})}


@dataclass(frozen=True)
class TagFilter:
    """Which preterminals to keep: the PTB word tags by default, or all but a drop list."""

    keep: frozenset[str] | None = PTB_WORD_TAGS
    drop: frozenset[str] = frozenset()

    @classmethod
    def from_options(cls, preset: str, punct_tags: str | None) -> TagFilter:
        if punct_tags:
            return cls(keep=None, drop=frozenset(punct_tags.replace(",", " ").split()))
        if preset == "ptb":
            return cls()
        if preset in DROP_PRESETS:
            return cls(keep=None, drop=DROP_PRESETS[preset])
        raise InputError(f"unknown treebank preset {preset!r} (expected ptb or {', '.join(DROP_PRESETS)})")

    def keeps(self, tag: str) -> bool:
        return tag in self.keep if self.keep is not None else tag not in self.drop

    def drops_by_name(self, tag: str) -> bool:
        """Whether the filter drops `tag` as one of the treebank's own non-word tags ($, #, quotes, traces), not for
        being a tag it does not know (a Chinese tree read as English: its words are dropped by mistake)."""
        return tag in PTB_OTHER_TAGS if self.keep is not None else tag in self.drop


@dataclass(frozen=True)
class GoldTree:
    source: str  # "file:line" of the tree's first line
    words: list[str]  # kept words, as in the file
    tree: Tree  # unlabeled, over `words`
    labels: tuple[tuple[int, int, str], ...] = ()  # (start, end, category) of every constituent kept, unary chains too
    dropped: tuple[str, ...] = ()  # the leaves the tag filter left out by name ($, #, quotes, traces), as in the file
    labelled: Any = field(default=None, repr=False, compare=False)  # the tree as read (nltk), for its heads
    tags: TagFilter | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def heads(self) -> tuple[int, ...]:
        """Each word's dependency head by Collins' head rules (text/heads.py), 0 the root: found when first asked
        for (evaluate --deps), not at every read."""
        from .heads import dependency_heads

        return tuple(dependency_heads(self.labelled, self.tags.keeps, category))

    def within(self, max_length: int) -> bool:
        """Whether it is scored under --max-length `max_length` (0: every tree), counted after the tag filter."""
        return not max_length or len(self.words) <= max_length

    def categories(self) -> dict[tuple[int, int], str]:
        """Each constituent of two or more words with its category (a unary chain's outermost: S over VP is S)."""
        found: dict[tuple[int, int], str] = {}
        for start, end, category in self.labels:  # inner before outer: the last one a span gets is its outermost
            if end - start >= 2 and category:
                found[start, end] = category
        return found


def read_gold(spec: str, tags: TagFilter, skip_bad: bool = False,
              messages: Messages | None = None) -> tuple[list[GoldTree], int]:
    """Read gold trees from a file, a folder of .mrg files or `nltk:<corpus>`.

    Returns the non-empty preprocessed trees and the number of trees skipped (emptied by
    preprocessing, or malformed when `skip_bad`). When the tag filter drops most leaves (Chinese
    trees scored as English, say), the warning is a note in `messages`.
    """
    gold: list[GoldTree] = []
    skipped: list[tuple[int, str, str]] = []  # (position among the file's trees, file:line, why)
    tag_counts: Counter[str] = Counter()
    for position, (source, text) in enumerate(_tree_strings(spec, skip_bad)):
        if text is None:  # malformed, and skip_bad is on
            skipped.append((position, source, "malformed"))
            continue
        try:
            tree = parse_bracketed(text, source)
            tagged = tagged_words(tree)
            tag_counts.update(tag for _, tag in tagged)
            kept = preprocess(tree, tags, source)
        except InputError:
            if not skip_bad:
                raise
            skipped.append((position, source, "malformed"))
            continue
        if kept is None:
            skipped.append((position, source, "no words once traces and punctuation are left out"))
            continue
        gold.append(GoldTree(source, leaves(kept), kept, labelled_spans(tree, tags),
                             tuple(word for word, tag in tagged if tags.drops_by_name(tag)), tree, tags))
    warning = _filter_warning(spec, tags, tag_counts)
    if not gold:
        raise InputError(f"{spec}: no gold trees with words in them" + (f"; {warning}" if warning else ""))
    if messages is not None and warning:
        messages.note(warning)
    if messages is not None and skipped:
        shown = ", ".join(f"{where} ({why})" for _, where, why in skipped[:3])
        messages.note(f"{plural(len(skipped), 'gold tree')} skipped: {shown}" + (", ..." if len(skipped) > 3 else ""))
    return gold, Skipped(skipped)


class Skipped(int):
    """How many gold trees were skipped (an int, as reports count them), with `trees`: each one's position
    among the file's trees, its file:line and why."""

    def __new__(cls, found: list[tuple[int, str, str]]) -> Self:
        count = super().__new__(cls, len(found))
        count.trees = tuple(found)
        return count


def _filter_warning(spec: str, tags: TagFilter, tag_counts: Counter[str]) -> str | None:
    """Say so when the tag filter drops most leaves: the gold trees likely use another tag set."""
    total = sum(tag_counts.values())
    dropped = Counter({tag: n for tag, n in tag_counts.items() if not tags.keeps(tag)})
    if not total or sum(dropped.values()) <= total / 2:
        return None
    common = ", ".join(tag for tag, _ in dropped.most_common(5))
    return (f"{spec}: the tag filter dropped {100 * sum(dropped.values()) / total:.0f}% of the gold leaves "
            f"(most often tagged {common}); for Chinese Treebank trees use --treebank ctb, for another "
            "tag set --punct-tags")


def _tree_strings(spec: str, skip_bad: bool) -> Iterator[tuple[str, str]]:
    if spec.startswith("nltk:"):
        yield from _nltk_tree_strings(spec)
        return
    path = Path(spec)
    if path.is_dir():
        files = sorted(path.rglob("*.mrg"))
        if not files:
            raise InputError(f"{path}: folder has no .mrg files")
    elif path.exists():
        files = [path]
    else:
        raise InputError(f"{path}: no such file or folder")
    for file in files:
        yield from split_trees(file, skip_bad)


def split_trees(path: Path, skip_bad: bool = False) -> Iterator[tuple[str, str | None]]:
    """Cut a file into top-level bracketed trees (one per line or spread over lines, continuation lines
    indented or not).

    A file whose brackets do not balance is read again taking a "(" in column 0 as the start of a new
    tree (PTB files indent continuation lines), which puts the error at the tree that is not closed.
    With `skip_bad`, each malformed piece is yielded as (file:line, None) instead of raising.
    """
    pieces = list(_split(path, skip_bad=True, column_zero_starts=False))
    if pieces and pieces[-1][1] is None and pieces[-1][2] == "never closed":
        pieces = list(_split(path, skip_bad, column_zero_starts=True))
    for source, text, why in pieces:
        if text is None and not skip_bad:
            raise InputError(f"{source}: {why}")
        yield source, text


def _split(path: Path, skip_bad: bool, column_zero_starts: bool) -> Iterator[tuple[str, str | None, str]]:
    """(file:line, tree text or None, why None)."""
    depth, start_line, buffer = 0, 0, []
    for lineno, line in read_lines(path):
        if depth and column_zero_starts and line.startswith("("):
            why = f"unbalanced brackets (the tree is not closed before line {lineno})"
            if not skip_bad:
                raise InputError(f"{path}:{start_line}: {why}")
            yield f"{path}:{start_line}", None, why
            depth = 0
        stray = False
        for ch in line:
            if depth == 0 and ch.isspace():
                continue
            if depth == 0:
                if ch != "(":
                    if not skip_bad:
                        raise InputError(f"{path}:{lineno}: text outside a tree (expected '(')")
                    stray = True
                    continue
                start_line, buffer = lineno, []
            buffer.append(ch)
            depth += (ch == "(") - (ch == ")")
            if depth == 0:
                yield f"{path}:{start_line}", "".join(buffer), ""
        if stray:
            yield f"{path}:{lineno}", None, "text outside a tree (expected '(')"
        if depth:
            buffer.append(" ")
    if depth:
        if not skip_bad:
            raise InputError(f"{path}:{start_line}: unbalanced brackets (a tree is never closed)")
        yield f"{path}:{start_line}", None, "never closed"


def _nltk_tree_strings(spec: str) -> Iterator[tuple[str, str]]:
    import nltk

    name = spec.removeprefix("nltk:")
    try:
        reader = getattr(nltk.corpus, name)
        fileids = reader.fileids()
    except LookupError:
        raise InputError(f"{spec}: nltk's data has no corpus {name!r}: download it (python -m nltk.downloader {name}) "
                         "or point NLTK_DATA at the folder that holds corpora/" + name) from None
    except (AttributeError, OSError) as e:
        raise InputError(f"{spec}: nltk cannot load this corpus ({str(e).strip().splitlines()[0]})") from None
    for fileid in fileids:
        yield from split_trees(Path(reader.abspath(fileid)))


_BRACKET_TOKENS = re.compile(r"\(\s*([^\s()]*)|\)|[^\s()]+")  # an opening bracket with its label, a closing one, a word


def parse_bracketed(text: str, source: str):
    """One bracketed tree -> nltk.Tree, read with a stack: no nesting limit (nltk's own reader stops at 500 levels).
    An outer bracket without a label goes, as nltk's remove_empty_top_bracketing; errors name `source` (file:line)."""
    from nltk import Tree as LabelledTree

    holder = LabelledTree("", [])
    stack = [holder]
    for match in _BRACKET_TOKENS.finditer(text):
        token = match.group()
        if token[0] == "(":
            node = LabelledTree(match.group(1), [])
            stack[-1].append(node)
            stack.append(node)
        elif token == ")":
            if len(stack) == 1:
                raise InputError(f"{source}: malformed tree (a ')' closes nothing)")
            stack.pop()
        elif len(stack) == 1:
            raise InputError(f"{source}: malformed tree (a word outside the brackets: {clipped(token, 40)})")
        else:
            stack[-1].append(token)
    if len(stack) > 1:
        raise InputError(f"{source}: malformed tree (a '(' is never closed)")
    if len(holder) > 1:
        raise InputError(f"{source}: malformed tree (more than one tree)")
    tree = holder[0] if holder else holder
    if tree.label() == "" and len(tree) == 1 and not isinstance(tree[0], str):
        tree = tree[0]
    if len(tree) == 0:
        raise InputError(f"{source}: empty tree")
    return tree


def tagged_words(tree) -> list[tuple[str, str]]:
    """(word, tag) of every leaf, in order (nltk's `pos()`, without its recursion)."""
    found: list[tuple[str, str]] = []
    trees.fold_labelled(tree, lambda node: found.append((node[0], node.label())), lambda node, made: None)
    return found


def labelled_spans(tree, tags: TagFilter) -> tuple[tuple[int, int, str], ...]:
    """(start, end, category) of every phrase over the kept words (`preprocess`'s), function tags and indices
    cut (NP-SBJ-1 -> NP); a unary chain gives each of its categories (S over VP: both)."""
    found: list[tuple[int, int, str]] = []
    position = 0

    def word(node) -> tuple[int, int]:
        nonlocal position
        start, position = position, position + tags.keeps(node.label())
        return start, position

    def phrase(node, spans: list[tuple[int, int]]) -> tuple[int, int]:
        start, end = (spans[0][0], spans[-1][1]) if spans else (position, position)
        if end > start:
            found.append((start, end, category(node.label())))
        return start, end

    trees.fold_labelled(tree, word, phrase)
    return tuple(found)


def category(label: str) -> str:
    """A treebank label's category: NP-SBJ-1 -> NP, PP=2 -> PP (-NONE-, -LRB- and the like stay whole)."""
    if label.startswith("-"):
        return label
    return label.split("-")[0].split("=")[0]


def preprocess(tree, tags: TagFilter, source: str = "") -> Tree | None:
    """Keep word-tagged leaves, drop emptied nodes, collapse unary chains; None if nothing is left."""

    def phrase(node, made: list) -> Tree | None:
        if len(node) == 0:
            raise InputError(f"{source}: ({node.label()}) has no word (a missing leaf)")
        if any(isinstance(child, str) for child in node):
            raise InputError(f"{source}: ({node.label()} ...) mixes words and subtrees, or has a word without a tag")
        kept = [child for child in made if child is not None]
        return (kept[0] if len(kept) == 1 else kept) if kept else None

    return trees.fold_labelled(tree, lambda node: node[0] if tags.keeps(node.label()) else None, phrase)
