"""Chinese: CTB trees read with the ctb preset (PU and -NONE- leaves dropped), Chinese text's tokens and
punctuation round trip through the tokenizer and the tree, and the shipped `zh` model by name."""

import pytest

from grammar_induce import trees
from grammar_induce.families import pretrained
from grammar_induce.text.tokenizer import Tokenizer
from grammar_induce.text.treebank import TagFilter, read_gold

from .conftest import SHARED_DATA

CTB_TREE = ("(TOP (IP (NP-SBJ (NP-PN (NR 法国)) (NP (NN 国防) (NN 部长))) (VP (NP-TMP (NT １日)) (VP (VV 说) "
            "(PU ，) (IP-OBJ (NP-SBJ (-NONE- *PRO*)) (VP (VV 研究)))) (PU 。))))")
CHINESE = Tokenizer("jieba", lowercase=True, replace_digits=True, punctuation_aside=True, fold_width=True)
TEXT = "新华社北京２月１２日电（记者张有浩）：中国十四个边境开放城市，经济建设成就显著。"


def test_ctb_trees_with_the_preset_drop_punctuation_and_traces(tmp_path):
    gold = tmp_path / "dev.trees"
    gold.write_text(CTB_TREE + "\n")
    (tree,), skipped = read_gold(str(gold), TagFilter.from_options("ctb", None))
    assert skipped == 0 and tree.words == ["法国", "国防", "部长", "１日", "说", "研究"]
    assert trees.spans(tree.tree) == {(1, 3), (0, 3), (3, 6), (4, 6)}


@pytest.mark.skipif(not (SHARED_DATA / "ctb51" / "dev.trees").is_file(), reason="needs ../shared/data/ctb51")
def test_the_ctb_development_trees_read_whole():
    gold, skipped = read_gold(str(SHARED_DATA / "ctb51" / "dev.trees"), TagFilter.from_options("ctb", None))
    assert len(gold) + skipped == 352 and sum(len(g.words) for g in gold) == 5824


def test_chinese_punctuation_is_set_aside_and_full_width_forms_fold():
    tokens, is_word = CHINESE.read(TEXT)
    assert "".join(tokens) == TEXT
    assert [t for t, w in zip(tokens, is_word) if not w] == ["（", "）", "：", "，", "。"]
    assert CHINESE.normalize("１２日") == "N日" and CHINESE.normalize("ＡＢＣ") == "abc"
    assert Tokenizer("whitespace", punctuation_aside=True).read("中国 ， 发展 。")[1] == [True, False, True, False]


@pytest.mark.skipif("zh" not in pretrained.catalogue(), reason="no Chinese model in this installation")
def test_zh_by_name_keeps_every_typed_character_and_attaches_punctuation():
    import grammar_induce as gi

    parser = gi.load("zh")
    tree = parser.parse(TEXT)
    assert "".join(tree.leaves()) == TEXT
    opening = tree.leaves().index("（")
    assert tree.leaves()[opening + 1] != "）"  # an opening bracket goes with the word after it
    segmented = "新华社 北京 ２月 １２日 电 （ 记者 张有浩 ）"
    pretokenized = gi.load("zh", pretokenized=True).parse(segmented)
    assert pretokenized.leaves() == segmented.split()
