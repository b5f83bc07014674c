"""Every command on CUDA, against the CPU's results (issue 61): training of each family, parsing in every format
with labels, ensembles and long lines, evaluation, distillation, resume and torchrun, with tiny models. Marked `gpu`
and skipped where torch sees no CUDA device (`scripts/gpu_check.sh` runs them); the batched sums they rely on are
tested on the CPU in test_pcfg.py. Trained weights are compared without dropout (CUDA and the CPU draw different
random numbers), to a float32 tolerance (the devices sum in other orders); trees by agreement, not bit for bit."""

import json
import os
import subprocess
import sys

import pytest
import torch

import grammar_induce as gi
from grammar_induce import trees
from grammar_induce.families.onlstm import graphs
from grammar_induce.families.onlstm import recurrence as engine
from grammar_induce.metrics import SpanMetric
from grammar_induce.output.formats import DEPENDENCY, FORMATS
from grammar_induce.workflows.train import train

from .conftest import QUIET, ROOT, by_section, invoke, tiny_config
from .test_graphs import layer_run

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")]

NO_DROPOUT = {"dropout": 0.0, "dropouth": 0.0, "dropouti": 0.0, "dropoute": 0.0, "wdrop": 0.0}
PCFG = {"kind": "pcfg", "nonterminals": 6, "preterminals": 8, "rank": 12, "symbol_dim": 16}
STRUCTFORMER = {"kind": "structformer", "hidden_size": 32, "n_layers": 2, "heads": 4, "parser_layers": 2, "conv_size": 3,
                "dropout": 0.0}
ADAM_LR = {"pcfg": {"lr": 0.01}, "structformer": {"lr": 0.003}}  # tiny.toml's lr is the ON-LSTM's SGD's
FAMILIES = {"onlstm": {**NO_DROPOUT}, "lstm": {"kind": "lstm", **NO_DROPOUT}, "pcfg": PCFG, "structformer": STRUCTFORMER}
LINES = ["The old man's dog didn't bark, and the cat sat.", "Profits rose. Analysts were surprised.",
         "a dog saw the man", "It cost 3.5 dollars."]
GOLD = ROOT / "data" / "synthetic" / "test.trees"


def trained(tmp_path, family: str, device: str, name: str = "", **settings):
    settings = {"epochs": 1, "max_steps": 12, "device": device, **ADAM_LR.get(family, {}), **settings}
    out = tmp_path / f"{family}-{name or device}"
    result = train(tiny_config(model=FAMILIES[family], **by_section(settings)), out, **QUIET)
    return out, result


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_trains_on_cuda_as_on_the_cpu(tmp_path, family):
    cpu, on_cpu = trained(tmp_path, family, "cpu")
    gpu, on_gpu = trained(tmp_path, family, "cuda", "gpu")
    a, b = (torch.load(run / "last.pt", weights_only=True)["state_dict"] for run in (cpu, gpu))
    for key in a:
        torch.testing.assert_close(a[key], b[key].cpu(), rtol=2e-3, atol=2e-4, msg=key)
    assert on_gpu.best_valid_ppl == pytest.approx(on_cpu.best_valid_ppl, rel=1e-3)


def agreement(a: list, b: list) -> float:
    return sum((SpanMetric.of(trees.spans(x), trees.spans(y)) for x, y in zip(a, b)), SpanMetric()).sentence_f1


@pytest.mark.parametrize("name", ["en", "ptb-pair", "ptb-pcfg"])
def test_the_shipped_models_parse_on_cuda_as_on_the_cpu_in_every_format(name, tmp_path):
    on = {device: gi.load(name, device=device) for device in ("cpu", "cuda")}
    found = {device: [trees.from_nested(t) for t in parser.parse_many(LINES)] for device, parser in on.items()}
    assert agreement(found["cpu"], found["cuda"]) > 0.95  # near-ties may break the other way
    for fmt in (f for f in FORMATS if f not in DEPENDENCY):  # no shipped model has dependency heads
        target = tmp_path / f"{fmt}-out" if fmt == "svg" else tmp_path / f"out.{fmt}"
        result = invoke("parse", "--model", name, "--device", "cuda", "--format", fmt, "--output", target, *LINES)
        assert result.exit_code == 0, result.output


def test_a_structformer_parses_on_cuda_as_on_the_cpu_with_its_heads_in_every_format(tmp_path):
    run, _ = trained(tmp_path, "structformer", "cpu")
    model = str(run / "best.pt")
    on = {device: list(gi.load(model, device=device).analyse_many(LINES)) for device in ("cpu", "cuda")}
    assert agreement(*([r.tree for r in on[device]] for device in ("cpu", "cuda"))) > 0.95
    heads = [[h for r in on[device] for m in r.members for h in m.heads] for device in ("cpu", "cuda")]
    assert sum(a == b for a, b in zip(*heads)) >= 0.9 * len(heads[0])  # near-ties may break the other way
    for fmt in FORMATS:
        target = tmp_path / f"{fmt}-out" if fmt == "svg" else tmp_path / f"out.{fmt}"
        result = invoke("parse", "--model", model, "--device", "cuda", "--format", fmt, "--output", target, *LINES)
        assert result.exit_code == 0, result.output


def test_a_pcfgs_labels_long_lines_and_its_sums_on_cuda(tmp_path):
    """The span_labels crash (a CPU mask beside a CUDA chart), a line past the PCFG's parse limit, and the batched
    sums over split points on CUDA against the CPU's C sums: likelihoods and span marginals."""
    labelled = gi.load("ptb-pcfg", device="cuda", labels=True)
    tree = labelled.parse(LINES[0])
    assert any(t.label().startswith("NT-") for t in tree.subtrees())
    long_line = " ".join(f"w{k}" for k in range(1200))
    assert len(gi.load("ptb-pcfg", device="cuda").analyse(long_line).words) == 1200
    assert invoke("parse", "--model", "ptb-pcfg", "--device", "cuda", "--format", "ascii", long_line).exit_code == 0
    model = gi.load("ptb-pcfg", device="cpu").models[0].model
    words = torch.randint(2, 10000, (8, 20), generator=torch.Generator().manual_seed(0))
    lengths = [20, 20, 18, 15, 12, 9, 4, 2]
    with torch.no_grad():
        on_cpu = model.structure(words, lengths)
        model.to("cuda")
        on_gpu = model.structure(words.cuda(), lengths)
        torch.testing.assert_close(on_gpu.partition.cpu(), on_cpu.partition, rtol=1e-4, atol=1e-3)
        torch.testing.assert_close(on_gpu.marginals.cpu(), on_cpu.marginals, rtol=1e-3, atol=1e-4)


def test_an_ensemble_evaluates_on_cuda_as_on_the_cpu():
    reports = {device: gi.evaluate(gi.load("ptb-pair", "ptb-pcfg", weights="auto", device=device), gold=str(GOLD))
               for device in ("cpu", "cuda")}
    main = reports["cpu"].main_row
    assert reports["cuda"].rows[main].sentence_f1 == pytest.approx(reports["cpu"].rows[main].sentence_f1, abs=0.01)


def test_distill_and_resume_on_cuda(tmp_path):
    lm, _ = trained(tmp_path, "onlstm", "cuda", max_steps=0)
    train_text, valid_text = (str(ROOT / "data" / "synthetic" / f"{part}.txt") for part in ("valid", "test"))
    student = gi.distill(str(lm / "best.pt"), train=train_text, valid=valid_text, out=tmp_path / "student",
                         device="cuda", epochs=1, log=None)
    assert student.models[0].model.device.type == "cuda" and student.parse("a dog saw the man").leaves()
    straight, _ = trained(tmp_path, "pcfg", "cuda", max_steps=0, epochs=2)
    limited = tmp_path / "limited"
    config = tiny_config(model=PCFG, train={"lr": 0.01}, run={"epochs": 2, "device": "cuda", "max_steps": 7})
    train(config, limited, **QUIET)  # stopped inside epoch 1
    train(tiny_config(model=PCFG, train={"lr": 0.01}, run={"epochs": 2, "device": "cuda"}), limited,
          resume=True, **QUIET)
    a, b = (torch.load(run / "last.pt", weights_only=True)["state_dict"] for run in (straight, limited))
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5, msg=key)


def test_torchrun_on_one_gpu(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", "-m",
               "grammar_induce", "train", "--config", str(ROOT / "configs" / "tiny.toml"), "--device", "cuda",
               "--max-steps", "20", "--epochs", "1", "--quiet", "--out", str(tmp_path / "ddp")]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert records and records[-1]["epoch"] == 1


@pytest.mark.parametrize("weight_dtype", [None, torch.bfloat16])
def test_the_onlstm_steps_replayed_from_cuda_graphs_equal_the_launched_ones(weight_dtype, monkeypatch):
    """The recorded graphs (from a shape's first use here) against the same steps launched one kernel at a time,
    over step counts that come back with new values."""
    replayed = graphs.Replayed(from_use=1)
    monkeypatch.setattr(engine, "REPLAYED", replayed)
    cases = [(5, 0), (7, 1), (5, 2), (7, 3)]
    got = [layer_run(steps, seed, weight_dtype, "cuda") for steps, seed in cases]
    assert replayed.failed is None and len(replayed.graphs) == 4, replayed.failed
    monkeypatch.setenv("GRAMMAR_INDUCE_CUDA_GRAPHS", "0")
    for (steps, seed), values in zip(cases, got):
        for a, b in zip(values, layer_run(steps, seed, weight_dtype, "cuda")):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_an_onlstm_trains_on_cuda_through_graphs_as_without(tmp_path, precision, monkeypatch):
    replayed = graphs.Replayed()
    monkeypatch.setattr(engine, "REPLAYED", replayed)
    a_run, _ = trained(tmp_path, "onlstm", "cuda", f"graphs-{precision}", precision=precision, max_steps=20)
    assert replayed.failed is None and replayed.graphs, replayed.failed  # the run replayed graphs
    monkeypatch.setenv("GRAMMAR_INDUCE_CUDA_GRAPHS", "0")
    b_run, _ = trained(tmp_path, "onlstm", "cuda", f"launched-{precision}", precision=precision, max_steps=20)
    a, b = (torch.load(run / "last.pt", weights_only=True)["state_dict"] for run in (a_run, b_run))
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=2e-3, atol=2e-4, msg=key)
