
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import nltk
import pytest
import torch

from grammar_induce import trees
from grammar_induce.errors import InputError
from grammar_induce.families import checkpoint
from grammar_induce.families.reading import middle_layer
from grammar_induce.inference.ensemble import ParseOptions, member_agreement
from grammar_induce.inference.members import Members, read_sentences, token_ids
from grammar_induce.inference.parsing import parse, parse_sentences
from grammar_induce.messages import Messages
from grammar_induce.output.formats import render, render_lines
from grammar_induce.text import corpus
from grammar_induce.trees import leaves, tree_from_distances
from grammar_induce.workflows.train import train

from .conftest import QUIET, ROOT, fifo_with, invoke, tiny_config

SENTENCES = [
    "the dog saw a cat .".split(),
    "he liked the old farmer 's red car near the river .".split(),
    [],
    "mary".split(),
    "every strange zebra quickly visited london".split(),  # "zebra" is not in the vocabulary
]


def sentence_results(models, sentences, options, all_layers=False):
    """parse_sentences through the member path: the members checked, their layers fixed."""
    return parse_sentences(Members.of(models, options).with_layers(), sentences, all_layers)


def test_batched_distances_equal_one_at_a_time(tiny_model):
    batched = read_sentences(tiny_model, SENTENCES, batch_size=8)
    for sentence, together in zip(SENTENCES, batched):
        alone = read_sentences(tiny_model, [sentence], batch_size=1)[0]
        if not sentence:
            assert together is None and alone is None
            continue
        torch.testing.assert_close(torch.tensor(together.distances["forget"]), torch.tensor(alone.distances["forget"]), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(torch.tensor(together.distances["input"]), torch.tensor(alone.distances["input"]), rtol=1e-5, atol=1e-6)


def test_distances_are_those_of_the_words_between_eos(tiny_model):
    sentence = SENTENCES[0]
    parsed = read_sentences(tiny_model, [sentence])[0]
    vocab = tiny_model.vocab
    tokens = torch.tensor([[1] + vocab.encode(sentence) + [1]]).t()  # <eos> w1..wn <eos>
    with torch.no_grad():
        distances = tiny_model.model.distances(tokens)
    assert len(parsed.distances["forget"]) == 3 and len(parsed.distances["forget"][1]) == len(sentence)
    torch.testing.assert_close(torch.tensor(parsed.distances["forget"]), distances.forget[:, 1:-1, 0])
    assert parsed.tree(2) == tree_from_distances(distances.forget[1, 1:-1, 0].tolist(), sentence)


def test_stopping_at_a_layer_gives_the_same_distances_for_the_layers_run(tiny_model):
    full = read_sentences(tiny_model, SENTENCES)
    lower = read_sentences(tiny_model, SENTENCES, n_layers=2)
    for whole, part in zip(full, lower):
        if whole is None:
            assert part is None
            continue
        assert len(part.distances["forget"]) == 2 and len(part.distances["input"]) == 2
        assert part.distances["forget"] == whole.distances["forget"][:2] and part.distances["input"] == whole.distances["input"][:2]
        assert part.tree(2) == whole.tree(2)


def test_unknown_words_keep_their_spelling(tiny_model):
    parsed = read_sentences(tiny_model, [SENTENCES[4]])[0]
    assert leaves(parsed.tree(2)) == SENTENCES[4]


def test_formats(tiny_model):
    layer = middle_layer(3)
    assert layer == 2
    forget = sentence_results([tiny_model], SENTENCES, ParseOptions(), all_layers=True)
    by_input = sentence_results([tiny_model], SENTENCES, ParseOptions(distance="input"))
    brackets = render(forget[0], "brackets")
    assert brackets.startswith("(") and brackets.count("(") == len(SENTENCES[0]) - 1
    assert nltk.Tree.fromstring(render(forget[0], "ptb")).leaves() == SENTENCES[0]
    assert leaves(json.loads(render(by_input[1], "json"))) == SENTENCES[1]
    assert json.loads(render(by_input[1], "json")) == read_sentences(tiny_model, [SENTENCES[1]])[0].tree(2, "input")
    record = json.loads(render(forget[1], "jsonl"))
    assert record["tokens"] == SENTENCES[1] and len(record["forget"]) == 3 and len(record["input"][0]) == 12
    assert render(forget[2], "brackets") == ""
    assert render(forget[3], "brackets") == "mary"
    assert "saw" in render(forget[0], "ascii")


def test_a_backward_models_distances_are_the_forward_pass_over_the_reversed_words(tiny_backward_model):
    sentence = SENTENCES[1]
    parsed = read_sentences(tiny_backward_model, [sentence, SENTENCES[0]])[0]
    assert parsed.direction == "backward" and parsed.words == sentence
    tokens = torch.tensor([[1] + tiny_backward_model.vocab.encode(sentence[::-1]) + [1]]).t()
    with torch.no_grad():
        distances = tiny_backward_model.model.distances(tokens)
    torch.testing.assert_close(torch.tensor(parsed.distances["forget"]), distances.forget[:, 1:-1, 0].flip(-1))
    torch.testing.assert_close(torch.tensor(parsed.distances["input"]), distances.input[:, 1:-1, 0].flip(-1))
    assert parsed.tree(2) == trees.paper_tree(parsed.distances["forget"][1], sentence, "backward")
    assert parsed.gaps(2) == parsed.distances["forget"][1][:-1]


def test_an_ensemble_of_one_model_twice_gives_that_models_trees(tiny_model):
    for decoder in ("paper", "gap"):
        alone = sentence_results([tiny_model], SENTENCES, ParseOptions(decoder=decoder))
        for combine in ("mbr", "mean"):
            if combine == "mean" and decoder == "paper":
                continue  # mean always decodes gaps
            twice = sentence_results([tiny_model, tiny_model], SENTENCES, ParseOptions(decoder=decoder, combine=combine))
            assert [r.tree for r in twice] == [r.tree for r in alone]
            assert all(len(r.members) == 2 for r in twice if r.tree is not None)


def test_forward_and_backward_members_combine_by_their_gap_scores(tiny_model, tiny_backward_model):
    sentence = SENTENCES[1]
    results = sentence_results([tiny_model, tiny_backward_model], [sentence], ParseOptions(combine="mean"))
    fwd, bwd = (read_sentences(m, [sentence])[0] for m in (tiny_model, tiny_backward_model))
    mean = [(a + b) / 2 for a, b in zip(trees.standardize(fwd.gaps(2)), trees.standardize(bwd.gaps(2)))]
    assert results[0].tree == trees.tree_from_gaps(mean, sentence)
    voted = sentence_results([tiny_model, tiny_backward_model, tiny_model], [sentence], ParseOptions())
    assert voted[0].tree == fwd.tree(2)  # two of three members are the same model


def test_ensemble_members_must_split_alike_and_each_normalises_its_own_tokens(tiny_model):
    """Span voting needs the same tokens, not the same normalisation: a member that lowercases and maps digits to N
    reads its own copy of the tokens (`The`, `1984` -> `the`, `N`); one that splits otherwise is refused."""
    tokenizer = dataclasses.replace(tiny_model.tokenizer, lowercase=True, replace_digits=True)
    lower = dataclasses.replace(tiny_model, tokenizer=tokenizer, source="lower.pt")
    line = "The old man saw 1984 dogs"
    results = parse(Members.of([tiny_model, lower], ParseOptions()), [line])[0]
    [result] = list(results)
    assert trees.leaves(result.tree) == line.split()
    assert read_sentences(lower, [line.split()])[0].words == line.split()
    ids = token_ids(lower, line.split())
    assert ids == token_ids(tiny_model, ["the", "old", "man", "saw", "N", "dogs"]) != token_ids(tiny_model, line.split())
    other = dataclasses.replace(tiny_model, tokenizer=dataclasses.replace(tiny_model.tokenizer, kind="char"),
                                source="other.pt")
    with pytest.raises(InputError, match="other.pt: splits text unlike .*; ensemble members must split text alike"):
        parse(Members.of([tiny_model, other], ParseOptions()), ["a b"])


def brackets(models, lines, options, fmt="brackets", **kwargs):
    return render_lines(parse(Members.of(models, options), lines, **kwargs)[0], fmt)


def test_member_agreement_is_pairwise_f1():
    a, b = [["x", "y"], "z"], ["x", ["y", "z"]]
    scores = member_agreement([[a, a, b]])
    assert [s.sentence_f1 for s in scores] == [0.5, 0.5, 0.0]


def test_parsing_in_chunks_gives_what_parsing_all_at_once_gives(tiny_model):
    lines = [" ".join(s) for s in SENTENCES] * 7  # 35 lines: chunks of 64 * batch_size = 128 lines at batch 2
    whole = sentence_results([tiny_model], [line.split() for line in lines], ParseOptions(batch_size=64),
                            all_layers=True)
    assert list(brackets([tiny_model], iter(lines), ParseOptions(batch_size=2))) == \
        [render(r, "brackets") for r in whole]
    streamed = [json.loads(line) if line else None
                for line in brackets([tiny_model], iter(lines), ParseOptions(batch_size=2), "jsonl", all_layers=True)]
    for record, result in zip(streamed, whole, strict=True):  # other batches: float rounding differs
        if result.tree is None:
            assert record == {"tokens": [], "words": [], "tree": None}  # a blank line is a record too
            continue
        assert record["tokens"] == result.words and record["tree"] == result.tree
        torch.testing.assert_close(torch.tensor(record["forget"]), torch.tensor(result.members[0].values["forget"]))
    counted = []
    list(parse(Members.of([tiny_model], ParseOptions(batch_size=2)), iter(lines), messages=Messages(progress=counted.append))[0])
    assert sum(counted) == len(lines) and len(counted) == 1  # 35 lines: one chunk


@pytest.mark.slow
def test_parsing_in_worker_processes_gives_the_same_results_in_order(tiny_model, tiny_backward_model):
    lines = [" ".join(s) for s in SENTENCES] * 40  # 200 lines: chunks of 128 at batch 2
    for options in (ParseOptions(batch_size=2), ParseOptions(batch_size=2, auto_layers=True, decoder="gap"),
                    ParseOptions(batch_size=2, combine="mean", layers=(1, 3))):
        alone, summary = parse(Members.of([tiny_model, tiny_backward_model], options), lines, agreement=True)
        expected = list(alone)
        counted = []
        together, in_processes = parse(Members.of([tiny_model, tiny_backward_model], options), lines, workers=2, agreement=True,
                                       messages=Messages(progress=counted.append))
        assert list(together) == expected and sum(counted) == len(lines)
        assert in_processes.agreement == summary.agreement and in_processes.layers == summary.layers


def test_layers_by_agreement_finds_the_layers_whose_trees_agree():
    from grammar_induce.inference.ensemble import Reading, layers_by_agreement

    words = list("abcdefgh")
    # gap scores of five trees: a balanced one, shared by member A's layer 3 and member B's layer 1, and four
    # others that each agree more with the balanced tree than with one another
    shared = [0, 1, 2, 1, 3, 1, 2, 1]
    o1, o2, o3, o4 = ([0, *gaps] for gaps in ([7, 6, 5, 4, 3, 2, 1], [1, 2, 3, 4, 5, 6, 7], [3, 2, 1, 7, 4, 5, 6],
                                             [6, 5, 4, 3, 2, 7, 1]))
    a = [Reading(words, {"forget": [o1, o2, shared], "input": [o1] * 3})] * 4
    b = [Reading(words, {"forget": [shared, o3, o4], "input": [o1] * 3})] * 4
    assert layers_by_agreement([a, b], ParseOptions(decoder="gap")) == (3, 1)
    assert layers_by_agreement([a, a], ParseOptions()) == (2, 2)  # agreeing members keep the middle layers


def test_layers_by_agreement_across_families_asks_the_other_family():
    from grammar_induce.inference.ensemble import Reading, layers_by_agreement

    words = list("abcdefgh")
    shared = [0, 1, 2, 1, 3, 1, 2, 1]  # a balanced tree: the PCFG's, and layer 3 of A, layer 1 of B
    bias, o1, o3 = ([0, *gaps] for gaps in ([7, 6, 5, 4, 3, 2, 1], [1, 2, 3, 4, 5, 6, 7], [3, 2, 1, 7, 4, 5, 6]))
    a = [Reading(words, {"forget": [o1, bias, shared], "input": [o1] * 3})] * 4
    b = [Reading(words, {"forget": [shared, bias, o3], "input": [o1] * 3})] * 4  # both middle layers hold the same tree: a family's bias
    pcfg = [Reading(words, parsed_tree=Reading(words, {"forget": [shared], "input": [shared]}).tree(1, decoder="gap"))] * 4
    options = ParseOptions(decoder="gap")
    assert layers_by_agreement([a, b], options) == (2, 2)  # alone, the two agree on their shared bias
    assert layers_by_agreement([a, b, pcfg], options, ["onlstm", "onlstm", "pcfg"]) == (3, 1, 1)
    assert layers_by_agreement([a, b, pcfg], options, ["onlstm"] * 3) == layers_by_agreement([a, b, pcfg], options)


def test_one_layer_for_all_models_or_one_per_model(tiny_model):
    from grammar_induce.inference.ensemble import resolve_layers

    assert resolve_layers(ParseOptions(), [tiny_model] * 2) == [2, 2]
    assert resolve_layers(ParseOptions(layers=(1,)), [tiny_model] * 2) == [1, 1]
    assert resolve_layers(ParseOptions(layers=(3, 1)), [tiny_model] * 2) == [3, 1]
    with pytest.raises(InputError, match="layer is given 2 times for 3 models"):
        resolve_layers(ParseOptions(layers=(3, 1)), [tiny_model] * 3)
    per_model = sentence_results([tiny_model, tiny_model], SENTENCES, ParseOptions(layers=(3, 1), decoder="gap"))
    assert [r.members[1].tree for r in per_model if r.tree] == [
        read_sentences(tiny_model, [s])[0].tree(1, decoder="gap") for s in SENTENCES if s]


def test_a_batch_holds_a_bounded_number_of_words_whatever_batch_size_asks(tiny_model, monkeypatch):
    from grammar_induce.inference import members as members_module

    seen = []
    original = type(tiny_model.model).read

    def read(self, tokens, words, *args, **kwargs):
        seen.append(sum(len(w) for w in words))
        return original(self, tokens, words, *args, **kwargs)

    monkeypatch.setattr(members_module, "BATCH_WORDS", 60)
    monkeypatch.setattr(type(tiny_model.model), "read", read)
    sentences = ["the dog barked".split()] * 100 + [["w"] * 80]
    bounded = read_sentences(tiny_model, sentences, batch_size=100000)
    assert max(seen[:-1]) <= 60 and seen[-1] == 80  # a longer sentence goes alone
    monkeypatch.setattr(members_module, "BATCH_WORDS", 1 << 20)
    unbounded = read_sentences(tiny_model, sentences, batch_size=100000)
    for a, b in zip(unbounded, bounded):  # the same distances, to float rounding (other batch shapes)
        for row_a, row_b in zip(a.distances["forget"], b.distances["forget"]):
            assert row_a == pytest.approx(row_b, rel=1e-5, abs=1e-6)


@pytest.mark.slow
def test_every_option_parses_the_same_in_worker_processes_as_in_one(tiny_run, tiny_backward_run, tmp_path):

    vocab = checkpoint.load(tiny_run / "best.pt").vocab.words[2:]
    rng = random.Random(0)
    lines = tmp_path / "in.txt"  # 3 chunks of 64 lines: short sentences, then long ones (whose layers agree otherwise)
    lines.write_text("".join(" ".join(rng.choice(vocab) for _ in range(rng.randint(2, 3) if k < 64 else
                                                                          rng.randint(15, 25))) + "\n"
                             for k in range(192)))
    models = ["--model", tiny_run / "best.pt", "--model", tiny_backward_run / "best.pt"]
    for options in (["--layer", "auto"], ["--layer", "auto", "--combine", "mean", "--decoder", "gap"],
                    ["--layer", "1", "--layer", "3", "--format", "jsonl"]):
        one = invoke("parse", *models, "--input", lines, "--batch-size", "1", *options)
        two = invoke("parse", *models, "--input", lines, "--batch-size", "1", "--workers", "2", *options)
        assert one.exit_code == 0 and two.exit_code == 0, two.output
        if "jsonl" not in options:
            assert one.stdout == two.stdout
            continue
        for a, b in zip(map(json.loads, one.stdout.splitlines()), map(json.loads, two.stdout.splitlines()), strict=True):
            assert a["tree"] == b["tree"] and [m["tree"] for m in a["members"]] == [m["tree"] for m in b["members"]]
            assert [m["layer"] for m in a["members"]] == [m["layer"] for m in b["members"]]
            # a worker has fewer threads: float32 sums may round in another order
            assert torch.allclose(torch.tensor(a["members"][0]["forget"]), torch.tensor(b["members"][0]["forget"]),
                                  rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_workers_are_capped_by_the_input_and_say_so(tiny_run):
    one = invoke("parse", "--model", tiny_run / "best.pt", "a b c", "d e")
    four = invoke("parse", "--model", tiny_run / "best.pt", "--workers", "4", "a b c", "d e")
    assert four.stdout == one.stdout
    assert "--workers 4 capped at 1: the input is 2 lines, 1 chunk of up to 4,096 lines" in four.stderr


@pytest.mark.slow
def test_sigterm_in_parse_leaves_no_temporary_file(run_copy, tmp_path):
    out = tmp_path / "o.txt"
    process = subprocess.Popen([sys.executable, "-m", "grammar_induce", "parse", "--model", run_copy / "best.pt",
                                "--input", "-", "--output", out], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdin.write(b"a b c\n" * 5000)  # more than a chunk: it is parsed and written while stdin stays open
    process.stdin.flush()
    deadline = time.time() + 120
    while not list(tmp_path.glob(".o.txt.*.tmp")) and time.time() < deadline:
        time.sleep(0.1)
    assert list(tmp_path.glob(".o.txt.*.tmp"))
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 143
    assert not list(tmp_path.glob(".o.txt.*")) and not out.exists()


def test_pipes_are_read_once(tiny_run, tmp_path):
    fifo_with(tmp_path / "in", "a b c\nd e\n")
    result = invoke("parse", "--model", tiny_run / "best.pt", "--input", tmp_path / "in")
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 2, result.output
    text = (ROOT / "grammar_induce" / "resources" / "synthetic" / "train.txt").read_text()
    fifo_with(tmp_path / "prep", text)
    result = invoke("prepare", tmp_path / "prep")
    assert result.exit_code == 0 and "sentences" in result.stdout, result.output
    fifo_with(tmp_path / "train", text)
    result = train(tiny_config(data={"train": str(tmp_path / "train")}, run={"max_steps": 2}), tmp_path / "run", **QUIET)
    assert result.epochs
    assert not list(Path(os.environ[corpus.CACHE_ENV]).glob(".stream-*"))


@pytest.mark.slow
def test_a_tree_is_printed_before_the_pipe_closes(tiny_run):
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "grammar_induce", "parse", "--model", str(tiny_run / "best.pt")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        process.stdin.write("a b c\n")
        process.stdin.flush()
        import select

        assert select.select([process.stdout], [], [], 60)[0], "no tree while the pipe is open"
        first = process.stdout.readline()  # the pipe is still open: the tree came because the line did
        assert trees.leaves(trees.parse_brackets(first.strip())) == ["a", "b", "c"]
        process.stdin.write("d e\n")
        process.stdin.close()
        assert trees.leaves(trees.parse_brackets(process.stdout.readline().strip())) == ["d", "e"]
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()


def test_non_utf8_input_to_parse_names_the_line(tiny_run, tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"the dog\n\xc3\x28 bad\n")
    result = invoke("parse", "--model", tiny_run / "best.pt", "--input", path)
    assert result.exit_code == 1 and "in.txt:2: not UTF-8" in result.output


def test_output_in_a_missing_folder_writes_nothing(tiny_run, tmp_path):
    result = invoke("parse", "--model", tiny_run / "best.pt", "--output", tmp_path / "no" / "such" / "out.txt", "a b")
    assert result.exit_code == 1 and "does not exist" in result.output
    assert not (tmp_path / "no").exists()
    result = invoke("evaluate", "--model", tiny_run / "best.pt", "--json", tmp_path / "no" / "e.json")
    assert result.exit_code == 1 and "does not exist" in result.output and "right-branching" not in result.output
