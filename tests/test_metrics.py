import pytest

from grammar_induce.metrics import SpanMetric, sentence_scores
from grammar_induce.trees import spans


def f1(pred, gold):
    return sentence_scores(spans(pred), spans(gold))[2]


def test_hand_computed_f1():
    gold = [["the", "dog"], ["saw", ["a", "cat"]]]  # {(0,2), (2,5), (3,5)}
    right = ["the", ["dog", ["saw", ["a", "cat"]]]]  # {(1,5), (2,5), (3,5)}: 2 of 3 match
    assert f1(right, gold) == pytest.approx(2 / 3)
    left = [[[["the", "dog"], "saw"], "a"], "cat"]  # {(0,2), (0,3), (0,4)}: 1 of 3
    assert f1(left, gold) == pytest.approx(1 / 3)
    assert f1(gold, gold) == 1.0


def test_one_and_two_word_sentences_score_one():
    assert sentence_scores(set(), set()) == (1.0, 1.0, 1.0)  # the paper's convention
    assert f1("a", "a") == 1.0
    assert f1(["a", "b"], ["a", "b"]) == 1.0


def test_flat_gold_gives_recall_one_and_precision_zero():
    # gold (a b c) is flat: no span but the sentence; a binary prediction has one span
    assert sentence_scores(spans(["a", ["b", "c"]]), spans(["a", "b", "c"])) == (0.0, 1.0, 0.0)


def test_empty_prediction_against_non_empty_gold():
    assert sentence_scores(set(), {(0, 2)}) == (0.0, 0.0, 0.0)


def test_metric_adds_sentence_and_corpus_levels():
    a = SpanMetric.of({(0, 2), (2, 4)}, {(0, 2)})  # p 1/2, r 1, f 2/3
    b = SpanMetric.of({(1, 3)}, {(0, 2), (1, 3), (0, 3)})  # p 1, r 1/3, f 1/2
    total = a + b
    assert total.sentences == 2
    assert total.sentence_f1 == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert total.precision == pytest.approx(2 / 3) and total.recall == pytest.approx(2 / 4)
    assert total.corpus_f1 == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert sum([a, b], SpanMetric()) == total
