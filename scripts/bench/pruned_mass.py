"""What a pruned PCFG parse keeps of the grammar (issue 80): per chart-constraint threshold, the share of the grammar's
probability of each line that the kept spans carry (`prune_mass`: the mean, median, least and the share of lines
below 0.9 and 0.5), and how many lines get the whole chart's tree (and the share of its spans kept).

    python scripts/bench/pruned_mass.py [--model ptb-pcfg] [--text ../shared/data/ptb_lm/valid.txt]
        [--thresholds 1e-4 1e-3 1e-2] [--json FILE]

No gold trees: it compares the pruned grammar with itself over the whole chart.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import grammar_induce as gi
from grammar_induce import trees

ROOT = Path(__file__).resolve().parents[2]


def kept_mass(model: str, lines: list[str], threshold: float) -> dict[str, float]:
    parser = gi.load(model, prune_threshold=threshold, prune_mass=True)
    kept = [r.members[0].kept_mass for r in parser.analyse_many(lines) if r.members]
    return {"mean": statistics.fmean(kept), "median": statistics.median(kept), "least": min(kept),
            "below_0.9": sum(k < 0.9 for k in kept) / len(kept), "below_0.5": sum(k < 0.5 for k in kept) / len(kept)}


def same_trees(model: str, lines: list[str], threshold: float, whole: list[set]) -> dict[str, float]:
    pruned = [trees.spans(r.tree) for r in gi.load(model, prune_threshold=threshold).analyse_many(lines) if r.tree]
    return {"same_tree": sum(a == b for a, b in zip(whole, pruned)) / len(whole),
            "spans_kept": sum(len(a & b) for a, b in zip(whole, pruned)) / sum(map(len, whole))}


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--model", default="ptb-pcfg")
    args.add_argument("--text", type=Path, default=ROOT.parent / "shared" / "data" / "ptb_lm" / "valid.txt")
    args.add_argument("--thresholds", type=float, nargs="+", default=[1e-4, 1e-3, 1e-2])
    args.add_argument("--json", type=Path)
    a = args.parse_args()
    lines = [line for line in a.text.read_text().splitlines() if line.strip()]
    whole = [trees.spans(r.tree) for r in gi.load(a.model, prune="off").analyse_many(lines) if r.tree]
    found = {}
    for threshold in a.thresholds:
        found[threshold] = {"lines": len(lines)} | kept_mass(a.model, lines, threshold) | same_trees(
            a.model, lines, threshold, whole)
        print(threshold, {k: float(f"{v:.4g}") for k, v in found[threshold].items()}, flush=True)
    if a.json:
        a.json.write_text(json.dumps({"model": a.model, "text": str(a.text), "by_threshold": found}, indent=1) + "\n")


if __name__ == "__main__":
    main()
