import json

import torch

from grammar_induce.config import Config
from grammar_induce.inference.ensemble import ParseOptions
from grammar_induce.models import checkpoint
from grammar_induce.output.formats import render
from grammar_induce.text.tokenizer import Tokenizer, Vocab
from grammar_induce.workflows.train import train

from .conftest import QUIET, ROOT, tiny_config
from .test_model import tiny_model
from .test_parse import sentence_results

BEFORE = ROOT / "tests" / "fixtures" / "v0.1"  # written by grammar-induce 0.1.0; see its README


def test_save_load_gives_identical_outputs(tmp_path):
    model = tiny_model().eval()
    vocab = Vocab(["<unk>", "<eos>"] + [f"w{k}" for k in range(18)])
    config = Config(model=model.config)
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
    train(tiny_config(train={"epochs": 2}), out, **QUIET)
    now = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    before = [json.loads(line) for line in (BEFORE / "metrics.jsonl").read_text().splitlines()]
    for a, b in zip(now, before, strict=True):
        assert (a["train_loss"], a["valid_ppl"], a["phase"]) == (b["train_loss"], b["valid_ppl"], b["phase"])
    old = tmp_path / "old"
    old.mkdir()
    for name in ("last.pt", "metrics.jsonl"):
        (old / name).write_bytes((BEFORE / name).read_bytes())
    result = train(tiny_config(train={"epochs": 3}), old, resume=True, **QUIET)
    assert [r["epoch"] for r in result.epochs] == [3]
    assert torch.load(old / "last.pt", weights_only=True)["training_state"]["version"] == 1
