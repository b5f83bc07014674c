"""Unlabeled binary trees as nested lists of words: building, spans and rendering. No torch.

A tree is a word (str) or a list of trees. Spans are (start, end) word offsets, end exclusive.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Tree = str | list


class TreeSyntaxError(ValueError):
    """Text that is not a bracketed tree."""


def tree_from_distances(distances: Sequence[float], words: Sequence[str]) -> Tree:
    """The paper's greedy top-down split, in linear time.

    For words w1..wn with distances d1..dn, i is the first index of the maximum and the tree
    is [tree(w1..w{i-1}), [wi, tree(w{i+1}..wn)]], dropping an empty side. The split points
    form the Cartesian tree of the distances (first maximum on top), built with a stack.
    """
    if len(distances) != len(words):
        raise ValueError(f"{len(distances)} distances for {len(words)} words")
    if not words:
        raise ValueError("cannot build a tree over no words")
    root, left, right = _cartesian_tree(distances)
    splits, todo = {}, [(root, 0, len(words))]  # (a node of the Cartesian tree, the words it covers)
    while todo:
        k, i, j = todo.pop()
        if k > i:
            splits[i, j] = k  # the words before k, then k with the words after it
        if j - k >= 2:
            splits[k, j] = k + 1  # word k, then the words after it
        todo += [(child, a, b) for child, a, b in ((left[k], i, k), (right[k], k + 1, j)) if child >= 0]
    return tree_of_splits(words, splits)


def _cartesian_tree(values: Sequence[float]) -> tuple[int, list[int], list[int]]:
    """The root and each index's left and right child (-1: none) in the Cartesian tree of `values`,
    the first of equal maxima on top; built with a stack in linear time."""
    left, right = [-1] * len(values), [-1] * len(values)
    stack: list[int] = []
    for k, v in enumerate(values):
        last = -1
        while stack and values[stack[-1]] < v:  # strict: an earlier equal value stays above
            last = stack.pop()
        left[k] = last
        if stack:
            right[stack[-1]] = k
        stack.append(k)
    return stack[0], left, right


def tree_of_splits(words: Sequence[str], splits: Mapping[tuple[int, int], int]) -> Tree:
    """The tree whose span i..j (of two or more words) splits at splits[i, j], without recursion (a long
    line is deep). Every decoder, span voting and the student's CKY build their trees here."""
    built: list[Tree] = []  # the parts made so far, left to right
    todo = [(0, len(words), False)]  # (i, j, whether its two parts are the last two built)
    while todo:
        i, j, parts_built = todo.pop()
        if parts_built:
            right = built.pop()
            built[-1] = [built[-1], right]
        elif j - i == 1:
            built.append(words[i])
        else:
            k = splits[i, j]
            todo += ((i, j, True), (k, j, False), (i, k, False))
    return built[0]


def tree_of_postorder(words: Sequence[str], ops: Sequence[int]) -> Tree:
    """The tree of a postorder walk (cky.exact_trees's, from C): each entry a word's position, or -1 where the
    last two parts built join."""
    built: list[Tree] = []
    for op in ops:
        if op < 0:
            right = built.pop()
            built[-1] = [built[-1], right]
        else:
            built.append(words[op])
    return built[0]


def mirror(tree: Tree) -> Tree:
    """The tree read right to left: every node's children reversed."""
    return rebuild(tree, lambda children: children[::-1])


def paper_tree(distances: Sequence[float], words: Sequence[str], direction: str = "forward") -> Tree:
    """The paper's decoder; for a backward model (distances in reading order) its mirror image, in which
    the largest distance's word ends the left part."""
    if direction == "forward":
        return tree_from_distances(distances, words)
    return mirror(tree_from_distances(distances[::-1], words[::-1]))


def gap_scores(distances: Sequence[float], direction: str) -> list[float]:
    """The n-1 scores of the gaps between neighbouring words, from distances in reading order.

    A forward model's distance at word t+1 says how much it forgets before reading t+1; a
    backward model's distance at word t says the same of the gap from the other side.
    """
    return list(distances[1:]) if direction == "forward" else list(distances[:-1])


def tree_from_gaps(gaps: Sequence[float], words: Sequence[str]) -> Tree:
    """Split at the largest gap (the first of equals), then each side the same way.

    Unlike the paper's decoder, the word after the split is not forced to stand alone, which
    removes its right-branching bias (Dyer, Melis and Blunsom 2019). Linear time: the split
    points are the Cartesian tree of the gaps, first maximum on top.
    """
    if len(gaps) != len(words) - 1:
        raise ValueError(f"{len(gaps)} gap scores for {len(words)} words")
    if len(words) == 1:
        return words[0]
    root, left, right = _cartesian_tree(gaps)
    splits, todo = {}, [(root, 0, len(words))]  # gap k lies between words k and k+1
    while todo:
        k, i, j = todo.pop()
        splits[i, j] = k + 1
        todo += [(child, a, b) for child, a, b in ((left[k], i, k + 1), (right[k], k + 1, j)) if child >= 0]
    return tree_of_splits(words, splits)


def _gap_decoder(distances: Sequence[float], words: Sequence[str], direction: str) -> Tree:
    return tree_from_gaps(gap_scores(distances, direction), words)


# name -> (distances in reading order, words, direction) -> tree. A new decoder: a function and an entry here.
DECODERS: dict[str, Callable[[Sequence[float], Sequence[str], str], Tree]] = {
    "paper": paper_tree,  # the paper's greedy split (mirrored for a backward model)
    "gap": _gap_decoder,  # split at the largest gap between words
}


def decode(distances: Sequence[float], words: Sequence[str], direction: str, decoder: str) -> Tree:
    return DECODERS[decoder](distances, words, direction)


def standardize(scores: Sequence[float]) -> list[float]:
    """Scores minus their mean, over their standard deviation (all 0 when they are equal)."""
    if not scores:
        return []
    mean = sum(scores) / len(scores)
    spread = (sum((x - mean) ** 2 for x in scores) / len(scores)) ** 0.5
    return [(x - mean) / spread if spread > 0 else 0.0 for x in scores]


OPEN, CLOSE = object(), object()  # structure events of `walk`, never equal to a word (a word may be "(")


def walk(tree: Tree):
    """Walk a tree without recursion (trees of long sentences are deep): yields OPEN, CLOSE or a word."""
    stack = [iter([tree])]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
            if stack:
                yield CLOSE
        elif isinstance(node, str):
            yield node
        else:
            yield OPEN
            stack.append(iter(node))


def rebuild(tree, node: Callable[[list], object] = list, leaf: Callable[[str, int], object] = lambda word, k: word):
    """The tree built again bottom up without recursion: each node made by `node` from its children made
    so far, each leaf by `leaf` from the word and its position. Any nested lists work (an nltk.Tree is one)."""
    if isinstance(tree, str):
        return leaf(tree, 0)
    position = 0
    stack = [(iter(tree), [])]  # each open node: its children still to read, those made
    while True:
        children, made = stack[-1]
        for child in children:
            if isinstance(child, str):
                made.append(leaf(child, position))
                position += 1
            else:
                stack.append((iter(child), []))
                break
        else:  # every child made: the node itself
            stack.pop()
            if not stack:
                return node(made)
            stack[-1][1].append(node(made))


def fold_labelled(tree, at_word: Callable[[Any], Any], at_phrase: Callable[[Any, list], Any]):
    """A labelled tree (an nltk.Tree) folded bottom up without recursion (a treebank tree may nest past Python's
    limit): each preterminal `(TAG word)` made by `at_word`, left to right, each phrase by `at_phrase` from itself and
    what its children made. A bare word among a phrase's children is passed over (a reader that cares checks it)."""
    if _is_preterminal(tree):
        return at_word(tree)
    stack = [(tree, iter(tree), [])]  # each open phrase: itself, its children still to read, those made
    while True:
        phrase, children, made = stack[-1]
        for child in children:
            if _is_preterminal(child):
                made.append(at_word(child))
            elif not isinstance(child, str):
                stack.append((child, iter(child), []))
                break
        else:
            stack.pop()
            value = at_phrase(phrase, made)
            if not stack:
                return value
            stack[-1][2].append(value)


def _is_preterminal(node) -> bool:
    return not isinstance(node, str) and len(node) == 1 and isinstance(node[0], str)


def from_nested(tree) -> Tree:
    """Nested lists of words (an nltk.Tree, its labels ignored) as a tree: a node of one child is that child."""
    return rebuild(tree, lambda children: children[0] if len(children) == 1 else children)


# punctuation that opens what follows (English, then the full-width forms of Chinese text); a straight
# double quote " opens when an even number of them precede it
OPENING = frozenset("`` ( [ { -LRB- -LSB- -LCB- \u201c \u2018 \u00ab \u300c \u300e \u300a \u3008 \uff08 \uff3b \uff5b \u3010".split())


def restore_tokens(tree: Tree, tokens: Sequence[str], is_word: Sequence[bool]) -> Tree:
    """`tree`, whose leaves are the tokens where `is_word`, with every other token (punctuation) put back
    beside its neighbour, attached low: an opening quote or bracket to the word after it, any other
    punctuation to the word before it (or after it, when no word precedes or follows).
    ((the dog) barks) for `` the dog barks . -> (((`` the) dog) (barks .)).

    The evaluation protocol drops punctuation, so this adds no span it counts.
    """
    words = [token for token, word in zip(tokens, is_word) if word]
    if words != leaves(tree):
        raise ValueError("the tree's leaves are not the tokens' words")
    before: list[list[str]] = [[] for _ in words]  # punctuation attached in front of word k
    after: list[list[str]] = [[] for _ in words]
    seen, waiting = -1, []  # waiting: tokens for the next word
    straight = 0  # straight double quotes so far
    for token, word in zip(tokens, is_word):
        opens = token in OPENING or (token == '"' and straight % 2 == 0)
        straight += token == '"'
        if word:
            seen += 1
            before[seen], waiting = waiting, []
        elif opens or seen < 0:
            waiting.append(token)
        else:
            after[seen] += waiting + [token]  # an opening mark followed by closing punctuation stays with it
            waiting = []
    after[-1] += waiting
    grown: list[Tree] = []
    for word, pre, post in zip(words, before, after):
        node: Tree = word
        for token in post:
            node = [node, token]
        for token in reversed(pre):
            node = [token, node]
        grown.append(node)
    return rebuild(tree, leaf=lambda word, k: grown[k])


def leaves(tree: Tree) -> list[str]:
    return [e for e in walk(tree) if isinstance(e, str)]


def spans(tree: Tree, whole: bool = False) -> set[tuple[int, int]]:
    """Every constituent of two or more words except the whole sentence, as in the paper's code (`whole`:
    the whole sentence too, as a tree's score over spans counts it). Read as `rebuild` reads (no recursion, no
    events: a parse reads every tree's spans)."""
    found: set[tuple[int, int]] = set()
    if isinstance(tree, str):
        return found
    position, stack = 0, [(iter(tree), 0)]  # each open node: its children still to read, its first word
    while stack:
        children, start = stack[-1]
        for child in children:
            if isinstance(child, str):
                position += 1
            else:
                stack.append((iter(child), position))
                break
        else:  # every child read: the node's span
            stack.pop()
            if position - start > 1:
                found.add((start, position))
    if not whole:
        found.discard((0, position))
    return found


def left_branching(words: Sequence[str]) -> Tree:
    tree: Tree = words[0]
    for word in words[1:]:
        tree = [tree, word]
    return tree


def right_branching(words: Sequence[str]) -> Tree:
    tree: Tree = words[-1]
    for word in reversed(words[:-1]):
        tree = [word, tree]
    return tree


def balanced(words: Sequence[str]) -> Tree:
    if len(words) == 1:
        return words[0]
    half = (len(words) + 1) // 2
    return [balanced(words[:half]), balanced(words[half:])]


def random_tree(words: Sequence[str], rng: random.Random) -> Tree:
    """A random binary tree: split at a uniformly chosen point, recursively."""
    if len(words) == 1:
        return words[0]
    cut = rng.randint(1, len(words) - 1)
    return [random_tree(words[:cut], rng), random_tree(words[cut:], rng)]


def node_labels(tree: Tree, labels: Mapping[tuple[int, int], Any], is_word: Sequence[bool] | None = None,
                order: str = "open", default: Any = "X") -> list[Any]:
    """Each node's label, in the order `walk` opens the nodes (`order="close"`: closes them, as `rebuild` makes
    them): `labels` of the words it covers (i, j), else `default`. `is_word`: per leaf, whether it is a word (else
    punctuation put back, which a span's word offsets do not count); default: every leaf. (Any value by word span
    goes onto the nodes so: a constituent's confidence too.)"""
    opened: list[Any] = []
    closed: list[Any] = []
    starts: list[tuple[int, int]] = []
    leaf = word = 0
    for event in walk(tree):
        if event is OPEN:
            starts.append((len(opened), word))
            opened.append(default)
        elif event is CLOSE:
            k, first = starts.pop()
            opened[k] = labels.get((first, word), default)
            closed.append(opened[k])
        else:
            word += 1 if is_word is None or is_word[leaf] else 0
            leaf += 1
    return opened if order == "open" else closed


def _render(tree: Tree, word, open_: str | Callable[[], str], close: str, sep: str) -> str:
    parts: list[str] = []
    separate = False  # whether the next item follows a sibling
    for event in walk(tree):
        if event is CLOSE:
            parts.append(close)
            separate = True
            continue
        if separate:
            parts.append(sep)
        parts.append((open_ if isinstance(open_, str) else open_()) if event is OPEN else word(event))
        separate = event is not OPEN
    return "".join(parts)


def to_brackets(tree: Tree) -> str:
    """`(the (quick (brown fox)))`; brackets inside words are written as the Penn Treebank does (-LRB- ...)."""
    return _render(tree, escape, "(", ")", " ")


def to_ptb(tree: Tree, labels: Mapping[tuple[int, int], str] | None = None,
           is_word: Sequence[bool] | None = None) -> str:
    """A labeled tree that EVALB and nltk read: every node X (or its label in `labels`, by the words it covers;
    see `node_labels`), every word under its own X."""
    if not labels:
        return _render(tree, lambda w: f"(X {escape(w)})", "(X ", ")", " ")
    names = iter(node_labels(tree, labels, is_word))
    return _render(tree, lambda w: f"(X {escape(w)})", lambda: f"({next(names)} ", ")", " ")


def to_labelled_brackets(tree: Tree, labels: Mapping[tuple[int, int], str] | None = None,
                         is_word: Sequence[bool] | None = None) -> str:
    """`(X The (X old man))`, as an nltk.Tree of ours prints on one line (words straight under their node, brackets in
    them escaped), each node X or its label (see `node_labels`); without recursion, however deep the tree."""
    if isinstance(tree, str):
        return f"(X {escape(tree)})"
    names = iter(node_labels(tree, labels or {}, is_word))
    return _render(tree, escape, lambda: f"({next(names)} ", ")", " ")


def depth(tree: Tree) -> int:
    """How many levels of nodes the tree has (a word alone: 0), counted without recursion."""
    deepest = level = 0
    for event in walk(tree):
        level += (event is OPEN) - (event is CLOSE)
        deepest = max(deepest, level)
    return deepest


def to_json(tree: Tree) -> str:
    """Nested lists of words; non-ASCII kept as is."""
    return _render(tree, lambda w: json.dumps(w, ensure_ascii=False), "[", "]", ", ")


PTB_ESCAPES = {"(": "-LRB-", ")": "-RRB-", "[": "-LSB-", "]": "-RSB-", "{": "-LCB-", "}": "-RCB-"}


def escape(word: str) -> str:
    for bracket, name in PTB_ESCAPES.items():
        word = word.replace(bracket, name)
    return word


def unescape(word: str) -> str:
    for bracket, name in PTB_ESCAPES.items():
        word = word.replace(name, bracket)
    return word


def parse_brackets(text: str) -> Tree:
    """Read `(the (quick (brown fox)))` back; -LRB-, -RRB- and the others become brackets again."""
    stack: list[list] = [[]]
    for token in text.replace("(", " ( ").replace(")", " ) ").split():
        if token == "(":
            stack.append([])
        elif token == ")":
            if len(stack) == 1:
                raise TreeSyntaxError("unbalanced brackets: too many ')'")
            node = stack.pop()
            if not node:
                raise TreeSyntaxError("empty brackets ()")
            stack[-1].append(node[0] if len(node) == 1 else node)
        else:
            stack[-1].append(unescape(token))
    if len(stack) != 1:
        raise TreeSyntaxError("unbalanced brackets: a '(' is never closed")
    if len(stack[0]) != 1:
        raise TreeSyntaxError("expected one tree")
    return stack[0][0]
