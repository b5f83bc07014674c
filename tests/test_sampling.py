"""Sentences drawn from a PCFG (families/pcfg/sampling.py, `grammar-induce sample`): their distribution on a tiny
grammar set by hand against its exact probabilities (a chi-square test), the trees and symbols that come with them,
the same seed giving the same sentences, and the refusals."""

import itertools
import math
from collections import Counter

import pytest
import torch

from grammar_induce import trees
from grammar_induce.families.pcfg.model import Grammar
from grammar_induce.families.pcfg.sampling import sample

from .conftest import invoke, sole_line_error

VOCAB = ["a", "b", "c"]


def tiny_grammar() -> Grammar:
    """Two nonterminals (S = 0, A = 1), two preterminals (P = 2, Q = 3), rank 2: proper by construction (U's rows sum to
    one over the rank, V's and W's columns over the symbols), the root always S."""
    head = torch.tensor([[0.3, 0.7], [0.8, 0.2]])
    left = torch.tensor([[0.0, 0.1], [0.2, 0.1], [0.5, 0.2], [0.3, 0.6]])
    right = torch.tensor([[0.1, 0.0], [0.0, 0.3], [0.6, 0.3], [0.3, 0.4]])
    emission = torch.tensor([[0.6, 0.3, 0.1], [0.1, 0.2, 0.7]]).log()
    return Grammar(torch.tensor([1.0, 0.0]), emission, head, left, right)


def exact(grammar: Grammar, longest: int) -> dict[str, float]:
    """p(words | at most `longest` words), summed over every tree and labelling, with the full rule tensor."""
    rules = torch.einsum("ar,br,cr->abc", grammar.head, grammar.left, grammar.right).double()
    emit = grammar.emission.exp().double()

    def inside(words: tuple[int, ...]) -> torch.Tensor:  # (4,) p(symbol =>* words)
        value = torch.zeros(4, dtype=torch.double)
        if len(words) == 1:
            value[2:] = emit[:, words[0]]
            return value
        for k in range(1, len(words)):
            value[:2] += torch.einsum("abc,b,c->a", rules, inside(words[:k]), inside(words[k:]))[:2]
        return value

    found = {" ".join(VOCAB[w] for w in words): float(grammar.root.double() @ inside(words)[:2])
             for n in range(2, longest + 1) for words in itertools.product(range(3), repeat=n)}
    total = sum(found.values())
    return {words: p / total for words, p in found.items()}


def chi_square_limit(df: int, z: float = 3.72) -> float:
    """The chi-square quantile of `df` degrees of freedom at the normal quantile z (3.72: one in 10,000), by
    Wilson and Hilferty's approximation."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_drawn_sentences_follow_the_grammars_probabilities():
    grammar, draws = tiny_grammar(), 20000
    drawn = sample(grammar, VOCAB, draws, torch.Generator().manual_seed(0), max_length=3)
    counts = Counter(" ".join(s.words) for s in drawn)
    expected = {words: p * draws for words, p in exact(grammar, 3).items()}
    assert set(counts) <= set(expected) and len(drawn) == draws
    kept = {w: e for w, e in expected.items() if e >= 5}  # the test's usual rule; the rest pooled
    pooled = draws - sum(counts[w] for w in kept), draws - sum(kept.values())
    statistic = sum((counts[w] - e) ** 2 / e for w, e in kept.items()) + (pooled[0] - pooled[1]) ** 2 / pooled[1]
    assert statistic < chi_square_limit(len(kept)), (statistic, len(kept))


def test_a_drawn_sentence_comes_with_its_tree_and_symbols():
    drawn = sample(tiny_grammar(), VOCAB, 50, torch.Generator().manual_seed(1), max_length=6)
    for s in drawn:
        assert 2 <= len(s.words) <= 6 and trees.leaves(s.tree) == s.words
        assert s.labels[0, len(s.words)] == "NT-0"  # the root is always S
        assert all(s.labels[k, k + 1] in ("T-0", "T-1") for k in range(len(s.words)))
        assert {span for span in s.labels if span[1] - span[0] > 1} == trees.spans(s.tree, whole=True)
        assert s.ptb.startswith("(NT-0 (") and s.ptb.count("(T-") == len(s.words)
    again = sample(tiny_grammar(), VOCAB, 50, torch.Generator().manual_seed(1), max_length=6)
    assert [s.ptb for s in again] == [s.ptb for s in drawn]


def test_sample_on_the_command_line_and_its_refusals():
    import grammar_induce as gi

    first = invoke("sample", "-n", "3", "--seed", "4", "--format", "text")
    assert first.exit_code == 0 and len(first.stdout.splitlines()) == 3, first.output
    assert invoke("sample", "-n", "3", "--seed", "4", "--format", "text").stdout == first.stdout
    trees_drawn = gi.sample("ptb-pcfg", 3, seed=4)
    assert [" ".join(t.leaves()) for t in trees_drawn] == first.stdout.splitlines()
    assert all(t.label().startswith("NT-") for t in trees_drawn)
    sole_line_error(invoke("sample", "--model", "ptb"), "--model ptb: an ON-LSTM language model is not a grammar")
    with pytest.raises(ValueError, match="n must be a whole number of at least 1"):
        gi.sample(n=0)


def test_sentences_stream_a_chunk_at_a_time_in_memory_flat_in_the_count():
    """10,000 sentences drawn one at a time hold no more memory than 500 do (a chunk's worth each); the first k of n
    are the sentences of k; the command line prints as it draws (it stops at a closed pipe's first line)."""
    import tracemalloc

    import grammar_induce as gi
    from grammar_induce.families.pcfg.sampling import samples

    def peak(count: int) -> int:
        drawn = samples(tiny_grammar(), VOCAB, torch.Generator().manual_seed(2), max_length=20)
        tracemalloc.start()
        for s in itertools.islice(drawn, count):
            assert s.words
        top = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return top

    small, large = peak(500), peak(10_000)
    assert large < 2 * small, (small, large)  # a list of all 10,000 would hold 20 times as many
    first = [s.ptb for s in sample(tiny_grammar(), VOCAB, 7, torch.Generator().manual_seed(3), max_length=8)]
    more = [s.ptb for s in sample(tiny_grammar(), VOCAB, 600, torch.Generator().manual_seed(3), max_length=8)]
    assert more[:7] == first
    assert [t.pformat() for t in gi.samples("ptb-pcfg", 2, seed=4)] == [t.pformat() for t in gi.sample("ptb-pcfg", 2, seed=4)]


def test_sample_writes_parses_jsonl_records():
    """issue 81, class 13: `sample --format jsonl` writes parse's keys (tokens, words, tree as nested lists, labels
    over the spans of two or more words), the labels those of the PTB tree, and each word's preterminal."""
    import json

    import grammar_induce as gi

    done = invoke("sample", "-n", "2", "--seed", "5", "--format", "jsonl")
    assert done.exit_code == 0, done.output
    for line, drawn in zip(done.stdout.splitlines(), gi.sample("ptb-pcfg", 2, seed=5)):
        record = json.loads(line)
        assert record["tokens"] == record["words"] == drawn.leaves() == trees.leaves(record["tree"])
        assert {(i, j) for i, j, _ in record["labels"]} == trees.spans(record["tree"], whole=True)
        assert [0, len(record["words"]), drawn.label()] in record["labels"]  # the root's symbol over the whole
        assert record["preterminals"] == [tag for _, tag in drawn.pos()]
