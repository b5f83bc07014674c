import pytest

from grammar_induce.files import InputError
from grammar_induce.text.treebank import TagFilter, parse_bracketed, preprocess, read_gold

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
