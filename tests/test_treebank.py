

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import grammar_induce as gi
from grammar_induce import trees
from grammar_induce.errors import InputError
from grammar_induce.text.treebank import TagFilter, parse_bracketed, preprocess, read_gold

from .conftest import (
    ROOT,
    TREE_ALPHABET,
    invoke,
)

WSJ = """( (S
    (NP-SBJ (NNP Pierre) (NNP Vinken) )
    (, ,)
    (VP (MD will)
      (VP (VB join)
        (NP (DT the) (NN board) )
        (PP-CLR (IN as) (NP (DT a) (JJ nonexecutive) (NN director) ))
        (NP-TMP (NNP Nov.) (CD 29) )))
    (. .) ))
( (S (NP-SBJ (-NONE- *-1)) (VP (VBZ is) (ADJP (JJ good))) (. .)) )
"""


def test_preprocess_drops_punctuation_traces_and_unary_chains(tmp_path):
    path = tmp_path / "wsj_0001.mrg"
    path.write_text(WSJ)
    gold, skipped = read_gold(str(path), TagFilter())
    assert skipped == 0 and len(gold) == 2
    first = gold[0]
    assert first.source == f"{path}:1"
    assert first.words == "Pierre Vinken will join the board as a nonexecutive director Nov. 29".split()
    vp = ["join", ["the", "board"], ["as", ["a", "nonexecutive", "director"]], ["Nov.", "29"]]
    assert first.tree == [["Pierre", "Vinken"], ["will", vp]]
    assert gold[1].words == ["is", "good"] and gold[1].tree == ["is", "good"]  # trace and unaries gone
    assert gold[1].source == f"{path}:10"


def test_folder_of_mrg_and_one_tree_per_line(tmp_path):
    (tmp_path / "a.mrg").write_text(WSJ)
    (tmp_path / "b.mrg").write_text("(TOP (S (NN x) (NN y)))\n")
    gold, _ = read_gold(str(tmp_path), TagFilter())
    assert len(gold) == 3
    lines = tmp_path / "gold.txt"
    lines.write_text("(S (NP (DT a) (NN b)) (VP (VBD c)))\n(S (NN d) (. .))\n")
    gold, _ = read_gold(str(lines), TagFilter())
    assert [g.words for g in gold] == [["a", "b", "c"], ["d"]]


def test_ctb_preset_and_punct_tags():
    tree = parse_bracketed("(IP (NP (NN 苹果)) (VP (VV 吃) (PU 。)) (-NONE- *))", "x:1")
    assert preprocess(tree, TagFilter.from_options("ctb", None)) == ["苹果", "吃"]
    assert preprocess(tree, TagFilter.from_options("ptb", "PU,-NONE-")) == ["苹果", "吃"]
    assert preprocess(tree, TagFilter()) == "苹果"  # only NN is a PTB word tag


def test_punctuation_only_constituent_disappears():
    tree = parse_bracketed("(S (NP (DT the) (NN dog)) (PRN (, ,) (: --)) (VP (VBD ran)))", "x:1")
    assert preprocess(tree, TagFilter()) == [["the", "dog"], "ran"]


@pytest.mark.parametrize("text, message", [
    ("(S (NN a)\n(VP (VB b))\n", "gold.txt:1: unbalanced"),
    ("(S (NN a))\nstray words\n", "gold.txt:2: text outside a tree"),
    ("(S (NN a)))\n", "gold.txt:1: text outside a tree"),
])
def test_malformed_gold_names_file_and_line(tmp_path, text, message):
    path = tmp_path / "gold.txt"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        read_gold(str(path), TagFilter())


def test_missing_gold_file():
    with pytest.raises(InputError, match="no such file"):
        read_gold("/nonexistent/gold.mrg", TagFilter())


def test_gold_trees_whose_continuation_lines_start_in_column_0_are_read(tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text("(S (NP (DT the) (NN dog))\n(VP (VBD barked)))\n(S (NP (DT a) (NN cat)) (VP (VBD sat)))\n")
    report = gi.evaluate(["((the dog) barked)", "((a cat) sat)"], gold=gold)
    assert report.sentences == 2 and report.rows[report.main_row].sentence_f1 == 1.0
    bad = tmp_path / "bad.mrg"
    bad.write_text("(S (NP (DT the) (NN dog))\n(S (NP (DT a) (NN cat)) (VP (VBD sat)))\n")
    with pytest.raises(InputError, match="bad.mrg:1: unbalanced brackets"):
        gi.evaluate(["((a cat) sat)"], gold=bad)


@pytest.mark.parametrize("text, message", [
    ("(S (NP (DT the) (NN dog)) (VP (VBD ran))\n", "gold.txt:1: unbalanced"),
    ("(S (NP (DT)) (VP (VBD ran)))\n", "gold.txt:1: (DT) has no word"),
    ("()\n", "gold.txt:1: empty tree"),
    ("(S (NN a))\n(S the dog)\n", "gold.txt:2: (S ...) mixes words"),
])
def test_bad_gold_trees_and_skip_bad(tmp_path, text, message):
    gold = tmp_path / "gold.txt"
    gold.write_text(text + "(S (NN ok) (VBD fine))\n")
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_gold(str(gold), TagFilter())
    kept, skipped = read_gold(str(gold), TagFilter(), skip_bad=True)
    assert kept[-1].words == ["ok", "fine"] and skipped >= 1


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(TREE_ALPHABET, max_size=60) | st.text(max_size=40))
def test_fuzz_gold_reader_returns_trees_or_our_error(tmp_path, text):
    path = tmp_path / "fuzz.txt"
    path.write_text(text, encoding="utf-8")
    for skip_bad in (False, True):
        try:
            gold, _ = read_gold(str(path), TagFilter(keep=None), skip_bad=skip_bad)
        except InputError:
            continue
        assert all(g.words == trees.leaves(g.tree) for g in gold)


def test_chinese_gold_scored_with_the_english_tag_filter_says_so(tmp_path):
    gold = tmp_path / "ctb.txt"
    gold.write_text("(IP (NP (NR 张三)) (VP (VV 喜欢) (NP (NN 苹果))) (PU 。))\n"
                    "(IP (NP (PN 我们)) (VP (VV 学习) (NP (NN 中文) (CD 3))) (PU 。))\n")
    pred = tmp_path / "pred.txt"
    pred.write_text("苹果\n(中文 3)\n")  # what survives the PTB filter: the NN and CD leaves
    result = invoke("evaluate", "--pred", pred, "--gold", gold)
    assert result.exit_code == 0, result.output
    assert "dropped 67% of the gold leaves" in result.output and "--treebank ctb" in result.output


def test_a_valid_gold_tree_nested_past_nltks_limit_is_read_and_scored(tmp_path):
    """A valid 1,200-word gold tree (1,199 levels) was called malformed, then "nested deeper than nltk reads": its
    readers recursed once a level (issue 70, class 5). Read with a stack and folded bottom up, at the default
    recursion limit, it gives its words, spans and heads, and scores against its own brackets and PTB form."""
    n = 1200
    text = "".join(f"(S (NN w{k}) " for k in range(n - 1)) + f"(NN w{n - 1})" + ")" * (n - 1)
    gold = tmp_path / "deep.mrg"
    gold.write_text(f"( {text} )\n(S (NN a) (VP (VB b)))\n")
    deep, shallow = read_gold(str(gold), TagFilter())[0]
    words = [f"w{k}" for k in range(n)]
    assert deep.words == words and trees.to_brackets(deep.tree) == trees.to_brackets(trees.right_branching(words))
    assert len(deep.labels) == n - 1 and deep.labels[0] == (n - 2, n, "S") and deep.labels[-1] == (0, n, "S")
    # Collins' S takes its S child as head; the innermost S, (NN w1198) (NN w1199), has none of its list: the first
    # child. So w1198 (1-based 1199) heads every other word and is the root.
    assert deep.heads == (n - 1,) * (n - 2) + (0, n - 1)
    assert shallow.words == ["a", "b"] and shallow.heads == (2, 0)  # S heads on its VP
    report = gi.evaluate([trees.to_brackets(deep.tree), "(a b)"], gold=gold)
    assert report.sentences == 2 and report.rows[report.main_row].corpus_f1 == 1.0
    labelled = tmp_path / "labelled.mrg"
    labelled.write_text(gold.read_text())
    scored = invoke("evaluate", "--pred", labelled, "--gold", gold, "--quiet")
    assert scored.exit_code == 0 and "100.0" in scored.stdout, scored.output


@pytest.mark.parametrize("text, message", [
    ("(S (NN a)))", r"a '\)' closes nothing"),
    ("(S (NN a)", r"a '\(' is never closed"),
    ("(S (NN a)) (S (NN b))", "more than one tree"),
    ("word (S (NN a))", "a word outside the brackets"),
    ("( )", "empty tree"),
])
def test_a_malformed_bracketed_tree_says_what_is_wrong_where(text, message):
    with pytest.raises(InputError, match=f"x.mrg:3: (malformed tree \\()?{message}"):
        parse_bracketed(text, "x.mrg:3")


def test_gold_heads_are_found_only_when_asked_for():
    """issue 82, point 4: reading gold trees loads no head rules; a tree's heads are found on first use."""
    import subprocess
    import sys

    from grammar_induce.text.treebank import TagFilter, read_gold

    gold_file = ROOT / "grammar_induce" / "resources" / "synthetic" / "test.trees"
    code = ("import sys; from grammar_induce.text.treebank import TagFilter, read_gold; "
            f"read_gold({str(gold_file)!r}, TagFilter()); print('grammar_induce.text.heads' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
    first = read_gold(str(gold_file), TagFilter())[0][0]
    assert len(first.heads) == len(first.words) and first.heads.count(0) == 1
