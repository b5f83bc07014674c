import json

import nltk
import pytest

from grammar_induce import trees
from grammar_induce.formats import RENDERERS, MemberResult, SentenceResult, render

BRACKETS = ["(", ")", "[", "]", "{", "}"]


def result_over(words):
    tree = trees.balanced(words)
    distances = [[0.5] * len(words)]
    return SentenceResult(words, tree, [MemberResult("forward", distances, distances, tree)])


@pytest.mark.parametrize("bracket", BRACKETS)
def test_every_format_keeps_every_bracket_word(bracket):
    words = ["a", bracket, "b", bracket, "c", "f(x)"]
    result = result_over(words)
    tree = result.tree
    assert trees.parse_brackets(render(result, "brackets")) == tree
    ptb = nltk.Tree.fromstring(render(result, "ptb"))
    assert [trees.unescape(w) for w in ptb.leaves()] == words
    assert json.loads(render(result, "json")) == tree
    assert json.loads(render(result, "jsonl"))["tree"] == tree
    drawn = render(result, "ascii")
    assert drawn.split().count(bracket) == 2 and "f(x)" in drawn.split()  # a picture: the words as written
    assert set(RENDERERS) == {"brackets", "ptb", "json", "jsonl", "ascii"}


def test_bracket_words_get_their_penn_treebank_names():
    assert trees.to_brackets(["a", ["(", ")"]]) == "(a (-LRB- -RRB-))"
    assert trees.to_brackets(["[", ["{", "}"], "]"]) == "(-LSB- (-LCB- -RCB-) -RSB-)"
    assert trees.leaves(["(", [")", "x"]]) == ["(", ")", "x"]
    assert trees.spans(["(", [")", "x"]]) == {(1, 3)}


def test_an_empty_line_is_an_empty_output_in_every_format():
    assert all(render(SentenceResult([], None), fmt) == "" for fmt in RENDERERS)
