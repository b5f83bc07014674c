"""The benchmark script runs end to end (tiny model, smoke settings) and reports every case."""

import json
import subprocess
import sys

import pytest
import torch

from grammar_induce.families.onlstm import native
from grammar_induce.runtime.precision import bf16_hardware

from .conftest import ROOT


@pytest.mark.slow
def test_benchmark_smoke_run_reports_every_case(tmp_path):
    out = tmp_path / "bench.json"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench" / "benchmark.py"), "--quick", "--models", "tiny",
                          "--threads", "1", "--json", str(out)], check=True, capture_output=True, text=True, timeout=300)
    report = json.loads(out.read_text())
    assert report["time_steps"] == ("C" if native.library(torch.float32) is not None else "tensor ops")
    results = report["results"]
    precisions = ["fp32", "bf16"] if bf16_hardware(torch.device("cpu")) else ["fp32"]
    expected = {"tiny products", "tiny train per-step as the paper's code", "tiny parse per-step paper",
                "tiny parse per-step scaled once", "tiny parse 2-model ensemble", "tiny parse one 500-word line",
                "tiny parse 2-model ensemble, one 800-word line", "tiny parse student vs the pair"}
    for p in precisions:
        expected |= {f"tiny train {p}", f"tiny train {p}, averaged SGD", f"tiny parse batch 1 {p}",
                     f"tiny parse batch 64 {p}", f"tiny parse batch 256 {p}", f"tiny parse batch 256, layers 1-2 {p}",
                     f"tiny parse student {p}"}
    assert set(results) == expected
    products = results.pop("tiny products")
    assert len(products) == 4 * len(precisions) + 1 and all(ms > 0 for ms in products.values())
    for case, figures in results.items():
        assert figures.get("tokens_per_s", figures.get("sentences_per_s")) > 0, case
        assert figures["peak_mb"] > 0, case
        if "floor_tokens_per_s" in figures or "floor_sentences_per_s" in figures:
            floor = figures.get("floor_tokens_per_s", figures.get("floor_sentences_per_s"))
            rate = figures.get("tokens_per_s", figures.get("sentences_per_s"))
            assert abs(figures["ratio"] - rate / floor) < 1e-9, case
    student = results["tiny parse student vs the pair"]
    assert abs(student["ratio"] - student["sentences_per_s"] / student["pair_sentences_per_s"]) < 1e-9
    assert student["one_800_word_line_seconds"] > 0
    ensemble = results["tiny parse 2-model ensemble"]
    assert abs(ensemble["ratio"] - ensemble["sentences_per_s"] / ensemble["one_model_sentences_per_s"]) < 1e-9
    batched = results["tiny parse batch 256 fp32"]["sentences_per_s"]
    for case in ("tiny parse per-step paper", "tiny parse per-step scaled once"):
        assert abs(results[case]["batch 256 speedup"] - batched / results[case]["sentences_per_s"]) < 1e-9
    paper = results["tiny train per-step as the paper's code"]["tokens_per_s"]
    for p in precisions:
        speedup = results[f"tiny train {p}"]["tokens_per_s"] / paper
        assert f"tiny {p}: training " in run.stdout and f"{speedup:.2f}x the paper-style" in run.stdout


def test_a_case_whose_process_fails_stops_the_benchmark_naming_it():
    """It waited for the figures forever (a failing case hung the smoke run until its 300 s timeout)."""
    code = ("import sys; sys.path.insert(0, 'scripts/bench'); import benchmark; "
            "benchmark.in_process(1, 'cpu', 'math:sqrt', -1.0)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         check=False)
    assert run.returncode == 1 and "ValueError: math domain error" in run.stderr
    assert run.stderr.strip().splitlines()[-1] == "benchmark case math:sqrt: its process ended with exit code 1 and no figures"
