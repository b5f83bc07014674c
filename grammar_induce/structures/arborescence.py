"""The highest-scoring dependency tree of a sentence from a score per (head, dependent) pair: a maximum spanning
arborescence with a given root (Chu and Liu 1965, Edmonds 1967). Each word takes its best head; a cycle among them
is contracted into one node whose arcs are rescored by what breaking the cycle there costs, the smaller problem is
solved, and the cycle is opened where the chosen arc enters it. O(n^3) for n words; torch-free."""

from __future__ import annotations

import math
from collections.abc import Sequence

NONE = -math.inf  # an arc that may not be taken


def best_tree(scores: Sequence[Sequence[float]], root: int) -> list[int]:
    """Each word's head (an index; -1 for `root`) of the tree with the most total score, `scores[h][d]` the score of
    word h heading word d (the diagonal and arcs into `root` are not taken)."""
    n = len(scores)
    s = [[NONE if h == d or d == root else float(scores[h][d]) for d in range(n)] for h in range(n)]
    return _solve(s, root)


def _solve(s: list[list[float]], root: int) -> list[int]:
    n = len(s)
    head = [-1 if d == root else max(range(n), key=lambda h: s[h][d]) for d in range(n)]
    cycle = _cycle(head)
    if not cycle:
        return head
    inside = set(cycle)
    outside = [v for v in range(n) if v not in inside]
    index = {v: k for k, v in enumerate(outside)}
    c = len(outside)  # the contracted node
    small = [[NONE] * (c + 1) for _ in range(c + 1)]
    enters: dict[int, int] = {}  # outside head -> the cycle word its best arc into the cycle enters
    leaves: dict[int, int] = {}  # outside dependent -> the cycle word its best arc from the cycle leaves
    for u in outside:
        for v in outside:
            small[index[u]][index[v]] = s[u][v]
        best = max(cycle, key=lambda v: s[u][v] - s[head[v]][v])
        small[index[u]][c], enters[u] = s[u][best] - s[head[best]][best], best
    for v in outside:
        best = max(cycle, key=lambda u: s[u][v])
        small[c][index[v]], leaves[v] = s[best][v], best
    found = _solve(small, index[root])
    heads = list(head)  # the cycle's own arcs, one of them replaced below
    for v in outside:
        h = found[index[v]]
        heads[v] = -1 if h == -1 else leaves[v] if h == c else outside[h]
    entering = outside[found[c]]
    heads[enters[entering]] = entering
    return heads


def _cycle(head: list[int]) -> list[int]:
    """Words on a cycle of the head links (-1: the root, no head), or [] when they form a tree."""
    state = [0] * len(head)  # 0 unseen, 1 on the current path, 2 done
    for start in range(len(head)):
        path, v = [], start
        while v != -1 and state[v] == 0:
            state[v] = 1
            path.append(v)
            v = head[v]
        if v != -1 and state[v] == 1:
            return path[path.index(v):]
        for u in path:
            state[u] = 2
    return []
