"""The README's precision parity tables from what scripts/experiments/reproduce_bf16.sh wrote.

    python scripts/experiments/precision_table.py RUN_DIR

Per epoch: both runs' validation perplexity and their relative difference (the issue's bound
is 2%); per run: epochs reached, best validation and test perplexity, and NLTK-sample sentence
F1 of the middle layer parsed in each precision; and how many sentences get the same tree when
a model is parsed in bf16 instead of float32.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

PRECISIONS = ("fp32", "bf16")
ROW = "layer 2 forget"


def main(run_dir: Path) -> None:
    metrics = {p: read_metrics(run_dir / p / "metrics.jsonl") for p in PRECISIONS}
    print("| epoch | fp32 valid ppl | bf16 valid ppl | difference |")
    print("| ---: | ---: | ---: | ---: |")
    for fp32, bf16 in zip(*metrics.values()):
        print(f"| {fp32['epoch']} | {fp32['valid_ppl']:.2f} | {bf16['valid_ppl']:.2f} "
              f"| {100 * (bf16['valid_ppl'] / fp32['valid_ppl'] - 1):+.2f}% |")
    print()
    print("| run | epochs | minutes | tokens/s | best valid ppl | test ppl | F1 parsed in fp32 | F1 parsed in bf16 "
          "| same trees |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for p in PRECISIONS:
        records = metrics[p]
        f1 = {parsed: sentence_f1(run_dir / f"eval-{p}-parsed-{parsed}.json") for parsed in PRECISIONS}
        same, total = same_trees(*(run_dir / f"trees-{p}-parsed-{parsed}.txt" for parsed in PRECISIONS))
        minutes = sum(r["seconds"] for r in records) / 60
        speed = sum(r["tokens_per_s"] for r in records) / len(records)
        print(f"| {p} | {len(records)} | {minutes:.0f} | {speed:.0f} | {min(r['valid_ppl'] for r in records):.2f} "
              f"| {test_ppl(run_dir / f'{p}.log')} | {f1['fp32']:.1f} | {f1['bf16']:.1f} "
              f"| {same}/{total} ({100 * same / total:.2f}%) |")


def read_metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def sentence_f1(path: Path) -> float:
    return 100 * json.loads(path.read_text())["rows"][ROW]["sentence_f1"]


def same_trees(first: Path, second: Path) -> tuple[int, int]:
    a, b = first.read_text().splitlines(), second.read_text().splitlines()
    return sum(x == y for x, y in zip(a, b)), len(a)


def test_ppl(log: Path) -> str:
    found = re.findall(r"test ppl ([0-9.]+)", log.read_text()) if log.exists() else []
    return found[-1] if found else "-"


if __name__ == "__main__":
    main(Path(sys.argv[1]))
