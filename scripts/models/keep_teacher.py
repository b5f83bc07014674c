"""Keep a trained model as a teacher: float16 weights, no training state, and its provenance (how it was made, its
metrics) in the checkpoint, as the teachers of ../shared/models and teachers/ are kept.

    python scripts/models/keep_teacher.py RUN/epoch-2.pt teachers/ptb-pcfg-focused.pt [--metrics RUN/metrics.jsonl]
        [--note "how it was made"]
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from grammar_induce.families import checkpoint

ROOT = Path(__file__).resolve().parents[2]


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--metrics", type=Path, help="the run's metrics.jsonl, kept in the provenance")
    parser.add_argument("--note", default="", help="how it was made (the command)")
    args = parser.parse_args()
    loaded = checkpoint.load(args.source)
    provenance = dict(loaded.provenance or {})
    provenance.update({"kept_from": args.source.name, "commit": commit()})
    if args.note:
        provenance["made_by"] = args.note
    if args.metrics:
        provenance["metrics"] = [json.loads(line) for line in args.metrics.read_text().splitlines() if line.strip()]
    loaded.model.half()
    args.target.parent.mkdir(parents=True, exist_ok=True)
    checkpoint.save(args.target, loaded.model, loaded.vocab, loaded.tokenizer, loaded.config, provenance=provenance)
    print(f"{args.target}: {args.target.stat().st_size / 1e6:.1f} MB, float16")


if __name__ == "__main__":
    main()
