"""The TN-PCFG family (families/pcfg/model.py): the grammar is proper, the rank-space inside pass equals brute force over
every tree and labelling, marginals and trees follow, and the family trains, resumes, parses and evaluates."""

import json
import math
import os
import signal
from dataclasses import replace

import pytest
import torch

from grammar_induce import trees
from grammar_induce.config import ConfigError
from grammar_induce.errors import InputError
from grammar_induce.families import checkpoint, sentences
from grammar_induce.families.pcfg import emission
from grammar_induce.families.pcfg.emission import word_log_probs
from grammar_induce.families.pcfg.model import TNPCFG
from grammar_induce.families.pcfg.settings import PCFGConfig
from grammar_induce.inference.ensemble import parse_layer
from grammar_induce.workflows.train import train

from .conftest import QUIET, by_section, tiny_config

NT, T, V = 3, 4, 7


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    model = TNPCFG(V, PCFGConfig(kind="pcfg", nonterminals=NT, preterminals=T, rank=5, symbol_dim=8)).double()
    with torch.no_grad():
        return model, model.grammar()


def test_the_grammar_is_a_proper_pcfg(small):
    _, g = small
    rules = torch.einsum("ar,br,cr->abc", g.head, g.left, g.right)
    assert torch.allclose(rules.sum((1, 2)), torch.ones(NT, dtype=torch.double))
    assert torch.allclose(g.emission.exp().sum(-1), torch.ones(T, dtype=torch.double))
    assert math.isclose(float(g.root.sum()), 1.0)
    assert (rules >= 0).all()


def padded_batch():
    sentences = [[3, 1, 4, 1, 5, 2, 6], [2, 6, 0], [0], [5, 5, 1, 0, 2]]
    return torch.tensor([s + [0] * (7 - len(s)) for s in sentences]), [len(s) for s in sentences]


@pytest.mark.parametrize("products", [None, torch.bfloat16])
def test_the_split_point_sums_in_c_give_the_tensor_ops_likelihoods_gradients_and_marginals(products, monkeypatch,
                                                                                           tensor_sums):
    """float32 runs the inside and outside passes' sums over split points in C (split_points.c) where it can be
    built; GRAMMAR_INDUCE_NATIVE=0 runs the tensor ops (whose gradients gradcheck checks in float64). The same
    log-likelihoods, parameter gradients, span marginals and label gradients, to float32's rounding (the C sums
    may round a product in another order), in a padded batch with a one-word sentence."""
    from grammar_induce.structures import rank_sums as native

    if native.library(torch.float32) is None:
        pytest.skip("no C compiler here: the tensor ops are all there is")
    torch.manual_seed(2)
    model = TNPCFG(V, PCFGConfig(kind="pcfg", nonterminals=NT, preterminals=T, rank=6, symbol_dim=8))
    ids, lengths = padded_batch()
    calls = []
    monkeypatch.setattr(native.Inside, "combine", lambda *args, run=native.Inside.combine: calls.append("combine")
                        or run(*args))
    monkeypatch.setattr(native.Outside, "pull", lambda *args, run=native.Outside.pull: calls.append("pull") or run(*args))
    found = []
    for flag in ("1", "0"):
        monkeypatch.setenv("GRAMMAR_INDUCE_NATIVE", flag)
        model.zero_grad()
        log_likelihood = model.log_likelihood(ids, lengths, products)
        log_likelihood.sum().backward()
        structure = model.structure(ids, lengths, products)
        marginals, child_grads = structure.marginals, structure.child_gradients
        found.append([log_likelihood.detach(), *(p.grad.clone() for p in model.parameters()), marginals, *child_grads])
        if flag == "1":
            assert calls.count("combine") == 2 * (7 - 1)  # widths 2..7, for the likelihood and for the marginals
            assert calls.count("pull") == (7 - 1) + (7 - 2)  # widths 6..1 as children in training, 6..2 parsing
            calls.clear()
    assert not calls  # the tensor ops ran without them
    for in_c, by_ops in zip(*found, strict=True):
        torch.testing.assert_close(in_c, by_ops, rtol=1e-5, atol=1e-6)


def test_a_training_steps_chart_is_freed_with_the_step_without_the_cyclic_collector():
    import gc
    import weakref

    torch.manual_seed(0)
    model = TNPCFG(V, PCFGConfig(kind="pcfg", nonterminals=NT, preterminals=T, rank=5, symbol_dim=8))
    ids, lengths = padded_batch()
    was = gc.isenabled()
    gc.disable()
    try:
        structure = model.structure(ids, lengths)
        (-structure.partition.sum()).backward()
        freed = weakref.ref(structure.chart), weakref.ref(structure)
        del structure
        assert freed[0]() is None and freed[1]() is None
    finally:
        if was:
            gc.enable()


def test_bfloat16_products_give_the_float32_gradients_to_their_rounding():
    """Every parameter's gradient within 0.5% of the largest (bfloat16's 8-bit mantissa; a few parameters' own
    gradients are far smaller, and two are zero but for rounding: softmax biases along the normalised axis)."""
    torch.manual_seed(1)
    model = TNPCFG(V, PCFGConfig(kind="pcfg", nonterminals=NT, preterminals=T, rank=5, symbol_dim=8))
    ids, lengths = padded_batch()
    grads = []
    for products in (None, torch.bfloat16):
        model.zero_grad()
        model.log_likelihood(ids, lengths, products).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    largest = max(float(full.abs().max()) for full in grads[0])
    for full, reduced in zip(*grads, strict=True):
        torch.testing.assert_close(reduced, full, rtol=0, atol=5e-3 * largest)


def test_the_emission_read_at_the_words_gives_the_full_softmaxs_values_and_gradients():
    """emission.py: log p(T -> w) at the words (a word twice in the batch, padding) equals log_softmax's full (T, V)
    table read there, its value and every gradient; in bfloat16 products, the same to their rounding."""
    torch.manual_seed(0)
    hidden = torch.randn(T, 8, dtype=torch.double, requires_grad=True)
    last = torch.nn.Linear(8, V).double()
    words = torch.tensor([[3, 1, 3, 0], [6, 3, 0, 0]])
    weights = torch.randn(2, 4, T, dtype=torch.double)

    def value_and_grads(read):
        hidden.grad = last.weight.grad = last.bias.grad = None
        value = read()
        (value * weights).sum().backward()
        return value.detach(), hidden.grad, last.weight.grad, last.bias.grad

    full = value_and_grads(lambda: last(hidden).log_softmax(-1)[:, words].permute(1, 2, 0))
    fused = value_and_grads(lambda: word_log_probs(hidden, last.weight, last.bias, words))
    for a, b in zip(full, fused):
        assert torch.allclose(a, b, atol=1e-12)
    in_bf16 = value_and_grads(lambda: word_log_probs(hidden, last.weight, last.bias, words, torch.bfloat16))
    for a, b in zip(full, in_bf16):
        assert torch.allclose(a, b, rtol=0.05, atol=0.05) and not torch.equal(a, b)


@pytest.mark.skipif(emission.library() is None, reason="no C compiler here: the emission's passes run as tensor ops")
def test_the_emissions_c_passes_give_the_tensor_ops_values_and_gradients(monkeypatch):
    """emission.c (bfloat16 products on a CPU) against the tensor ops it replaces: the same softmax, reading and
    gradients (a word twice, padding), to float32's rounding of sums taken in another order (the gradients within a
    bfloat16 step of the largest: a logit's gradient a hair from a rounding boundary may round either way, and where
    depends on the machine's exp)."""
    torch.manual_seed(2)
    hidden = torch.randn(37, 16, requires_grad=True)
    last = torch.nn.Linear(16, 1003)
    words = torch.randint(0, 1003, (4, 9))
    words[0, 1] = words[0, 2]
    weights = torch.randn(4, 9, 37)

    def value_and_grads():
        hidden.grad = last.weight.grad = last.bias.grad = None
        value = word_log_probs(hidden, last.weight, last.bias, words, torch.bfloat16)
        (value * weights).sum().backward()
        return value.detach(), hidden.grad, last.weight.grad, last.bias.grad

    in_c = value_and_grads()
    monkeypatch.setattr(emission, "_in_c", lambda logits: None)
    for a, b in zip(in_c, value_and_grads(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=2**-8 * float(b.abs().max()))


def test_long_sentences_neither_underflow_nor_differ_from_log_space(small):
    """60 words: probabilities near 1e-100 stay exact through the per-span scales (a log-space symbol inside
    pass, in double precision, as the reference)."""
    model, g = small
    torch.manual_seed(1)
    words = torch.randint(0, V, (1, 60))
    log_z = model.log_likelihood(words, [60]).item()
    rules = torch.einsum("ar,br,cr->abc", g.head, g.left, g.right).log()
    n = 60
    chart = {}
    for i in range(n):
        v = torch.full((NT + T,), -math.inf, dtype=torch.double)
        v[NT:] = g.emission[:, words[0, i]]
        chart[i, i + 1] = v
    for w in range(2, n + 1):
        for i in range(n - w + 1):
            j = i + w
            parts = torch.stack([(rules + chart[i, k][None, :, None] + chart[k, j][None, None, :]).logsumexp((1, 2))
                                 for k in range(i + 1, j)])
            v = torch.full((NT + T,), -math.inf, dtype=torch.double)
            v[:NT] = parts.logsumexp(0)
            chart[i, j] = v
    expected = float((g.root.log() + chart[0, n][:NT]).logsumexp(0))
    assert expected < -100
    assert log_z == pytest.approx(expected, rel=1e-9)


def test_bf16_products_stay_close_to_float32():
    torch.manual_seed(0)
    model = TNPCFG(50, PCFGConfig(kind="pcfg", nonterminals=8, preterminals=16, rank=32, symbol_dim=16))
    words = torch.randint(0, 50, (4, 12))
    full = model.log_likelihood(words, [12, 12, 9, 2])
    reduced = model.log_likelihood(words, [12, 12, 9, 2], torch.bfloat16)
    assert torch.allclose(full, reduced, rtol=2e-2)
    assert float(model.log_likelihood(words[:1, :1], [1]).detach()) == 0.0  # one word: no binary rule covers it


def pcfg_config(**settings):
    return tiny_config(model={"kind": "pcfg", "nonterminals": 4, "preterminals": 6, "rank": 8, "symbol_dim": 16},
                       **by_section({"lr": 0.01, "clip": 3.0, "epochs": 2, "batch_size": 16, "max_length": 20,
                                     **settings}))


def test_a_pcfg_trains_parses_and_evaluates_with_labels(tmp_path):
    from grammar_induce import api

    result = train(pcfg_config(), tmp_path / "run", **QUIET)
    assert result.best_valid_ppl is not None and math.isfinite(result.best_valid_ppl)
    epochs = [r["valid_ppl"] for r in result.epochs]
    assert len(epochs) == 2 and epochs[1] < epochs[0]  # it learns
    parser = api.load(tmp_path / "run" / "best.pt", labels=True)
    tree = parser.parse("the old man saw a dog")
    assert tree.leaves() == "the old man saw a dog".split()
    assert all(t.label().startswith("NT-") for t in tree.subtrees() if t.height() > 2)
    assert [str(t) for t in parser.parse_many(["dog", "a"])] == ["(X dog)", "(X a)"]  # one word: no span
    plain = api.load(tmp_path / "run" / "best.pt").parse("the old man saw a dog")
    assert {t.label() for t in plain.subtrees()} == {"X"} and plain.leaves() == tree.leaves()
    report = api.evaluate(parser, gold=tiny_config().data.valid.replace(".txt", ".trees"))
    assert set(report.label_recall["pcfg (MBR CKY over span marginals)"]) == {"NP", "VP", "PP", "SBAR", "ADJP", "ADVP"}


def test_a_pcfg_with_no_sentence_to_train_on_is_refused_before_the_run_directory(tmp_path):
    """No training sentence of 2 to max_length words (or to the curriculum's first longest): every epoch would have
    no step, and an untrained best.pt would be reported as a success."""
    train_text = tmp_path / "one-word.txt"
    train_text.write_text("dog\ncat\n" * 20)
    with pytest.raises(InputError, match=rf"{train_text}: none of its 40 sentences has 2 to 20 words "
                                         r"\(train.max_length\): nothing to train on"):
        train(replace(pcfg_config(epochs=1), data=replace(tiny_config().data, train=str(train_text))),
              tmp_path / "run", **QUIET)
    assert not (tmp_path / "run").exists()
    train_text.write_text("the dog barked loudly\n" * 20)
    with pytest.raises(InputError, match=r"none of its 20 sentences has 2 to 3 words \(train.start_length\)"):
        train(replace(pcfg_config(start_length=3, epochs=1), data=replace(tiny_config().data, train=str(train_text))),
              tmp_path / "run", **QUIET)
    assert not (tmp_path / "run").exists()


def test_a_pcfg_at_an_sgd_learning_rate_stops_at_its_first_diverged_step(tmp_path):
    """`--set model.kind=pcfg` on an ON-LSTM config keeps its lr (10, for SGD): one Adam step at that rate sends the
    loss past what a float's perplexity holds while it stays finite. The run stops there and says why, instead of
    training on to a best.pt of infinite perplexity."""
    from grammar_induce.training.loop import TrainingStopped

    with pytest.raises(TrainingStopped, match=r"the training loss became [\d.]+e\+\d+ at step 2 of epoch 1; nothing "
                                              r"had been saved yet.*\(lr 10 with adam: try a lower lr or clip\)"):
        train(pcfg_config(lr=10.0, epochs=1), tmp_path / "run", **QUIET)


def test_a_pcfg_resumes_to_the_same_weights_after_a_signal_and_after_a_crash(tmp_path, monkeypatch):
    """Interrupted by SIGINT inside epoch 1, then killed (an exception) inside epoch 2 after a periodic save,
    resumed each time: the same weights as a run that went straight through."""
    config = pcfg_config(checkpoint_minutes=1e-9)  # last.pt after every step
    train(config, tmp_path / "straight", **QUIET)
    original = sentences.sentence_step
    calls = {"n": 0}

    def step(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 12:
            raise RuntimeError("killed")
        value = original(*args, **kwargs)
        if calls["n"] == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return value

    monkeypatch.setattr(sentences, "sentence_step", step)
    out = tmp_path / "interrupted"
    train(config, out, **QUIET)
    with pytest.raises(RuntimeError, match="killed"):
        train(config, out, resume=True, **QUIET)
    monkeypatch.setattr(sentences, "sentence_step", original)
    train(config, out, resume=True, **QUIET)
    a = torch.load(tmp_path / "straight" / "last.pt", weights_only=True)
    b = torch.load(out / "last.pt", weights_only=True)
    assert calls["n"] == 12 and b["training_state"]["epoch"] == 3
    for key in a["state_dict"]:
        assert torch.equal(a["state_dict"][key], b["state_dict"][key]), key


def test_a_pcfg_is_a_teacher_and_an_ensemble_member_beside_a_language_model(tmp_path, tiny_run):
    from grammar_induce import api

    train(pcfg_config(epochs=1), tmp_path / "pcfg", **QUIET)
    pcfg, lm = tmp_path / "pcfg" / "best.pt", tiny_run / "best.pt"
    sentence = "the old man saw a dog near the river"
    both = api.load(pcfg, lm)
    votes = [api.load(m).parse(sentence) for m in (pcfg, lm)]
    assert both.parse(sentence).leaves() == sentence.split()
    # two voters: span voting keeps every span both trees hold
    def held(t):
        return trees.spans(trees.from_nested(t))
    assert held(votes[0]) & held(votes[1]) <= held(both.parse(sentence))
    said: list[str] = []
    student = api.distill(pcfg, lm, train=tiny_config().data.train, valid=tiny_config().data.valid,
                          out=tmp_path / "student", epochs=1, emb_size=8, hidden_size=8, log=said.append)
    lm_layer = parse_layer(api.load(lm).models[0], None)
    assert any(line.startswith(f"round 1: 2 members (layers -, {lm_layer}, ") for line in said)  # a PCFG reads none
    assert student.parse(sentence).leaves() == sentence.split()
    made = checkpoint.load(tmp_path / "student" / "best.pt").provenance
    assert made["teachers"] == [str(pcfg), str(lm)]
    assert made["layers"] == [None, lm_layer]  # a PCFG reads no layer: none is written for it (issue 70, class 14)


@pytest.fixture(scope="module")
def tiny_pcfg(tmp_path_factory):
    out = tmp_path_factory.mktemp("pcfg") / "run"
    train(pcfg_config(epochs=1), out, **QUIET)
    return out / "best.pt"


def test_labels_travel_through_ptb_jsonl_and_are_refused_where_no_model_induces_them(tiny_pcfg, tiny_run):
    import json

    from click.testing import CliRunner

    from grammar_induce.cli import main

    def run(*args):
        return CliRunner().invoke(main, ["parse", "--model", str(tiny_pcfg), *args, "the old man saw a dog"])

    plain, labelled, record = run("--format", "ptb"), run("--format", "ptb", "--labels"), run("--format", "jsonl", "--labels")
    assert plain.exit_code == labelled.exit_code == record.exit_code == 0
    import nltk

    a, b = nltk.Tree.fromstring(plain.output), nltk.Tree.fromstring(labelled.output)
    assert "NT-" not in plain.output and a.treepositions() == b.treepositions() and a.leaves() == b.leaves()
    line = json.loads(record.output)
    spans = {(i, j): label for i, j, label in line["labels"]}
    assert set(spans) == trees.spans(line["tree"], whole=True) and all(v.startswith("NT-") for v in spans.values())
    assert labelled.output.startswith(f"({spans[0, 6]} ")  # the root's label
    assert labelled.output.count("(NT-") == len(spans) and plain.output.count("(X") == labelled.output.count("(X") + len(spans)
    refused = CliRunner().invoke(main, ["parse", "--model", str(tiny_run / "best.pt"), "--labels", "a dog"])
    assert refused.exit_code != 0 and "labels" in refused.output and "PCFG" in refused.output


def test_layer_auto_names_the_layers_of_the_members_that_read_one(tiny_pcfg, tiny_run):
    from click.testing import CliRunner

    from grammar_induce.cli import main

    lm = str(tiny_run / "best.pt")
    result = CliRunner().invoke(main, ["parse", "--model", str(tiny_pcfg), "--model", lm, "--layer", "auto",
                                       "the old man saw a dog"])
    assert result.exit_code == 0, result.output
    note = next(line for line in result.stderr.splitlines() if "--layer auto chose" in line)
    assert f"of {lm}" in note and str(tiny_pcfg) not in note  # a PCFG reads no layer


def test_labels_alone_print_ptb_trees_draw_in_text_and_are_noted_where_a_format_cannot_show_them(tiny_pcfg):
    from click.testing import CliRunner

    from grammar_induce.cli import main

    def run(*args):
        return CliRunner().invoke(main, ["parse", "--model", str(tiny_pcfg), *args, "the old man saw a dog"])

    alone, ptb = run("--labels"), run("--labels", "--format", "ptb")
    drawn, brackets = run("--labels", "--format", "ascii"), run("--labels", "--format", "brackets")
    assert alone.exit_code == ptb.exit_code == drawn.exit_code == brackets.exit_code == 0
    assert alone.output == ptb.output and alone.output.startswith("(NT-")
    root = ptb.output.split()[0][1:]
    assert drawn.output.split()[0] == root and drawn.output.count("NT-") == ptb.output.count("(NT-")
    note = "note: --labels has no effect with --format brackets (labels show in ptb, jsonl, ascii)"
    assert brackets.output.splitlines() == [note, run("--format", "brackets").output.strip()]


def test_the_spacy_component_gives_a_pcfgs_labels_when_asked(tiny_pcfg):
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    nlp.add_pipe("grammar_induce", config={"model": str(tiny_pcfg), "labels": True})
    sent = nlp("the old man saw a dog .")[:]
    constituents = [c for c in sent._.constituents if len(c) > 1]
    assert all(len(c._.labels) == 1 and c._.labels[0].startswith("NT-") for c in constituents)
    assert sent._.parse_string.startswith(f"({sent._.labels[0]} ") and "(X" not in sent._.parse_string.split(" ")[0]
    assert sent._.tree.label() == sent._.labels[0]
    plain = spacy.blank("en")
    plain.add_pipe("grammar_induce", config={"model": str(tiny_pcfg)})
    assert plain("the old man saw a dog .")[:]._.labels == ()


def test_family_weights_balance_the_families_and_a_weightless_member_never_votes(tiny_pcfg, tiny_run):
    from grammar_induce import api
    from grammar_induce.errors import SettingError
    from grammar_induce.inference.ensemble import ParseOptions, resolve_weights

    kinds = ["onlstm", "onlstm", "pcfg"]
    assert resolve_weights(ParseOptions(weights="family"), kinds) == (0.5, 0.5, 1.0)
    assert resolve_weights(ParseOptions(weights=(2, 1, 1)), kinds) == (2.0, 1.0, 1.0)
    with pytest.raises(SettingError, match="2 numbers for 3 models"):
        resolve_weights(ParseOptions(weights=(1, 1)), kinds)
    sentence = "the old man saw a dog near the river with a telescope"
    lm, pcfg = tiny_run / "best.pt", tiny_pcfg
    for first, second in ((lm, pcfg), (pcfg, lm)):
        alone = api.load(first).parse(sentence)
        assert api.load(first, second, weights=(1, 0)).parse(sentence) == alone
    assert api.load(lm, lm, pcfg, weights="family").parse(sentence) == api.load(lm, pcfg).parse(sentence)


def test_a_line_too_long_for_a_pcfgs_chart_is_parsed_in_pieces_of_bounded_depth_and_a_note(tiny_pcfg, monkeypatch):
    """A line longer than the chart's limit got a right-branching tree as deep as the line, which readers (json,
    nltk) could not read back (issue 70, class 5): now each piece has its MBR tree, joined by a balanced tree."""
    from grammar_induce import api
    from grammar_induce.families import registry
    from grammar_induce.families.pcfg import model as pcfg
    from grammar_induce.messages import Messages

    monkeypatch.setattr(pcfg, "PARSE_LIMIT", 4)
    shorter = replace(pcfg.FAMILY.yields, longest=(4, pcfg.LONGER_LINES))
    monkeypatch.setitem(registry.FAMILIES, "pcfg", replace(pcfg.FAMILY, yields=shorter))
    messages = Messages()
    lines = ["the dog barked", "the old man saw a dog near the river", "a cat"]
    parser = api.load(tiny_pcfg, labels=True)
    results, _ = parser.run(lines, messages=messages, confidence=True)
    results = list(results)
    long = results[1]
    words = lines[1].split()
    first, second = (api.load(tiny_pcfg).analyse(" ".join(piece)) for piece in (words[:3], words[3:6]))
    assert pcfg._pieces(9) == [(0, 3), (3, 6), (6, 9)]  # at most 4 words, as near equal as can be
    assert trees.leaves(long.tree) == lines[1].split() and trees.depth(long.tree) <= 2 + 3
    assert long.tree[0] == [first.tree, second.tree]  # each piece its own MBR tree, the three joined balanced
    assert all(label.startswith("NT-") for label in long.labels.values())
    assert long.confidence[0, 3] == pytest.approx(first.confidence[0, 3]) and long.confidence[0, 9] == 0.0
    assert results[0].labels and trees.leaves(results[0].tree) == lines[0].split()
    assert messages.notes == [("1 line of more than 4 words: the pcfg's MBR CKY over span marginals parsed them in "
                               "pieces of at most that many words, joined by a balanced tree (its chart grows with the "
                               "square of the length)")]


def test_the_length_curriculum_grows_by_its_step_up_to_the_longest():
    from grammar_induce.families.sentences import epoch_longest

    curriculum = tiny_config(model={"kind": "pcfg"}, train={"max_length": 40, "start_length": 20, "length_step": 10}).train
    assert [epoch_longest(curriculum, e) for e in (1, 2, 3, 4)] == [20, 30, 40, 40]
    assert epoch_longest(tiny_config(model={"kind": "pcfg"}, train={"max_length": 40}).train, 1) == 40  # no curriculum: the longest


def test_auto_precision_is_measured_per_member_in_an_ensemble_of_two_families(tiny_pcfg, tiny_model, monkeypatch):
    """bf16 may pay for an ON-LSTM and not for a PCFG: each member runs in what its own probe found faster."""
    from grammar_induce.inference import members as members_module
    from grammar_induce.inference.ensemble import ParseOptions
    from grammar_induce.runtime import precision

    monkeypatch.setattr(precision, "cpu_bf16_units", lambda: "AMX")
    monkeypatch.setattr(precision, "measure", lambda probe, device: "bf16" if probe.key[0][0] == "onlstm" else "fp32")
    pcfg = checkpoint.load(tiny_pcfg)
    members = members_module.Members.of([tiny_model, pcfg], ParseOptions(precision="auto"))
    assert members.options.member_precisions == ("bf16", "fp32") and members.options.precision == "auto"
    assert f"{pcfg.source}: precision auto -> fp32" in members.chosen
    seen = []
    monkeypatch.setattr(members_module, "read_sentences", lambda loaded, *args: seen.append(args[4]) or [])
    members.read([["the", "dog", "barked"]])
    assert seen == [torch.bfloat16, None]
    alike = members_module.Members.of([tiny_model, tiny_model], ParseOptions(precision="auto"))
    assert alike.options.precision == "bf16" and alike.chosen.startswith("precision bf16")


def test_chart_constraints_from_a_student_prune_a_shipped_grammars_parse_and_keeping_every_span_changes_nothing(
        monkeypatch):
    """`ptb-pcfg` prunes its chart with `en` by default (its models.toml entry); a threshold of 0 keeps every span, so
    its trees are the whole chart's; the pruner's best tree is always kept, so every sentence has a tree, in pieces
    too (a long line's chart constraints cut as the line is); a model without span marginals is refused as a pruner.
    The pruner reads in bfloat16 where the device has native bfloat16 units, whatever the grammar's precision."""
    import grammar_induce as gi
    from grammar_induce.errors import SettingError
    from grammar_induce.families.pcfg import model as pcfg_model
    from grammar_induce.inference import pruning

    lines = ["The old man saw a dog in the park .", "Profits rose sharply in the third quarter , analysts said .",
             "It is .", "A b"]
    pruned = gi.load("ptb-pcfg")
    assert pruned.options.pruning is not None and pruned.options.pruning.pruner.source.endswith("en.pt")
    whole = [str(t) for t in gi.load("ptb-pcfg", prune="off").parse_many(lines)]
    assert [str(t) for t in gi.load("ptb-pcfg", prune="en", prune_threshold=0.0).parse_many(lines)] == whole
    strict = gi.load("ptb-pcfg", prune_threshold=0.999)  # the pruner's tree alone, nearly: the grammar keeps to it
    natively = strict.options.pruning.products == torch.bfloat16
    assert natively == (pruning.bf16_hardware(torch.device("cpu")) is not None)
    en = [str(t) for t in gi.load("en", precision="bf16" if natively else "fp32").parse_many(lines)]
    assert [str(t) for t in strict.parse_many(lines)] == en
    monkeypatch.setattr(pcfg_model, "PARSE_LIMIT", 4)  # in pieces of at most 4 words
    assert all(t.leaves() == line.split() for t, line in zip(strict.parse_many(lines), lines))
    with pytest.raises(SettingError, match="has no span marginals to prune a chart with"):
        gi.load("ptb-pcfg", prune="ptb")
    for units, dtype in (("AVX-512 BF16", torch.bfloat16), (None, None)):
        monkeypatch.setattr(pruning, "bf16_hardware", lambda device, units=units: units)
        assert gi.load("ptb-pcfg", precision="fp32").options.pruning.products == dtype


def _binary_trees(i: int, j: int) -> list[frozenset]:
    """Every binary tree over words i..j-1, as its spans of two or more words."""
    if j - i == 1:
        return [frozenset()]
    return [left | right | {(i, j)} for k in range(i + 1, j) for left in _binary_trees(i, k)
            for right in _binary_trees(k, j)]


def test_the_mass_chart_constraints_keep_is_each_trees_posterior_when_they_keep_one_tree(tiny_pcfg, monkeypatch):
    """Chart constraints that keep one binary tree's spans keep that tree alone: its kept mass is its posterior, so
    over the 14 trees of five words they sum to 1; constraints that keep every span keep all of it; a parse not
    asked for it says none; a sentence parsed in pieces keeps the product of its pieces' shares."""
    from grammar_induce.families.pcfg import model as pcfg_model
    from grammar_induce.inference.members import token_rows

    loaded = checkpoint.load(tiny_pcfg)
    words = [["the", "old", "man", "saw", "dog"]]
    tokens = token_rows(loaded, words)

    def kept(spans) -> float:
        keep = torch.zeros(6, 6, dtype=torch.bool)
        for i, j in spans:
            keep[i, j] = True
        keep[torch.arange(5), torch.arange(1, 6)] = True  # the words themselves
        return loaded.model.read(tokens, words, keep=[keep], kept_mass=True)[0].kept_mass

    shares = [kept(tree) for tree in _binary_trees(0, 5)]
    assert len(shares) == 14 and all(0 < share < 1 for share in shares)
    assert sum(shares) == pytest.approx(1.0, abs=1e-4)
    assert kept({(i, j) for i in range(5) for j in range(i + 2, 6)}) == pytest.approx(1.0, abs=1e-5)
    assert loaded.model.read(tokens, words, keep=[torch.ones(6, 6, dtype=torch.bool)])[0].kept_mass is None

    long = [["the", "old", "man", "saw", "a", "dog", "in", "the", "park"]]
    keep = torch.rand(10, 10, generator=torch.Generator().manual_seed(0)) < 0.5
    keep |= torch.ones(10, 10, dtype=torch.bool).triu(1).tril(1)  # the words
    for i, j in ((0, 3), (3, 6), (6, 9), (0, 2), (3, 5), (7, 9)):  # a tree in each piece, as a pruner's best tree is
        keep[i, j] = True
    keep[4, 6] = False  # the middle piece's other tree left out: less than all of it kept
    monkeypatch.setattr(pcfg_model, "PARSE_LIMIT", 4)  # pieces of words 0-3, 3-6, 6-9
    whole = loaded.model.read(token_rows(loaded, long), long, keep=[keep], kept_mass=True)[0].kept_mass
    pieces = [loaded.model.read(token_rows(loaded, [long[0][s:e]]), [long[0][s:e]], keep=[keep[s : e + 1, s : e + 1]],
                                kept_mass=True)[0].kept_mass for s, e in ((0, 3), (3, 6), (6, 9))]
    assert 0 < whole < 1 and whole == pytest.approx(math.prod(pieces), rel=1e-4)


def test_a_pruned_parse_says_the_mass_it_kept_per_line_and_on_average(tmp_path):
    """`parse --prune-mass`: each jsonl line's `kept_mass` (a line of two sentences: the product of theirs, parsed
    alone), the mean and the least on stderr; a threshold of 0 keeps it all; refused or noted where it means nothing."""
    from click.testing import CliRunner

    import grammar_induce as gi
    from grammar_induce.cli import main
    from grammar_induce.errors import SettingError

    one, two = "Profits rose sharply in the third quarter , analysts said .", "The old man saw a dog in the park ."
    text = tmp_path / "in.txt"
    text.write_text(f"{one}\n{two}\n{one} {two}\n")
    run = CliRunner().invoke(main, ["parse", "--model", "ptb-pcfg", "--input", str(text), "--format", "jsonl",
                                    "--prune-mass"])
    assert run.exit_code == 0, run.output
    masses = [json.loads(line)["kept_mass"] for line in run.stdout.splitlines()]
    assert all(0 < m <= 1 for m in masses) and masses[2] == pytest.approx(masses[0] * masses[1], rel=1e-4)
    least = min(masses)
    assert (f"ptb-pcfg.pt (shipped): its chart constraints kept {sum(masses) / 3:.1%} of its probability of a line "
            f"on average (the least {least:.1%}, line {masses.index(least) + 1})") in run.stderr
    # the API over the same lines (the same batches: a pruner in bfloat16 may round a row otherwise in another batch)
    api = [r.members[0].kept_mass for r in gi.load("ptb-pcfg", prune_mass=True).analyse_many(text.read_text().splitlines())]
    assert api == pytest.approx(masses, abs=1e-6)
    everything = gi.load("ptb-pcfg", prune_threshold=0.0, prune_mass=True).analyse(one).members[0].kept_mass
    assert everything == pytest.approx(1.0, abs=1e-4)
    assert gi.load("ptb-pcfg").analyse(one).members[0].kept_mass is None
    with pytest.raises(SettingError, match="prune_mass"):
        gi.load("ptb-pcfg", prune_mass="yes")
    off = CliRunner().invoke(main, ["parse", "--model", "ptb-pcfg", "--prune", "off", "--prune-mass", one])
    assert off.exit_code == 0 and "--prune-mass has no effect without chart constraints" in off.stderr


def test_a_run_stopped_by_steps_inside_an_epoch_records_the_fields_an_epochs_end_does(tmp_path):
    """issue 82, point 3: one epoch end for whole and partial epochs: the partial record has every field of a whole
    one (the recipe's own, the PCFG's `longest`, among them) and the partial marks, and best.pt is kept alike."""
    import json

    whole = train(pcfg_config(epochs=1), tmp_path / "whole", **QUIET)
    train(pcfg_config(epochs=1, max_steps=2), tmp_path / "part", **QUIET)
    full = json.loads((tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()[0])
    partial = json.loads((tmp_path / "part" / "metrics.jsonl").read_text().splitlines()[0])
    assert "longest" in full and set(partial) == set(full) | {"partial", "stopped_by"}
    assert partial["stopped_by"] == "max_steps" and 0 < partial["partial"] < 1
    assert (tmp_path / "part" / "best.pt").exists() and whole.best_valid_ppl is not None


def test_the_grammar_for_parsing_is_built_once_until_the_weights_change():
    """issue 80: parsing builds the grammar's MLPs and softmaxes once, not every batch; a step of training (a new
    version of a weight) builds it again."""
    model = TNPCFG(30, PCFGConfig(kind="pcfg", nonterminals=3, preterminals=4, rank=5, symbol_dim=8))
    first = model.built_grammar()
    assert model.built_grammar() is first
    assert torch.equal(first.emission, model.grammar().emission.detach())
    with torch.no_grad():
        model.term_emb.add_(1.0)
    again = model.built_grammar()
    assert again is not first and not torch.equal(again.emission, first.emission)


@pytest.mark.parametrize("stop", ["epoch", "steps", "time"])
def test_every_epoch_end_records_the_recipes_own_fields_and_keeps_the_best(tmp_path, stop):
    """The loop's two epoch ends (a whole epoch; a part of one, stopped by steps or by time) write the same fields,
    the recipe's own (the PCFG's `longest`) among them, and keep the validated figure as the run's best."""
    limits = {"epoch": {}, "steps": {"max_steps": 1}, "time": {"max_minutes": 1e-9}}[stop]
    out = tmp_path / stop
    train(pcfg_config(epochs=1, **limits), out, **QUIET)
    [record] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert set(record) - {"partial", "stopped_by"} == {"epoch", "train_loss", "valid_ppl", "lr", "phase", "seconds",
                                                       "tokens_per_s", "longest"}
    assert ("partial" in record) == (stop != "epoch")
    best = torch.load(out / "last.pt", weights_only=True)["training_state"]["best"]
    assert math.exp(best) == pytest.approx(record["valid_ppl"], abs=1e-3)


def _rules(grammar) -> torch.Tensor:
    """p(A -> B C) of every rule, summed over the rank by brute force: (NT, NT + T, NT + T)."""
    return torch.einsum("ar,br,cr->abc", grammar.head, grammar.left, grammar.right)


def test_a_grammar_adopts_a_higher_ranks_weights_keeping_its_most_used_components():
    """Three of eight rank components given no share of any rule: the rank-5 grammar adopted from it keeps the other
    five and has the same rules (brute force over every rule), root and emission; a lower rank is refused."""
    sizes = {"kind": "pcfg", "nonterminals": 4, "preterminals": 6, "symbol_dim": 16}
    torch.manual_seed(0)
    big = TNPCFG(20, PCFGConfig(**sizes, rank=8))
    state = {k: v.clone() for k, v in big.state_dict().items()}
    unused = [1, 4, 6]
    state["head_mlp.2.bias"][unused] = -60.0  # U[A, k] ~ exp(-60): no rule comes through them
    big.load_state_dict(state)
    small = TNPCFG(20, PCFGConfig(**sizes, rank=5))
    adopted = small.adopt(state, {**sizes, "rank": 8})
    small.load_state_dict(adopted)
    assert torch.equal(adopted["left_mlp.2.weight"], state["left_mlp.2.weight"][[0, 2, 3, 5, 7]])
    with torch.no_grad():
        a, b = big.grammar(), small.grammar()
    torch.testing.assert_close(_rules(b), _rules(a), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(b.root, a.root)
    torch.testing.assert_close(b.emission, a.emission)
    assert small.adopt(adopted, {**sizes, "rank": 5}) is adopted
    with pytest.raises(ConfigError, match="train.init has rank 5: a grammar starts from one of its rank or higher"):
        TNPCFG(20, PCFGConfig(**sizes, rank=8)).adopt(adopted, {**sizes, "rank": 5})

