"""`distill` end to end on tiny teachers: the student is a model like the others."""

import json
import shutil

import pytest
import torch
from click.testing import CliRunner

import grammar_induce as gi
from grammar_induce import trees
from grammar_induce.cli import main
from grammar_induce.errors import InputError
from grammar_induce.families import checkpoint
from grammar_induce.families.student.model import SpanParser

from .conftest import (
    ROOT,
    SMALL_STUDENT,
    invoke,
    one_line_error,
    small_text,
)

SYNTHETIC = ROOT / "grammar_induce" / "resources" / "synthetic"


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


SMALL = {"emb_size": 16, "hidden_size": 16, "n_layers": 1, "max_length": 12}  # a student for tests


def lines(name: str, count: int, folder) -> str:
    path = folder / name
    path.write_text("".join(SYNTHETIC.joinpath(name).read_text().splitlines(keepends=True)[:count]))
    return path


@pytest.fixture(scope="module")
def student(tiny_run, tiny_backward_run, tmp_path_factory):
    folder = tmp_path_factory.mktemp("distill")
    parser = gi.distill(tiny_run / "best.pt", tiny_backward_run / "best.pt", train=lines("train.txt", 150, folder),
                        valid=lines("valid.txt", 50, folder), out=folder / "out", layer="auto", epochs=2, rounds=2,
                        log=lambda line: None, **SMALL)
    assert parser.models[0].source == str(folder / "out" / "best.pt")
    return folder / "out"


def interrupt_in_epoch_2(monkeypatch) -> None:
    """Ctrl-C as the second epoch's agreement is measured (a run of two epochs stops inside its second)."""
    from grammar_induce.workflows import distillation

    agreement, calls = distillation.agreement_with, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return agreement(*args, **kwargs)

    monkeypatch.setattr(distillation, "agreement_with", interrupted)


def test_the_command_line_distills(tiny_run, tmp_path):
    train = lines("train.txt", 20, tmp_path)
    result = cli("distill", "--model", tiny_run / "best.pt", "--train", train, "--valid", train, "--out", tmp_path / "s",
                 "--epochs", "1", "--confident")
    assert result.exit_code == 0, result.output
    assert "round 1 epoch 1: loss" in result.output and f"student in {tmp_path / 's' / 'best.pt'}" in result.output


def test_distill_writes_each_round_and_its_epochs(student):
    assert {p.name for p in student.iterdir()} >= {"round-1.pt", "round-2.pt", "best.pt", "distill.jsonl"}
    records = [json.loads(line) for line in (student / "distill.jsonl").read_text().splitlines()]
    assert [(r["round"], r["epoch"]) for r in records] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert all(0 <= r["valid_agreement_f1"] <= 100 for r in records)


def test_the_student_parses_evaluates_and_votes_like_any_model(student, tiny_run):
    loaded = checkpoint.load(student / "best.pt")  # plain data, weights_only
    assert isinstance(loaded.model, SpanParser) and loaded.config.model.kind == "student"
    result = cli("parse", "--model", student / "best.pt", "the old man saw a dog", "")
    assert result.exit_code == 0 and result.stdout.endswith("\n\n")
    assert result.stdout.split("\n")[0].count("(") == 5  # a binary tree over six words
    table = cli("evaluate", "--model", student / "best.pt", "--quiet")
    assert table.exit_code == 0 and "student (CKY) *" in table.stdout
    pair = cli("parse", "--model", tiny_run / "best.pt", "--model", student / "best.pt", "--format", "jsonl", "a b c")
    assert pair.exit_code == 0 and len(members := json.loads(pair.stdout)["members"]) == 2
    assert members[0]["forget"] and all(len(row) == 3 for row in members[0]["forget"] + members[0]["input"])
    assert members[1].keys() == {"tree"}  # a student has no distances, no layer, no direction: no empty fields either
    alone = cli("parse", "--model", student / "best.pt", "--format", "jsonl", "a b c")
    record = json.loads(alone.stdout)
    assert record.keys() == {"tokens", "words", "tree", "spans"}  # its CRF's marginals: how sure it is of each span
    assert [(s["start"], s["end"]) for s in record["spans"]] == [(0, 2), (0, 3)] or \
        [(s["start"], s["end"]) for s in record["spans"]] == [(0, 3), (1, 3)]
    assert all(0 <= s["confidence"] <= 1 for s in record["spans"])
    mean = cli("parse", "--model", tiny_run / "best.pt", "--model", student / "best.pt", "--combine", "mean", "a b c")
    assert mean.exit_code == 1 and "--combine mean needs gap scores" in mean.output
    assert cli("parse", "--model", student / "best.pt", "--format", "html", "a b c").exit_code == 0
    rows = cli("evaluate", "--model", tiny_run / "best.pt", "--model", student / "best.pt", "--quiet")
    assert rows.exit_code == 0 and "mbr of 2 *" in rows.stdout and "mean of 2" not in rows.stdout  # no gaps to average


def test_a_teacher_in_the_output_folder_is_never_overwritten(tiny_run, tmp_path):
    (tmp_path / "out").mkdir()
    teacher = tmp_path / "out" / "best.pt"
    teacher.write_bytes((tiny_run / "best.pt").read_bytes())
    result = cli("distill", "--model", teacher, "--train", SYNTHETIC / "valid.txt", "--valid", SYNTHETIC / "valid.txt",
                 "--out", tmp_path / "out", "--force")
    assert result.exit_code == 1 and "best.pt is also an input" in result.output
    assert teacher.read_bytes() == (tiny_run / "best.pt").read_bytes()


def test_a_folder_with_a_student_is_kept_unless_forced(student, tiny_run):
    result = cli("distill", "--model", tiny_run / "best.pt", "--train", SYNTHETIC / "valid.txt", "--valid",
                 SYNTHETIC / "valid.txt", "--out", student)
    assert result.exit_code == 1 and "holds a student (best.pt); use --force" in result.output


def test_an_existing_folder_of_other_files_or_of_the_training_text_is_never_written_into(tiny_run, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "round-1.pt").write_text("a user's own file")
    (folder / "distill.jsonl").write_text("a user's own log")
    train = lines("train.txt", 40, folder)
    valid = lines("valid.txt", 10, tmp_path)
    for out in (folder, folder):  # with and without --force: never
        for force in ((), ("--force",)):
            result = cli("distill", "--model", tiny_run / "best.pt", "--train", train, "--valid", valid, "--out", out,
                         *force)
            assert result.exit_code != 0 and "holds other files" in result.output, result.output
    assert (folder / "round-1.pt").read_text() == "a user's own file"
    assert (folder / "distill.jsonl").read_text() == "a user's own log"


def test_a_second_distillation_into_a_folder_in_use_is_refused_naming_the_holder(tiny_run, tmp_path):
    from grammar_induce.runtime import rundir

    work = tmp_path / "out.partial"
    work.mkdir()
    lock = rundir.take_lock(work, "")  # as a live run holds it
    try:
        for resume in ((), ("--resume",)):
            result = cli("distill", "--model", tiny_run / "best.pt", "--train", lines("train.txt", 40, tmp_path),
                         "--valid", lines("valid.txt", 10, tmp_path), "--out", tmp_path / "out", *resume)
            assert result.exit_code != 0
            assert f"out: in use by process {__import__('os').getpid()} on " in result.output, result.output
    finally:
        rundir.release_lock(work, lock)


def test_text_of_sentences_of_one_or_two_words_is_refused_before_anything_is_parsed(tiny_run, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("the dog\nbarked\na cat\n")
    result = cli("distill", "--model", tiny_run / "best.pt", "--train", short, "--valid", short,
                 "--out", tmp_path / "out")
    assert result.exit_code != 0
    assert "none of its 3 sentences has 3 to 40 words (a sentence of 1 or 2 words has only one tree)" in result.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_an_out_folder_under_home_is_expanded_not_made_literally(tiny_run, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    gi.distill(tiny_run / "best.pt", train=lines("train.txt", 60, tmp_path), valid=lines("valid.txt", 20, tmp_path),
               out="~/student", epochs=1, log=None, **SMALL)
    assert (tmp_path / "home" / "student" / "best.pt").exists() and not (tmp_path / "~").exists()


def test_distill_without_a_teacher_says_so(tmp_path):
    with pytest.raises(ValueError, match="teachers are missing: give one or more models"):
        gi.distill(train=tmp_path / "t.txt", valid=tmp_path / "v.txt", out=tmp_path / "o")
    with pytest.raises(ValueError, match="out takes the student's output folder"):
        gi.distill("en", train=tmp_path / "t.txt", valid=tmp_path / "v.txt", out=None)


def test_distill_with_no_sentence_short_enough_is_refused_with_the_count(tiny_run, tmp_path):
    text = tmp_path / "long.txt"
    text.write_text("a b c d e\nf g h i j k\n")
    result = invoke("distill", "--model", tiny_run / "best.pt", "--train", text, "--valid", text, "--out",
                 tmp_path / "student", "--max-length", "3")
    one_line_error(result, "long.txt: none of its 2 sentences has 3 to 3 words")


@pytest.mark.parametrize("settings, message", [
    ({"epochs": 0}, "epochs must be a whole number of at least 1"),
    ({"lr": float("nan")}, "lr must be a positive number"),
    ({"student_batch_size": 0}, "student_batch_size must be a whole number"),
    ({"bogus": 3}, "unexpected keyword argument 'bogus'"),
])
def test_distill_refuses_bad_settings_before_any_work(settings, message, tmp_path):
    with pytest.raises(InputError, match=message):  # the texts do not exist: they were never read
        gi.distill("ptb", train=tmp_path / "none.txt", valid=tmp_path / "none.txt", out=tmp_path / "s", **settings)
    assert not (tmp_path / "s").exists()


def test_distill_never_writes_over_a_language_model(tiny_run, tmp_path):

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    before = (run / "best.pt").read_bytes()
    text = small_text(tmp_path)
    result = invoke("distill", "--model", tiny_run / "best.pt", "--train", text, "--valid", text, "--out", run, "--force")
    one_line_error(result, "its best.pt is an ON-LSTM language model (onlstm), not a distilled student")
    assert (run / "best.pt").read_bytes() == before and not (tmp_path / "run.partial").exists()


def test_a_failed_start_leaves_no_folder(tiny_run, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(InputError):
        gi.distill(tiny_run / "best.pt", train=empty, valid=empty, out=tmp_path / "s", **SMALL_STUDENT)
    assert not (tmp_path / "s").exists() and not (tmp_path / "s.partial").exists()


def test_an_interrupted_distillation_keeps_the_old_student_and_resumes_to_the_same_student(tiny_run, tmp_path,
                                                                                          monkeypatch):
    from grammar_induce.families import checkpoint

    text = small_text(tmp_path)
    whole = gi.distill(tiny_run / "best.pt", train=text, valid=text, out=tmp_path / "whole", log=lambda s: None,
                       **SMALL_STUDENT)
    out = tmp_path / "out"
    gi.distill(tiny_run / "best.pt", train=text, valid=text, out=out, log=lambda s: None, **{**SMALL_STUDENT, "seed": 7})
    old = {name: (out / name).read_bytes() for name in ("best.pt", "distill.jsonl")}

    interrupt_in_epoch_2(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        gi.distill(tiny_run / "best.pt", train=text, valid=text, out=out, force=True, log=lambda s: None, **SMALL_STUDENT)
    monkeypatch.undo()
    assert {name: (out / name).read_bytes() for name in old} == old  # the old student is whole
    assert (tmp_path / "out.partial" / "resume.pt").exists()
    with pytest.raises(InputError, match="holds an interrupted distillation: add --resume"):
        gi.distill(tiny_run / "best.pt", train=text, valid=text, out=out, force=True, **SMALL_STUDENT)
    resumed = gi.distill(tiny_run / "best.pt", train=text, valid=text, out=out, force=True, resume=True,
                         log=lambda s: None, **SMALL_STUDENT)
    assert not (tmp_path / "out.partial").exists()
    a, b = checkpoint.read(whole.models[0].source), checkpoint.read(resumed.models[0].source)
    assert all((a["state_dict"][k] == b["state_dict"][k]).all() for k in a["state_dict"])
    epochs = [json.loads(line)["epoch"] for line in (out / "distill.jsonl").read_text().splitlines()]
    assert epochs == [1, 2]


def test_a_students_layer_and_decoder_have_no_effect_and_say_so(tiny_run, tmp_path):
    text = small_text(tmp_path)
    gi.distill(tiny_run / "best.pt", train=text, valid=text, out=tmp_path / "s", log=lambda s: None, **SMALL_STUDENT)
    result = invoke("parse", "--model", tmp_path / "s" / "best.pt", "--layer", "2", "--decoder", "gap", "a b c")
    assert result.exit_code == 0 and "note: --layer, --decoder have no effect with a distilled student" in result.stderr


def test_a_students_long_line_is_split_greedily_and_says_so(tiny_run, tmp_path, monkeypatch):
    from grammar_induce.structures import cky

    text = small_text(tmp_path)
    gi.distill(tiny_run / "best.pt", train=text, valid=text, out=tmp_path / "s", log=lambda s: None, **SMALL_STUDENT)
    words = " ".join(f"w{k % 7}" for k in range(30))
    exact = invoke("parse", "--model", tmp_path / "s" / "best.pt", words)
    monkeypatch.setattr(cky, "EXACT_LIMIT", 10)
    greedy = invoke("parse", "--model", tmp_path / "s" / "best.pt", words, "a b")
    assert greedy.exit_code == 0 and "1 line of more than 10 words: the student's CKY split them greedily" in greedy.stderr
    assert trees.leaves(trees.parse_brackets(greedy.stdout.splitlines()[0])) == words.split()
    assert "greedily" not in exact.stderr


def test_a_distillation_stopped_inside_an_epoch_resumes_to_the_same_student(tiny_run, tmp_path, monkeypatch):
    """Ctrl-C inside an epoch (the student runs through the one training loop): the round's last.pt keeps the
    position and the batch order's generator as it was at the epoch's start, so the resumed student is the
    uninterrupted one."""
    import os
    import signal

    import torch

    from grammar_induce.families import checkpoint
    from grammar_induce.families.student.model import SpanParser

    text, small = small_text(tmp_path), {**SMALL_STUDENT, "student_batch_size": 8, "keep": "last"}
    whole = gi.distill(tiny_run / "best.pt", train=text, valid=text, out=tmp_path / "whole", log=None, **small)
    loss, calls = SpanParser.loss, []

    def interrupted_at_batch_11(self, *args):
        calls.append(1)
        if len(calls) == 8:  # the second batch of epoch 2 (6 batches an epoch)
            os.kill(os.getpid(), signal.SIGINT)
        return loss(self, *args)

    monkeypatch.setattr(SpanParser, "loss", interrupted_at_batch_11)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        gi.distill(tiny_run / "best.pt", train=text, valid=text, out=out, log=None, **small)
    saved = torch.load(tmp_path / "out.partial" / "round-1" / "last.pt", weights_only=True)["training_state"]
    assert saved["epoch"] == 2 and saved["position"]["start"] > 0  # inside epoch 2
    monkeypatch.undo()
    resumed = gi.distill(tiny_run / "best.pt", train=text, valid=text, out=out, resume=True, log=None, **small)
    a, b = checkpoint.read(whole.models[0].source), checkpoint.read(resumed.models[0].source)
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    assert (tmp_path / "whole" / "distill.jsonl").read_text().count("\n") == 2
    assert [json.loads(line)["epoch"] for line in (out / "distill.jsonl").read_text().splitlines()] == [1, 2]


def test_soft_targets_are_the_teachers_marginals_kept_with_the_targets_and_a_resumed_run_is_the_same(tiny_run, tmp_path,
                                                                                                     monkeypatch):
    """A student of a student's span marginals (soft 0.5): the targets file keeps each sentence's chart (the CRF's
    marginals, whose rows sum as a chart does), the loss reads them, and a run stopped in epoch 2 resumes to the
    uninterrupted student. A teacher without marginals (an ON-LSTM) is refused before anything is parsed."""
    import torch

    from grammar_induce.workflows import distillation

    text = small_text(tmp_path)
    teacher = gi.distill(tiny_run / "best.pt", train=text, valid=text, out=tmp_path / "teacher", log=None,
                         **{**SMALL_STUDENT, "epochs": 1})
    source = teacher.models[0].source
    with pytest.raises(InputError, match="has none"):
        gi.distill(tiny_run / "best.pt", train=text, valid=text, out=tmp_path / "no", soft=0.5, **SMALL_STUDENT)
    assert not (tmp_path / "no.partial").exists()
    soft = {**SMALL_STUDENT, "soft": 0.5}
    whole = gi.distill(source, train=text, valid=text, out=tmp_path / "whole", log=None, **soft)
    seen = []
    loss = SpanParser.loss

    def recording(self, tokens, lengths, kept, marginals=None, weight=0.0):
        seen.append((marginals, weight))
        return loss(self, tokens, lengths, kept, marginals, weight)

    monkeypatch.setattr(SpanParser, "loss", recording)
    interrupt_in_epoch_2(monkeypatch)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        gi.distill(source, train=text, valid=text, out=out, log=None, **soft)
    charts = torch.load(tmp_path / "out.partial" / "targets-1.pt", weights_only=True)["train"]["marginals"]
    words = distillation.sentences_of(str(text), teacher.models[0])
    assert [c.shape[0] for c in charts] == [len(w) + 1 for w in words] and charts[0].dtype == torch.float16
    for chart, n in zip(charts, (len(w) for w in words)):
        if n >= 2:
            assert abs(float(chart[0, n]) - 1.0) < 1e-2  # the whole sentence is in every tree
    assert seen and all(m is not None and w == 0.5 for m, w in seen)
    monkeypatch.undo()
    resumed = gi.distill(source, train=text, valid=text, out=out, resume=True, log=None, **soft)
    a, b = checkpoint.read(whole.models[0].source), checkpoint.read(resumed.models[0].source)
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    assert a["provenance"]["settings"]["soft"] == 0.5


def test_a_students_word_embeddings_start_from_a_language_models_principal_components(tiny_run, tmp_path):
    """distill --embeddings: the ON-LSTM's word embeddings on their principal directions, scaled to spread 1, are the
    student's start (at the source's own size a rotation: every distance between two words kept, up to one scale); a
    word the source lacks starts at 0; a distillation from that start runs and says so; a model without word
    embeddings is refused."""
    from grammar_induce.text.tokenizer import Vocab
    from grammar_induce.workflows.distillation import DistillSettings, _student_config, embedding_start

    source = checkpoint.load(tiny_run / "best.pt")
    table = source.model.embedding.weight.detach()
    words = [*source.vocab.words[:2], "a-word-it-lacks", *source.vocab.words[5:25]]  # <unk>, <eos> first
    config = _student_config(source, DistillSettings(emb_size=table.shape[1]), 1)
    start = embedding_start(str(tiny_run / "best.pt"), Vocab(words), config)["state_dict"]["embedding.weight"]
    assert start.shape == (len(words), table.shape[1]) and not start[2].any()
    known = [k for k in range(len(words)) if k != 2]
    rows = table[[source.vocab.index[words[k]] for k in known]]
    found, expected = torch.cdist(start[known], start[known]), torch.cdist(rows, rows)
    torch.testing.assert_close(found, expected * (found.sum() / expected.sum()), rtol=1e-4, atol=1e-5)
    smaller = embedding_start(str(tiny_run / "best.pt"), source.vocab, _student_config(source, DistillSettings(**SMALL), 1))
    assert smaller["state_dict"]["embedding.weight"].std().item() == pytest.approx(1.0, abs=1e-3)

    parser = gi.distill(tiny_run / "best.pt", train=lines("train.txt", 60, tmp_path), valid=lines("valid.txt", 20, tmp_path),
                        out=tmp_path / "out", epochs=1, log=None, embeddings=str(tiny_run / "best.pt"), **SMALL)
    assert parser.models[0].provenance["settings"]["embeddings"] == str(tiny_run / "best.pt")
    with pytest.raises(InputError, match="has no word embeddings"):
        embedding_start(str(parser.models[0].source), source.vocab, _student_config(source, DistillSettings(emb_size=64), 1))
