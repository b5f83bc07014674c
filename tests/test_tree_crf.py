"""The tree CRF against brute force over every binary tree of small sentences; the student parser."""

import itertools
import math
import random

import pytest
import torch

from grammar_induce import trees
from grammar_induce.families.student import native_scores
from grammar_induce.families.student.model import SpanParser
from grammar_induce.families.student.settings import StudentConfig
from grammar_induce.structures import cky, tree_crf

from .test_trees import all_binary_trees


def brute_force(scores, n):
    words = [f"w{k}" for k in range(n)]
    candidates = list(all_binary_trees(words))
    totals = [sum(scores[i, j].item() for i, j in trees.spans(t, whole=True)) for t in candidates]
    return candidates, totals


NO_C_CKY = "no C compiler here: CKY runs by tensor ops"


@pytest.mark.parametrize("engine", ["C", "tensor ops"])
def test_the_tree_crf_equals_brute_force(engine, monkeypatch):
    """Its partition, best score, argmax and marginals (in C: cky.span_marginals; else the inside pass's gradient)
    against every binary tree of sentences of 1 to 6 words."""
    if engine == "tensor ops":
        monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")
    elif cky._cky_library() is None:
        pytest.skip(NO_C_CKY)
    torch.manual_seed(0)
    lengths = [1, 2, 3, 4, 5, 6]
    crf = tree_crf.TreeCRF(torch.randn(len(lengths), 7, 7, dtype=torch.float64), lengths)
    scores, log_z, best, marginals = crf.scores, crf.partition, crf.max, crf.marginals
    decoded = crf.argmax([[f"w{k}" for k in range(n)] for n in lengths])
    for b, n in enumerate(lengths):
        candidates, totals = brute_force(scores[b].detach(), n)
        assert math.isclose(log_z[b].item(), math.log(sum(math.exp(t) for t in totals)), rel_tol=1e-9, abs_tol=1e-12)
        assert math.isclose(best[b].item(), max(totals), rel_tol=1e-9)
        assert decoded[b] == candidates[totals.index(max(totals))]
        z = sum(math.exp(t) for t in totals)
        for i, j in itertools.combinations(range(n + 1), 2):
            if j - i >= 2:
                expected = sum(math.exp(t) for c, t in zip(candidates, totals) if (i, j) in trees.spans(c, whole=True)) / z
                assert math.isclose(marginals[b, i, j].item(), expected, rel_tol=1e-7, abs_tol=1e-12)


def test_the_tree_crf_computes_each_of_its_figures_once(monkeypatch):
    monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")  # the marginals by the inside pass's gradient
    crf = tree_crf.TreeCRF(torch.randn(2, 5, 5, dtype=torch.float64), [4, 3])
    calls = []
    counted = tree_crf.inside
    monkeypatch.setattr(tree_crf, "inside", lambda *args: calls.append(args[2:]) or counted(*args))
    assert crf.marginals is crf.marginals and crf.partition is crf.partition and crf.max is crf.max
    assert calls == [(), (), (tree_crf.MAX,)]  # the marginals' inside pass, the partition's, the best score's


@pytest.mark.skipif(cky._cky_library() is None, reason=NO_C_CKY)
def test_the_c_span_marginals_are_the_inside_passs_gradient_with_padding_and_forbidden_spans():
    """0 to 40 words, charts wider than the words, some sentences keeping given spans (the others scored -1e9): the C
    passes give the autograd marginals."""
    draw = random.Random(3)
    torch.manual_seed(3)
    for _ in range(30):
        batch, n = draw.randint(1, 5), draw.randint(0, 40)
        lengths = [n] + [draw.randint(0, n) for _ in range(batch - 1)]
        keeping = n >= 3 and draw.random() < 0.5  # (square charts)
        wider = 0 if keeping else draw.randint(0, 3)
        crf = tree_crf.TreeCRF(torch.randn(batch, n + 1, n + 1 + wider, dtype=torch.float64) * 4, lengths)
        if keeping:
            crf = crf.keeping([{(0, 2)} if length >= 3 else set() for length in lengths])
        found = cky.span_marginals(crf.scores, lengths)
        assert not found[:, :, n + 1 :].any()
        with torch.enable_grad():
            scores = crf.scores[:, :, : n + 1].clone().requires_grad_()
            log_z = tree_crf.inside(scores, lengths).sum()
            expected = torch.autograd.grad(log_z, scores)[0] if log_z.requires_grad else torch.zeros_like(scores)
        torch.testing.assert_close(found[:, :, : n + 1], expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("engine", ["C", "tensor ops"])
def test_cky_finds_the_brute_force_best_tree_by_either_engine(engine, monkeypatch):
    if engine == "tensor ops":
        monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")
    elif cky._cky_library() is None:
        pytest.skip(NO_C_CKY)
    torch.manual_seed(1)
    lengths = [1, 2, 3, 4, 5, 6, 7]
    scores = torch.randn(len(lengths), 8, 8, dtype=torch.float64)
    found = cky.best_trees(scores, lengths, [[f"w{k}" for k in range(n)] for n in lengths])
    for b, n in enumerate(lengths):
        candidates, totals = brute_force(scores[b], n)
        assert found[b] == candidates[totals.index(max(totals))]


@pytest.mark.skipif(cky._cky_library() is None, reason=NO_C_CKY)
def test_the_c_cky_gives_the_tensor_ops_split_table_ties_and_padding_included():
    """Vote counts (whole numbers, many ties: the leftmost split wins) and scores rounded to tenths, 0 to 30
    words, charts wider than the words (a batch's padding): the same table, entry for entry."""
    draw = random.Random(5)
    torch.manual_seed(5)
    for _ in range(100):
        batch, n = draw.randint(1, 6), draw.randint(0, 30)
        shape = (batch, n + 1, n + 1 + draw.randint(0, 3))
        own = torch.randint(0, 3, shape) if draw.random() < 0.5 else torch.randn(shape, dtype=torch.float64).round(
            decimals=1)
        in_c = cky._best_splits_in_c(cky._cky_library(), own)
        assert list(in_c) == cky._best_splits_by_tensor_ops(own)


@pytest.mark.skipif(cky._cky_library() is None, reason=NO_C_CKY)
def test_the_c_cky_reads_its_trees_as_the_split_table_gives_them():
    """exact_trees reads each sentence's tree from the split table in C (a postorder walk, built in Python): the
    trees tree_of_splits builds from the same table, for 1 to 30 words in batches padded to the longest, votes with
    many ties and scores alike."""
    draw = random.Random(6)
    torch.manual_seed(6)
    for _ in range(60):
        lengths = sorted(draw.randint(1, 30) for _ in range(draw.randint(1, 6)))
        shape = (len(lengths), lengths[-1] + 1, lengths[-1] + 1)
        scores = torch.randint(0, 3, shape).double() if draw.random() < 0.5 else torch.randn(shape, dtype=torch.float64)
        words = [[f"w{k}" for k in range(n)] for n in lengths]
        expected = [trees.tree_of_splits(w, splits) for w, splits in zip(words, cky.best_splits(scores))]
        assert cky.exact_trees(scores, words) == expected


@pytest.mark.parametrize("engine", ["C", "tensor ops"])
def test_the_best_trees_spans_are_those_of_the_tree_cky_builds(engine, monkeypatch):
    """cky.best_tree_spans marks the spans of two or more words of each best tree (the whole sentence's too), as
    trees.spans reads them off exact_trees' trees: 1 to 30 words in batches padded past the longest, votes with many
    ties and scores alike, in C and from the splits."""
    if engine == "tensor ops":
        monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")
    elif cky._cky_library() is None:
        pytest.skip(NO_C_CKY)
    draw = random.Random(7)
    torch.manual_seed(7)
    for _ in range(40):
        lengths = sorted(draw.randint(1, 30) for _ in range(draw.randint(1, 6)))
        shape = (len(lengths), lengths[-1] + 1 + draw.randint(0, 2), lengths[-1] + 1 + draw.randint(0, 2))
        shape = (shape[0], max(shape[1:]), max(shape[1:]))
        scores = torch.randint(0, 3, shape).double() if draw.random() < 0.5 else torch.randn(shape, dtype=torch.float64)
        found = cky.best_tree_spans(scores, lengths)
        assert found.dtype == torch.bool and found.shape == shape
        for b, tree in enumerate(cky.best_trees(scores, lengths, [[f"w{k}" for k in range(n)] for n in lengths])):
            marked = {tuple(span) for span in found[b].nonzero().tolist()}
            assert marked == set(trees.spans(tree, whole=True))


def test_a_students_likely_spans_are_those_its_readings_give():
    """The student's chart constraints a batch at once (its marginals at least the threshold, its CKY tree's spans, no
    tree built) are the contract's own, read off its readings (ModelKind.likely_spans), at every threshold; a
    one-word sentence keeps what its marginals give."""
    from grammar_induce.families.kind import ModelKind

    torch.manual_seed(3)
    parser = SpanParser(40, StudentConfig(emb_size=8, hidden_size=6)).eval()
    lengths = [1, 2, 5, 9, 12]
    tokens = torch.randint(2, 40, (len(lengths), max(lengths) + 2))
    words = [[f"w{k}" for k in range(n)] for n in lengths]
    for threshold in (0.0, 1e-3, 0.2, 0.999):
        fast = parser.likely_spans(tokens, words, threshold)
        read = ModelKind.likely_spans(parser, tokens, words, threshold)
        assert [k.shape for k in fast] == [(n + 1, n + 1) for n in lengths]
        assert all(torch.equal(a, b) for a, b in zip(fast, read))
    kept = parser.likely_spans(tokens, words, 0.999)[-1]
    assert kept[0, 12] and int(kept.triu(2).sum()) >= 11  # the whole sentence, and a binary tree's 11 spans at least


def test_a_postorder_walk_gives_its_tree():
    assert trees.tree_of_postorder(["a", "b", "c"], [0, 1, -1, 2, -1]) == [["a", "b"], "c"]
    assert trees.tree_of_postorder(["a", "b", "c"], [0, 1, 2, -1, -1]) == ["a", ["b", "c"]]
    assert trees.tree_of_postorder(["a"], [0]) == "a"


def test_without_a_compiler_cky_runs_by_tensor_ops(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no cached build either
    cky._cky_library.cache_clear()
    try:
        assert cky._cky_library() is None
        scores = torch.zeros(1, 4, 4, dtype=torch.float64)
        scores[0, 0, 2] = 1.0  # (w0 w1) scores: ((w0 w1) w2)
        assert cky.best_trees(scores, [3], [["w0", "w1", "w2"]]) == [[["w0", "w1"], "w2"]]
    finally:
        cky._cky_library.cache_clear()


def test_keeping_spans_gives_the_trees_that_hold_them():
    torch.manual_seed(1)
    n = 5
    scores = torch.randn(1, n + 1, n + 1, dtype=torch.float64)
    kept = {(0, 2), (2, 5)}
    candidates, totals = brute_force(scores[0], n)
    holding = [t for c, t in zip(candidates, totals) if kept <= trees.spans(c, whole=True)]
    kept_partition = tree_crf.TreeCRF(scores, [n]).keeping([kept]).partition
    assert math.isclose(kept_partition.item(), math.log(sum(math.exp(t) for t in holding)), rel_tol=1e-9)
    tree = [["a", "b"], [["c", "d"], "e"]]
    whole = tree_crf.crossing_mask([trees.spans(tree, whole=True)], n)
    assert math.isclose(tree_crf.inside(scores.masked_fill(whole, -1e9), [n]).item(),
                        sum(scores[0, i, j].item() for i, j in trees.spans(tree, whole=True)), rel_tol=1e-9)


def test_greedy_past_the_exact_limit_finds_a_clear_best_tree_and_cky_equals_the_brute_force(monkeypatch):
    rng = random.Random(0)
    for n in range(2, 8):
        words = [f"w{k}" for k in range(n)]
        tree = rng.choice(list(all_binary_trees(words)))
        scores = torch.full((1, n + 1, n + 1), -1.0, dtype=torch.float64)
        for i, j in trees.spans(tree, whole=True):
            scores[0, i, j] = 1.0  # every span of `tree` scores, every other costs: a clear best tree
        assert cky.best_trees(scores, [n], [words]) == [tree]
        monkeypatch.setattr(cky, "EXACT_LIMIT", 1)
        assert cky.best_trees(scores, [n], [words]) == [tree]
        monkeypatch.undo()


def student(vocab_size=12):
    torch.manual_seed(0)
    return SpanParser(vocab_size, StudentConfig(kind="student", emb_size=16, hidden_size=16, n_layers=1, dropout=0.0))


def batch(sentences):
    longest = max(len(s) for s in sentences)
    return torch.tensor([[1, *s, 1] + [1] * (longest - len(s)) for s in sentences]), [len(s) for s in sentences]


def test_the_losss_gradient_is_the_span_marginals_less_the_target_tree():
    torch.manual_seed(2)
    n = 5
    scores = torch.randn(1, n + 1, n + 1, dtype=torch.float64, requires_grad=True)
    target = [["a", "b"], ["c", ["d", "e"]]]
    kept = trees.spans(target, whole=True)
    loss = tree_crf.inside(scores, [n]) - tree_crf.inside(scores.masked_fill(tree_crf.crossing_mask([kept], n), -1e9), [n])
    (grad,) = torch.autograd.grad(loss.sum(), scores)
    candidates, totals = brute_force(scores[0].detach(), n)
    z = sum(math.exp(t) for t in totals)
    for i, j in itertools.combinations(range(n + 1), 2):
        if j - i >= 2:
            marginal = sum(math.exp(t) for c, t in zip(candidates, totals) if (i, j) in trees.spans(c, whole=True)) / z
            assert math.isclose(grad[0, i, j].item(), marginal - ((i, j) in kept), abs_tol=1e-9)
    assert torch.autograd.gradcheck(lambda x: tree_crf.inside(x, [n, 3]), torch.randn(2, n + 1, n + 1, dtype=torch.float64,
                                                                                  requires_grad=True))


def test_the_students_parameters_get_the_gradient_of_its_span_scores():
    model = student().double()
    tokens, lengths = batch([[2, 3, 4, 5], [6, 7, 8]])
    kept = [trees.spans([["a", "b"], ["c", "d"]], whole=True), trees.spans(["a", ["b", "c"]], whole=True)]
    model.loss(tokens, lengths, kept).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert model.score.weight.grad.abs().sum() > 0 and model.embedding.weight.grad[2:9].abs().sum() > 0


def test_padding_does_not_change_a_sentences_scores():
    model = student().eval()
    alone_tokens, alone_lengths = batch([[2, 3, 4]])
    padded_tokens, padded_lengths = batch([[2, 3, 4], [5, 6, 7, 8, 9, 10]])
    alone = model.span_scores(alone_tokens, alone_lengths)[0]
    padded = model.span_scores(padded_tokens, padded_lengths)[0, :4, :4]
    assert torch.allclose(alone, padded, atol=1e-6)


def test_a_student_trained_on_one_tree_per_sentence_reproduces_them():
    model = student()
    sentences = [[2, 3, 4, 5, 6], [7, 8, 9, 10], [3, 5, 7, 9, 11, 2]]
    targets = [[["a", "b"], ["c", ["d", "e"]]], ["a", [["b", "c"], "d"]], [[["a", "b"], "c"], ["d", ["e", "f"]]]]
    tokens, lengths = batch(sentences)
    kept = [trees.spans(t, whole=True) for t in targets]
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(150):
        optimizer.zero_grad()
        model.loss(tokens, lengths, kept).backward()
        optimizer.step()
    words = [[w for w in trees.leaves(t)] for t in targets]
    assert [tree for tree, _, _ in model.trees(tokens, lengths, words)] == targets


def test_the_students_long_line_search_is_the_greedy_split_without_a_chart(monkeypatch):
    """Past EXACT_LIMIT the student scores only the spans the greedy split looks at: the same tree as the greedy
    split over the full chart of span scores."""
    torch.manual_seed(3)
    student = SpanParser(30, StudentConfig(kind="student", emb_size=8, hidden_size=8, n_layers=1)).eval()
    words = [f"w{k}" for k in range(25)]
    tokens = torch.randint(2, 30, (1, 27))
    with torch.no_grad():
        chart = student.span_scores(tokens, [25])[0]
    expected = trees.tree_of_splits(words, cky.greedy_splits(lambda i, j: float(chart[i, j]), 25))
    monkeypatch.setattr(cky, "EXACT_LIMIT", 10)
    assert [tree for tree, _, _ in student.trees(tokens, [25], [words])] == [expected]


def test_the_students_span_scores_are_the_projected_fencepost_differences():
    """f_j - f_i + b_i - b_j, computed as (f_j - b_j) - (f_i - b_i): equal to float rounding."""
    torch.manual_seed(5)
    student = SpanParser(30, StudentConfig(kind="student", emb_size=8, hidden_size=8, n_layers=1)).eval()
    tokens = torch.randint(2, 30, (3, 14))
    with torch.no_grad():
        f, b = student._fenceposts(tokens, [12, 12, 12])
        written = (f[:, None, :] - f[:, :, None]) + (b[:, :, None] - b[:, None, :])
        expected = student.score(torch.relu(written + student.project.bias)).squeeze(-1)
        assert torch.allclose(student.span_scores(tokens, [12] * 3), expected, atol=1e-6)
        upper = torch.ones(13, 13, dtype=torch.bool).triu(1)  # the spans i < j, all that is read
        assert torch.allclose(student.span_scores(tokens, [12] * 3, block=64)[:, upper], expected[:, upper], atol=1e-6)


def test_parsing_reads_each_direction_unpacked_and_gets_the_packed_states():
    """Parsing runs each layer and direction as one unpacked call (the backward one over each row reversed in
    place); training packs the rows. Same states to float rounding, whatever the padding; bf16 products close."""
    torch.manual_seed(4)
    model = SpanParser(30, StudentConfig(kind="student", emb_size=8, hidden_size=8, n_layers=2,
                                       dropout=0.0))
    tokens, lengths = batch([[2, 3], [4, 5, 6, 7, 8, 9, 10], [11, 12, 13, 14], [15, 16, 17, 18, 19, 20, 21, 22, 23]])
    with torch.no_grad():
        packed = model.train().span_scores(tokens, lengths)
        unpacked = model.eval().span_scores(tokens, lengths)
        bf16 = model.span_scores(tokens, lengths, products=torch.bfloat16)
    for row, n in enumerate(lengths):
        assert torch.allclose(unpacked[row, : n + 1, : n + 1], packed[row, : n + 1, : n + 1], atol=1e-6)
        assert torch.allclose(bf16[row, : n + 1, : n + 1], packed[row, : n + 1, : n + 1], atol=0.05)


def test_bf16_parsing_converts_the_weights_once_and_sees_a_change_to_them():
    """bfloat16 copies of the BiLSTM's weights are kept between batches, and made again when a weight changes (a
    training step, a loaded state): a parse after the change equals a fresh model's."""
    torch.manual_seed(4)
    config = StudentConfig(kind="student", emb_size=8, hidden_size=8, n_layers=1, dropout=0.0)
    model = SpanParser(30, config).eval()
    tokens, lengths = batch([[2, 3, 4], [5, 6, 7, 8, 9]])
    with torch.no_grad():
        first = model.span_scores(tokens, lengths, products=torch.bfloat16)
        copies = [id(w) for w in model._lstm_weights(0, "", torch.bfloat16)]
        assert torch.equal(model.span_scores(tokens, lengths, products=torch.bfloat16), first)
        assert [id(w) for w in model._lstm_weights(0, "", torch.bfloat16)] == copies  # not converted again
        model.encoder.weight_hh_l0.mul_(3.0)
        changed = model.span_scores(tokens, lengths, products=torch.bfloat16)
    fresh = SpanParser(30, config).eval()
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(changed, fresh.span_scores(tokens, lengths, products=torch.bfloat16))
    assert not torch.equal(changed, first)


@pytest.mark.parametrize("hidden", [8, 200])
def test_parse_scores_in_c_equal_the_tensor_ops_on_every_span_read(hidden, monkeypatch):
    """span_scores.c scores only the spans i < j from their fenceposts; the tensor ops materialise every span's
    features in blocks. The same scores to float rounding (a sum over the hidden units in another order)."""
    if not native_scores.usable(torch.zeros(1)):
        pytest.skip("no C compiler here")
    torch.manual_seed(7)
    model = SpanParser(30, StudentConfig(kind="student", emb_size=8, hidden_size=hidden, n_layers=1,
                                       dropout=0.0)).eval()
    tokens, lengths = batch([[2, 3], [4, 5, 6, 7, 8, 9, 10], [11, 12, 13, 14], list(range(2, 26))])
    with torch.no_grad():
        in_c = model.span_scores(tokens, lengths, block=1 << 22)
        monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", "0")
        by_ops = model.span_scores(tokens, lengths, block=1 << 22)
    upper = torch.ones(in_c.shape[1], in_c.shape[1], dtype=torch.bool).triu(1)
    torch.testing.assert_close(in_c[:, upper], by_ops[:, upper], rtol=1e-5, atol=1e-6)
    assert not in_c[:, ~upper].any()  # nothing computed where the CKY does not read


def test_the_soft_target_loss_is_the_cross_entropy_of_the_teachers_trees_under_the_student():
    """log Z_S - sum q(i, j) score_S(i, j) = -sum over trees of q(tree) log p_S(tree), every tree of 1 to 5 words
    enumerated, q a teacher's distribution over them (another CRF's), whose marginals are all the loss reads."""
    torch.manual_seed(1)
    lengths = [1, 2, 3, 4, 5]
    student = tree_crf.TreeCRF(torch.randn(len(lengths), 6, 6, dtype=torch.float64), lengths)
    teacher = tree_crf.TreeCRF(2 * torch.randn(len(lengths), 6, 6, dtype=torch.float64), lengths)
    loss = student.cross_entropy(teacher.marginals)
    for b, n in enumerate(lengths):
        _, own = brute_force(student.scores[b], n)
        _, theirs = brute_force(teacher.scores[b], n)
        log_z, their_z = math.log(sum(map(math.exp, own))), sum(map(math.exp, theirs))
        expected = -sum(math.exp(t) / their_z * (s - log_z) for s, t in zip(own, theirs))
        assert math.isclose(loss[b].item(), expected, rel_tol=1e-9, abs_tol=1e-12), (n, loss[b].item(), expected)


def test_the_students_loss_mixes_the_tree_and_the_soft_targets_by_their_weight():
    torch.manual_seed(2)
    model = SpanParser(20, StudentConfig(kind="student", emb_size=8, hidden_size=8, n_layers=1, dropout=0.0))
    tokens, lengths = torch.randint(2, 20, (2, 7)), [5, 4]
    kept = [trees.spans(trees.right_branching(list("abcde")), whole=True),
            trees.spans(trees.left_branching(list("abcd")), whole=True)]
    marginals = tree_crf.TreeCRF(torch.randn(2, 6, 6), lengths).marginals
    hard, soft = model.loss(tokens, lengths, kept), model.loss(tokens, lengths, kept, marginals, 1.0)
    crf = tree_crf.TreeCRF(model.span_scores(tokens, lengths), lengths)
    assert torch.allclose(soft, crf.cross_entropy(marginals).mean())
    assert torch.allclose(model.loss(tokens, lengths, kept, marginals, 0.25), 0.75 * hard + 0.25 * soft)
    one_tree = torch.zeros(2, 6, 6)  # a teacher sure of its tree: the soft loss is the hard one
    for b, spans in enumerate(kept):
        for i, j in spans:
            one_tree[b, i, j] = 1.0
    assert torch.allclose(model.loss(tokens, lengths, kept, one_tree, 1.0), hard)


def test_a_students_train_section_takes_a_soft_weight_from_0_to_1():
    from grammar_induce.config import ConfigError
    from grammar_induce.families.student.settings import StudentTrainConfig

    for weight in (0.0, 0.5, 1.0):
        StudentTrainConfig(soft=weight).validate()
    with pytest.raises(ConfigError, match="train.soft must be from 0 to 1, got 1.5"):
        StudentTrainConfig(soft=1.5).validate()
