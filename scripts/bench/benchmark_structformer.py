"""StructFormer training speed beside the ON-LSTM's, in one run, on the same machine and threads.

    python scripts/bench/benchmark_structformer.py [--device cpu|cuda] [--threads N] [--batches 5] [--json FILE]
                                             [--precisions fp32,bf16]

Tokens a second of full training steps (the recipe's own: forward, loss, backward, clipping, the optimizer step),
the median over batches after warm-up, each case in its own process:
- the ON-LSTM at the paper's size (configs/ptb.toml, 25M parameters: 20 rows of 70 tokens, SGD), as
  scripts/bench/benchmark.py measures it;
- the StructFormer at the paper's size (configs/structformer-ptb.toml, 38M: a batch of 4,096 tokens in sentences of
  20 words, 30% masked, Adam), and at the ON-LSTM's size (4 layers instead of 8: 25M parameters).
Tokens: every token the batch reads (the StructFormer's masked and unmasked words alike).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]
from benchmark import VOCAB, default_precisions, in_process, model_config, sync

WORDS = 20  # a PTB sentence's length, about


def bench_structformer_training(device_name: str, batches: int, precision: str, n_layers: int = 0) -> dict:
    import dataclasses
    import time

    import torch

    from grammar_induce.families.structformer.model import StructFormer
    from grammar_induce.families.structformer.recipe import masked
    from grammar_induce.runtime import memory
    from grammar_induce.runtime.clipping import clip_and_step
    from grammar_induce.runtime.precision import product_dtype

    device = torch.device(device_name)
    if device.type == "cpu":
        memory.keep_freed_memory()
    cfg = model_config("structformer-ptb")
    model_cfg = dataclasses.replace(cfg.model, n_layers=n_layers or cfg.model.n_layers)
    torch.manual_seed(0)
    model = StructFormer(VOCAB, model_cfg).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, eps=1e-9, weight_decay=cfg.train.weight_decay)
    rows = cfg.train.batch_size // WORDS
    ids = torch.randint(2, VOCAB, (rows, WORDS), device=device)
    products = product_dtype(precision)

    def one_batch():
        inputs, targets = masked(ids, model, cfg.train.mask_rate)
        optimizer.zero_grad(set_to_none=True)
        loss, units = model.masked_loss(inputs, targets, products)
        (loss / units).backward()
        clip_and_step(optimizer, model.parameters(), cfg.train.clip)

    times = []
    for k in range(batches + 2):
        sync(device)
        began = time.perf_counter()
        one_batch()
        sync(device)
        if k >= 2:
            times.append(time.perf_counter() - began)
    parameters = sum(p.numel() for p in model.parameters())
    return {"tokens_per_s": rows * WORDS / statistics.median(times), "parameters": parameters}


def parameters_of_onlstm() -> int:
    from grammar_induce.families.onlstm.model import ONLSTMLanguageModel

    return sum(p.numel() for p in ONLSTMLanguageModel(VOCAB, model_config("ptb").model).parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: every core)")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--precisions", default="")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    import os

    threads = args.threads or os.cpu_count() or 1
    precisions = args.precisions.split(",") if args.precisions else default_precisions(args.device)
    results: dict[str, dict] = {}
    for precision in precisions:
        here = "benchmark_structformer:"  # run_case finds a function of this script by its module's name
        cases = {"ON-LSTM (paper size)": ("bench_training", ("ptb", args.device, args.batches, precision)),
                 "StructFormer (paper size)": ("bench_structformer_training", (args.device, args.batches, precision)),
                 "StructFormer (4 layers: the ON-LSTM's size)": ("bench_structformer_training",
                                                                 (args.device, args.batches, precision, 4))}
        for name, (fn, fn_args) in cases.items():
            results[f"{name} {precision}"] = in_process(threads, args.device, fn if fn == "bench_training" else here + fn,
                                                        *fn_args)
        results[f"ON-LSTM (paper size) {precision}"]["parameters"] = parameters_of_onlstm()
    print(f"{'training':48s} {'parameters':>11s} {'tokens/s':>9s} {'x ON-LSTM':>10s}")
    for precision in precisions:
        base = results[f"ON-LSTM (paper size) {precision}"]["tokens_per_s"]
        for name, r in results.items():
            if name.endswith(precision):
                print(f"{name:48s} {r['parameters']:11,d} {r['tokens_per_s']:9.0f} {r['tokens_per_s'] / base:10.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
