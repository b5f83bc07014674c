"""Per-sentence speed of the spaCy component: nlp.pipe over many documents, one nlp(doc) call per
document, and the API's parse_many on the same sentences' tokens, in one run (ratios, not absolute times).

    python scripts/bench/benchmark_spacy.py [--model en] [--docs 200] [--text ../shared/data/ptb_lm/valid.txt]

Documents are made of 3 consecutive lines of the text each (so about 3 sentences a document).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import spacy

import grammar_induce as gi

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="en")
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--text", default=str(SHARED / "ptb_lm" / "valid.txt"))
    args = ap.parse_args()
    with open(args.text, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()][: 3 * args.docs]
    texts = [". ".join(lines[k : k + 3]) + "." for k in range(0, len(lines), 3)]
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("grammar_induce", config={"model": args.model})
    list(nlp.pipe(texts[:5]))  # warm up
    began = time.perf_counter()
    piped = list(nlp.pipe(texts))
    pipe_seconds = time.perf_counter() - began
    began = time.perf_counter()
    for text in texts:
        nlp(text)
    call_seconds = time.perf_counter() - began
    sentences = [[t.text for t in s] for doc in piped for s in doc.sents]
    parser = gi.load(args.model)
    began = time.perf_counter()
    list(parser.parse_many(sentences))
    api_seconds = time.perf_counter() - began
    n = len(sentences)
    print(f"{len(texts)} documents, {n} sentences, model {args.model}")
    for name, seconds in (("nlp.pipe", pipe_seconds), ("nlp(doc) per document", call_seconds),
                          ("parse_many (tokens)", api_seconds)):
        print(f"{name:24s} {1000 * seconds / n:7.2f} ms a sentence  ({n / seconds:7.1f} sentences/s)")
    print(f"nlp.pipe is {call_seconds / pipe_seconds:.2f}x one call per document, "
          f"{pipe_seconds / api_seconds:.2f}x the time of parse_many")


if __name__ == "__main__":
    main()
