"""Gold dependency trees from constituency trees by head rules: Collins' (1999, appendix A) table, as written in
his thesis (the NP rule included; his coordination adjustment left out), the conversion the PTB
dependency-induction papers score against. No torch.

Each phrase picks its head child: for a phrase with a direction and a priority list, the first category of the list
found among the children, scanning them in the direction (left: from the first child), else the first child in
the direction; NP (and NX) by Collins' own rule. A word's head is the head word of the smallest phrase it does not
head; the sentence's head word has head 0."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..trees import fold_labelled

# category -> (direction, priority list), Collins (1999), table A.1
RULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ADJP": ("left", ("NNS", "QP", "NN", "$", "ADVP", "JJ", "VBN", "VBG", "ADJP", "JJR", "NP", "JJS", "DT", "FW",
                      "RBR", "RBS", "SBAR", "RB")),
    "ADVP": ("right", ("RB", "RBR", "RBS", "FW", "ADVP", "TO", "CD", "JJR", "JJ", "IN", "NP", "JJS", "NN")),
    "CONJP": ("right", ("CC", "RB", "IN")),
    "FRAG": ("right", ()),
    "INTJ": ("left", ()),
    "LST": ("right", ("LS", ":")),
    "NAC": ("left", ("NN", "NNS", "NNP", "NNPS", "NP", "NAC", "EX", "$", "CD", "QP", "PRP", "VBG", "JJ", "JJS", "JJR",
                     "ADJP", "FW")),
    "PP": ("right", ("IN", "TO", "VBG", "VBN", "RP", "FW")),
    "PRN": ("left", ()),
    "PRT": ("right", ("RP",)),
    "QP": ("left", ("$", "IN", "NNS", "NN", "JJ", "RB", "DT", "CD", "NCD", "QP", "JJR", "JJS")),
    "RRC": ("right", ("VP", "NP", "ADVP", "ADJP", "PP")),
    "S": ("left", ("TO", "IN", "VP", "S", "SBAR", "ADJP", "UCP", "NP")),
    "SBAR": ("left", ("WHNP", "WHPP", "WHADVP", "WHADJP", "IN", "DT", "S", "SQ", "SINV", "SBAR", "FRAG")),
    "SBARQ": ("left", ("SQ", "S", "SINV", "SBARQ", "FRAG")),
    "SINV": ("left", ("VBZ", "VBD", "VBP", "VB", "MD", "VP", "S", "SINV", "ADJP", "NP")),
    "SQ": ("left", ("VBZ", "VBD", "VBP", "VB", "MD", "VP", "SQ")),
    "UCP": ("right", ()),
    "VP": ("left", ("TO", "VBD", "VBN", "MD", "VBZ", "VB", "VBG", "VBP", "VP", "ADJP", "NN", "NNS", "NP")),
    "WHADJP": ("left", ("CC", "WRB", "JJ", "ADJP")),
    "WHADVP": ("right", ("CC", "WRB")),
    "WHNP": ("left", ("WDT", "WP", "WP$", "WHADJP", "WHPP", "WHNP")),
    "WHPP": ("right", ("IN", "TO", "FW")),
}
NOUNS = frozenset({"NN", "NNP", "NNPS", "NNS", "NX", "POS", "JJR"})


def head_child(parent: str, children: Sequence[str]) -> int:
    """The index of the head among a phrase's children's categories (a word's: its tag)."""
    if parent in ("NP", "NX"):
        return _noun_phrase_head(children)
    direction, priorities = RULES.get(parent, ("left", ()))
    order = range(len(children)) if direction == "left" else range(len(children) - 1, -1, -1)
    for category in priorities:
        for k in order:
            if children[k] == category:
                return k
    return order[0]


def _noun_phrase_head(children: Sequence[str]) -> int:
    """Collins' NP rule: a final POS; else the last noun-like child; else the first NP; else the last of $, ADJP,
    PRN; else the last CD; else the last of JJ, JJS, RB, QP; else the last child."""
    last = len(children) - 1
    if children[last] == "POS":
        return last

    def last_of(found: Callable[[str], bool]) -> int | None:
        return next((k for k in range(last, -1, -1) if found(children[k])), None)
    for pick in (lambda: last_of(NOUNS.__contains__),
                 lambda: next((k for k, c in enumerate(children) if c == "NP"), None),
                 lambda: last_of({"$", "ADJP", "PRN"}.__contains__),
                 lambda: last_of("CD".__eq__),
                 lambda: last_of({"JJ", "JJS", "RB", "QP"}.__contains__)):
        if (k := pick()) is not None:
            return k
    return last


def dependency_heads(tree, keeps: Callable[[str], bool], category: Callable[[str], str]) -> tuple[int, ...]:
    """The heads of an nltk.Tree's kept words (`keeps(tag)`; punctuation and traces left out first, as the F1
    protocol leaves them out), 1-based, 0 for the sentence's head word. `category` cuts a label to its category
    (NP-SBJ-1 -> NP)."""
    heads: dict[int, int] = {}
    position = 0

    def word(node) -> tuple[str, int] | None:  # a kept word: its tag and position
        nonlocal position
        if not keeps(node.label()):
            return None
        position += 1
        return node.label(), position - 1

    def phrase(node, made: list) -> tuple[str, int] | None:  # its category and head word, if it has a kept word
        found = [child for child in made if child is not None]
        if not found:
            return None
        k = head_child(category(node.label()), [c for c, _ in found])
        for j, (_, head) in enumerate(found):
            if j != k:
                heads[head] = found[k][1] + 1
        return category(node.label()), found[k][1]

    root = fold_labelled(tree, word, phrase)
    if root is None:
        return ()
    heads[root[1]] = 0
    return tuple(heads[k] for k in range(position))


def chain(n: int, leftward: bool) -> list[int]:
    """A baseline: each word's head the word before it (`leftward`; the first word the root), or after it (the last
    word the root)."""
    return [k for k in range(n)] if leftward else [k + 2 for k in range(n - 1)] + [0]


def attachment(predicted: Sequence[Sequence[int]], gold: Sequence[Sequence[int]]) -> tuple[float, float]:
    """(directed, undirected) attachment scores over every word: a word's head as the gold tree's; or the pair
    {word, head} among the gold tree's pairs (either direction; the root as head 0), as the StructFormer paper's
    evaluation counts them."""
    directed = undirected = total = 0
    for heads, truth in zip(predicted, gold):
        pairs = {frozenset((k + 1, h)) for k, h in enumerate(truth)}
        for k, (h, g) in enumerate(zip(heads, truth)):
            directed += h == g
            undirected += frozenset((k + 1, h)) in pairs
        total += len(truth)
    return directed / max(1, total), undirected / max(1, total)
