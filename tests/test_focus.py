"""Parse-focusing (families/focus.py, text/aligned.py, workflows/train.py): the teachers' votes and the span biases
they make, by hand; a grammar trained toward a teacher's trees, from a file or a model (whose trees are made once, in
chunks kept in the cache); the refusal of a file that does not match the training text; a start from a trained
grammar; resume. The focused partition itself against brute force: tests/test_rank_cfg.py."""

import json
import math
import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from nltk import Tree

from grammar_induce import trees
from grammar_induce.errors import InputError
from grammar_induce.families import checkpoint, sentences
from grammar_induce.families.focus import HARD_FLOOR, SpanVotes, Teacher
from grammar_induce.inference import teachers as model_teachers
from grammar_induce.inference.teachers import TreeMaker
from grammar_induce.messages import Messages
from grammar_induce.workflows.train import train

from .conftest import QUIET
from .test_pcfg import pcfg_config


def test_votes_count_each_teacher_or_each_family_once_and_the_right_branching_voter():
    """Three teachers of two families over one sentence of 5 words; a second sentence no teacher has."""
    a = Teacher("a", "pcfg", [frozenset({(0, 2), (2, 5), (3, 5)}), None])
    b = Teacher("b", "pcfg", [frozenset({(0, 2), (2, 4)}), None])
    c = Teacher("c", "onlstm", [frozenset({(0, 2), (3, 5)}), None])
    by_teacher = SpanVotes([a, b, c], [5, 3])
    assert by_teacher.votes(0) == {(0, 2): 3.0, (2, 5): 1.0, (3, 5): 2.0, (2, 4): 1.0}
    assert by_teacher.votes(1) == {} and by_teacher.covered == 1
    by_family = SpanVotes([a, b, c], [5, 3], by="family", right=0.5)
    assert by_family.votes(0) == {(0, 2): 2.0, (2, 5): 0.5 + 0.5, (3, 5): 0.5 + 1.0 + 0.5, (2, 4): 0.5,
                                  (1, 5): 0.5}  # right-branching: (1, 5), (2, 5), (3, 5)
    assert by_family.votes(1) == {}  # no teacher tree: the right-branching voter alone does not focus it


def test_the_bias_is_strength_times_votes_soft_and_the_papers_floor_hard():
    votes = SpanVotes([Teacher("a", "pcfg", [frozenset({(0, 2)}), frozenset({(1, 3)})])], [4, 3])
    soft = votes.bias([1, 0], [3, 4], "soft", 2.5)
    assert soft.shape == (2, 5, 5)
    expected = torch.zeros(2, 5, 5)
    expected[0, 1, 3] = 2.5
    expected[1, 0, 2] = 2.5
    assert torch.equal(soft, expected)
    hard = votes.bias([0], [4], "hard", 99.0)[0]
    for i in range(5):
        for j in range(5):
            wanted = 0.0 if j - i < 2 or (i, j) in {(0, 2), (0, 4)} else HARD_FLOOR
            assert float(hard[i, j]) == pytest.approx(wanted), (i, j)


def training_words(config) -> list[list[str]]:
    return [line.split() for line in Path(config.data.train).read_text().splitlines()]


def teacher_file(config, path: Path, shape=trees.left_branching) -> Path:
    """A tree of `shape` (left-branching: what a grammar of the English-like synthetic text does not make) of each
    line of the training text."""
    path.write_text("".join(trees.to_brackets(shape(w)) + "\n" if w else "\n" for w in training_words(config)))
    return path


def share_of_teacher_trees(run: Path, config) -> float:
    """The share of the training sentences (3 to 12 words) whose MBR tree is left-branching."""
    from grammar_induce import api

    parser = api.load(run / "best.pt")
    words = [w for w in training_words(config) if 3 <= len(w) <= 12][:120]
    found = [trees.spans(tree_of(t)) for t in parser.parse_many(words)]
    return sum(f == trees.spans(trees.left_branching(w)) for f, w in zip(found, words)) / len(words)


def tree_of(nltk_tree) -> trees.Tree:
    return trees.from_nested(nltk_tree)


def test_a_grammar_focused_by_a_file_of_trees_learns_them_and_keeps_the_settings(tmp_path):
    config = pcfg_config(epochs=2, lr=0.02)
    focused = replace(config, train=replace(config.train, focus=(str(teacher_file(config, tmp_path / "rb.txt")),),
                                            focus_strength=4.0))
    train(config, tmp_path / "plain", **QUIET)
    train(focused, tmp_path / "focused", **QUIET)
    plain_share, focused_share = (share_of_teacher_trees(tmp_path / run, config) for run in ("plain", "focused"))
    assert focused_share > plain_share + 0.3, (plain_share, focused_share)
    saved = checkpoint.load(tmp_path / "focused" / "best.pt").config.train
    assert (saved.focus, saved.focus_mode, saved.focus_strength) == (focused.train.focus, "soft", 4.0)
    assert 'focus = ["' in (tmp_path / "focused" / "config.toml").read_text()


def test_a_focus_file_that_does_not_match_the_training_text_is_refused_naming_the_line(tmp_path):
    config = pcfg_config(epochs=1)
    lines = teacher_file(config, tmp_path / "rb.txt").read_text().splitlines()

    def refused(text: str, match: str) -> None:
        path = tmp_path / "teacher.txt"
        path.write_text(text)
        with pytest.raises(InputError, match=match):
            train(replace(config, train=replace(config.train, focus=(str(path),))), tmp_path / "run", **QUIET)
        assert not (tmp_path / "run").exists()

    refused("\n".join(lines[:-1]) + "\n", r"teacher.txt: 499 trees for the 500 lines of .*valid.txt: a focus file "
                                          r"has a tree \(or a blank line\) for each line")
    words = training_words(config)[2]
    other = lines[:2] + [trees.to_brackets(trees.left_branching(["zebra", *words[1:]]))] + lines[3:]
    assert words[0] != "zebra"
    refused("\n".join(other) + "\n", rf"teacher.txt:3: the tree's words are not those of .*valid.txt:3 \(word 1 is "
                                     rf"'zebra' against '{words[0]}'\)")
    refused("\n".join(lines[:4] + ["(a (b c"] + lines[5:]) + "\n", r"teacher.txt:5: unbalanced brackets")


def test_a_model_teachers_trees_are_made_once_in_chunks_and_read_back(tmp_path, monkeypatch):
    """A model teacher parses the training sentences in chunks, each kept as it is made: a run stopped among them
    goes on from the last, and a second run with the same teacher and text parses nothing."""
    config = pcfg_config(epochs=1, max_steps=2)
    config = replace(config, data=replace(config.data, cache_dir=str(tmp_path / "cache")),
                     train=replace(config.train, focus=("teacher",)))
    monkeypatch.setattr(model_teachers, "CHUNK", 100)
    asked = []

    def parse(sentences):
        asked.append(len(sentences))
        if len(asked) == 3:
            raise KeyboardInterrupt  # stopped while making the third chunk
        return [trees.right_branching(w) for w in sentences]

    teachers = {"teacher": TreeMaker("pcfg", "a tiny teacher", parse)}
    with pytest.raises(KeyboardInterrupt):
        train(config, tmp_path / "run", teachers=teachers, **QUIET)
    chunks = sorted((tmp_path / "cache" / "focus").glob("*/trees-*.txt"))
    assert [c.name for c in chunks] == ["trees-00000.txt", "trees-00001.txt"]
    kept = [w for w in training_words(config) if 2 <= len(w) <= config.train.max_length]
    train(config, tmp_path / "run", teachers=teachers, **QUIET)
    assert len(asked) == 3 + 3 and sum(asked[3:]) + sum(asked[:2]) == len(kept)  # chunks 3 to 5, then nothing again
    train(config, tmp_path / "again", teachers=teachers, **QUIET)
    assert len(asked) == 6
    first = chunks[0].read_text().splitlines()
    assert first[0] == trees.to_brackets(trees.right_branching(training_words(config)[0]))


def test_a_run_starts_from_a_trained_grammar_of_the_same_sizes_or_a_higher_rank_and_refuses_another(tmp_path):
    config = pcfg_config(epochs=1)
    train(config, tmp_path / "first", **QUIET)
    start = tmp_path / "first" / "best.pt"
    tuned = replace(config, train=replace(config.train, init=str(start), lr=1e-9), run=replace(config.run, max_steps=1))
    said = Messages()
    train(tuned, tmp_path / "tuned", **{**QUIET, "messages": said})
    assert any(f"train.init {start}: its vocabulary" in n and "covers 100.0% of the training text's" in n
               and "<unk>" not in n for n in said.notes), said.notes  # issue 81, class 6: how much it covers
    foreign = tmp_path / "foreign.txt"
    foreign.write_text("zebra quokka okapi\nquokka zebra\n" * 20)
    said = Messages()
    train(replace(tuned, data=replace(tuned.data, train=str(foreign))), tmp_path / "foreign", **{**QUIET, "messages": said})
    assert any("covers 0.0% of the training text's 100 words" in n and "the rest are <unk>" in n for n in said.notes)
    before, after = checkpoint.load(start), checkpoint.load(tmp_path / "tuned" / "last.pt")
    assert after.vocab.words == before.vocab.words
    for key, value in before.model.state_dict().items():
        assert torch.allclose(after.model.state_dict()[key], value, atol=1e-6), key
    other = replace(tuned, model=replace(config.model, symbol_dim=8))
    with pytest.raises(InputError, match=rf"train.init {start}: must be a model of the run's kind and sizes: it has "
                                         r"model.symbol_dim = 16, the run 8"):
        train(other, tmp_path / "other", **QUIET)
    lower = train(replace(tuned, model=replace(config.model, rank=6)), tmp_path / "lower", **QUIET)  # a rank it adapts
    assert checkpoint.load(tmp_path / "lower" / "last.pt").model.head_mlp[2].out_features == 6 and lower.epochs


def test_a_focused_run_resumes_to_the_same_weights_after_a_signal(tmp_path, monkeypatch):
    config = pcfg_config(checkpoint_minutes=1e-9)
    config = replace(config, train=replace(config.train, focus=(str(teacher_file(config, tmp_path / "rb.txt")),),
                                           focus_mode="hard"))
    train(config, tmp_path / "straight", **QUIET)
    original, calls = sentences.sentence_step, {"n": 0}

    def step(*args, **kwargs):
        calls["n"] += 1
        assert args[-1] is not None  # the batch's span bias reaches the step
        value = original(*args, **kwargs)
        if calls["n"] == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return value

    monkeypatch.setattr(sentences, "sentence_step", step)
    train(config, tmp_path / "interrupted", **QUIET)
    monkeypatch.setattr(sentences, "sentence_step", original)
    train(config, tmp_path / "interrupted", resume=True, **QUIET)
    a = torch.load(tmp_path / "straight" / "last.pt", weights_only=True)
    b = torch.load(tmp_path / "interrupted" / "last.pt", weights_only=True)
    assert b["training_state"]["epoch"] == 3
    for key in a["state_dict"]:
        assert torch.equal(a["state_dict"][key], b["state_dict"][key]), key
    assert math.isfinite(b["training_state"]["best"])


def test_train_focus_on_the_command_line_keeps_the_teachers_and_refuses_what_is_none(tmp_path):
    from grammar_induce.config import to_toml

    from .conftest import invoke, sole_line_error

    config = pcfg_config(epochs=1, max_steps=1)
    path = tmp_path / "pcfg.toml"
    path.write_text(to_toml(config))
    teacher = teacher_file(config, tmp_path / "teacher.txt")
    result = invoke("train", "--config", path, "--focus", teacher, "--set", "train.focus_strength=2", "--out",
                    tmp_path / "run", "--quiet")
    assert result.exit_code == 0, result.output
    saved = checkpoint.load(tmp_path / "run" / "last.pt").config.train
    assert saved.focus == (str(teacher.resolve()),) and saved.focus_strength == 2.0
    sole_line_error(invoke("train", "--config", path, "--focus", "no-such-teacher", "--out", tmp_path / "other"),
                    "focus no-such-teacher: neither a file of trees nor a checkpoint nor a shipped model's name")
    assert not (tmp_path / "other").exists()


def test_a_model_teachers_leaves_read_already_match_the_training_words():
    """A model teacher is given the training words as read (lowercased, digits as N); reading its leaves again lowers
    the N, which must not make the tree's words differ from the sentence's (the CTB run of issue 69 stopped on it)."""
    from grammar_induce.text.aligned import spans_over
    from grammar_induce.text.tokenizer import Tokenizer
    reader = Tokenizer("whitespace", lowercase=True, replace_digits=True)
    words = reader("一九九8年 Paris rose")
    assert words == ["一九九N年", "paris", "rose"]
    tree = Tree.fromstring("(S (X 一九九N年 paris) (X rose))")
    assert spans_over(tree, words, reader, "teacher", "train.txt:1") == frozenset({(0, 2)})
    with pytest.raises(InputError, match=r"train.txt:1 \(word 2 is 'london' against 'paris'\)"):
        spans_over(Tree.fromstring("(S (X 一九九N年 london) (X rose))"), words, reader, "teacher", "train.txt:1")


def test_a_resumed_focused_run_refuses_a_changed_teacher_and_a_damaged_cache_chunk_is_made_again(tmp_path, monkeypatch):
    """issue 81, classes 3 and 10: a run records what each teacher was (teachers.json: a file's hash, a model's
    files' hashes); a resume after the tree file was rewritten is refused naming it, and goes on once it is back. A
    cached chunk of a model teacher's trees that does not read is made again, with a note naming the file."""
    config = pcfg_config(epochs=1)
    tree_file = teacher_file(config, tmp_path / "t.trees")
    focused = replace(config, train=replace(config.train, focus=(str(tree_file),)), run=replace(config.run, max_steps=2))
    train(focused, tmp_path / "run", **QUIET)
    assert json.loads((tmp_path / "run" / "teachers.json").read_text()).keys() == {str(tree_file)}
    original = tree_file.read_text()
    teacher_file(config, tree_file, shape=trees.right_branching)  # rewritten at the same path
    more = replace(focused, run=replace(focused.run, max_steps=4))
    with pytest.raises(InputError, match=rf"the focusing teacher {tree_file} has changed since the run started"):
        train(more, tmp_path / "run", resume=True, **QUIET)
    tree_file.write_text(original)
    train(more, tmp_path / "run", resume=True, **QUIET)

    monkeypatch.setattr(model_teachers, "CHUNK", 100)
    teachers = {"teacher": TreeMaker("pcfg", "a tiny teacher", lambda ws: [trees.right_branching(w) for w in ws])}
    modelled = replace(config, train=replace(config.train, focus=("teacher",)), run=replace(config.run, max_steps=1),
                       data=replace(config.data, cache_dir=str(tmp_path / "cache")))
    train(modelled, tmp_path / "first", teachers=teachers, **QUIET)
    chunk = next((tmp_path / "cache" / "focus").glob("*/trees-00000.txt"))
    whole = chunk.read_text()
    chunk.write_text(whole[: len(whole) // 2])  # truncated mid-tree
    said = Messages()
    train(modelled, tmp_path / "second", teachers=teachers, **{**QUIET, "messages": said})
    assert any(f"the cached chunk {chunk} does not read" in n and "made again" in n for n in said.notes), said.notes
    assert chunk.read_text() == whole


def test_a_teacher_given_by_a_relative_path_is_kept_by_its_absolute_one_and_a_missing_one_named(tmp_path, monkeypatch):
    """issue 81, class 9: however a teacher was given (--set, `settings`), the run's config keeps its absolute path
    (a shipped name stays a name), so --resume works from any folder; one that is not there is named as what it is."""
    from grammar_induce.api import _teachers_pinned_by_path
    from grammar_induce.errors import SettingError

    config = pcfg_config()
    teacher_file(config, tmp_path / "t.trees")
    monkeypatch.chdir(tmp_path)
    given = replace(config, train=replace(config.train, focus=("t.trees", "en")))
    assert _teachers_pinned_by_path(given, resume=False).train.focus == (str(tmp_path / "t.trees"), "en")
    gone = replace(config, train=replace(config.train, focus=(str(tmp_path / "gone.trees"),)))
    with pytest.raises(SettingError, match="the resumed run's teacher .* is no longer there"):
        _teachers_pinned_by_path(gone, resume=True)
    with pytest.raises(SettingError, match="neither a file of trees nor a checkpoint"):
        _teachers_pinned_by_path(gone, resume=False)


def test_a_focus_file_of_parses_own_ptb_output_with_raw_digits_reads_as_the_training_text_does(tmp_path):
    """issue 81, class 8: `parse --format ptb` writes labels and (X word) leaves, and the words as typed (一九九０年,
    where the CTB recipe's training reads 一九九N年): the focus file's spans are those of the tree, labels no words."""
    from grammar_induce.config import DataConfig
    from grammar_induce.text.aligned import file_spans
    from grammar_induce.text.corpus import training_lines, training_reader

    train = tmp_path / "train.txt"
    data = DataConfig(train=str(train), lowercase=True, replace_digits=True, fold_width=True)
    reader = training_reader(data)
    train.write_text("一九九０年 Paris rose\nit rose\n")
    ptb = tmp_path / "teacher.trees"
    ptb.write_text("(X (X (X 一九九０年) (X Paris)) (X rose))\n(NT-3 (X it) (X rose))\n")
    lines = training_lines(data)
    assert file_spans(ptb, str(train), lines, reader, [True, True]) == [frozenset({(0, 2)}), frozenset()]
    ptb.write_text("(X (X (X 一九九０年) (X London)) (X rose))\n(X (X it) (X rose))\n")
    with pytest.raises(InputError, match=r"teacher.trees:1: the tree's words are not those of"):
        file_spans(ptb, str(train), lines, reader, [True, True])
