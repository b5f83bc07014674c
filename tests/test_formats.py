
import json
import sys

import nltk
import pytest

from grammar_induce import trees
from grammar_induce.output.formats import RENDERERS, MemberResult, SentenceResult, render

from .conftest import (
    invoke,
)

BRACKETS = ["(", ")", "[", "]", "{", "}"]


def result_over(words):
    tree = trees.balanced(words)
    distances = [[0.5] * len(words)]
    heads = [k for k in range(len(words))]  # each word hangs from the one before it
    return SentenceResult(words, tree, [MemberResult("forward", {"forget": distances, "input": distances}, tree,
                                                     heads=heads)])


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
    assert [row.split("\t")[1] for row in render(result, "conll").splitlines()] == words
    assert set(RENDERERS) == {"brackets", "ptb", "json", "jsonl", "ascii", "conll"}


def test_bracket_words_get_their_penn_treebank_names():
    assert trees.to_brackets(["a", ["(", ")"]]) == "(a (-LRB- -RRB-))"
    assert trees.to_brackets(["[", ["{", "}"], "]"]) == "(-LSB- (-LCB- -RCB-) -RSB-)"
    assert trees.leaves(["(", [")", "x"]]) == ["(", ")", "x"]
    assert trees.spans(["(", [")", "x"]]) == {(1, 3)}


def test_an_empty_line_is_an_empty_output_in_every_format_but_jsonl_where_it_is_a_record():
    assert all(render(SentenceResult([], None), fmt) == "" for fmt in RENDERERS if fmt != "jsonl")
    assert json.loads(render(SentenceResult([], None), "jsonl")) == {"tokens": [], "words": [], "tree": None}


def test_every_jsonl_line_has_one_schema_with_the_words_the_model_read():
    member = MemberResult("forward", {"forget": [[0.1, 0.2]], "input": [[0.3, 0.4]]}, ["the", "n"])
    plain = json.loads(render(SentenceResult(["the", "3.5"], ["the", "3.5"], [member], read=["the", "N"]), "jsonl"))
    punct = json.loads(render(SentenceResult(["The", "3.5"], [["The", "3.5"], "."], [member], ["The", "3.5", "."],
                                             [True, True, False], read=["the", "N"]), "jsonl"))
    assert plain.keys() == punct.keys() == {"tokens", "words", "forget", "input", "tree"}
    assert plain["words"] == punct["words"] == ["the", "N"] and punct["tokens"] == ["The", "3.5", "."]


def test_agreement_is_the_same_in_every_format(tiny_run):
    models = ["--model", tiny_run / "best.pt", "--model", tiny_run / "best.pt"]  # twins: they agree fully
    for fmt, sentences in (("brackets", ["a b c d", "c d e"]), ("html", ["a b c d", "c d e"]), ("svg", ["a b c d"])):
        table = invoke("parse", *models, "--agreement", "--format", fmt, *sentences).stderr
        assert table.count("100.0") == 3, (fmt, table)  # each member, and the mean


def test_every_jsonl_line_is_json_with_the_words_the_model_read():
    result = invoke("parse", "--model", "ptb", "--format", "jsonl", "The 3.5 dogs", "", "the dogs barked .")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["words"] for line in lines] == [["the", "N", "dogs"], [], ["the", "dogs", "barked"]]
    assert lines[1] == {"tokens": [], "words": [], "tree": None}
    assert lines[0].keys() == lines[2].keys() and trees.leaves(lines[2]["tree"]) == ["the", "dogs", "barked", "."]


def test_no_output_format_recurses_per_tree_level(monkeypatch):
    """A tree 1,199 levels deep (a PCFG past its parse limit gave a right-branching one; any reader's own trees may
    be): json.dumps, nltk's reader and its drawing recurse once a level. Every format writes it; ascii says the tree
    is too deep to draw and writes its PTB form. And a PCFG's tree of a line that long is no deeper than a piece's
    and a few levels: it reads back at the default recursion limit (issue 70, class 5)."""
    import json

    import grammar_induce as gi
    from grammar_induce.families.pcfg import model as pcfg
    from grammar_induce.output.formats import SentenceResult, render

    words = [f"w{k}" for k in range(1200)]
    line = " ".join(words)
    monkeypatch.setattr(pcfg, "PARSE_LIMIT", 30)  # pieces of 30 words: the same joining, a fraction of the work
    shallow = gi.load("ptb-pcfg").analyse(line)
    assert trees.leaves(shallow.tree) == words and trees.depth(shallow.tree) <= 30 + 7  # 40 pieces: 6 levels
    assert json.loads(render(shallow, "jsonl"))["tree"] == shallow.tree  # at the default recursion limit
    result = SentenceResult(words, trees.right_branching(words))
    brackets = render(result, "brackets")  # written at the default recursion limit
    lines = {fmt: render(result, fmt) for fmt in ("jsonl", "json")}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)  # json.loads and == on nested lists recurse once a level: reading back, not writing
    try:
        record = json.loads(lines["jsonl"])
        assert record["tree"] == result.tree == json.loads(lines["json"])
        assert record["tokens"] == words and trees.parse_brackets(brackets) == result.tree
    finally:
        sys.setrecursionlimit(limit)
    assert render(result, "brackets").count("(") == 1199 and render(result, "ptb").count("(X") == 2399
    drawn = render(result, "ascii").splitlines()
    assert drawn[0] == "(a tree of 1199 levels, too deep to draw: its PTB form)" and drawn[1] == render(result, "ptb")


def test_ascii_drawings_of_wide_characters_line_up_in_a_terminal():
    """nltk lays a drawing out one column a character; a CJK character takes two in a terminal. Each leaf's bar must
    stand over the leaf's own columns, counted as a terminal counts them."""
    import unicodedata

    import grammar_induce as gi
    from grammar_induce.output.formats import render

    def columns(text: str) -> list[int]:  # the terminal column where each character starts
        found, at = [], 0
        for char in text:
            found.append(at)
            at += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
        return found

    drawn = render(gi.load("zh").analyse("我们喜欢北京的苹果。"), "ascii").splitlines()
    leaves, bars = drawn[-1], drawn[-2]
    leaf_columns, bar_columns = columns(leaves), columns(bars)
    spans, start = [], None
    for k, char in enumerate(leaves + " "):
        if char != " " and start is None:
            start = k
        elif char == " " and start is not None:
            spans.append((leaf_columns[start], leaf_columns[k - 1] + 2))
            start = None
    bar_at = [bar_columns[k] for k, char in enumerate(bars) if char == "|"]
    assert len(spans) == len(bar_at) == 6
    assert all(a <= bar < b for (a, b), bar in zip(spans, bar_at))
