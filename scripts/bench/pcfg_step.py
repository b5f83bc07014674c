"""Time one TN-PCFG training step (inside pass, log-likelihood, backward) at the paper's sizes, per sum-over-split-
points path, on one device: the C sums (CPU, float32 or bfloat16 children) and the tensor ops (every device; all
split points of a width at once since round 19). Median milliseconds of `--repeats` steps after two warm-ups.

    python scripts/bench/pcfg_step.py [--device cpu|cuda] [--precision fp32|bf16] [--batch 32] [--lengths 10,20,40]

Run it at two commits (a worktree each) for a before/after of one path; `scripts/gpu_check.sh` runs it on CUDA.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from benchmark_pcfg import median_seconds  # scripts/, beside this file

from grammar_induce.families.pcfg.model import TNPCFG
from grammar_induce.families.pcfg.settings import PCFGConfig

VOCAB = 10000


def step_ms(model: TNPCFG, batch: int, length: int, products: torch.dtype | None, repeats: int, device: str) -> float:
    generator = torch.Generator().manual_seed(length)
    words = torch.randint(2, VOCAB, (batch, length), generator=generator).to(device)
    lengths = [length] * batch

    def step() -> None:
        model.zero_grad(set_to_none=True)
        (-model.log_likelihood(words, lengths, products).mean()).backward()
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    return 1000 * median_seconds(step, repeats, warmup=2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lengths", default="10,20,40")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--paths", default="c,tensor", help="c (the CPU's C sums), tensor (tensor ops)")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = TNPCFG(VOCAB, PCFGConfig(kind="pcfg", nonterminals=250, preterminals=500, rank=500, symbol_dim=256))
    model.to(args.device)
    products = torch.bfloat16 if args.precision == "bf16" else None
    rows = []
    for path in args.paths.split(","):
        if path == "c" and not args.device.startswith("cpu"):
            continue
        os.environ["GRAMMAR_INDUCE_NATIVE"] = "1" if path == "c" else "0"
        for length in map(int, args.lengths.split(",")):
            ms = step_ms(model, args.batch, length, products, args.repeats, args.device)
            rows.append({"path": path, "device": args.device, "precision": args.precision, "batch": args.batch,
                         "words": length, "ms": round(ms, 1), "tokens_per_s": round(args.batch * length / ms * 1000)})
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
