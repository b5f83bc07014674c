import itertools
import random

import nltk
import pytest

from grammar_induce import trees


def split_recursively(distances, words):
    """The paper's build_tree, verbatim in spirit: first index of the maximum, recursively."""
    if len(words) == 1:
        return words[0]
    i = max(range(len(distances)), key=lambda k: (distances[k], -k))
    tree = []
    if i > 0:
        tree.append(split_recursively(distances[:i], words[:i]))
    right = words[i] if i == len(words) - 1 else [words[i], split_recursively(distances[i + 1 :], words[i + 1 :])]
    return right if not tree else tree + [right]


def test_linear_split_equals_recursive_definition_on_random_inputs_with_ties():
    rng = random.Random(0)
    for _ in range(3000):
        n = rng.randint(1, 14)
        distances = [rng.choice([0.1, 0.2, 0.3, 0.5]) if rng.random() < 0.5 else rng.random() for _ in range(n)]
        words = [f"w{k}" for k in range(n)]
        assert trees.tree_from_distances(distances, words) == split_recursively(distances, words)


def test_every_small_distance_pattern():
    for n in range(1, 6):
        words = [str(k) for k in range(n)]
        for distances in itertools.product(range(3), repeat=n):
            assert trees.tree_from_distances(list(distances), words) == split_recursively(list(distances), words)


def test_split_examples():
    words = "the quick brown fox".split()
    assert trees.tree_from_distances([0.9, 0.1, 0.2, 0.3], words) == ["the", [["quick", "brown"], "fox"]]
    assert trees.tree_from_distances([0.1, 0.2, 0.9, 0.3], words) == [["the", "quick"], ["brown", "fox"]]
    assert trees.tree_from_distances([0.5, 0.5, 0.5, 0.5], words) == ["the", ["quick", ["brown", "fox"]]]
    assert trees.tree_from_distances([1.0], ["a"]) == "a"


def test_long_sentence_does_not_recurse():
    n = 20000
    tree = trees.tree_from_distances(list(range(n)), [str(k) for k in range(n)])  # left-branching
    assert len(trees.leaves(tree)) == n


def test_spans_exclude_whole_sentence_and_single_words():
    tree = [["a", "b"], ["c", ["d", "e"]]]
    assert trees.spans(tree) == {(0, 2), (2, 5), (3, 5)}
    assert trees.spans("a") == set()
    assert trees.spans(["a", "b"]) == set()
    assert trees.spans(["a", "b", "c"]) == set()  # flat


def test_baselines():
    words = list("abcde")
    assert trees.spans(trees.left_branching(words)) == {(0, 2), (0, 3), (0, 4)}
    assert trees.spans(trees.right_branching(words)) == {(1, 5), (2, 5), (3, 5)}
    assert trees.balanced(words) == [[["a", "b"], "c"], ["d", "e"]]
    rng = random.Random(3)
    for _ in range(50):
        t = trees.random_tree(words, rng)
        assert trees.leaves(t) == words and len(trees.spans(t)) == 3  # binary: n - 2 spans


def test_brackets_round_trip_and_ptb_is_readable_by_nltk():
    tree = [["the", "(odd)"], ["fox", ["ran", "away"]]]
    text = trees.to_brackets(tree)
    assert text == "((the -LRB-odd-RRB-) (fox (ran away)))"
    assert trees.parse_brackets(text) == tree
    ptb = nltk.Tree.fromstring(trees.to_ptb(tree))
    assert ptb.leaves() == ["the", "-LRB-odd-RRB-", "fox", "ran", "away"]
    assert trees.to_json([["苹果", "的"], "x"]) == '[["苹果", "的"], "x"]'


@pytest.mark.parametrize("bad", ["(a b", "a b)", "()", "(a) (b)"])
def test_parse_brackets_rejects_malformed(bad):
    with pytest.raises(ValueError):
        trees.parse_brackets(bad)
