"""What an induced grammar learned (issue 72; families/pcfg/inspection.py, workflows/grammar.py): the symbols of a
tiny grammar whose rules are set by hand, labelled F1 under a label map by hand, and the `grammar` command: its table,
json and html, best matches on gold trees written as a label map that `parse` and `evaluate` read back."""

import json

import nltk
import pytest

from grammar_induce import api, trees
from grammar_induce.errors import InputError
from grammar_induce.families.pcfg.inspection import read_symbols
from grammar_induce.inference.maps import LabelMap
from grammar_induce.text.treebank import GoldTree
from grammar_induce.workflows.scoring import labelled_score

from .conftest import invoke, tiny_config
from .test_pcfg import tiny_pcfg  # noqa: F401 (a fixture)
from .test_sampling import VOCAB, tiny_grammar


def test_the_symbols_of_a_grammar_set_by_hand():
    """S = NT-0, A = NT-1, P = T-0, Q = T-1 (tests/test_sampling.py): p(S -> B C) = sum_r U[S, r] V[B, r] W[C, r]."""
    symbols = {s.name: s for s in read_symbols(tiny_grammar(), VOCAB, top=3)}
    s = symbols["NT-0"]
    assert s.root == pytest.approx(1.0) and symbols["NT-1"].root == pytest.approx(0.0)
    # Q Q: 0.3 * 0.3 * 0.3 + 0.7 * 0.6 * 0.4; Q P: 0.3 * 0.3 * 0.6 + 0.7 * 0.6 * 0.3; P P: 0.3 * 0.5 * 0.6 + 0.7 * 0.2 * 0.3
    assert [(b, c) for b, c, _ in s.rules] == [("T-1", "T-1"), ("T-1", "T-0"), ("T-0", "T-0")]
    assert [p for _, _, p in s.rules] == pytest.approx([0.195, 0.18, 0.132])
    # Q as a child: (U V^T + U W^T) / 2 at Q, averaged over S and A: ((0.3*0.3 + 0.7*0.6 + 0.3*0.3 + 0.7*0.4) +
    # (0.8*0.3 + 0.2*0.6 + 0.8*0.3 + 0.2*0.4)) / 4
    assert symbols["T-1"].child == pytest.approx((0.09 + 0.42 + 0.09 + 0.28 + 0.24 + 0.12 + 0.24 + 0.08) / 4)
    assert [w for w, _ in symbols["T-0"].words] == ["a", "b", "c"] and symbols["T-1"].words[0] == ("c", pytest.approx(0.7))


def test_labelled_f1_under_a_label_map_by_hand():
    """Gold (S (NP a b) (VP c (NP d e))) with S over VP at (2, 5) as a unary chain: its outermost category counts."""
    gold = GoldTree("g:1", list("abcde"), trees.parse_brackets("((a b) (c (d e)))"),
                    ((0, 2, "NP"), (3, 5, "NP"), (2, 5, "VP"), (2, 5, "S"), (0, 5, "S")))
    assert gold.categories() == {(0, 2): "NP", (3, 5): "NP", (2, 5): "S", (0, 5): "S"}
    tree = trees.parse_brackets("((a b) ((c d) e))")
    labels = {(0, 2): "NT-1", (2, 5): "NT-2", (2, 4): "NT-1", (0, 5): "NT-0"}
    score = labelled_score([labels], [tree], [gold], {"NT-1": "NP", "NT-2": "S"})
    # found: (0,2,NP) right, (2,5,S) right, (2,4,NP) wrong; gold: (0,2,NP), (3,5,NP), (2,5,S)
    assert (score.matched, score.predicted, score.gold) == (2, 3, 3)


def test_grammar_shows_the_table_json_and_html_and_writes_a_label_map_parse_and_evaluate_read(tiny_pcfg, tmp_path):  # noqa: F811
    model, gold = str(tiny_pcfg), tiny_config().data.valid.replace(".txt", ".trees")
    table = invoke("grammar", "--model", model, "--top", "2")
    assert table.exit_code == 0 and "4 nonterminals, 6 preterminals" in table.output
    assert table.output.count("\n  NT-") == 2 and table.output.count("\n  T-") == 2
    saved = tmp_path / "map.json"
    done = invoke("grammar", "--model", model, "--gold", gold, "--text", tiny_config().data.valid, "--format", "json",
                  "--save-map", str(saved))
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert len(report["symbols"]) == 10 and any("best_match" in s for s in report["symbols"])
    the_map = LabelMap.read(saved).labels
    assert the_map == {s["name"]: s["best_match"]["category"] for s in report["symbols"] if "best_match" in s}
    assert sum(s.get("usage", 0) for s in report["symbols"]) > 0
    page = invoke("grammar", "--model", model, "--format", "html").output
    assert "<table>" in page and page.count("<tr>") == 1 + 4 + 1 + 6

    labelled = invoke("parse", "--model", model, "--label-map", str(saved), "the old man saw a dog")
    plain = invoke("parse", "--model", model, "--labels", "the old man saw a dog")
    before, after = nltk.Tree.fromstring(plain.output), nltk.Tree.fromstring(labelled.output)
    assert [the_map.get(t.label(), t.label()) for t in before.subtrees()] == [t.label() for t in after.subtrees()]
    assert any(t.label() in the_map.values() for t in after.subtrees())
    scored = invoke("evaluate", "--model", model, "--gold", gold, "--label-map", str(saved))
    assert scored.exit_code == 0 and "labelled (the induced labels renamed by the label map" in scored.output
    parser = api.load(model, label_map=saved)
    assert parser.options.labels
    saved.write_text("{}")
    refused = invoke("parse", "--model", model, "--label-map", str(saved), "a dog")
    assert refused.exit_code != 0 and "not a label map" in refused.output
    with pytest.raises(InputError, match="not a label map"):
        LabelMap.read(saved)
