
import dataclasses
import json

import pytest
import torch

from grammar_induce.errors import InputError
from grammar_induce.families import checkpoint
from grammar_induce.inference.ensemble import ParseOptions
from grammar_induce.output.formats import render
from grammar_induce.text.tokenizer import Tokenizer, Vocab
from grammar_induce.workflows.train import train

from .conftest import QUIET, ROOT, RunsCode, invoke, sole_line_error, tiny_config
from .test_onlstm_model import tiny_model
from .test_parsing import sentence_results

BEFORE = ROOT / "tests" / "fixtures" / "v0.1"  # written by grammar-induce 0.1.0; see its README


def test_save_load_gives_identical_outputs(tmp_path):
    model = tiny_model().eval()
    vocab = Vocab(["<unk>", "<eos>"] + [f"w{k}" for k in range(18)])
    config = dataclasses.replace(tiny_config(), model=model.config)
    checkpoint.save(tmp_path / "m.pt", model, vocab, Tokenizer(), config)
    loaded = checkpoint.load(tmp_path / "m.pt")
    tokens = torch.randint(0, 20, (6, 2))
    a, b = model(tokens), loaded.model(tokens)
    assert torch.equal(a.logits, b.logits)
    assert torch.equal(a.distances.forget, b.distances.forget)
    assert loaded.vocab.words == vocab.words


def test_a_checkpoint_written_by_0_1_loads_and_parses_as_it_did():
    loaded = checkpoint.load(BEFORE / "best.pt")
    sentences = [line.split() for line in (BEFORE / "sentences.txt").read_text().splitlines()]
    results = sentence_results([loaded], sentences, ParseOptions(), all_layers=True)
    now = [json.loads(render(r, "jsonl")) for r in results]
    before = [json.loads(line) for line in (BEFORE / "parse.jsonl").read_text().splitlines()]
    for a, b in zip(now, before, strict=True):
        assert (a["tokens"], a["tree"]) == (b["tokens"], b["tree"])
        # float32 sums round in the last bits differently on CPUs with other vector units (AVX2 vs AVX-512)
        for kind in ("forget", "input"):
            assert torch.allclose(torch.tensor(a[kind]), torch.tensor(b[kind]), rtol=1e-6, atol=1e-7)


def test_training_gives_the_numbers_0_1_gave_and_resumes_its_last_pt(tmp_path):
    out = tmp_path / "run"
    train(tiny_config(run={"epochs": 2}), out, **QUIET)
    now = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    before = [json.loads(line) for line in (BEFORE / "metrics.jsonl").read_text().splitlines()]
    for a, b in zip(now, before, strict=True):
        assert (a["train_loss"], a["valid_ppl"], a["phase"]) == (b["train_loss"], b["valid_ppl"], b["phase"])
    old = tmp_path / "old"
    old.mkdir()
    for name in ("last.pt", "metrics.jsonl"):
        (old / name).write_bytes((BEFORE / name).read_bytes())
    result = train(tiny_config(run={"epochs": 3}), old, resume=True, **QUIET)
    assert [r["epoch"] for r in result.epochs] == [3]
    assert torch.load(old / "last.pt", weights_only=True)["training_state"]["version"] == 1


def test_truncated_foreign_and_future_checkpoints_are_refused(tiny_run, tmp_path):
    data = (tiny_run / "best.pt").read_bytes()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(data[: len(data) // 2])
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    text = tmp_path / "text.pt"
    text.write_text("hello")
    future = tmp_path / "future.pt"
    payload = torch.load(tiny_run / "best.pt", weights_only=True)
    torch.save({**payload, "format_version": 99}, future)
    for path, message in [(truncated, "not a grammar-induce checkpoint or corrupt"),
                          (foreign, "not a grammar-induce checkpoint"),
                          (text, "not a grammar-induce checkpoint or corrupt"),
                          (future, "format version 99")]:
        result = invoke("parse", "--model", path, "a b")
        assert result.exit_code == 1 and message in result.output, result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_a_checkpoint_with_flipped_bytes_is_refused_not_loaded(tiny_run, tmp_path):
    """64 bytes flipped inside the weights leave a file torch still loads (its zip's CRCs are not checked), and the
    damaged model parsed on; now the stored CRCs are checked and the file refused, naming what is damaged."""
    data = bytearray((tiny_run / "best.pt").read_bytes())
    weights = max(torch.load(tiny_run / "best.pt", weights_only=True)["state_dict"].values(), key=torch.Tensor.numel)
    at = bytes(data).index(weights.numpy().tobytes()[:64])  # the largest tensor's first bytes, stored as they are
    data[at : at + 64] = bytes(b ^ 0xFF for b in data[at : at + 64])
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(bytes(data))
    torch.load(damaged, weights_only=True)  # what torch alone does: no complaint
    sole_line_error(invoke("parse", "--model", damaged, "a b"),
                    f"{damaged}: damaged checkpoint (")
    with pytest.raises(InputError, match="does not match the CRC stored with it"):
        checkpoint.load(damaged)


def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save({"format_version": 1, "config": RunsCode(marker)}, evil)
    with pytest.raises(InputError, match="not a grammar-induce checkpoint or corrupt"):
        checkpoint.load(evil)
    assert not marker.exists()
    with open(evil, "rb") as f:  # the file really is armed: plain unpickling would run it
        assert b"system" in f.read()


def test_checkpoint_messages_name_the_problem(tiny_run, tmp_path):
    sole_line_error(invoke("parse", "--model", tiny_run, "a b"),
                   f"is a folder, not a checkpoint file (did you mean {tiny_run / 'best.pt'}?)")
    payload = torch.load(tiny_run / "best.pt", weights_only=True)
    payload["state_dict"]["layers.1.hh.weight"] = torch.zeros(3, 3)
    wrong = tmp_path / "wrong.pt"
    torch.save(payload, wrong)
    sole_line_error(invoke("parse", "--model", wrong, "a b"), "size mismatch for layers.1.hh.weight")
    evil = tmp_path / "evil.pt"
    torch.save({"format_version": 1, "config": RunsCode(tmp_path / "pwned")}, evil)
    result = invoke("parse", "--model", evil, "a b")
    sole_line_error(result, "holds Python objects, not only plain data")
    assert "weights_only=False" not in result.output
