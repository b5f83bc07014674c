"""Distillation levers, measured (issue 28): every teacher parses the text once, then each variant makes
its targets from those distances (which teachers, layers by agreement, a right-branching voter, voter
weights), trains a student and scores it on gold trees (the NLTK sample: a setting chosen here is chosen
by looking at F1 on it, and is reported as such). Gold trees are used only for the scores printed.

    python scripts/distill_variants.py --out runs/variants [--sentences 20000] [--variants NAME ...]

Results go to OUT/variants.jsonl (a line per variant, appended: a stopped run resumes where it stopped).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import torch

import grammar_induce as gi
from grammar_induce import trees
from grammar_induce.files import Messages
from grammar_induce.inference.ensemble import ParseOptions, layers_by_agreement
from grammar_induce.inference.members import read_sentences
from grammar_induce.metrics import SpanMetric
from grammar_induce.models import checkpoint
from grammar_induce.text.treebank import TagFilter, read_gold
from grammar_induce.workflows.distillation import DistillSettings, Targets, targets_of, train_student

SHARED = Path(__file__).resolve().parents[2] / "shared"
TEACHERS = {
    "A": [SHARED / "models/ptb-bf16-seed141/forward/best.pt", SHARED / "models/ptb-bf16-seed141/backward/best.pt"],
    "B": [SHARED / "models/ptb-bf16-seed2/forward/best.pt", SHARED / "models/ptb-bf16-seed2/backward/best.pt"],
}
# name -> (teacher groups, right-branching voter weight, student settings)
VARIANTS = {
    "A": ("A", 0.0, {}),
    "A+right": ("A", 1.0, {}),
    "AB": ("AB", 0.0, {}),
    "A+right0.5": ("A", 0.5, {}),
    "AB+right": ("AB", 1.0, {}),
    "A/last": ("A", 0.0, {"keep": "last"}),
    "A/3epochs-last": ("A", 0.0, {"epochs": 3, "keep": "last"}),
    "A/1epoch": ("A", 0.0, {"epochs": 1}),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("runs/variants"))
    ap.add_argument("--train", default=str(SHARED / "data/ptb_lm/train.txt"))
    ap.add_argument("--valid", default=str(SHARED / "data/ptb_lm/valid.txt"))
    ap.add_argument("--gold", default=str(SHARED / "data/nltk/corpora/treebank/combined"))
    ap.add_argument("--sentences", type=int, default=20000)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "variants.jsonl"
    done = {json.loads(line)["variant"] for line in results.read_text().splitlines()} if results.exists() else set()
    train = sentences_of(args.train)[: args.sentences]
    valid = sentences_of(args.valid)[:1000]
    gold, _ = read_gold(args.gold, TagFilter())
    groups = sorted({g for name in args.variants for g in VARIANTS[name][0]})
    models = {g: [checkpoint.load(p) for p in TEACHERS[g]] for g in groups}
    began = time.time()
    parsed = {(g, k, part): read_sentences(m, sentences, 64, products=torch.bfloat16)
              for g in groups for k, m in enumerate(models[g])
              for part, sentences in (("train", train), ("valid", valid), ("gold", [x.words for x in gold]))}
    print(f"teachers parsed in {time.time() - began:.0f} s", flush=True)
    gold_spans = [trees.spans(x.tree) for x in gold]
    for name in args.variants:
        if name in done:
            continue
        group_names, right, settings = VARIANTS[name]
        members = [(g, k) for g in group_names for k in range(len(models[g]))]
        options = ParseOptions(decoder="gap", combine="mbr", right_voter=right)
        layers = list(layers_by_agreement([parsed[g, k, "train"][:4096] for g, k in members], options))
        options = replace(options, layers=tuple(layers))

        def targets(part: str, members=members, options=options) -> Targets:
            return targets_of([parsed[g, k, part] for g, k in members], options)

        teacher_f1 = f1(targets("gold").trees, gold_spans)
        began = time.time()
        folder = args.out / name.replace("/", "_")
        folder.mkdir(exist_ok=True)
        student = train_student(models[group_names[0]][0], targets("train"), targets("valid"),
                                DistillSettings(**settings), 1, folder, Messages(say=print))
        path = folder / "best.pt"
        checkpoint.save(path, student.model, student.vocab, student.tokenizer, student.config)
        student_f1 = gi.evaluate(gi.load(path), gold=args.gold).rows["student (CKY)"].sentence_f1
        record = {"variant": name, "teachers": group_names, "layers": layers, "right_voter": right,
                  "settings": settings, "sentences": len(train), "teachers_nltk_f1": round(100 * teacher_f1, 1),
                  "student_nltk_f1": round(100 * student_f1, 1), "student_minutes": round((time.time() - began) / 60, 1)}
        print(json.dumps(record), flush=True)
        with open(results, "a") as f:
            f.write(json.dumps(record) + "\n")


def sentences_of(path: str) -> list[list[str]]:
    with open(path) as f:
        return [line.split() for line in f if line.strip()]


def f1(predicted: list, gold_spans: list[set]) -> float:
    return sum((SpanMetric.of(trees.spans(t), g) for t, g in zip(predicted, gold_spans)), SpanMetric()).sentence_f1


if __name__ == "__main__":
    main()
