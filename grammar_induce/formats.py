"""Output formats: one table from a format's name to a pure function of a parsed sentence. No torch.

Words that are brackets are written as the Penn Treebank writes them (-LRB-, -RRB-) wherever
a format would otherwise read them as structure.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from . import trees
from .trees import Tree


@dataclass(frozen=True)
class MemberResult:
    """What one model of an ensemble made of a sentence: its distances in reading order and its tree."""

    direction: str
    forget: list[list[float]]  # per layer run, per word
    input: list[list[float]]
    tree: Tree
    source: str = ""  # the model's checkpoint file


@dataclass(frozen=True)
class SentenceResult:
    words: list[str]
    tree: Tree | None  # None for an empty line
    members: list[MemberResult] = field(default_factory=list)


def to_jsonl(result: SentenceResult) -> str:
    """Tokens, every layer's distances and the tree; with several models, each member's too."""
    if len(result.members) == 1:
        member = result.members[0]
        record = {"tokens": result.words, "forget": member.forget, "input": member.input, "tree": result.tree}
    else:
        record = {"tokens": result.words, "tree": result.tree, "members": [
            {"direction": m.direction, "forget": m.forget, "input": m.input, "tree": m.tree} for m in result.members]}
    return json.dumps(record, ensure_ascii=False)


def to_ascii(tree: Tree) -> str:
    import nltk
    from nltk.tree import TreePrettyPrinter

    return TreePrettyPrinter(nltk.Tree.fromstring(trees.to_ptb(tree))).text().rstrip("\n")


def _tree_format(render_tree: Callable[[Tree], str]) -> Callable[[SentenceResult], str]:
    return lambda result: render_tree(result.tree)


RENDERERS: dict[str, Callable[[SentenceResult], str]] = {
    "brackets": _tree_format(trees.to_brackets),
    "ptb": _tree_format(trees.to_ptb),
    "json": _tree_format(trees.to_json),
    "jsonl": to_jsonl,
    "ascii": _tree_format(to_ascii),
}
PICTURES = ("svg", "html")  # drawn by `draw`, not line by line
FORMATS = (*RENDERERS, *PICTURES)
ALL_LAYERS = frozenset({"jsonl"})  # formats that print every layer's distances, so every layer must run


def render(result: SentenceResult, fmt: str) -> str:
    """One sentence in an output format; an empty sentence is an empty line."""
    return RENDERERS[fmt](result) if result.tree is not None else ""
