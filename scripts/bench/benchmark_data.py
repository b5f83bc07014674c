"""Corpus size: wall time and peak memory of preparing, training on and parsing large generated corpora.

    python scripts/bench/benchmark_data.py [--tokens 1,10,100] [--sentences 10,100,1000] [--work DIR]
                                     [--compare-with OLD_CHECKOUT] [--json FILE]

Corpora are generated (no downloads): sentences of a Zipf-distributed 10k-word vocabulary, 20
words on average; a corpus of N million tokens repeats one generated million-token block. For
each size (millions of tokens) it measures, each in its own process:
- prepare: `grammar-induce prepare` (tokenize into the token cache): seconds, MB/s of text, peak RSS;
- train: the first start on that corpus (cache built) with `configs/ptb-cpu.toml` and 20 batches;
- cached start: a second start, timed to the first batch, and the peak RSS of its 20 batches;
- with --compare-with, the same training run by the code in another checkout (say, before the
  token cache), for the bytes-per-token figure of the in-memory reader.
Then for each count (thousands of sentences), `grammar-induce parse --input` with a small model
(configs/tiny.toml size): sentences per second and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = 1_000_000


def generate_block(seed: int = 0) -> str:
    """About a million tokens of sentences over a Zipf-distributed vocabulary."""
    rng = random.Random(seed)
    words = [f"w{k}" for k in range(10_000)]
    weights = [1 / (k + 1) for k in range(len(words))]
    lines, total = [], 0
    while total < BLOCK:
        n = max(3, int(rng.gauss(20, 8)))
        lines.append(" ".join(rng.choices(words, weights, k=n)))
        total += n
    return "\n".join(lines) + "\n"


def write_corpus(path: Path, millions: int, block: str) -> None:
    if path.exists() and path.stat().st_size == millions * len(block.encode()):
        return
    with open(path, "w") as f:
        f.writelines(block for _ in range(millions))


def measure(command: list[str], env: dict | None = None, mark: str | None = None, cwd: Path | None = None) -> dict:
    """Run a command; its wall seconds, peak RSS (MB) and the seconds until a line containing `mark`."""
    began = time.time()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, **(env or {})}, cwd=cwd)
    marked, output = None, []
    for line in process.stdout:
        output.append(line)
        if mark and marked is None and mark in line:
            marked = time.time() - began
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        sys.exit(f"{' '.join(command)} failed:\n{''.join(output[-20:])}")
    return {"seconds": time.time() - began, "peak_mb": usage.ru_maxrss / 1024, "until_mark": marked,
            "output": "".join(output[-5:])}


def grammar_induce(*args: str) -> list[str]:
    return [sys.executable, "-m", "grammar_induce", *args]


def train_command(corpus: Path, valid: Path, out: Path) -> list[str]:
    return grammar_induce("train", "--config", str(ROOT / "configs" / "ptb-cpu.toml"), "--train", str(corpus),
                          "--valid", str(valid), "--set", "data.test=\"\"", "--out", str(out), "--force", "--max-steps", "20",
                          "--quiet", "--device", "cpu")


def bench_corpus(millions: int, work: Path, block: str, valid: Path, compare_with: Path | None) -> dict:
    corpus = work / f"corpus-{millions}M.txt"
    write_corpus(corpus, millions, block)
    cache = {"GRAMMAR_INDUCE_CACHE": str(work / "cache")}
    megabytes = corpus.stat().st_size / 2**20
    prepared = measure(grammar_induce("prepare", str(corpus), "--config", str(ROOT / "configs" / "ptb-cpu.toml")),
                       cache)
    first = measure(train_command(corpus, valid, work / "run"), cache)
    again = measure(train_command(corpus, valid, work / "run"), cache, mark="parameters, vocabulary")
    result = {"tokens": millions * BLOCK, "text_mb": megabytes,
              "prepare_s": prepared["seconds"], "prepare_mb_per_s": megabytes / prepared["seconds"],
              "prepare_peak_mb": prepared["peak_mb"], "train_first_s": first["seconds"],
              "train_first_peak_mb": first["peak_mb"], "cached_start_to_first_batch_s": again["until_mark"],
              "cached_train_s": again["seconds"], "cached_train_peak_mb": again["peak_mb"]}
    if compare_with is not None:
        # run from the other checkout: `python -m` puts the working folder first on the path
        old = measure(train_command(corpus, valid, work / "run-old"), {"PYTHONPATH": str(compare_with)},
                      cwd=compare_with)
        result.update(old_train_s=old["seconds"], old_train_peak_mb=old["peak_mb"])
    return result


def bench_parse(thousands: int, work: Path, block: str, model: Path) -> dict:
    lines = block.splitlines()
    text = work / f"parse-{thousands}k.txt"
    with open(text, "w") as f:
        f.writelines(lines[k % len(lines)] + "\n" for k in range(thousands * 1000))
    result = measure(grammar_induce("parse", "--model", str(model), "--input", str(text), "--output",
                                    str(work / "parsed.txt"), "--device", "cpu"))
    return {"sentences": thousands * 1000, "sentences_per_s": thousands * 1000 / result["seconds"],
            "peak_mb": result["peak_mb"]}


def tiny_model(work: Path, block: str) -> Path:
    """A configs/tiny.toml-sized model over the generated vocabulary (one short epoch)."""
    text = work / "tiny-train.txt"
    text.write_text("\n".join(block.splitlines()[:3000]) + "\n")
    measure(grammar_induce("train", "--config", str(ROOT / "configs" / "tiny.toml"), "--train", str(text),
                           "--valid", str(text), "--out", str(work / "tiny"), "--force", "--epochs", "1", "--quiet",
                           "--device", "cpu"), {"GRAMMAR_INDUCE_CACHE": str(work / "cache")})
    return work / "tiny" / "best.pt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="1,10,100", help="corpus sizes, millions of tokens")
    parser.add_argument("--sentences", default="10,100,1000", help="parse sizes, thousands of sentences")
    parser.add_argument("--work", type=Path, default=Path("runs/benchmark-data"))
    parser.add_argument("--compare-with", type=Path, default=None, help="another checkout, for today's figure")
    parser.add_argument("--compare-tokens", default="1,10",
                        help="sizes to run the other checkout on (it reads the whole corpus into memory)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    block = generate_block()
    valid = args.work / "valid.txt"
    valid.write_text("\n".join(block.splitlines()[:500]) + "\n")
    compared = set(args.compare_tokens.split(","))
    corpora = [bench_corpus(int(m), args.work, block, valid, args.compare_with if m in compared else None)
               for m in args.tokens.split(",")]
    model = tiny_model(args.work, block)
    parses = [bench_parse(int(k), args.work, block, model) for k in args.sentences.split(",")]
    print_tables(corpora, parses)
    if args.json:
        args.json.write_text(json.dumps({"corpora": corpora, "parse": parses}, indent=2))


def print_tables(corpora: list[dict], parses: list[dict]) -> None:
    print("| tokens | text MB | prepare s (MB/s) | prepare peak MB | first start + 20 batches s, peak MB "
          "| cached: to first batch s | cached: 20 batches peak MB | before the cache: s, peak MB |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in corpora:
        old = f"{r['old_train_s']:.0f}, {r['old_train_peak_mb']:.0f}" if "old_train_s" in r else ""
        print(f"| {r['tokens'] / 1e6:.0f}M | {r['text_mb']:.0f} | {r['prepare_s']:.1f} ({r['prepare_mb_per_s']:.1f}) "
              f"| {r['prepare_peak_mb']:.0f} | {r['train_first_s']:.0f}, {r['train_first_peak_mb']:.0f} "
              f"| {r['cached_start_to_first_batch_s']:.1f} | {r['cached_train_peak_mb']:.0f} | {old} |")
    for key, label in (("cached_train_peak_mb", "the token cache"), ("old_train_peak_mb", "before the cache")):
        measured = [r for r in corpora if key in r]
        if len(measured) > 1:
            small, large = measured[0], measured[-1]
            per_token = (large[key] - small[key]) * 2**20 / (large["tokens"] - small["tokens"])
            print(f"training peak memory per extra corpus token, {label}: {per_token:.1f} bytes")
    print("\n| sentences | parse sent/s | peak MB |\n| ---: | ---: | ---: |")
    for r in parses:
        print(f"| {r['sentences']:,} | {r['sentences_per_s']:.0f} | {r['peak_mb']:.0f} |")


if __name__ == "__main__":
    main()
