"""The rank-space CFG structure (structures/rank_cfg.py) against brute force over every tree and labelling, with a
random proper grammar and no model: its partition, span marginals, the inside pass's written-out backward, the MBR
tree and each span's most probable nonterminal; both forms of the tensor-op sums over split points."""

import math
from types import SimpleNamespace

import pytest
import torch

from grammar_induce import trees
from grammar_induce.structures import cky, rank_cfg
from grammar_induce.structures.rank_cfg import RankSpaceCFG

NT, T, V, R = 3, 4, 7, 5


def random_grammar(seed: int) -> SimpleNamespace:
    """A proper grammar in float64 (U's rows sum to one over the rank, V's and W's columns over the symbols)."""
    gen = torch.Generator().manual_seed(seed)

    def draw(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.double) * 2

    return SimpleNamespace(root=draw(NT).softmax(0), emission=draw(T, V).log_softmax(-1), head=draw(NT, R).softmax(-1),
                           left=draw(NT + T, R).softmax(0), right=draw(NT + T, R).softmax(0))


def structure(g: SimpleNamespace, ids: torch.Tensor, lengths: list[int], span_bias=None, keep=None) -> RankSpaceCFG:
    return RankSpaceCFG(g.root, g.head, g.left, g.right, g.emission[:, ids].permute(1, 2, 0), lengths,
                        span_bias=span_bias, keep=keep)


def padded(sentences: list[list[int]]) -> tuple[torch.Tensor, list[int]]:
    n = max(map(len, sentences))
    return torch.tensor([s + [0] * (n - len(s)) for s in sentences]), [len(s) for s in sentences]


def all_trees(i, j):
    """Every binary bracketing of words i..j-1 as nested (left, right, split) tuples."""
    if j - i == 1:
        yield i
        return
    for k in range(i + 1, j):
        for left in all_trees(i, k):
            for right in all_trees(k, j):
                yield (left, right, k)


def spans_of(tree, i, j):
    if isinstance(tree, int):
        return set()
    return {(i, j)} | spans_of(tree[0], i, tree[2]) | spans_of(tree[1], tree[2], j)


def symbol_inside(g, words, tree, i, j):
    """(m,) the probability that each symbol yields words i..j-1 with this bracketing, summed over labellings,
    computed with the full m x m x m rule tensor (the brute force the rank space avoids)."""
    rules = torch.einsum("ar,br,cr->abc", g.head, g.left, g.right)
    value = torch.zeros(NT + T, dtype=torch.double)
    if isinstance(tree, int):
        value[NT:] = g.emission.exp()[:, words[i]]
        return value
    left, right = symbol_inside(g, words, tree[0], i, tree[2]), symbol_inside(g, words, tree[1], tree[2], j)
    value[:NT] = torch.einsum("abc,b,c->a", rules, left, right)
    return value


def brute_force(g, words):
    """{frozenset of spans: p(sentence, tree)} over every binary tree."""
    n = len(words)
    return {frozenset(spans_of(t, 0, n)): float(g.root @ symbol_inside(g, words, t, 0, n)[:NT])
            for t in all_trees(0, n)}


def test_a_vocabularys_leaves_read_at_the_words_are_the_batchs_own():
    """Leaves.of over the whole vocabulary (a parse's grammar keeps them: pcfg/grammar.word_leaves), read at a batch's
    words, are the batch's words' own, made from their emission; and a structure made from them is the same."""
    g = random_grammar(4)
    ids, lengths = padded([[3, 1, 4, 1, 5], [2, 6]])
    own = rank_cfg.Leaves.of(g.emission[:, ids].permute(1, 2, 0), g.left[NT:], g.right[NT:])
    read = rank_cfg.Leaves.of(g.emission.t(), g.left[NT:], g.right[NT:]).at(ids)
    torch.testing.assert_close(read.scale, own.scale, rtol=0, atol=0)
    torch.testing.assert_close(read.values, own.values, rtol=1e-12, atol=0)
    from_leaves = RankSpaceCFG(g.root, g.head, g.left, g.right, read, lengths)
    torch.testing.assert_close(from_leaves.partition, structure(g, ids, lengths).partition, rtol=1e-12, atol=0)
    torch.testing.assert_close(from_leaves.marginals, structure(g, ids, lengths).marginals, rtol=1e-10, atol=1e-12)


def test_partition_and_marginals_equal_brute_force_over_every_tree(tensor_sums):
    g = random_grammar(0)
    sentences = [[3, 1, 4, 1, 5], [2, 6], [0, 5, 5]]
    assert_brute_force(structure(g, *padded(sentences)), [brute_force(g, words) for words in sentences])


def assert_brute_force(s: RankSpaceCFG, by_sentence: list[dict]) -> None:
    """The structure's partition and span marginals are those of {spans: weight} over every tree of each sentence."""
    for b, weighted in enumerate(by_sentence):
        z, n = sum(weighted.values()), max(j for spans in weighted for _, j in spans)
        assert s.partition[b].item() == pytest.approx(math.log(z), rel=1e-9)
        for i in range(n):
            for j in range(i + 2, n + 1):
                expected = sum(p for spans, p in weighted.items() if (i, j) in spans) / z
                assert float(s.marginals[b, i, j]) == pytest.approx(expected, abs=1e-6)


def test_the_outside_pass_is_the_inside_passs_exact_gradient(tensor_sums):
    """_Inside's backward (the outside pass written out) against finite differences, in float64, in a padded batch
    with a sentence of one word: log Z's gradients at the words' values, the map to children and the root."""
    ids, lengths = padded([[3, 1, 4, 1, 5, 2, 6], [2, 6, 0], [0], [5, 5, 1, 0, 2]])
    s = structure(random_grammar(1), ids, lengths)
    top = s.leaf_scale

    def log_z(first, to_children, root):
        chart = rank_cfg.Chart.of_words(top)
        weights = torch.tensor([1.0, 0.5, 2.0, -1.0], dtype=torch.double)  # each sentence's gradient seeded apart
        return rank_cfg._Inside.apply(first, to_children, root, chart, lengths, None, None, None) * weights

    inputs = tuple(t.detach().clone().requires_grad_() for t in (s.leaves, s.to_children, s.root))
    assert torch.autograd.gradcheck(log_z, inputs)


def test_the_partition_carries_gradients_to_the_rules_and_emissions():
    g = random_grammar(2)
    factors = [x.clone().requires_grad_() for x in (g.root, g.head, g.left, g.right, g.emission)]
    ids, lengths = padded([[3, 1, 4], [2, 6]])

    def log_z(root, head, left, right, emission):
        return RankSpaceCFG(root, head, left, right, emission[:, ids].permute(1, 2, 0), lengths).partition

    assert torch.autograd.gradcheck(log_z, tuple(factors))


def test_the_mbr_tree_has_the_largest_sum_of_span_marginals():
    words = [3, 1, 4, 1, 5, 2]
    s = structure(random_grammar(0), torch.tensor([words]), [6])
    best = max(all_trees(0, 6), key=lambda t: sum(float(s.marginals[0, i, j]) for i, j in spans_of(t, 0, 6)))
    names = [str(w) for w in words]
    assert trees.spans(s.argmax([names])[0], whole=True) == spans_of(best, 0, 6)
    assert s.argmax([names]) == cky.best_trees(s.marginals, [6], [names])


def test_each_span_is_labelled_with_its_most_probable_nonterminal():
    """The label of a span is the nonterminal with the largest marginal of (span, nonterminal), computed here
    by brute force: every tree and every labelling, the span's symbol fixed."""
    g = random_grammar(3)
    words = [3, 1, 4, 1]
    s = structure(g, torch.tensor([words]), [4])
    found = s.argmax([[str(w) for w in words]])
    labels = s.labels(found)[0]
    rules = torch.einsum("ar,br,cr->abc", g.head, g.left, g.right)

    def labelled(tree, i, j, span, symbol):
        value = symbol_inside(g, words, tree, i, j) if isinstance(tree, int) else None
        if value is None:
            left = labelled(tree[0], i, tree[2], span, symbol)
            right = labelled(tree[1], tree[2], j, span, symbol)
            value = torch.zeros(NT + T, dtype=torch.double)
            value[:NT] = torch.einsum("abc,b,c->a", rules, left, right)
        if (i, j) == span:
            keep = torch.zeros_like(value)
            keep[symbol] = value[symbol]
            value = keep
        return value

    assert labels and set(labels) == trees.spans(found[0], whole=True)
    for span, label in labels.items():
        mass = [sum(float(g.root @ labelled(t, 0, 4, span, a)[:NT]) for t in all_trees(0, 4)) for a in range(NT)]
        assert label == max(range(NT), key=lambda a: mass[a])


def random_bias(sentences: list[list[int]], seed: int) -> torch.Tensor:
    """(B, n+1, n+1) a log weight for every span, drawn (the focus's votes are counts; any real number must do)."""
    n = max(map(len, sentences))
    return torch.randn(len(sentences), n + 1, n + 1, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.double) * 1.5


def test_a_focused_partition_and_its_marginals_equal_brute_force_over_every_tree(tensor_sums):
    """Parse-focusing's objective: log of the sum over trees of p(sentence, tree) exp(sum of its spans' biases) (the
    whole sentence's and single words' biases too: a constant of every tree, and none), and the marginals of that
    reweighted distribution."""
    g = random_grammar(3)
    sentences = [[3, 1, 4, 1, 5], [2, 6], [0, 5, 5]]
    ids, lengths = padded(sentences)
    bias = random_bias(sentences, 4)
    assert_brute_force(structure(g, ids, lengths, bias),
                       [{spans: p * math.exp(sum(float(bias[b, i, j]) for i, j in spans))
                         for spans, p in brute_force(g, words).items()} for b, words in enumerate(sentences)])


def test_a_focused_partition_carries_the_exact_gradient_to_the_rules_and_emissions(tensor_sums):
    g = random_grammar(5)
    sentences = [[3, 1, 4, 6], [2, 6, 1]]
    ids, lengths = padded(sentences)
    bias = random_bias(sentences, 6)
    factors = [x.clone().requires_grad_() for x in (g.root, g.head, g.left, g.right, g.emission)]

    def log_z(root, head, left, right, emission):
        return RankSpaceCFG(root, head, left, right, emission[:, ids].permute(1, 2, 0), lengths,
                            span_bias=bias).partition

    assert torch.autograd.gradcheck(log_z, tuple(factors))
    # and that gradient is the brute force's: d/d(emission) of log sum_t p(t) exp(bias(t)) by autograd through it
    emission = g.emission.clone().requires_grad_()
    weighted = [g.root @ symbol_inside(SimpleNamespace(**{**vars(g), "emission": emission}), words, t, 0, len(words))[:NT]
                * math.exp(sum(float(bias[b, i, j]) for i, j in spans_of(t, 0, len(words))))
                for b, words in enumerate(sentences) for t in all_trees(0, len(words))]
    brute = sum(torch.log(sum(weighted[k] for k in range(len(weighted)) if k in rows))
                for rows in (range(5), range(5, 7)))  # 5 trees of 4 words, 2 of 3
    brute.backward()
    ours = factors[4].detach().clone().requires_grad_()
    RankSpaceCFG(g.root, g.head, g.left, g.right, ours[:, ids].permute(1, 2, 0), lengths,
                 span_bias=bias).partition.sum().backward()
    assert torch.allclose(ours.grad, emission.grad, atol=1e-9)


def test_a_strong_focus_on_one_tree_concentrates_the_marginals_on_it():
    """A large bias on one tree's spans (a single teacher at a large strength): its spans' marginals go to one, every
    other span's to zero; in float32, through the C sums where they are built, as training runs."""
    g = random_grammar(7)
    words = [3, 1, 4, 1, 5, 2, 6]
    teacher = ((0, (1, 2, 2), 1), ((3, 4, 4), (5, 6, 6), 5), 3)  # ((w0 (w1 w2)) ((w3 w4) (w5 w6)))
    chosen = spans_of(teacher, 0, 7)
    bias = torch.zeros(1, 8, 8)
    for i, j in chosen:
        bias[0, i, j] = 30.0
    f32 = SimpleNamespace(**{k: v.float() for k, v in vars(g).items()})
    plain, focused = structure(f32, torch.tensor([words]), [7]), structure(f32, torch.tensor([words]), [7], bias)
    assert float(plain.marginals[0, 0, 3]) < 0.9  # the grammar alone is not sure of the teacher's spans
    for i in range(7):
        for j in range(i + 2, 8):
            expected = 1.0 if (i, j) in chosen else 0.0
            assert float(focused.marginals[0, i, j]) == pytest.approx(expected, abs=1e-4)
    assert trees.spans(focused.argmax([[str(w) for w in words]])[0], whole=True) == chosen


def constraints(sentences: list[list[int]], seed: int, share: float = 0.5) -> torch.Tensor:
    """(B, n+1, n+1) chart constraints: a random share of the spans and every span of one tree (the right-branching
    one, as a pruner's best tree), so every sentence keeps a tree."""
    n = max(map(len, sentences))
    keep = torch.rand(len(sentences), n + 1, n + 1, generator=torch.Generator().manual_seed(seed)) < share
    for b, words in enumerate(sentences):
        for i in range(len(words) - 1):
            keep[b, i, len(words)] = True
    return keep


def test_a_pruned_chart_sums_exactly_the_trees_whose_every_span_is_kept(tensor_sums):
    """Chart constraints against brute force: the partition and marginals of the trees made of kept spans alone."""
    g = random_grammar(11)
    sentences = [[3, 1, 4, 1, 5], [2, 6], [0, 5, 5, 2]]
    ids, lengths = padded(sentences)
    keep = constraints(sentences, 12)
    expected = [{spans: p for spans, p in brute_force(g, words).items()
                 if all(bool(keep[b, i, j]) for i, j in spans)} for b, words in enumerate(sentences)]
    assert all(0 < len(e) < len(brute_force(g, w)) for e, w in zip(expected, sentences) if len(w) > 3)  # some pruned
    pruned = structure(g, ids, lengths, keep=keep)
    assert_brute_force(pruned, expected)
    assert pruned.kept_spans == (int(sum(keep[b, : n + 1, : n + 1].triu(2).sum() for b, n in enumerate(lengths))),
                                 10 + 1 + 6)


def test_chart_constraints_that_keep_every_span_are_the_exact_chart_and_a_pruned_one_the_biased_chart():
    """In float32 and through the C sums where they are built (as parsing runs): keeping every span gives the
    unconstrained partition, marginals and gradients; pruning gives what a span bias of PRUNED on the left-out spans
    gives without skipping any work (the skipped products and split points added exactly zero)."""
    g = SimpleNamespace(**{k: v.float() for k, v in vars(random_grammar(13)).items()})
    sentences = [[3, 1, 4, 1, 5, 2, 6, 0, 4], [2, 6, 1, 1], [0, 5, 5, 2, 3, 3]]
    ids, lengths = padded(sentences)
    n = max(lengths)
    full, kept_all = structure(g, ids, lengths), structure(g, ids, lengths, keep=torch.ones(3, n + 1, n + 1, dtype=torch.bool))
    assert torch.allclose(full.partition, kept_all.partition, rtol=1e-6)
    assert torch.allclose(full.marginals, kept_all.marginals, atol=1e-6)
    keep = constraints(sentences, 14, share=0.3)
    biased = structure(g, ids, lengths, span_bias=torch.zeros(3, n + 1, n + 1).masked_fill(~keep, rank_cfg.PRUNED))
    pruned = structure(g, ids, lengths, keep=keep)
    assert torch.allclose(pruned.partition, biased.partition, rtol=1e-6)
    assert torch.allclose(pruned.marginals, biased.marginals, atol=1e-6)
    assert (pruned.marginals[~keep] == 0).all() and (pruned.partition < full.partition).all()
    emission = g.emission.clone().requires_grad_()
    grads = []
    for kwargs in ({"keep": keep}, {"span_bias": biased.span_bias}):
        e = emission.detach().clone().requires_grad_()
        RankSpaceCFG(g.root, g.head, g.left, g.right, e[:, ids].permute(1, 2, 0), lengths, **kwargs).partition.sum().backward()
        grads.append(e.grad)
    assert torch.allclose(*grads, atol=1e-5)
