import json

import nltk
import torch

from grammar_induce.parse import middle_layer, parse_words, render
from grammar_induce.trees import leaves, tree_from_distances

SENTENCES = [
    "the dog saw a cat .".split(),
    "he liked the old farmer 's red car near the river .".split(),
    [],
    "mary".split(),
    "every strange zebra quickly visited london".split(),  # "zebra" is not in the vocabulary
]


def test_batched_distances_equal_one_at_a_time(tiny_model):
    batched = parse_words(tiny_model, SENTENCES, batch_size=8)
    for sentence, together in zip(SENTENCES, batched):
        alone = parse_words(tiny_model, [sentence], batch_size=1)[0]
        if not sentence:
            assert together is None and alone is None
            continue
        torch.testing.assert_close(torch.tensor(together.forget), torch.tensor(alone.forget), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(torch.tensor(together.input), torch.tensor(alone.input), rtol=1e-5, atol=1e-6)


def test_distances_are_those_of_the_words_between_eos(tiny_model):
    sentence = SENTENCES[0]
    parsed = parse_words(tiny_model, [sentence])[0]
    vocab = tiny_model.vocab
    tokens = torch.tensor([[1] + vocab.encode(sentence) + [1]]).t()  # <eos> w1..wn <eos>
    with torch.no_grad():
        distances = tiny_model.model.distances(tokens)
    assert len(parsed.forget) == 3 and len(parsed.forget[1]) == len(sentence)
    torch.testing.assert_close(torch.tensor(parsed.forget), distances.forget[:, 1:-1, 0])
    assert parsed.tree(2) == tree_from_distances(distances.forget[1, 1:-1, 0].tolist(), sentence)


def test_stopping_at_a_layer_gives_the_same_distances_for_the_layers_run(tiny_model):
    full = parse_words(tiny_model, SENTENCES)
    lower = parse_words(tiny_model, SENTENCES, n_layers=2)
    for whole, part in zip(full, lower):
        if whole is None:
            assert part is None
            continue
        assert len(part.forget) == 2 and len(part.input) == 2
        assert part.forget == whole.forget[:2] and part.input == whole.input[:2]
        assert part.tree(2) == whole.tree(2)


def test_unknown_words_keep_their_spelling(tiny_model):
    parsed = parse_words(tiny_model, [SENTENCES[4]])[0]
    assert leaves(parsed.tree(2)) == SENTENCES[4]


def test_formats(tiny_model):
    parsed = parse_words(tiny_model, SENTENCES)
    layer = middle_layer(3)
    assert layer == 2
    brackets = render(parsed[0], "brackets", layer, "forget")
    assert brackets.startswith("(") and brackets.count("(") == len(SENTENCES[0]) - 1
    assert nltk.Tree.fromstring(render(parsed[0], "ptb", layer, "forget")).leaves() == SENTENCES[0]
    assert leaves(json.loads(render(parsed[1], "json", layer, "input"))) == SENTENCES[1]
    record = json.loads(render(parsed[1], "jsonl", layer, "forget"))
    assert record["tokens"] == SENTENCES[1] and len(record["forget"]) == 3 and len(record["input"][0]) == 12
    assert render(parsed[2], "brackets", layer, "forget") == ""
    assert render(parsed[3], "brackets", layer, "forget") == "mary"
    assert "saw" in render(parsed[0], "ascii", layer, "forget")
