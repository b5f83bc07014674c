"""A shipped student against the pair it learned from, in one run (a ratio): sentences per second of PTB
validation text at batch 64, and one 800-word line through the student; and the treebank tokenizer's
splitting (nltk's tables run by the standard library's `re`) against nltk's own `span_tokenize`, lines per second.

    python scripts/bench/student_speed.py [--student en] [--pair ptb-pair] [--text ../shared/data/ptb_lm/valid.txt]
                                    [--precision fp32|bf16|auto] (the student's; the pair parses in fp32)
                                    [--rounds 5] (the two parse in turn each round: the ratio is the rounds' median)
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import grammar_induce as gi

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def rate(parser: gi.Parser, lines: list[str]) -> float:
    began = time.perf_counter()
    count = sum(1 for _ in parser.parse_many(lines, batch_size=64))
    return count / (time.perf_counter() - began)


def tokenizer_rates(lines: list[str], rounds: int = 3) -> tuple[float, float]:
    """Lines per second of nltk's TreebankWordTokenizer.span_tokenize and of ours (the best of `rounds`, alternating)."""
    from nltk.tokenize import TreebankWordTokenizer

    from grammar_induce.text.nltk_treebank import treebank_tokenizer

    best = {"nltk": 0.0, "ours": 0.0}
    for _ in range(rounds):
        for name, tokenizer in (("nltk", TreebankWordTokenizer()), ("ours", treebank_tokenizer())):
            began = time.perf_counter()
            for line in lines:
                list(tokenizer.span_tokenize(line))
            best[name] = max(best[name], len(lines) / (time.perf_counter() - began))
    return best["nltk"], best["ours"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--student", default="en")
    ap.add_argument("--pair", default="ptb-pair")
    ap.add_argument("--text", default=str(SHARED / "ptb_lm" / "valid.txt"))
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "auto"])
    ap.add_argument("--rounds", type=int, default=5, help="rounds of the two in turn (a ratio each; the median printed)")
    args = ap.parse_args()
    with open(args.text, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()][: args.sentences]
    student, pair = gi.load(args.student, precision=args.precision), gi.load(args.pair)
    rate(student, lines[:64]), rate(pair, lines[:64])  # warm up
    rates: dict[str, list[float]] = {"student": [], "pair": []}
    for _ in range(args.rounds):  # the two in turn, so both see the same machine; a ratio a round
        rates["student"].append(rate(student, lines))
        rates["pair"].append(rate(pair, lines))
    ratios = [s / p for s, p in zip(rates["student"], rates["pair"])]
    print(f"{args.student} ({args.precision}): {max(rates['student']):.1f} sentences/s at best, {args.pair}: "
          f"{max(rates['pair']):.1f} ({len(lines)} sentences, batch 64): the student {statistics.median(ratios):.2f}x "
          f"(median of {args.rounds} rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
    words = " ".join(" ".join(lines).split()[:800])
    began = time.perf_counter()
    student.parse(words)
    print(f"one 800-word line through {args.student}: {time.perf_counter() - began:.2f} s")
    theirs, ours = tokenizer_rates(lines)
    print(f"treebank tokenizer ({len(lines)} lines): nltk's span_tokenize {theirs:.0f} lines/s, its tables run by re "
          f"{ours:.0f} lines/s: {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
