"""Two levers of issue 80 measured as ratios in one process, the cases alternated (docs/performance.md, round 20):

- a TN-PCFG training step (`ptb-pcfg`, batches of 16 PTB training sentences of 2 to 40 words, bf16 rank products,
  forward and backward) with the whole chart against the chart pruned by `en` (its reading of the batch counted
  apart), and the share of a step that building the grammar (its MLPs, the emission's log-softmax) takes;
- `ptb-pcfg` parsing (pruned by `en`, its default) in fp32 against bf16 rank products, and whether the trees agree.

    python scripts/bench/benchmark_pcfg_levers.py [--batches 8] [--lines 300] [--threshold 1e-3] [--threads 1]

Needs ../shared/data/ptb_lm (the PTB text); the models are the shipped ones.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch

import grammar_induce as gi
from grammar_induce.families import checkpoint, pretrained
from grammar_induce.inference.pruning import Pruning
from grammar_induce.structures.tree_crf import stacked

PTB = Path(__file__).resolve().parents[3] / "shared" / "data" / "ptb_lm"


def ids(vocab, words: list[str]) -> list[int]:
    unknown = vocab.index["<unk>"]
    return [vocab.index.get(word, unknown) for word in words]


def training_batches(pcfg, student, count: int):
    """`count` batches of 16 PTB training sentences (2 to 40 words, shuffled with seed 0), sorted by length: the
    grammar's word ids (B, n) and the student's rows `<eos> w1 ... wn <eos>`."""
    lines = [line.split() for line in (PTB / "train.txt").read_text().splitlines() if 2 <= len(line.split()) <= 40]
    random.Random(0).shuffle(lines)
    eos = student.vocab.index["<eos>"]
    for k in range(count):
        words = sorted(lines[16 * k: 16 * k + 16], key=len)
        n = max(map(len, words))
        grammar_ids = torch.tensor([ids(pcfg.vocab, w) + [0] * (n - len(w)) for w in words])
        student_ids = torch.tensor([[eos] + ids(student.vocab, w) + [eos] + [0] * (n - len(w)) for w in words])
        yield words, grammar_ids, [len(w) for w in words], student_ids


def step_seconds(model, words: torch.Tensor, lengths: list[int], keep) -> float:
    began = time.perf_counter()
    loss = -model.structure(words, lengths, torch.bfloat16, keep=keep).partition.sum()
    model.zero_grad()
    loss.backward()
    return time.perf_counter() - began


def training_step(batches: int, threshold: float) -> None:
    pcfg = checkpoint.load(pretrained.find("ptb-pcfg").paths[0], "cpu")
    student = checkpoint.load(pretrained.find("en").paths[0], "cpu")
    pruning, model = Pruning(student, threshold), pcfg.model
    model.train()
    seconds, kept, spans = {"whole": 0.0, "pruned": 0.0, "pruner": 0.0, "grammar": 0.0}, 0, 0
    for k, (words, grammar_ids, lengths, student_ids) in enumerate(training_batches(pcfg, student, batches)):
        began = time.perf_counter()
        keeps = pruning.keep(words, student_ids)
        seconds["pruner"] += time.perf_counter() - began
        kept += sum(int(keep.triu(1).sum()) for keep in keeps)
        spans += sum(n * (n + 1) // 2 for n in lengths)
        cases = [("whole", None), ("pruned", stacked(keeps))]
        for name, keep in cases if k % 2 else cases[::-1]:
            seconds[name] += step_seconds(model, grammar_ids, lengths, keep)
        began = time.perf_counter()
        g = model.grammar()
        (g.emission.sum() + g.head.sum() + g.left.sum() + g.right.sum() + g.root.sum()).backward()
        seconds["grammar"] += time.perf_counter() - began
    print(f"training step, {batches} batches of 16: whole chart {seconds['whole'] / batches:.3f} s a step, of which "
          f"building the grammar {seconds['grammar'] / batches:.3f} s; pruned (threshold {threshold:g}, "
          f"{kept / spans:.1%} of spans kept) x{seconds['whole'] / seconds['pruned']:.2f}, "
          f"x{seconds['whole'] / (seconds['pruned'] + seconds['pruner']):.2f} with the pruner's reading")


def parse_precision(count: int) -> None:
    lines = (PTB / "valid.txt").read_text().splitlines()[:count]
    parsers = {precision: gi.load("ptb-pcfg", precision=precision) for precision in ("fp32", "bf16")}
    seconds, trees = {p: [] for p in parsers}, {}
    for r in range(3):
        for precision in ("fp32", "bf16") if r % 2 == 0 else ("bf16", "fp32"):
            began = time.perf_counter()
            trees[precision] = [str(tree) for tree in parsers[precision].parse_many(lines)]
            seconds[precision].append(time.perf_counter() - began)
    median = {p: sorted(times)[1] for p, times in seconds.items()}
    same = sum(a == b for a, b in zip(trees["fp32"], trees["bf16"]))
    print(f"parse, {count} lines (pruned by en): fp32 {count / median['fp32']:.1f}, bf16 {count / median['bf16']:.1f} "
          f"sentences a second (x{median['fp32'] / median['bf16']:.2f}); the same tree for {same} of {count}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--threshold", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    training_step(args.batches, args.threshold)
    parse_precision(args.lines)


if __name__ == "__main__":
    main()
