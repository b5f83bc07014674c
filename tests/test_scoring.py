import json

import pytest

from grammar_induce import trees
from grammar_induce.files import InputError
from grammar_induce.inference.ensemble import ParseOptions
from grammar_induce.inference.voting import most_voted_tree
from grammar_induce.metrics import SpanMetric
from grammar_induce.text.treebank import TagFilter, read_gold
from grammar_induce.workflows.scoring import EvalOptions, evaluate_file, evaluate_models, report_json

from .conftest import ROOT

GOLD = str(ROOT / "data" / "synthetic" / "test.trees")


def test_model_report_rows_and_baselines(tiny_model, tmp_path):
    report = evaluate_models([tiny_model], EvalOptions(GOLD, quiet=True), ParseOptions())
    expected_rows = {f"layer {l} {k}" for l in (1, 2, 3) for k in ("forget", "input")}
    expected_rows |= {"mean of layers forget", "mean of layers input", "left-branching", "right-branching",
                      "balanced", "random"}
    assert set(report.rows) == expected_rows and report.main_row == "layer 2 forget"
    gold, _ = read_gold(GOLD, TagFilter())
    right = sum((SpanMetric.of(trees.spans(trees.right_branching(g.words)), trees.spans(g.tree)) for g in gold),
                SpanMetric())
    assert report.rows["right-branching"] == right
    assert report.sentences == len(gold) == 500
    assert sum(m.sentences for m in report.by_length["right-branching"].values()) == 500
    data = json.loads(report_json(report))
    assert data["rows"]["right-branching"]["sentence_f1"] == pytest.approx(right.sentence_f1)


def test_max_length(tiny_model):
    report = evaluate_models([tiny_model], EvalOptions(GOLD, max_length=10, quiet=True), ParseOptions())
    gold, _ = read_gold(GOLD, TagFilter())
    assert report.sentences == sum(1 for g in gold if len(g.words) <= 10)


def test_pred_file_scores_gold_trees_perfectly_and_checks_alignment(tmp_path):
    gold, _ = read_gold(GOLD, TagFilter())
    pred = tmp_path / "pred.txt"
    pred.write_text("".join(trees.to_brackets(g.tree) + "\n" for g in gold))
    report = evaluate_file(pred, EvalOptions(GOLD), labeled=False)
    assert report.rows["predicted"].sentence_f1 == 1.0 and report.rows["predicted"].corpus_f1 == 1.0
    pred.write_text("".join(trees.to_brackets(g.tree) + "\n" for g in gold[:-1]))
    with pytest.raises(InputError, match="499 predicted trees for 500 gold trees"):
        evaluate_file(pred, EvalOptions(GOLD), labeled=False)
    lines = [trees.to_brackets(g.tree) for g in gold]
    lines[3] = "(some other words)"
    pred.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"pred.txt:4: the words .* differ from the gold tree at .*test.trees:4"):
        evaluate_file(pred, EvalOptions(GOLD), labeled=False)


def test_labeled_pred_file(tmp_path):
    gold = tmp_path / "gold.txt"
    gold.write_text("(S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))) (. .))\n")
    pred = tmp_path / "pred.txt"
    pred.write_text("(X (X (X the) (X dog)) (X (X saw) (X (X a) (X cat))))\n")
    report = evaluate_file(pred, EvalOptions(str(gold)), labeled=True)
    assert report.rows["predicted"].sentence_f1 == 1.0


def test_ensemble_rows_members_combinations_and_agreement(tiny_model, tiny_backward_model):
    from grammar_induce.inference.members import read_sentences

    report = evaluate_models([tiny_model, tiny_backward_model], EvalOptions(GOLD, max_length=12, quiet=True),
                             ParseOptions(decoder="gap"))
    members = [name for name in report.rows if name[0].isdigit()]
    assert len(members) == 2 and members[0].startswith("1: ") and members[0].endswith("/best.pt L2")
    assert report.main_row == "mbr of 2" and "mean of 2" in report.rows
    gold, _ = read_gold(GOLD, TagFilter())
    gold = [g for g in gold if len(g.words) <= 12]
    parsed = [read_sentences(m, [g.words for g in gold]) for m in (tiny_model, tiny_backward_model)]
    voted = [most_voted_tree([f.tree(2, decoder="gap"), b.tree(2, decoder="gap")]) for f, b in zip(*parsed)]
    expected = sum((SpanMetric.of(trees.spans(t), trees.spans(g.tree)) for t, g in zip(voted, gold)), SpanMetric())
    assert report.rows["mbr of 2"] == expected
    pairwise = sum((SpanMetric.of(trees.spans(f.tree(2, decoder="gap")), trees.spans(b.tree(2, decoder="gap")))
                    for f, b in zip(*parsed)), SpanMetric())
    assert [m.sentence_f1 for m in report.agreement.values()] == pytest.approx([pairwise.sentence_f1] * 2)
    assert "mean pairwise F1" in report.table()


def test_a_gold_tree_of_traces_only_is_skipped_with_where_and_why_and_its_blank_prediction_aligned(tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text("(S (NP (-NONE- *)) (VP (-NONE- *T*-1)))\n(S (NP (DT the) (NN dog)) (VP (VBD barked)))\n")
    blank_first = tmp_path / "parse.txt"  # what parse writes for the gold words: a blank line for no words
    blank_first.write_text("\n((the dog) barked)\n")
    for pred in (blank_first, tmp_path / "aligned.txt"):
        if pred.name == "aligned.txt":
            pred.write_text("((the dog) barked)\n")
        report = evaluate_file(pred, EvalOptions(str(gold), quiet=True), labeled=False)
        assert report.sentences == 1 and report.skipped == 1 and report.rows["predicted"].sentence_f1 == 1.0
        assert report.notes == [f"1 gold tree skipped: {gold}:1 (no words once traces and punctuation are left out)"]
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("(a b)\n((the dog) barked)\n")
    with pytest.raises(InputError, match=r"wrong.txt:1: a tree for the gold tree at .*gold.mrg:1, which is skipped"):
        evaluate_file(wrong, EvalOptions(str(gold), quiet=True), labeled=False)


def test_predictions_in_every_format_parse_writes_are_scored_alike(tiny_model, tmp_path):
    from grammar_induce import api

    gold = tmp_path / "gold.mrg"  # trees spread over lines, as .mrg files write them
    gold.write_text("(S\n  (NP (DT the) (NN dog))\n  (VP (VBD saw)\n    (NP (DT a) (NN cat))))\n"
                    "(S (NP (DT a) (NN cat)) (VP (VBD ran)))\n")
    assert evaluate_file(gold, EvalOptions(str(gold), quiet=True), labeled=True).rows["predicted"].sentence_f1 == 1.0
    parser = api.Parser([tiny_model], ParseOptions())
    scores = set()
    for fmt in ("brackets", "ptb", "json", "jsonl"):
        pred = tmp_path / f"pred.{fmt}"
        from grammar_induce.output.formats import render
        pred.write_text("".join(render(r, fmt) + "\n" for r in parser.analyse_many(["the dog saw a cat", "a cat ran"])))
        scores.add(api.evaluate(pred, gold).rows["predicted"].sentence_f1)
    assert len(scores) == 1
    ascii_file = tmp_path / "pred.ascii"
    ascii_file.write_text("      X\n   ___|___\n  the   dog\n")
    with pytest.raises(InputError, match=r"not a file of bracketed trees \(.*ascii drawings and pictures cannot be scored\)"):
        api.evaluate(ascii_file, gold)


def test_a_missing_nltk_corpus_says_how_to_get_it(monkeypatch, tmp_path):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    with pytest.raises(InputError, match=r"nltk:treebank: nltk's data has no corpus 'treebank': download it .*NLTK_DATA"):
        read_gold("nltk:treebank", TagFilter())
