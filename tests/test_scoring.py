
import json

import pytest

import grammar_induce as gi
from grammar_induce import trees
from grammar_induce.errors import InputError
from grammar_induce.inference.ensemble import ParseOptions
from grammar_induce.inference.members import Members, read_sentences
from grammar_induce.inference.voting import most_voted_tree
from grammar_induce.metrics import SpanMetric
from grammar_induce.text.predicted import predicted_trees
from grammar_induce.text.treebank import TagFilter, read_gold
from grammar_induce.workflows.scoring import EvalOptions, evaluate_models, evaluate_trees

from .conftest import (
    LABELLED_GOLD,
    ROOT,
    invoke,
    one_line_error,
    sole_line_error,
)

GOLD = str(ROOT / "data" / "synthetic" / "test.trees")


def test_model_report_rows_and_baselines(tiny_model, tmp_path):
    report = evaluate_models(Members.of([tiny_model], ParseOptions()), EvalOptions(GOLD, quiet=True))
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
    data = json.loads(report.to_json())
    assert data["rows"]["right-branching"]["sentence_f1"] == pytest.approx(right.sentence_f1)


def test_max_length(tiny_model):
    report = evaluate_models(Members.of([tiny_model], ParseOptions()), EvalOptions(GOLD, max_length=10, quiet=True))
    gold, _ = read_gold(GOLD, TagFilter())
    assert report.sentences == sum(1 for g in gold if len(g.words) <= 10)


def test_pred_file_scores_gold_trees_perfectly_and_checks_alignment(tmp_path):
    gold, _ = read_gold(GOLD, TagFilter())
    pred = tmp_path / "pred.txt"
    pred.write_text("".join(trees.to_brackets(g.tree) + "\n" for g in gold))
    report = evaluate_trees(pred, predicted_trees(pred, None), EvalOptions(GOLD), labeled=False)
    assert report.rows["predicted"].sentence_f1 == 1.0 and report.rows["predicted"].corpus_f1 == 1.0
    pred.write_text("".join(trees.to_brackets(g.tree) + "\n" for g in gold[:-1]))
    with pytest.raises(InputError, match="499 predicted trees for 500 gold trees"):
        evaluate_trees(pred, predicted_trees(pred, None), EvalOptions(GOLD), labeled=False)
    lines = [trees.to_brackets(g.tree) for g in gold]
    lines[3] = "(some other words)"
    pred.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"pred.txt:4: the words .* differ from the gold tree at .*test.trees:4"):
        evaluate_trees(pred, predicted_trees(pred, None), EvalOptions(GOLD), labeled=False)


def test_labeled_pred_file(tmp_path):
    gold = tmp_path / "gold.txt"
    gold.write_text("(S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))) (. .))\n")
    pred = tmp_path / "pred.txt"
    pred.write_text("(X (X (X the) (X dog)) (X (X saw) (X (X a) (X cat))))\n")
    report = evaluate_trees(pred, predicted_trees(pred, None), EvalOptions(str(gold)), labeled=True)
    assert report.rows["predicted"].sentence_f1 == 1.0


def test_ensemble_rows_members_combinations_and_agreement(tiny_model, tiny_backward_model):

    report = evaluate_models(Members.of([tiny_model, tiny_backward_model], ParseOptions(decoder="gap")),
                             EvalOptions(GOLD, max_length=12, quiet=True))
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
        report = evaluate_trees(pred, predicted_trees(pred, None), EvalOptions(str(gold), quiet=True), labeled=False)
        assert report.sentences == 1 and report.skipped == 1 and report.rows["predicted"].sentence_f1 == 1.0
        assert report.notes == [f"1 gold tree skipped: {gold}:1 (no words once traces and punctuation are left out)"]
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("(a b)\n((the dog) barked)\n")
    with pytest.raises(InputError, match=r"wrong.txt:1: a tree for the gold tree at .*gold.mrg:1, which is skipped"):
        evaluate_trees(wrong, predicted_trees(wrong, None), EvalOptions(str(gold), quiet=True), labeled=False)


def test_predictions_in_every_format_parse_writes_are_scored_alike(tiny_model, tmp_path):
    from grammar_induce import api

    gold = tmp_path / "gold.mrg"  # trees spread over lines, as .mrg files write them
    gold.write_text("(S\n  (NP (DT the) (NN dog))\n  (VP (VBD saw)\n    (NP (DT a) (NN cat))))\n"
                    "(S (NP (DT a) (NN cat)) (VP (VBD ran)))\n")
    assert evaluate_trees(gold, predicted_trees(gold, None), EvalOptions(str(gold), quiet=True), labeled=True).rows["predicted"].sentence_f1 == 1.0
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


def test_the_gold_trees_rescored_as_labelled_predictions_give_100(tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text(LABELLED_GOLD)
    for extra in ([], ["--pred-format", "ptb"]):
        result = invoke("evaluate", "--pred", gold, "--gold", gold, "--json", tmp_path / "r.json", *extra)
        assert result.exit_code == 0, result.output
        assert json.loads((tmp_path / "r.json").read_text())["rows"]["predicted"]["sentence_f1"] == 1.0


def test_parse_output_of_text_with_punctuation_can_be_rescored(tiny_run, tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text(LABELLED_GOLD)
    for fmt in ("ptb", "brackets"):
        pred = tmp_path / f"pred.{fmt}"
        assert invoke("parse", "--model", tiny_run / "best.pt", "--format", fmt, "--output", pred,
                   "The dog , barked a lot .").exit_code == 0
        result = invoke("evaluate", "--pred", pred, "--gold", gold)
        assert result.exit_code == 0, result.output


def test_evaluate_says_how_many_gold_words_the_model_does_not_know(tiny_run, tmp_path):
    result = invoke("evaluate", "--model", tiny_run / "best.pt", "--quiet")
    assert "gold words unknown to" in result.stdout and "note:" not in result.stdout
    gold = tmp_path / "gold.mrg"
    gold.write_text(LABELLED_GOLD)
    result = invoke("evaluate", "--model", tiny_run / "best.pt", "--gold", gold, "--quiet")
    assert result.exit_code == 0 and "are unknown to" in result.stdout and "note:" in result.stdout


def test_a_shipped_model_is_named_by_its_name_in_the_json_report_not_its_install_path(tmp_path):
    """evaluate --json keyed the unknown-word counts by the shipped file's install path: issue 70, class 14."""
    from grammar_induce.families.pretrained import MODELS_DIR

    gold = tmp_path / "gold.mrg"
    gold.write_text(LABELLED_GOLD)
    result = invoke("evaluate", "--model", "ptb-pair", "--gold", gold, "--json", tmp_path / "r.json", "--quiet")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "r.json").read_text()
    assert str(MODELS_DIR) not in text and str(MODELS_DIR) not in result.output
    assert list(json.loads(text)["unknown_words"]) == ["ptb-forward.pt (shipped)", "ptb-backward.pt (shipped)"]


def test_evaluate_writes_all_its_files_or_none(tiny_run, tmp_path):
    result = invoke("evaluate", "--model", tiny_run / "best.pt", "--quiet", "--json", tmp_path / "a.json",
                 "--report", "/dev/full")
    one_line_error(result, "/dev/full: cannot write (No space left on device)")
    assert list(tmp_path.iterdir()) == []  # a.json was not written, and no temporary is left


def written(path, text: str):
    path.write_text(text)
    return path


def test_rescoring_reports_dropped_punctuation_and_refuses_extra_words(tmp_path):
    gold = written(tmp_path / "gold.mrg", "(S (NP (DT The) (NN dog)) (VP (VBD barked)) (. .))\n")
    result = invoke("evaluate", "--pred", written(tmp_path / "punct.txt", "((The dog) (barked .))\n"), "--gold", gold)
    assert result.exit_code == 0 and "note: 1 predicted token the gold trees do not have" in result.stdout
    assert "the first '.' at " in result.stdout
    extra = written(tmp_path / "extra.txt", "((The dog) (barked loudly))\n")
    one_line_error(invoke("evaluate", "--pred", extra, "--gold", gold), "1 word the gold tree at", "loudly")
    # the same in json and jsonl (nested lists were also tried as labelled trees: an AttributeError traceback)
    for name, line in (("extra.json", '[["The", "dog"], ["barked", "loudly"]]'),
                       ("extra.jsonl", '{"tokens": [], "tree": [["The", "dog"], ["barked", "loudly"]]}')):
        one_line_error(invoke("evaluate", "--pred", written(tmp_path / name, line + "\n"), "--gold", gold),
                       "1 word the gold tree at", "loudly")


def test_rescoring_chinese_trees_as_english_keeps_the_hint(tmp_path):
    gold = tmp_path / "ctb.trees"
    gold.write_text("(TOP (IP (NP (NN 经济)) (VP (VV 发展)) (PU 。)))\n(TOP (IP (NP (NN 城市)) (VP (VV 建设)) (PU ，)))\n")
    pred = tmp_path / "pred.txt"
    pred.write_text("((经济 发展) 。)\n((城市 建设) ，)\n")  # what `parse` prints of these sentences
    one_line_error(invoke("evaluate", "--pred", pred, "--gold", gold), "1 word the gold tree",
                   "for Chinese Treebank trees use --treebank ctb")  # not scored as if 发展 were not there
    assert invoke("evaluate", "--pred", pred, "--gold", gold, "--treebank", "ctb").exit_code == 0


def test_the_tools_own_tokenization_of_gold_words_is_rescored(tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text("(S (NP (NNP Gotta) (NNP U.S.)) (VP (VBD fell)))\n(S (NP (NNP S&L)) (VP (VBD rose)) (. .))\n")
    pred = tmp_path / "pred.txt"
    pred.write_text("(((Got ta) (U.S .)) fell)\n((S&L rose) .)\n")  # how parse splits `Gotta U.S. fell`
    result = invoke("evaluate", "--pred", pred, "--gold", gold)
    assert result.exit_code == 0, result.output
    report = gi.evaluate(pred, gold=gold)
    assert report.rows["predicted"].sentence_f1 == 1.0
    assert "1 predicted token the gold trees do not have" in result.stdout  # the final "." only


def test_rows_without_spans_say_n_a_and_the_random_row_counts_the_sentences(tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text("(S (NN a) (VB b))\n(S (NN c) (VB d))\n(S (NP (NN e) (NN f)) (VB g))\n")
    result = invoke("evaluate", "--pred", gold, "--gold", gold, "--max-length", "2", "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    assert "n/a" in next(line for line in result.stdout.splitlines() if line.startswith("predicted"))
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert rows["random"]["sentences"] == rows["predicted"]["sentences"] == 2


def test_brackets_typed_as_words_survive_parsing_and_rescoring(tiny_run, tmp_path):
    result = invoke("parse", "--model", tiny_run / "best.pt", "a ( b ) c [ d ] { e }")
    assert result.exit_code == 0, result.output
    assert trees.leaves(trees.parse_brackets(result.output.strip())) == "a ( b ) c [ d ] { e }".split()
    gold = tmp_path / "gold.txt"
    gold.write_text("(S (NP (DT the) (NN dog)) (VP (VBD saw) (-LRB- -LRB-) (NP (DT a) (NN cat)) (-RRB- -RRB-)))\n")
    saved = tmp_path / "saved.txt"
    first = invoke("evaluate", "--model", tiny_run / "best.pt", "--gold", gold, "--punct-tags", "PU",
                "--save-trees", saved, "--quiet")
    assert first.exit_code == 0, first.output
    assert "-LRB-" in saved.read_text()
    again = invoke("evaluate", "--pred", saved, "--gold", gold, "--punct-tags", "PU")
    assert again.exit_code == 0, again.output


def test_saved_trees_of_a_length_limited_evaluation_can_be_rescored(tiny_run, tmp_path):
    saved = tmp_path / "t.txt"
    first = invoke("evaluate", "--model", tiny_run / "best.pt", "--max-length", 10, "--save-trees", saved, "--quiet")
    assert first.exit_code == 0, first.output
    again = invoke("evaluate", "--pred", saved, "--max-length", 10)
    assert again.exit_code == 0, again.output
    main_row = next(line for line in first.output.splitlines() if "*" in line).split("*")[1].split()
    assert next(line for line in again.output.splitlines() if "*" in line).split("*")[1].split() == main_row


def test_labelled_predictions_are_recognised(tmp_path):
    gold = written(tmp_path / "gold.txt", "(S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))) (. .))\n")
    pred = written(tmp_path / "pred.txt", "(S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))))\n")
    result = invoke("evaluate", "--pred", pred, "--gold", gold)
    assert result.exit_code == 0 and "100.0" in result.output, result.output
    pred.write_text("(S (NP (DT the) (NN cow)) (VP (VBD saw) (NP (DT a) (NN cat))))\n")
    sole_line_error(invoke("evaluate", "--pred", pred, "--gold", gold), "(for labelled trees, add --pred-format ptb)")


def test_label_recall_shows_no_figure_where_no_gold_constituent_is_and_has_the_random_row(tiny_run, tmp_path):
    import grammar_induce as gi

    gold = tmp_path / "gold.mrg"
    gold.write_text("(S (NP (DT the) (JJ old) (NN man)) (VP (VBD saw) (NP (DT a) (NN dog))))\n"
                    "(S (NP (DT a) (NN dog)) (VP (VBD saw) (PP (IN in) (NP (DT the) (NN house)))))\n")
    report = gi.evaluate(gi.load(str(tiny_run / "best.pt")), gold=str(gold))
    assert "random" in report.label_recall and report.label_recall["random"]["ADVP"] == (0.0, 0)
    np_found, np_total = report.label_recall["random"]["NP"]
    assert np_total == 4 and 0 <= np_found <= 4
    table = report.table()
    header = next(line for line in table.splitlines() if line.strip().startswith("NP"))
    column = header.split().index("ADVP")
    for line in table.splitlines()[table.splitlines().index(header) + 2:]:
        if line.startswith(("right-branching", "random")):
            assert line.split()[-len(header.split()) + column] == "-"
    assert report.to_dict()["label_recall"]["random"]["ADVP"] is None


def test_a_jsonl_file_read_as_json_is_a_one_line_error_naming_the_line(tmp_path):
    """`--pred x.jsonl --pred-format json` read each record as a tree and crashed (AttributeError on a dict)."""
    gold = written(tmp_path / "gold.txt", "(S (NP (DT the) (NN dog)) (VP (VBD barked)))\n")
    pred = written(tmp_path / "pred.jsonl", '{"tokens": ["the", "dog", "barked"], "tree": [["the", "dog"], "barked"]}\n')
    sole_line_error(invoke("evaluate", "--pred", pred, "--pred-format", "json", "--gold", gold),
                    f"{pred}:1: not a json line of parse's output (expected a tree as nested lists; this is a jsonl "
                    "record: --pred-format jsonl)")
    assert invoke("evaluate", "--pred", pred, "--pred-format", "jsonl", "--gold", gold).exit_code == 0


def test_a_parse_of_wsj_text_with_dollar_signs_hashes_and_closing_quotes_is_scored_whole(tmp_path):
    """$, US$, # and a closing ' are words to a model (the PTB text has them) and punctuation to the protocol (their
    tags are dropped): `evaluate --pred` refused parse's own trees over them (issue 70, class 4)."""
    gold = tmp_path / "gold.mrg"
    gold.write_text("(S (NP ($ US$) (CD 5) (NNS millions)) (VP (VBD rose) (NP (NNS investors) ('' ')) "
                    "(NP (DT the) (# #) (NN index))))\n")
    pred = tmp_path / "pred.txt"
    pred.write_text("(((US$ 5) millions) (rose ((investors ') ((the #) index))))\n")
    report = gi.evaluate(pred, gold)
    assert report.sentences == 1 and report.rows["predicted"].predicted == 4  # over the 6 gold words
    assert report.rows["predicted"].matched == 3  # (5 millions), (rose ... index), (the index)
    pred.write_text("(((US$ 5) millions) (rose ((investors ') ((the zebra) index))))\n")
    with pytest.raises(InputError, match="1 word the gold tree at .* does not have: zebra"):
        gi.evaluate(pred, gold)
