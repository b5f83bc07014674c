"""Generate the quick start's synthetic treebank from scripts/synthetic_grammar.txt.

    python scripts/experiments/make_synthetic.py            # writes grammar_induce/resources/synthetic/ (seeded, reproducible)

Outputs: train.txt and valid.txt (sentences, one per line), test.txt (the test sentences)
and test.trees (their gold trees, one PTB-style bracketed tree per line).
"""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
RULE = re.compile(r"^(\S+)\s*->\s*(.+?)\s*\[([0-9.]+)\]$")
LEXICON = re.compile(r"^(\S+)\s*=>\s*(.+)$")


def read_grammar(path: Path) -> tuple[dict[str, list[tuple[list[str], float]]], dict[str, list[str]]]:
    rules: dict[str, list[tuple[list[str], float]]] = {}
    lexicon: dict[str, list[str]] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if m := RULE.match(line):
            rules.setdefault(m[1], []).append((m[2].split(), float(m[3])))
        elif m := LEXICON.match(line):
            lexicon[m[1]] = m[2].split()
        else:
            raise SystemExit(f"{path}:{lineno}: cannot read {line!r}")
    for lhs, options in rules.items():
        if abs(sum(p for _, p in options) - 1.0) > 1e-6:
            raise SystemExit(f"{path}: probabilities of {lhs} sum to {sum(p for _, p in options)}")
    return rules, lexicon


def sample(symbol: str, rules, lexicon, rng: random.Random):
    """A tree as (label, children) with (tag, word) leaves."""
    if "/" in symbol:
        tag, word = symbol.split("/", 1)
        return (tag, word)
    if symbol in lexicon:
        return (symbol, rng.choice(lexicon[symbol]))
    expansions, weights = zip(*rules[symbol])
    rhs = rng.choices(expansions, weights)[0]
    return (symbol, [sample(child, rules, lexicon, rng) for child in rhs])


def words(tree) -> list[str]:
    _label, body = tree
    return [body] if isinstance(body, str) else [w for child in body for w in words(child)]


def bracketed(tree) -> str:
    label, body = tree
    if isinstance(body, str):
        return f"({label} {body})"
    return f"({label} " + " ".join(bracketed(child) for child in body) + ")"


def generate(count: int, rules, lexicon, rng: random.Random, max_words: int) -> list:
    trees = []
    while len(trees) < count:
        tree = sample("S", rules, lexicon, rng)
        if 2 <= len(words(tree)) <= max_words:
            trees.append(tree)
    return trees


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grammar", type=Path, default=HERE / "synthetic_grammar.txt")
    parser.add_argument("--out", type=Path, default=HERE.parent / "grammar_induce" / "resources" / "synthetic")
    parser.add_argument("--train", type=int, default=8000)
    parser.add_argument("--valid", type=int, default=500)
    parser.add_argument("--test", type=int, default=500)
    parser.add_argument("--max-words", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rules, lexicon = read_grammar(args.grammar)
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", args.train), ("valid", args.valid), ("test", args.test)):
        trees = generate(count, rules, lexicon, rng, args.max_words)
        (args.out / f"{split}.txt").write_text("".join(" ".join(words(t)) + "\n" for t in trees), encoding="utf-8")
        if split == "test":
            (args.out / "test.trees").write_text("".join(bracketed(t) + "\n" for t in trees), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
