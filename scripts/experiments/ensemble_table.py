"""The README's ensemble table from the evaluations scripts/experiments/reproduce_ensemble.sh wrote.

    python scripts/experiments/ensemble_table.py RUN_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROWS = [  # (label, evaluation file, row in it)
    ("forward, paper decoder", "forward-paper", "layer 2 forget"),
    ("forward, gap decoder", "forward-gap", "layer 2 forget"),
    ("backward, paper decoder (mirrored)", "backward-paper", "layer 2 forget"),
    ("backward, gap decoder", "backward-gap", "layer 2 forget"),
    ("forward + backward, mbr of paper trees", "pair-paper", "mbr of 2"),
    ("forward + backward, mbr of gap trees", "pair-gap", "mbr of 2"),
    ("forward + backward, mean gap scores", "pair-gap", "mean of 2"),
    ("forward + backward, layers by agreement, mbr of gap trees", "pair-gap-auto", "mbr of 2"),
    ("forward + backward, layers by agreement, mean gap scores", "pair-gap-auto", "mean of 2"),
]
SNAPSHOTS = [("forward snapshots", "snapshots-forward"), ("forward + backward snapshots", "snapshots-both")]


def main(run_dir: Path) -> None:
    reports = {path.stem.removeprefix("eval-"): json.loads(path.read_text()) for path in run_dir.glob("eval-*.json")}
    print("| trees | sentence F1 | corpus F1 | members' mean | mean pairwise agreement |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, name, row in ROWS:
        print(line(label, reports[name], row))
    for label, name in SNAPSHOTS:
        for decoder in ("paper", "gap"):
            report = reports[f"{name}-{decoder}"]
            count = len(report["agreement"])
            print(line(f"{label} ({count}), mbr of {decoder} trees", report, f"mbr of {count}"))
        print(line(f"{label} ({count}), mean gap scores", reports[f"{name}-gap"], f"mean of {count}"))
    report = reports["snapshots-both-gap-auto"]
    count = len(report["agreement"])
    print(line(f"forward + backward snapshots ({count}), layers by agreement, mbr of gap trees", report,
               f"mbr of {count}"))
    print(line(f"forward + backward snapshots ({count}), layers by agreement, mean gap scores", report,
               f"mean of {count}"))


def line(label: str, report: dict, row: str) -> str:
    figures = report["rows"][row]
    members = [name for name in report["rows"] if name[:1].isdigit()]
    member_mean = sum(report["rows"][m]["sentence_f1"] for m in members) / len(members) if members else None
    agreement = [m["sentence_f1"] for m in report["agreement"].values()]
    cells = [f"{100 * figures['sentence_f1']:.1f}", f"{100 * figures['corpus_f1']:.1f}",
             f"{100 * member_mean:.1f}" if member_mean is not None else "",
             f"{100 * sum(agreement) / len(agreement):.1f}" if agreement else ""]
    return f"| {label} | " + " | ".join(cells) + " |"


if __name__ == "__main__":
    main(Path(sys.argv[1]))
