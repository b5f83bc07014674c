"""The TN-PCFG's cost against an earlier commit's, in one run (issue 80): `ptb-pcfg` parsing PTB validation lines
through `parse_many` (sentences/s: the first 300 lines, where a process's first batches weigh, and the whole text,
3,370 lines), a training step of the focused recipe's shape with the recipe's optimiser, on
huge pages as `grammar-induce train` runs (sentences/s), the peak memory of
one 100-word sentence, and the parse's FLOP-to-floor ratio (the time of its rank-space matrix products alone, at the
shapes it runs, over the whole parse's time).

    python scripts/bench/benchmark_pcfg_cost.py [--base 7403af8] [--lines 300 3370] [--rounds 3] [--json FILE]
        [--model GRAMMAR.pt]

The base commit is checked out as a git worktree in a temporary folder; each measurement runs in a process of its
own with that tree or this one first on the path, the two sides alternating (A B A B ...) so that a busy machine
weighs on both alike; each figure is the median of its rounds. Each side uses its own defaults: this tree's
`ptb-pcfg` prunes its chart with `en` (inference/pruning.py), and runs again with `--prune off`. `--model FILE` also
measures a candidate grammar (a smaller rank, say) in this tree, its chart pruned by `en` as `ptb-pcfg`'s is.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VALID = ROOT.parent / "shared" / "data" / "ptb_lm" / "valid.txt"

# Each case is a small program run with a side's tree first on sys.path; it prints one JSON object.
PARSE = """
import json, sys, time
import grammar_induce as gi
lines = open(sys.argv[1]).read().splitlines()[: int(sys.argv[2])]
options = json.loads(sys.argv[3])
parser = gi.load(options.pop("model", "ptb-pcfg"), **options)
list(parser.parse_many(lines[:16]))
start = time.perf_counter()
found = [str(t) for t in parser.parse_many(lines)]
print(json.dumps({"sentences_per_s": len(lines) / (time.perf_counter() - start)}))
"""
TRAIN = """
import os
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # before torch, as `grammar-induce train` runs (runtime/memory.py)
import json, sys, time, torch
from grammar_induce.families import checkpoint
from grammar_induce.families.pretrained import catalogue
from grammar_induce.families.sentences import ADAM_BETAS, sentence_step
try:  # the side's own optimiser, as its recipe makes it
    from grammar_induce.families.sentences import adam
except ImportError:
    adam = lambda model, lr: torch.optim.Adam(model.parameters(), lr=lr, betas=ADAM_BETAS)
from grammar_induce.runtime.precision import product_dtype
name = sys.argv[3]
loaded = checkpoint.load(catalogue()[name].paths[0] if name in catalogue() else name)
model = loaded.model.train()
optimizer = adam(model, 2e-3)
torch.manual_seed(0)
lines = [l.split() for l in open(sys.argv[1]).read().splitlines() if 2 <= len(l.split()) <= 40][:16 * int(sys.argv[2])]
batches = [sorted(lines[k : k + 16], key=len) for k in range(0, len(lines), 16)]
def step(batch):
    n = max(map(len, batch))
    ids = torch.tensor([[loaded.word_id(w) for w in s] + [0] * (n - len(s)) for s in batch])
    sentence_step(model, optimizer, ids, [len(s) for s in batch], 3.0, product_dtype("bf16"))
step(batches[0])
start = time.perf_counter()
for batch in batches[1:]:
    step(batch)
print(json.dumps({"sentences_per_s": 16 * (len(batches) - 1) / (time.perf_counter() - start)}))
"""
LONG = """
import json, resource, sys
import grammar_induce as gi
options = json.loads(sys.argv[3])
parser = gi.load(options.pop("model", "ptb-pcfg"), **options)
words = open(sys.argv[1]).read().split()[:100]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
parser.parse(" ".join(words))
print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "loaded_mb": before / 1024}))
"""
FLOOR = """
import json, sys, time, torch
import grammar_induce as gi
from grammar_induce.inference.members import token_rows
lines = [l.split() for l in open(sys.argv[1]).read().splitlines()[: int(sys.argv[2])] if l.split()]
options = json.loads(sys.argv[3])
parser = gi.load(options.pop("model", "ptb-pcfg"), **options)
pruning = parser.options.pruning
rank = parser.models[0].model.grammar().head.shape[1]
kept = [int(pruning.keep([s], token_rows(pruning.pruner, [s]))[0].triu(2).sum()) if pruning
        else len(s) * (len(s) - 1) // 2 for s in lines]
# per sentence: its leaves (n x T x 2r) and, per kept span, the children product (r x 2r) and the outside's (2r x r)
a, b = torch.randn(4096, rank).bfloat16(), torch.randn(rank, 2 * rank).bfloat16()
start = time.perf_counter()
for _ in range(10):
    a @ b
per_row = (time.perf_counter() - start) / 10 / 4096  # seconds a span's r x 2r product takes at a batch's shape
seconds = per_row * 2 * sum(kept)
print(json.dumps({"floor_seconds": seconds, "kept_spans": sum(kept),
                  "spans": sum(len(s) * (len(s) - 1) // 2 for s in lines)}))
"""


def run_case(tree: Path, program: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tree)!r})\n{program}", *args],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"a case failed in {tree}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def worktree(commit: str) -> Path:
    folder = Path(tempfile.mkdtemp()) / f"base-{commit}"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(folder), commit], check=True,
                   capture_output=True)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="7403af8")
    parser.add_argument("--lines", type=int, nargs="+", default=[300, 3370], help="each parse's first lines")
    parser.add_argument("--batches", type=int, default=6, help="training steps timed (batches of 16)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--model", type=Path, default=None, help="a candidate grammar measured beside ptb-pcfg")
    args = parser.parse_args()
    base = worktree(args.base)
    sides = {f"{args.base}": (base, {}), "HEAD": (ROOT, {}), "HEAD --prune off": (ROOT, {"prune": "off"})}
    if args.model:
        sides[args.model.name] = (ROOT, {"model": str(args.model.resolve()), "prune": "en"})
    found: dict[str, dict[str, list[float]]] = {name: {} for name in sides}
    try:
        for _ in range(args.rounds):
            for name, (tree, options) in sides.items():
                record = found[name]
                for count in args.lines:
                    record.setdefault(f"parse {count}", []).append(run_case(
                        tree, PARSE, str(VALID), str(count), json.dumps(options))["sentences_per_s"])
                if name != "HEAD --prune off":
                    record.setdefault("train", []).append(run_case(
                        tree, TRAIN, str(VALID), str(args.batches), options.get("model", "ptb-pcfg"))["sentences_per_s"])
        for name, (tree, options) in sides.items():
            found[name]["peak_mb"] = [run_case(tree, LONG, str(VALID), "1", json.dumps(options))["peak_mb"]]
        floors = {name: run_case(ROOT, FLOOR, str(VALID), str(args.lines[0]), json.dumps(options))
                  for name, (_, options) in list(sides.items())[1:]}
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    medians = {name: {k: statistics.median(v) for k, v in record.items()} for name, record in found.items()}
    baseline = medians[args.base]
    print(f"ptb-pcfg, the first {' and the first '.join(map(str, args.lines))} PTB validation lines through "
          f"parse_many; a training step of 16 sentences (bf16 rank products); medians of {args.rounds} rounds, A B "
          "alternating")
    parses = "".join(f" {f'parse {count} /s':>15} {'x base':>7}" for count in args.lines)
    print(f"{'':<20}{parses} {'train sent/s':>13} {'x base':>7} {'100 words MB':>13}")
    for name, m in medians.items():
        parses = "".join(f" {m[f'parse {c}']:>15.1f} {m[f'parse {c}'] / baseline[f'parse {c}']:>7.2f}" for c in args.lines)
        train = f"{m['train']:>13.1f} {m['train'] / baseline['train']:>7.2f}" if "train" in m else f"{'':>21}"
        print(f"{name:<20}{parses} {train} {m['peak_mb']:>13.0f}")
    for name, floor in floors.items():
        seconds = args.lines[0] / medians[name][f"parse {args.lines[0]}"]
        print(f"{name}: FLOP-to-floor {floor['floor_seconds'] / seconds:.2f} (the rank-space products alone "
              f"{floor['floor_seconds']:.2f} s of {seconds:.2f} s; {floor['kept_spans']:,} of {floor['spans']:,} "
              "spans in the chart)")
    if args.json:
        args.json.write_text(json.dumps({"medians": medians, "rounds": found, "floors": floors}, indent=1) + "\n")


if __name__ == "__main__":
    main()
