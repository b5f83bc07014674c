"""Integration with the corpora in ../shared/data (see its README); skipped where they are absent."""

import pytest

from grammar_induce import trees
from grammar_induce.text.predicted import predicted_trees
from grammar_induce.text.tokenizer import Tokenizer
from grammar_induce.text.treebank import TagFilter, read_gold
from grammar_induce.workflows.scoring import EvalOptions, evaluate_trees

from .conftest import SHARED_DATA
from .plain_corpus import build_vocab, read_corpus

TREEBANK = SHARED_DATA / "nltk" / "corpora" / "treebank" / "combined"
PTB_LM = SHARED_DATA / "ptb_lm"
needs = pytest.mark.skipif
needs_treebank = needs(not TREEBANK.is_dir(), reason="../shared/data/nltk is absent")
needs_ptb_lm = needs(not (PTB_LM / "valid.txt").is_file(), reason="../shared/data/ptb_lm is absent")


@needs_treebank
def test_the_nltk_treebank_sample_and_its_right_branching_baseline(tmp_path):
    gold, skipped = read_gold(str(TREEBANK), TagFilter())
    assert len(gold) + skipped == 3914 and skipped == 0
    pred = tmp_path / "right.txt"
    pred.write_text("".join(trees.to_brackets(trees.right_branching(g.words)) + "\n" for g in gold))
    report = evaluate_trees(pred, predicted_trees(pred, None), EvalOptions(str(TREEBANK)), labeled=False)
    # the figure the README gives for this baseline under the paper's protocol
    assert round(100 * report.rows["predicted"].sentence_f1, 1) == 39.9


@needs_ptb_lm
def test_the_ptb_language_modelling_text_has_its_published_size():
    sentences, blank = read_corpus(PTB_LM / "valid.txt", Tokenizer())
    assert blank == 0 and sum(map(len, sentences)) == 70390  # words, as the data README says
    assert len(build_vocab(sentences)) <= 10000
