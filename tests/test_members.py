"""The one member path (inference/members.py): reading sentences, layers by agreement."""

import dataclasses

import pytest
import torch

from grammar_induce import trees
from grammar_induce.inference.members import read_sentences, token_ids

from .conftest import invoke


def test_layer_auto_with_empty_or_only_blank_lines(tiny_run, tiny_backward_run):
    models = ["--model", tiny_run / "best.pt", "--model", tiny_backward_run / "best.pt", "--layer", "auto"]
    assert invoke("parse", *models, "").exit_code == 0
    result = invoke("parse", *models, "--input", "-", input="\n\n\n")
    assert result.exit_code == 0 and result.stdout == "\n\n\n"


def test_sentence_far_longer_than_bptt_is_parsed_whole(tiny_model):
    words = ("the old man saw a dog near the river " * 60).split()  # 540 words, bptt is 12
    parsed = read_sentences(tiny_model, [words, words[:7]])
    assert trees.leaves(parsed[0].tree(2)) == words
    alone = read_sentences(tiny_model, [words[:7]])[0]
    torch.testing.assert_close(torch.tensor(parsed[1].distances["forget"]), torch.tensor(alone.distances["forget"]), rtol=1e-5, atol=1e-6)


def test_eos_and_unk_typed_by_a_user_are_ordinary_unknown_words(tiny_model):
    typed = read_sentences(tiny_model, ["the dog <eos> saw a cat".split(), "the dog <unk> saw a cat".split()])
    unknown = read_sentences(tiny_model, ["the dog qqqq saw a cat".split()])[0]
    for parsed in typed:  # a batch of two against a batch of one: equal to float32 rounding, not bit for bit
        for got, expected in zip(parsed.distances["forget"], unknown.distances["forget"]):
            assert got == pytest.approx(expected, rel=1e-5, abs=1e-6)
        assert len(trees.leaves(parsed.tree(2))) == 6


def test_a_models_ids_of_typed_words_are_its_vocabularys_remembered(tiny_model):
    """`<eos>` before the words, each word by its vocabulary id (`<eos>` typed, and words it lacks: 0, `<unk>`);
    a word seen before is looked up from what the model remembers, to the same id."""
    vocab = tiny_model.vocab
    k = next(k for k, word in enumerate(vocab.words) if word.isalpha() and word.islower())
    ids = token_ids(tiny_model, [vocab.words[k], "<eos>", "qqqq", vocab.words[k]])
    assert ids == [vocab.index["<eos>"], k, 0, 0, k] and vocab.words[0] == "<unk>"
    assert tiny_model.word_id.cache_info().hits >= 1
    lowercasing = dataclasses.replace(tiny_model, tokenizer=dataclasses.replace(tiny_model.tokenizer, lowercase=True))
    assert token_ids(lowercasing, [vocab.words[k].upper()])[1:] == [k]  # normalised, then looked up
    assert token_ids(tiny_model, [vocab.words[k].upper()])[1:] == [0]  # this model keeps case
