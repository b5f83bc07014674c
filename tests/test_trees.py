
import itertools
import random

import nltk
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammar_induce import trees
from grammar_induce.inference.voting import most_voted_tree

from .conftest import TREE_ALPHABET


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


def _spans_by_recursion(tree, start=0):
    """Every node's span (start, end) of a nested tree, by its definition (recursion: small trees only)."""
    if isinstance(tree, str):
        return set(), start + 1
    found, end = set(), start
    for child in tree:
        inside, end = _spans_by_recursion(child, end)
        found |= inside
    return found | {(start, end)}, end


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.sampled_from(["a", "(", ")", "X"]), lambda kids: st.lists(kids, min_size=1, max_size=4),
                    max_leaves=30))
def test_spans_are_every_node_of_two_or_more_words_whatever_its_arity(tree):
    """n-ary nodes, one-child nodes, words that look like brackets; an nltk.Tree reads the same."""
    every, n = _spans_by_recursion(tree)
    wide = {(i, j) for i, j in every if j - i > 1}
    assert trees.spans(tree, whole=True) == wide and trees.spans(tree) == wide - {(0, n)}
    if not isinstance(tree, str):
        as_nltk = trees.rebuild(tree, lambda children: nltk.Tree("X", children))
        assert trees.spans(as_nltk, whole=True) == wide


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


def split_at_largest_gap(gaps, words):
    """The gap decoder's definition: split at the first largest gap, then each side the same way."""
    if len(words) == 1:
        return words[0]
    k = max(range(len(gaps)), key=lambda m: (gaps[m], -m))
    return [split_at_largest_gap(gaps[:k], words[: k + 1]), split_at_largest_gap(gaps[k + 1 :], words[k + 1 :])]


def all_binary_trees(words):
    if len(words) == 1:
        yield words[0]
        return
    for cut in range(1, len(words)):
        for left in all_binary_trees(words[:cut]):
            for right in all_binary_trees(words[cut:]):
                yield [left, right]


def test_gap_decoder_equals_its_recursive_definition_on_every_small_case_with_ties():
    for n in range(1, 7):
        words = [f"w{k}" for k in range(n)]
        for gaps in itertools.product([0.0, 0.5, 1.0], repeat=n - 1):
            assert trees.tree_from_gaps(list(gaps), words) == split_at_largest_gap(list(gaps), words)


def test_gap_decoder_does_not_force_the_split_word_alone():
    # gaps: a|b 0.1, b|c 0.9, c|d 0.2 -> split between b and c, and c d stay together
    assert trees.tree_from_gaps([0.1, 0.9, 0.2], list("abcd")) == [["a", "b"], ["c", "d"]]
    # forward distances 0 .9 .1 .5 score the gaps .9 .1 .5: the paper's decoder makes b head the
    # rest ([b [c d]]), while the gap decoder groups b c before d
    assert trees.paper_tree([0.0, 0.9, 0.1, 0.5], list("abcd")) == ["a", ["b", ["c", "d"]]]
    assert trees.tree_from_gaps(trees.gap_scores([0.0, 0.9, 0.1, 0.5], "forward"), list("abcd")) == [
        "a", [["b", "c"], "d"]]
    with pytest.raises(ValueError):
        trees.tree_from_gaps([0.1], list("abc"))


def test_gap_scores_of_each_direction():
    assert trees.gap_scores([0.5, 0.1, 0.9], "forward") == [0.1, 0.9]
    assert trees.gap_scores([0.5, 0.1, 0.9], "backward") == [0.5, 0.1]


def test_backward_paper_decoder_is_the_mirror_image():
    # the largest distance's word ends the left part; ties go to the rightmost (the first the model read)
    assert trees.paper_tree([0.1, 0.9, 0.5, 0.2], list("abcd"), "backward") == [["a", "b"], ["c", "d"]]
    assert trees.paper_tree([0.1, 0.2, 0.3], list("abc"), "backward") == [["a", "b"], "c"]
    assert trees.paper_tree([0.5, 0.5], list("ab"), "backward") == ["a", "b"]
    rng = random.Random(1)
    for _ in range(500):
        n = rng.randint(1, 10)
        distances = [rng.choice([0.1, 0.5, 0.9]) for _ in range(n)]
        words = [f"w{k}" for k in range(n)]
        mirrored = trees.mirror(trees.tree_from_distances(distances[::-1], words[::-1]))
        assert trees.paper_tree(distances, words, "backward") == mirrored
        assert trees.leaves(mirrored) == words


def test_mirror_reverses_every_node_and_is_its_own_inverse():
    tree = [["a", "b"], ["c", ["d", "e"]]]
    assert trees.mirror(tree) == [[["e", "d"], "c"], ["b", "a"]]
    assert trees.mirror(trees.mirror(tree)) == tree
    assert trees.mirror("a") == "a"


def test_span_voting_equals_brute_force_over_all_binary_trees():
    rng = random.Random(2)
    for n in range(1, 9):
        words = [f"w{k}" for k in range(n)]
        candidates = list(all_binary_trees(words))
        for _ in range(30 if n > 2 else 3):
            members = [rng.choice(candidates) for _ in range(rng.randint(1, 5))]
            votes = [sum(len(trees.spans(c) & trees.spans(m)) for m in members) for c in candidates]
            voted = most_voted_tree(members)
            assert voted in candidates
            assert votes[candidates.index(voted)] == max(votes)


def test_span_voting_of_identical_members_is_their_tree():
    tree = [["the", "dog"], ["saw", ["a", "cat"]]]
    assert most_voted_tree([tree, tree, tree]) == tree
    assert most_voted_tree([tree]) == tree
    # two of three agree on every span: the majority wins
    other = trees.right_branching(["the", "dog", "saw", "a", "cat"])
    assert most_voted_tree([tree, other, tree]) == tree


def test_standardize():
    assert trees.standardize([1.0, 3.0]) == [-1.0, 1.0]
    assert trees.standardize([2.0, 2.0, 2.0]) == [0.0, 0.0, 0.0]
    assert trees.standardize([]) == []


def assert_most_voted(voted, voters: list, weights: list[float], words: list[str]) -> None:
    """`voted` holds as many weighted votes as the best of every binary tree over `words`."""
    candidates = list(all_binary_trees(words))
    score = [sum(w * len(trees.spans(c) & trees.spans(v)) for v, w in zip(voters, weights)) for c in candidates]
    assert score[candidates.index(voted)] == max(score)


def test_weighted_span_voting_equals_brute_force():
    rng = random.Random(3)
    for n in range(2, 8):
        words = [f"w{k}" for k in range(n)]
        candidates = list(all_binary_trees(words))
        for _ in range(20):
            members = [rng.choice(candidates) for _ in range(rng.randint(1, 4))]
            weights = [rng.choice([0.25, 0.5, 1.0, 2.0]) for _ in members]
            assert_most_voted(most_voted_tree(members, weights), members, weights, words)


def test_a_right_branching_voter_is_one_more_weighted_voter():
    from grammar_induce.inference.ensemble import ParseOptions, Reading, combine

    rng = random.Random(4)
    for n in range(3, 8):
        words = [f"w{k}" for k in range(n)]
        for _ in range(10):
            members = [Reading(words, {"forget": [[rng.random() for _ in words]], "input": [[0.0] * n]}) for _ in range(2)]
            voters = [m.tree(1) for m in members] + [trees.right_branching(words)]
            for weight in (0.5, 1.0):
                voted = combine([members], [1, 1], ParseOptions(layers=(1, 1), right_voter=weight))[0]
                assert_most_voted(voted, voters, [1, 1, weight], words)
            assert combine([members], [1, 1], ParseOptions(layers=(1, 1), right_voter=5.0))[0] == voters[-1]


@settings(max_examples=300, deadline=None)
@given(text=st.text(TREE_ALPHABET, max_size=60))
def test_fuzz_bracket_parser_returns_a_tree_or_our_error(text):
    try:
        tree = trees.parse_brackets(text)
    except trees.TreeSyntaxError:
        return
    assert trees.parse_brackets(trees.to_brackets(tree)) == tree
