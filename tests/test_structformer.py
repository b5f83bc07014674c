"""The StructFormer family: its structure maths against hand-computed cases, the masking, resume, and a tiny run
that trains, parses both kinds of tree, evaluates (F1 and UAS), votes with an ON-LSTM and teaches a student."""

from __future__ import annotations

import json
import math

import pytest
import torch

import grammar_induce as gi
from grammar_induce import config as config_module
from grammar_induce.families import checkpoint
from grammar_induce.families.registry import CONFIGS
from grammar_induce.families.structformer import structure
from grammar_induce.families.structformer.model import StructFormer, before_each_word
from grammar_induce.families.structformer.recipe import UNK, masked, token_batches
from grammar_induce.families.structformer.settings import StructFormerConfig
from grammar_induce.inference.parsing import joined
from grammar_induce.output.formats import MemberResult, SentenceResult, render
from grammar_induce.text.heads import attachment, chain, dependency_heads, head_child
from grammar_induce.text.treebank import TagFilter, category, parse_bracketed, read_gold
from grammar_induce.workflows.train import train

from .conftest import QUIET, ROOT, SYNTHETIC_GOLD, by_section, invoke, well_formed

BIG = structure.BIG


def tiny_structformer_config(**settings):
    raw = config_module.read_toml(ROOT / "configs" / "structformer-tiny.toml")
    for section, values in by_section({"device": "cpu", **settings}).items():
        raw.setdefault(section, {}).update(values)
    return CONFIGS.from_dict(raw)


@pytest.fixture(scope="module")
def sf_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("structformer")
    train(tiny_structformer_config(), out, **QUIET)
    return out


def test_two_words_parent_is_the_hand_computed_product():
    # word 0 reaches across gap 0 w.p. sigmoid((h0 - d0) s_d); the span [0, 1] is headed by word 1 w.p.
    # sigmoid((h1 - h0) s_h); the span [0, 0] is headed by word 0 itself (no parent)
    h0, h1, d0, s_d, s_h = 0.3, 1.1, -0.4, 2.0, 3.0
    distance, height = torch.tensor([[d0, BIG]]), torch.tensor([[h0, h1]])
    parent = structure.parents(distance, height, torch.tensor([s_d, s_h]))
    sigmoid = lambda x: 1 / (1 + math.exp(-x))
    assert parent[0, 0, 1].item() == pytest.approx(sigmoid((h0 - d0) * s_d) * sigmoid((h1 - h0) * s_h), rel=1e-5)
    assert parent[0, 0, 0].item() == 0 and parent[0, 1, 1].item() == 0


def test_hard_distances_and_heights_give_the_dependency_tree_they_encode():
    # "a b c": b the root (highest); a's height crosses gap a|b (0) but not b|c (2): a's parent heads [a b], b;
    # c's height crosses b|c and a|b: c's parent heads [a b c], b
    distance, height = torch.tensor([[0.0, 2.0, BIG]]), torch.tensor([[1.0, 3.0, 2.5]])
    scales = torch.tensor([60.0, 60.0])  # near-hard sigmoids and softmaxes
    parent = structure.parents(distance, height, scales)
    assert parent[0, 0].argmax().item() == 1 and parent[0, 0, 1].item() > 0.99
    assert parent[0, 2].argmax().item() == 1 and parent[0, 2, 1].item() > 0.99
    assert structure.heads_of(parent, height, [3]) == [[2, 0, 2]]


def test_the_long_form_gives_the_same_parents_with_padding():
    torch.manual_seed(3)
    lengths = [9, 6, 2]
    words = torch.arange(9)[None, :] < torch.tensor(lengths)[:, None]
    last_gap = torch.nn.functional.pad(words[:, 1:], (0, 1), value=False)
    distance = torch.randn(3, 9).masked_fill(~last_gap, BIG)
    height = torch.randn(3, 9).masked_fill(~words, -BIG)
    distance = structure.calibrate(distance, height, words, per_sentence=True)
    scales = torch.tensor([1.7, 2.3])
    short, long = structure.parents(distance, height, scales), structure.parents_long(distance, height, scales)
    for row, n in enumerate(lengths):
        assert torch.allclose(short[row, :n, :n].double(), long[row, :n, :n], atol=1e-6)


def test_calibration_moves_every_distance_alike_and_one_sentence_alone_as_in_a_batch():
    torch.manual_seed(4)
    words = torch.ones(2, 5, dtype=torch.bool)
    distance = torch.randn(2, 5)
    distance[:, -1] = BIG
    height = torch.randn(2, 5)
    each = structure.calibrate(distance, height, words, per_sentence=True)
    shift = (distance - each)[:, :-1]
    assert torch.allclose(shift, shift[:, :1].expand_as(shift))  # the gaps' order, so the tree, is kept
    alone = structure.calibrate(distance[1:], height[1:], words[1:], per_sentence=False)
    assert torch.allclose(each[1:], alone)


def test_the_first_word_is_never_split_off_by_either_decoder():
    assert before_each_word([0.5, -1.0]) == [-2.0, 0.5, -1.0]
    assert before_each_word([]) == [-1.0]


def small_model(**settings) -> StructFormer:
    torch.manual_seed(0)
    config = StructFormerConfig(kind="structformer", hidden_size=16, n_layers=2, heads=2, parser_layers=1, conv_size=3,
                         dropout=0.0, **settings)
    return StructFormer(30, config)


def test_masking_never_touches_padding_or_unknown_words_and_targets_only_masked_words():
    model = small_model()
    ids = torch.randint(1, 30, (40, 50))
    ids[:, 40:] = model.pad
    ids[:, :3] = UNK
    inputs, targets = masked(ids, model, 0.3, torch.Generator().manual_seed(0))
    chosen = inputs == model.mask
    assert not chosen[:, 40:].any() and not chosen[:, :3].any()
    assert torch.equal(targets[chosen], ids[chosen]) and (targets[~chosen] == model.pad).all()
    assert torch.equal(inputs[~chosen], ids[~chosen])
    share = chosen[:, 3:40].float().mean().item()
    assert 0.27 < share < 0.33  # 1,480 draws at 0.3


def test_the_loss_at_masked_words_is_the_cross_entropy_of_the_full_logits():
    model = small_model().eval()
    ids = torch.randint(2, 30, (3, 7))
    ids[0, 5:] = model.pad
    inputs, targets = masked(ids, model, 0.5, torch.Generator().manual_seed(1))
    loss, count = model.masked_loss(inputs, targets)
    full = torch.nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(), ignore_index=model.pad,
                                             reduction="sum")
    assert count == int((targets != model.pad).sum()) and loss.item() == pytest.approx(full.item(), rel=1e-5)


def test_padding_changes_no_word_s_logits():
    model = small_model().eval()
    ids = torch.randint(2, 30, (1, 6))
    longer = torch.cat([ids, torch.full((1, 3), model.pad)], dim=1)
    assert torch.allclose(model(ids)[0], model(longer)[0, :6], atol=1e-5)


def test_token_batches_hold_at_least_the_tokens_asked_and_every_sentence_once():
    sentences = [torch.zeros(n) for n in (3, 9, 1, 4, 4, 12, 2)]
    batches = token_batches(sentences, 8, longest=10, rng=None)
    assert sorted(k for b in batches for k in b) == [0, 1, 2, 3, 4, 6]  # 12 words: past `longest`
    assert all(sum(len(sentences[k]) for k in b) >= 8 for b in batches[:-1])


def test_training_resumed_midway_ends_with_the_same_weights(tmp_path):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    train(tiny_structformer_config(), straight, **QUIET)
    first = train(tiny_structformer_config(max_steps=3), stopped, **QUIET)
    assert first.limited_by == "max_steps"
    train(tiny_structformer_config(max_steps=0), stopped, resume=True, **QUIET)
    a = checkpoint.load(straight / "last.pt").model.state_dict()
    b = checkpoint.load(stopped / "last.pt").model.state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_a_structformer_parses_both_kinds_of_tree(sf_run):
    parser = gi.load(sf_run / "best.pt")
    record = parser.analyse("the old man saw a dog .").to_dict()
    assert len(record["heads"]) == len(record["words"]) and record["heads"].count(0) == 1
    assert "parser" in record and "forget" not in record and "input" not in record  # its distances, by their name
    result = invoke("parse", "--model", sf_run / "best.pt", "--format", "conll", "a b c", "d e f g")
    assert result.exit_code == 0, result.output
    blocks = result.output.strip().split("\n\n")
    rows = [line.split("\t") for line in blocks[1].splitlines()]
    assert len(blocks) == 2 and [r[1] for r in rows] == ["d", "e", "f", "g"]
    heads = [int(r[6]) for r in rows]
    assert heads.count(0) == 1 and all(0 <= h <= 4 for h in heads) and heads == record_heads(sf_run, "d e f g")


def record_heads(run, line: str) -> list[int]:
    return gi.load(run / "best.pt").analyse(line).to_dict()["heads"]


def test_the_spacy_component_gives_each_token_its_induced_head(sf_run):
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("grammar_induce", config={"model": str(sf_run / "best.pt")})
    doc = nlp("the old man saw a dog . a cat sat , then ran .")
    conll = invoke("parse", "--model", sf_run / "best.pt", "--format", "conll", *(s.text for s in doc.sents))
    blocks = [[line.split("\t") for line in block.splitlines()] for block in conll.output.strip().split("\n\n")]
    for sent, rows in zip(doc.sents, blocks, strict=True):
        for token, row in zip(sent, rows, strict=True):
            head = token._.induced_head
            assert token._.induced_dep == row[7] and (0 if head is None else head.i - sent.start + 1) == int(row[6])
    assert [sum(t._.induced_dep == "root" for t in sent) for sent in doc.sents] == [1, 1]
    assert all(t._.induced_head is None or t._.induced_head.sent == t.sent for t in doc)
    assert all(t._.induced_head is None and t._.induced_dep is None
               for t in spacy.blank("en")("no pipe here"))  # no component: nothing


def test_svg_and_html_draw_each_words_arc_from_its_head(sf_run, tmp_path):
    import re

    line = "the old man saw a dog"
    heads = record_heads(sf_run, line)
    svg = invoke("parse", "--model", sf_run / "best.pt", "--format", "svg", line).output
    well_formed(svg)
    drawn = [(int(h), int(d)) for h, d in re.findall(r'class="arc" data-head="(\d+)" data-dependent="(\d+)"', svg)]
    assert sorted(drawn, key=lambda a: a[1]) == [(h, d) for d, h in enumerate(heads, 1) if h]
    assert re.findall(r'class="arc root" data-dependent="(\d+)"', svg) == [str(heads.index(0) + 1)]
    page = tmp_path / "page.html"
    assert invoke("parse", "--model", sf_run / "best.pt", "--format", "html", "--output", page, line, "a b c").exit_code == 0
    assert page.read_text().count('class="arc root"') == 2  # a root a sentence
    plain = invoke("parse", "--model", "ptb", "--format", "svg", line).output
    assert 'class="arc' not in plain  # a model without heads: no arcs


def test_the_gap_decoder_is_a_structformer_s_own(sf_run):
    parser = gi.load(sf_run / "best.pt")
    reading = parser.analyse("the old man saw a dog").members[0]
    gap = gi.load(sf_run / "best.pt", decoder="gap").analyse("the old man saw a dog").members[0]
    assert reading.tree == gap.tree


def test_conll_needs_a_model_with_heads(tiny_run):
    result = invoke("parse", "--model", tiny_run / "best.pt", "--format", "conll", "a b")
    assert result.exit_code == 2 and "an ON-LSTM language model has none" in result.output


def test_evaluate_deps_scores_heads_beside_the_chains(sf_run):
    report = gi.evaluate(gi.load(sf_run / "best.pt"), gold=SYNTHETIC_GOLD, dependencies=True)
    assert report.main_row == "parser distances" and not any(row.startswith(("layer", "mean")) for row in report.rows)
    assert set(report.dependencies) == {"structformer heads (argmax)", "structformer heads (tree)", "left chain",
                                        "right chain"}
    assert all(0 <= d <= u <= 1 for d, u in report.dependencies.values())
    result = invoke("evaluate", "--model", sf_run / "best.pt", "--gold", SYNTHETIC_GOLD, "--deps", "--quiet")
    assert result.exit_code == 0 and "Collins' (1999) head rules" in result.output
    refused = invoke("evaluate", "--model", "ptb", "--gold", SYNTHETIC_GOLD, "--deps", "--quiet")
    assert refused.exit_code == 1 and "has none" in refused.output


def test_a_structformer_votes_with_an_on_lstm_and_teaches(sf_run, tiny_run, tmp_path):
    both = gi.load(sf_run / "best.pt", tiny_run / "best.pt", weights="family")
    assert both.parse("a b c d").leaves() == ["a", "b", "c", "d"]
    train_text = tmp_path / "train.txt"
    train_text.write_text("".join((ROOT / "data" / "synthetic" / "train.txt").read_text().splitlines(True)[:40]))
    student = gi.distill(sf_run / "best.pt", train=train_text, valid=train_text, out=tmp_path / "student", epochs=1,
                         emb_size=16, hidden_size=16, n_layers=1, max_length=12, log=lambda line: None)
    assert student.parse("a b c").leaves() == ["a", "b", "c"]


COLLINS_CASE = "(S (NP (NNP Pierre) (NNP Vinken)) (VP (MD will) (VP (VB join) (NP (DT the) (NN board)))) (. .))"


def test_collins_head_rules_on_a_hand_converted_sentence():
    tree = parse_bracketed(COLLINS_CASE, "case")
    # NP -> its last noun (Vinken); the inner VP -> join; the outer VP -> will (MD before VP in VP's list);
    # S -> the VP's head; the period is left out before heads are found
    assert dependency_heads(tree, TagFilter().keeps, category) == (2, 3, 0, 3, 6, 4)
    assert head_child("NP", ["NNP", "POS"]) == 1 and head_child("PP", ["IN", "NP"]) == 0
    assert head_child("NP", ["NP", "PP"]) == 0 and head_child("XYZ", ["B", "C"]) == 0


def test_attachment_counts_directed_and_undirected_pairs():
    gold = [[2, 0, 2]]
    assert attachment([[2, 0, 2]], gold) == (1.0, 1.0)
    # a the root (wrong both ways), b under a (the pair a-b: right undirected), c under b (right)
    assert attachment([[0, 1, 2]], gold) == (pytest.approx(1 / 3), pytest.approx(2 / 3))
    assert chain(3, leftward=True) == [0, 1, 2] and chain(3, leftward=False) == [2, 3, 0]


def test_gold_trees_carry_their_heads(tmp_path):
    path = tmp_path / "g.mrg"
    path.write_text(f"( {COLLINS_CASE} )\n")
    gold, _ = read_gold(str(path), TagFilter())
    assert gold[0].heads == (2, 3, 0, 3, 6, 4) and len(gold[0].words) == 6


def test_heads_shift_with_the_sentences_of_a_line():
    first = SentenceResult(["a", "b"], ["a", "b"], [MemberResult("forward", {}, ["a", "b"], heads=[2, 0])])
    second = SentenceResult(["c", "d", "e"], ["c", ["d", "e"]],
                            [MemberResult("forward", {}, ["c", ["d", "e"]], heads=[0, 1, 2])])
    joined_line = joined([first, second])
    assert joined_line.heads == [2, 0, 0, 3, 4]
    assert json.loads(render(joined_line, "jsonl"))["heads"] == [2, 0, 0, 3, 4]


def test_a_line_of_two_sentences_is_two_conll_blocks_each_numbered_from_one():
    first = SentenceResult(["a", "b"], ["a", "b"], [MemberResult("forward", {}, ["a", "b"], heads=[2, 0])])
    second = SentenceResult(["c", "d", "e"], ["c", ["d", "e"]],
                            [MemberResult("forward", {}, ["c", ["d", "e"]], heads=[0, 1, 2])])
    blocks = render(joined([first, second]), "conll").split("\n\n")
    rows = [[line.split("\t") for line in block.splitlines()] for block in blocks]
    assert [[(r[0], r[1], r[6]) for r in block] for block in rows] == [
        [("1", "a", "2"), ("2", "b", "0")], [("1", "c", "0"), ("2", "d", "1"), ("3", "e", "2")]]


def test_the_heads_are_a_tree_the_argmax_ones_beside_them(sf_run):
    """Each word's most probable parent alone may make a cycle (rose -> quickly -> rose); the heads written are the
    best tree of them (Chu-Liu/Edmonds), one root a sentence."""
    from grammar_induce.structures.arborescence import _cycle

    parser = gi.load(sf_run / "best.pt")
    lines = (ROOT / "data" / "synthetic" / "valid.txt").read_text().splitlines()[:60]
    readings = [next(parser.members.parse([line.split()], at_once=True)).readings[0][0] for line in lines]
    for reading in readings:
        heads = [h - 1 for h in reading.heads]
        assert heads.count(-1) == 1 and not _cycle(heads)
        assert reading.argmax_heads.index(0) == reading.heads.index(0)  # the same root: the highest word


def test_conll_hangs_punctuation_from_the_word_before_it():
    result = SentenceResult(["Hello", "world"], [["Hello", ","], ["world", "."]],
                            [MemberResult("forward", {}, ["Hello", "world"], heads=[2, 0])],
                            tokens=["Hello", ",", "world", "."], is_word=[True, False, True, False])
    rows = [line.split("\t") for line in render(result, "conll").splitlines()]
    assert [(r[0], r[1], r[6], r[7]) for r in rows] == [("1", "Hello", "3", "dep"), ("2", ",", "1", "punct"),
                                                         ("3", "world", "0", "root"), ("4", ".", "3", "punct")]
    opening = SentenceResult(["a"], ['"', "a"], [MemberResult("forward", {}, "a", heads=[0])], tokens=['"', "a"],
                             is_word=[False, True])
    assert [r.split("\t")[6] for r in render(opening, "conll").splitlines()] == ["2", "0"]


def test_dropout_zeroes_its_share_and_scales_the_rest_as_torch_s():
    from grammar_induce.families.structformer.model import Dropout

    torch.manual_seed(0)
    x = torch.randn(400, 500, requires_grad=True)
    y = Dropout(0.3).train()(x)
    dropped = y == 0
    assert 0.29 < dropped.float().mean().item() < 0.31  # 200,000 draws
    assert torch.allclose(y[~dropped], x[~dropped] / 0.7)
    y.sum().backward()
    assert torch.allclose(x.grad, (~dropped).float() / 0.7)
    assert Dropout(0.3).eval()(x) is x


def test_tokens_a_second_count_every_word_read_not_only_the_masked_ones(sf_run):
    """The log's tokens a second are the words an epoch read (a masked LM's loss covers about 30% of them)."""
    words = sum(len(line.split()) for line in (ROOT / "data" / "synthetic" / "valid.txt").read_text().splitlines())
    for record in map(json.loads, (sf_run / "metrics.jsonl").read_text().splitlines()):
        rate, seconds = record["tokens_per_s"], record["seconds"]
        rounding = rate * 0.005 + seconds * 0.05  # the record keeps seconds to 0.01 and the rate to 0.1
        assert rate * seconds == pytest.approx(words, rel=0.01, abs=rounding), record


def test_an_input_distance_asked_of_a_structformer_is_a_one_line_error_naming_the_model(sf_run, tiny_run, tmp_path):
    """A StructFormer has its parser's distances alone: `--distance input` ended in an IndexError traceback in parse,
    evaluate, ensembles and the API. Its readings name them `parser` (issue 71): the default and `--distance parser`
    read them, in an ensemble beside an ON-LSTM whose default is its forget gates."""
    from .conftest import sole_line_error

    model = sf_run / "best.pt"
    said = f"--distance input: {model} (a StructFormer masked language model) has no input distances; it has parser"
    sole_line_error(invoke("parse", "--model", model, "--distance", "input", "the dog barked"), said)
    sole_line_error(invoke("parse", "--model", tiny_run / "best.pt", "--model", model, "--distance", "input",
                           "the dog barked"), said)
    sole_line_error(invoke("evaluate", "--model", model, "--distance", "input", "--gold", SYNTHETIC_GOLD), said)
    with pytest.raises(ValueError, match="distance input: .* has no input distances"):
        gi.load(model, distance="input")
    assert invoke("parse", "--model", tiny_run / "best.pt", "--distance", "input", "the dog barked").exit_code == 0
    named = invoke("parse", "--model", model, "--distance", "parser", "--format", "jsonl", "the dog barked")
    default = invoke("parse", "--model", model, "--format", "jsonl", "the dog barked")
    assert named.exit_code == 0 and named.stdout == default.stdout and list(json.loads(named.stdout))[2] == "parser"
    mixed = invoke("parse", "--model", tiny_run / "best.pt", "--model", model, "--format", "jsonl", "the dog barked")
    assert [list(m)[2] for m in json.loads(mixed.stdout)["members"]] == ["forget", "parser"]
