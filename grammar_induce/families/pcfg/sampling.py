"""Sentences drawn from a TN-PCFG with their trees: the root rule picks a nonterminal; a nonterminal A rewrites to B C
by drawing a rank component r from U[A, :] and then B from V[:, r] and C from W[:, r] (p(A -> B C) = sum_r U[A, r]
V[B, r] W[C, r], so the full rule tensor is never built); a preterminal emits a word. Every open node of every
sentence is expanded at once, a level at a time (a few batched draws a level). A sentence that grows past
`max_length` words is dropped and drawn again: the samples follow the grammar's distribution given a length of at most
`max_length` (the grammar has no unary rules, so every sentence has at least two words). Sentences come a chunk of
CHUNK roots at a time, whatever the count asked for: memory stays flat in the count, and the first k of n sentences
are those of k (the same seed, the same sentences)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from ... import trees
from .grammar import Grammar

CHUNK = 256  # roots drawn and grown at a time


@dataclass(frozen=True)
class Sampled:
    """One drawn sentence: its words, its tree over them, and each node's symbol by the words it covers (`NT-k` for
    the nonterminals of spans of two or more words, `T-k` for each word's preterminal by its (i, i+1))."""

    words: list[str]
    tree: trees.Tree
    labels: dict[tuple[int, int], str]
    ptb: str  # the tree with its symbols, preterminals over the words: (NT-3 (T-7 the) (T-2 dog))


def sample(grammar: Grammar, vocab: list[str], count: int, generator: torch.Generator,
           max_length: int = 40) -> list[Sampled]:
    """`count` sentences of at most `max_length` words drawn from the grammar (float probabilities on the CPU)."""
    return list(itertools.islice(samples(grammar, vocab, generator, max_length), count))


def samples(grammar: Grammar, vocab: list[str], generator: torch.Generator, max_length: int = 40) -> Iterator[Sampled]:
    """Sentences of at most `max_length` words drawn from the grammar without end, a chunk at a time."""
    nt = grammar.head.shape[0]
    # each distribution as its cumulative sums, a row each: a draw is a uniform number looked up in its row
    root, head, emission = _cumulative(grammar.root[None]), _cumulative(grammar.head), _cumulative(grammar.emission.exp())
    left, right = _cumulative(grammar.left.t()), _cumulative(grammar.right.t())  # (r, NT + T): over symbols
    while True:
        roots = _draw(root, [0] * CHUNK, generator)
        yield from _grow(roots, nt, head, left, right, emission, vocab, generator, max_length)


def _cumulative(rows: Tensor) -> Tensor:
    """Each row's cumulative sums, normalised to end at one (float64: a row of 10,000 small numbers)."""
    sums = rows.double().cumsum(-1)
    return sums / sums[:, -1:]


def _draw(cumulative: Tensor, rows: list[int], generator: torch.Generator) -> list[int]:
    """One index drawn from each of the distributions `rows` (of the cumulative sums)."""
    picked = cumulative[rows]
    uniform = torch.rand(len(rows), 1, generator=generator, dtype=picked.dtype)
    return torch.searchsorted(picked, uniform).clamp_max(picked.shape[1] - 1)[:, 0].tolist()


def _grow(roots: list[int], nt: int, head: Tensor, left: Tensor, right: Tensor, emission: Tensor, vocab: list[str],
          generator: torch.Generator, max_length: int) -> list[Sampled]:
    """Expand the sentences from their root symbols, a level at a time; those that stay within max_length words."""
    # each node: (sentence, symbol, children: a pair of node indices or a word id)
    symbols = list(roots)
    owner = list(range(len(roots)))
    children: list[tuple[int, int] | int | None] = [None] * len(roots)
    leaves = [1] * len(roots)  # each sentence's count of open nodes and words so far (a lower bound on its length)
    frontier = list(range(len(roots)))
    while frontier:
        frontier = [k for k in frontier if leaves[owner[k]] <= max_length]
        rules = [k for k in frontier if symbols[k] < nt]
        words = [k for k in frontier if symbols[k] >= nt]
        if words:
            for k, word in zip(words, _draw(emission, [symbols[k] - nt for k in words], generator)):
                children[k] = word
        frontier = []
        if rules:
            ranks = _draw(head, [symbols[k] for k in rules], generator)
            b, c = _draw(left, ranks, generator), _draw(right, ranks, generator)
            for k, first, second in zip(rules, b, c):
                children[k] = (len(symbols), len(symbols) + 1)
                symbols += [first, second]
                owner += [owner[k], owner[k]]
                children += [None, None]
                leaves[owner[k]] += 1
                frontier += list(children[k])
    return [_sentence(k, symbols, children, nt, vocab) for k in range(len(roots)) if leaves[k] <= max_length]


def _sentence(root: int, symbols: list[int], children: list, nt: int, vocab: list[str]) -> Sampled:
    """A drawn sentence's words, tree and labels, read from its nodes without recursion."""
    words: list[str] = []
    labels: dict[tuple[int, int], str] = {}
    built: dict[int, trees.Tree] = {}
    shown: dict[int, str] = {}
    starts: dict[int, int] = {}
    stack = [(root, False)]
    while stack:
        k, done = stack.pop()
        below = children[k]
        if isinstance(below, int):  # a preterminal and its word
            labels[len(words), len(words) + 1] = f"T-{symbols[k] - nt}"
            built[k] = vocab[below]
            shown[k] = f"(T-{symbols[k] - nt} {trees.escape(vocab[below])})"
            words.append(vocab[below])
        elif not done:
            starts[k] = len(words)
            stack += [(k, True), (below[1], False), (below[0], False)]
        else:
            labels[starts[k], len(words)] = f"NT-{symbols[k]}"
            built[k] = [built.pop(below[0]), built.pop(below[1])]
            shown[k] = f"(NT-{symbols[k]} {shown.pop(below[0])} {shown.pop(below[1])})"
    return Sampled(words, built[root], labels, shown[root])
