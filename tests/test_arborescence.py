"""The maximum spanning arborescence (structures/arborescence.py) against brute force over every head assignment
that is a tree, on random scores."""

import itertools
import random

import pytest

from grammar_induce.structures.arborescence import _cycle, best_tree


def trees_of(n: int, root: int):
    """Every head assignment of n words with `root` the only root that has no cycle."""
    others = [d for d in range(n) if d != root]
    for choice in itertools.product(range(n), repeat=len(others)):
        head = [-1] * n
        for d, h in zip(others, choice):
            head[d] = h
        if all(head[d] != d for d in others) and not _cycle(head):
            yield head


@pytest.mark.parametrize("seed", range(30))
def test_the_best_tree_is_the_best_of_every_tree(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 6)
    root = rng.randrange(n)
    scores = [[rng.gauss(0, 1) for _ in range(n)] for _ in range(n)]

    def total(head):
        return sum(scores[h][d] for d, h in enumerate(head) if h != -1)

    found = best_tree(scores, root)
    assert not _cycle(found) and found[root] == -1 and found.count(-1) == 1
    assert total(found) == pytest.approx(max(total(head) for head in trees_of(n, root)))


def test_a_cycle_of_best_heads_is_broken():
    """rose <-> quickly: each other's best head; the root (2) must reach both."""
    scores = [[0, 5, 1], [5, 0, 0], [2, 1, 0]]
    assert best_tree(scores, root=2) == [2, 0, -1]
