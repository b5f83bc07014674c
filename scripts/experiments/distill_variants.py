"""Distillation variants, measured (issues 28 and 38): every teacher parses the text once, then each variant
makes its targets from those readings (which teachers, their layers by agreement, voting weights, a
right-branching voter), trains a student and scores it on gold trees. Gold trees are used only for the
scores printed: a setting kept because of them is chosen by looking at F1 on them, and is reported as such.

    python scripts/experiments/distill_variants.py --language en --out runs/variants [--variants NAME ...]
    python scripts/experiments/distill_variants.py --language zh --out runs/variants-zh --teacher Q=runs/pcfg/ctb/best.pt

Each teacher's readings are kept in OUT/readings (keyed by the file and the sentences): a later run with other
variants or other teachers parses only what it has not read. Teachers are groups of checkpoints named by a
letter (`--teacher NAME=PATH[,PATH]` replaces a group's files). English: A, B the bf16 ON-LSTM pairs of ../shared/models, P the TN-PCFG of scripts/train_pcfg.sh. Chinese: C the
CTB ON-LSTM pair of scripts/models/train_chinese.sh, Q the CTB TN-PCFG. Results go to OUT/variants.jsonl (a line per
variant, appended: a stopped run resumes where it stopped).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

import grammar_induce as gi
from grammar_induce import trees
from grammar_induce.families import checkpoint
from grammar_induce.families.reading import Reading
from grammar_induce.inference.ensemble import (
    ParseOptions,
    layers_by_agreement,
    parse_layer,
    rank_members,
    resolve_weights,
)
from grammar_induce.inference.members import read_sentences
from grammar_induce.messages import Messages
from grammar_induce.metrics import SpanMetric
from grammar_induce.text.treebank import TagFilter, read_gold
from grammar_induce.workflows.distillation import (
    DistillSettings,
    Targets,
    provenance,
    sentences_of,
    targets_of,
    train_student,
)

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"


@dataclass(frozen=True)
class Variant:
    groups: str  # teacher groups, a letter each
    right: float = 0.0  # the right-branching voter's weight (0: none)
    weights: str = ""  # "": 1 each; "family": each model kind votes as one (ParseOptions.weights)
    settings: dict = field(default_factory=dict)  # DistillSettings fields


@dataclass(frozen=True)
class Language:
    teachers: dict[str, list[Path]]
    train: Path
    valid: Path  # its first 1,000 sentences: the held-out text the student's epoch is kept by
    gold: Path
    treebank: str  # which leaves of the gold trees count as words
    sentences: int  # training sentences taken from the start of `train`
    variants: dict[str, Variant]


SMALL = {"emb_size": 100}  # the shipped students' size (docs/pretrained.md)
LANGUAGES = {
    "en": Language(
        teachers={"A": [SHARED / f"models/ptb-bf16-seed141/{d}/best.pt" for d in ("forward", "backward")],
                  "B": [SHARED / f"models/ptb-bf16-seed2/{d}/best.pt" for d in ("forward", "backward")],
                  "P": [SHARED / "models/pcfg-ptb-h200/seed2.pt"],
                  "R": [SHARED / "models/pcfg-ptb-h200/seed141-batch64.pt"],
                  "S": [SHARED / "models/pcfg-ptb-h200/seed141.pt"]},
        train=SHARED / "data/ptb_lm/train.txt", valid=SHARED / "data/ptb_lm/valid.txt",
        gold=SHARED / "data/nltk/corpora/treebank/combined", treebank="ptb", sentences=20000,
        variants={
            "A": Variant("A"),
            "A+right": Variant("A", 1.0),
            "AB": Variant("AB"),
            "A+right0.5": Variant("A", 0.5),
            "AB+right": Variant("AB", 1.0),
            "A/last": Variant("A", settings={"keep": "last"}),
            "A/3epochs-last": Variant("A", settings={"epochs": 3, "keep": "last"}),
            "A/1epoch": Variant("A", settings={"epochs": 1}),
            # issue 38: the ON-LSTM pair beside the TN-PCFG (rules fixed before any of their F1 was seen)
            "A+right0.5/emb100": Variant("A", 0.5, settings=SMALL),
            "AP+right0.5/emb100": Variant("AP", 0.5, settings=SMALL),
            "AP/family+right0.5/emb100": Variant("AP", 0.5, "family", SMALL),
            "AP/emb100": Variant("AP", settings=SMALL),
            # issue 59: the H200 TN-PCFGs (P seed2, R seed141-batch64, S seed141) beside both ON-LSTM pairs, weighted
            # by the gold-free rule (inference/ensemble.rank_members); the rules fixed before any student was scored
            "ABPRS/auto+right0.5/emb100": Variant("ABPRS", 0.5, "auto", SMALL),
            "ABPRS/auto/emb100": Variant("ABPRS", 0.0, "auto", SMALL),
            "ABPRS/family+right0.5/emb100": Variant("ABPRS", 0.5, "family", SMALL),
            "PRS/emb100": Variant("PRS", settings=SMALL),
            "P/emb100": Variant("P", settings=SMALL),
            "AP/auto+right0.5/emb100": Variant("AP", 0.5, "auto", SMALL),
            "ABPRS/auto+right0.5/emb200": Variant("ABPRS", 0.5, "auto"),
            "APRS/auto+right0.5/emb100": Variant("APRS", 0.5, "auto", SMALL),
            "ABPRS/family+right0.5/emb200": Variant("ABPRS", 0.5, "family"),
            "ABPRS/family+right1/emb100": Variant("ABPRS", 1.0, "family", SMALL),
            "ABPRS/family+right0.5/emb100/seed2": Variant("ABPRS", 0.5, "family", {**SMALL, "seed": 2}),
        }),
    "zh": Language(
        teachers={"C": [ROOT / f"runs/ctb/{d}/best.pt" for d in ("forward", "backward")],
                  "Q": [ROOT / "runs/pcfg/ctb/best.pt"]},
        train=SHARED / "data/ctb51/train.txt", valid=ROOT / "runs/ctb/dev.txt",
        gold=SHARED / "data/ctb51/dev.trees", treebank="ctb", sentences=10**9,
        variants={
            "Q/emb100": Variant("Q", settings=SMALL),
            "C/emb100": Variant("C", settings=SMALL),
            "C+right0.5/emb100": Variant("C", 0.5, settings=SMALL),
            "CQ/emb100": Variant("CQ", settings=SMALL),
            "CQ+right0.5/emb100": Variant("CQ", 0.5, settings=SMALL),
            "CQ/family+right0.5/emb100": Variant("CQ", 0.5, "family", SMALL),
        }),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--language", choices=LANGUAGES, default="en")
    ap.add_argument("--out", type=Path, default=Path("runs/variants"))
    ap.add_argument("--teacher", action="append", default=[], metavar="NAME=PATH[,PATH]")
    ap.add_argument("--sentences", type=int, help="training sentences (default: 20,000 English, all Chinese)")
    ap.add_argument("--variants", nargs="*")
    ap.add_argument("--rank", metavar="GROUPS", help="rank these teacher groups' members without gold trees (--weights "
                    "auto's rule, on the held-out sentences), print each one's F1 on the gold trees beside it, train "
                    "nothing")
    ap.add_argument("--parse-only", action="store_true", help="parse with the variants' teachers (kept for later runs), "
                    "print each teacher's F1, train nothing")
    args = ap.parse_args()
    language = LANGUAGES[args.language]
    teachers = dict(language.teachers)
    for given in args.teacher:
        name, paths = given.split("=", 1)
        teachers[name] = [Path(p) for p in paths.split(",")]
    names = args.variants or list(language.variants)
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "variants.jsonl"
    done = {json.loads(line)["variant"] for line in results.read_text().splitlines()} if results.exists() else set()
    groups = sorted(set(args.rank) if args.rank else {g for name in names for g in language.variants[name].groups})
    models = {g: [checkpoint.load(str(p)) for p in teachers[g]] for g in groups}
    first = models[groups[0]][0]
    train = sentences_of(str(language.train), first)[: args.sentences or language.sentences]
    valid = sentences_of(str(language.valid), first)[:1000]
    gold, _ = read_gold(str(language.gold), TagFilter.from_options(language.treebank, None))
    began = time.time()
    parts = {"valid": valid, "gold": [x.words for x in gold]} | ({} if args.rank else {"train": train})
    parsed = {(g, k, part): readings(m, teachers[g][k], part, sentences, args.out / "readings")
              for g in groups for k, m in enumerate(models[g]) for part, sentences in parts.items()}
    print(f"teachers parsed in {time.time() - began:.0f} s", flush=True)
    gold_spans = [trees.spans(x.tree) for x in gold]
    for g in groups:
        for k, path in enumerate(teachers[g]):
            member = [p.tree(parse_layer(models[g][k], None), "forget", "gap") for p in parsed[g, k, "gold"]]
            print(f"teacher {g}{k + 1} ({path}), middle layer, gap decoder: {100 * f1(member, gold_spans):.1f}")
    if args.rank:
        return rank(groups, models, parsed, gold_spans, args.out / "ranking.json")
    if args.parse_only:
        return
    for name in names:
        if name in done:
            continue
        variant = language.variants[name]
        members = [(g, k) for g in variant.groups for k in range(len(models[g]))]
        kinds = [models[g][k].config.model.kind for g, k in members]
        options = ParseOptions(decoder="gap", combine="mbr", right_voter=variant.right,
                               weights=variant.weights or ())
        layers = list(layers_by_agreement([parsed[g, k, "train"][:4096] for g, k in members], options, kinds))
        if variant.weights == "auto":  # the gold-free rule on the same sentences the layers were chosen on
            first = [[p.tree(layer, "forget", "gap") for p in parsed[g, k, "train"][:4096]]
                     for (g, k), layer in zip(members, layers)]
            weights = tuple(s.weight for s in rank_members([list(c) for c in zip(*first)], kinds))
        else:
            weights = resolve_weights(options, kinds)
        options = replace(options, layers=tuple(layers), weights=weights)

        def targets(part: str, members=members, options=options) -> Targets:
            return targets_of([parsed[g, k, part] for g, k in members], options)

        teacher_f1 = f1(targets("gold").trees, gold_spans)
        began = time.time()
        folder = args.out / name.replace("/", "_")
        folder.mkdir(exist_ok=True)
        settings = DistillSettings(**variant.settings)
        vocabulary_of = models[members[0][0]][members[0][1]]  # the student takes its vocabulary and tokenizer
        student = train_student(vocabulary_of, targets("train"), targets("valid"), settings, 1, folder, Messages(say=print))
        path = folder / "best.pt"
        teachers_of = [models[g][k] for g, k in members]
        made = provenance(teachers_of, str(language.train), str(language.valid), len(train), options, settings, 1)
        checkpoint.save(path, student.model, student.vocab, student.tokenizer, student.config, provenance=made)
        report = gi.evaluate(gi.load(str(path)), gold=str(language.gold), treebank=language.treebank)
        record = {"variant": name, "teachers": variant.groups, "layers": layers, "weights": list(options.weights),
                  "right_voter": variant.right, "settings": variant.settings, "sentences": len(train),
                  "teachers_f1": round(100 * teacher_f1, 1),
                  "student_f1": round(100 * report.rows["student (CKY)"].sentence_f1, 1),
                  "student_minutes": round((time.time() - began) / 60, 1)}
        print(json.dumps(record), flush=True)
        with open(results, "a") as f:
            f.write(json.dumps(record) + "\n")


CHUNK = 2000  # sentences a cached file holds: a stopped parse resumes at its last whole chunk


def rank(groups: list[str], models: dict, parsed: dict, gold_spans: list[set], out: Path) -> None:
    """Each teacher's gold-free standing (`--weights auto`'s rule on the held-out sentences: layers by agreement, gap
    decoder) beside its F1 on the gold trees with the same layer and decoder, and the rank correlation of the two."""
    members = [(g, k) for g in groups for k in range(len(models[g]))]
    kinds = [models[g][k].config.model.kind for g, k in members]
    options = ParseOptions(decoder="gap")
    layers = layers_by_agreement([parsed[g, k, "valid"] for g, k in members], options, kinds)
    held_out = [[p.tree(layer, "forget", "gap") for p in parsed[(*m, "valid")]] for m, layer in zip(members, layers)]
    standings = rank_members([list(column) for column in zip(*held_out)], kinds)
    rows = []
    for (g, k), layer, kind, standing in zip(members, layers, kinds, standings):
        on_gold = [p.tree(layer, "forget", "gap") for p in parsed[g, k, "gold"]]
        rows.append({"teacher": f"{g}{k + 1}", "kind": kind, "layer": layer, "agreement": 100 * standing.agreement,
                     "baseline": 100 * standing.baseline, "lead": 100 * standing.lead, "weight": standing.weight, "gold_f1": 100 * f1(on_gold, gold_spans)})
    for row in rows:
        print("{teacher:4s} {kind:8s} layer {layer}  agreement {agreement:5.1f}  right-branching {baseline:5.1f}  "
              "weight {weight:.3f}  gold F1 {gold_f1:5.1f}".format(**row))
    correlation = {key: spearman([r[key] for r in rows], [r["gold_f1"] for r in rows]) for key in ("lead", "agreement")}
    print(f"Spearman rank correlation with the gold F1 over {len(rows)} teachers: lead over right-branching "
          f"{correlation['lead']:.3f}, agreement alone {correlation['agreement']:.3f}")
    out.write_text(json.dumps({"rows": rows, "spearman": correlation}, indent=2))


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (ties take their mean rank)."""
    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=lambda k: values[k])
        out = [0.0] * len(values)
        start = 0
        while start < len(order):
            end = start
            while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
                end += 1
            for k in order[start : end + 1]:
                out[k] = (start + end) / 2
            start = end + 1
        return out

    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return cov / var if var else 0.0


def readings(model, path: Path, part: str, sentences: list[list[str]], cache: Path) -> list:
    """A teacher's readings of one part of the text (bf16 products), kept in `cache` a chunk of CHUNK sentences at a
    time, under the file's path, time and size and the chunk's sentences: a stopped run goes on from its last whole
    chunk, and later runs (other variants, other teachers, more sentences of the same text) read them again."""
    found = []
    for start in range(0, len(sentences), CHUNK):
        found += _chunk_readings(model, path, f"{part}-{start}", sentences[start : start + CHUNK], cache)
    return found


def _chunk_readings(model, path: Path, part: str, sentences: list[list[str]], cache: Path) -> list:
    stat = path.stat()
    key = hashlib.sha1(f"{path.resolve()}|{stat.st_mtime_ns}|{stat.st_size}|{part}|{sentences}".encode()).hexdigest()
    kept = cache / f"{path.parent.name}-{path.stem}-{part}-{key[:12]}.json"
    if kept.exists():
        return [_reading(fields) for fields in json.loads(kept.read_text())]
    found = read_sentences(model, sentences, 64, products=torch.bfloat16)
    cache.mkdir(parents=True, exist_ok=True)
    partial = kept.with_suffix(".partial")
    partial.write_text(json.dumps([_plain(r) for r in found]))
    partial.replace(kept)
    return found


def _plain(reading: Reading) -> dict:
    """A reading as plain data (its own tree as nested lists, its labels as [start, end, label])."""
    fields = asdict(reading)
    return fields | {"labels": None if reading.labels is None else [[i, j, x] for (i, j), x in reading.labels.items()]}


def _reading(fields: dict) -> Reading:
    if "forget" in fields:  # kept before readings named their distances: an ON-LSTM's two, as lists
        named = {name: fields.pop(name) for name in ("forget", "input")}
        fields["distances"] = {name: rows for name, rows in named.items() if rows}
    labels = fields["labels"]
    return Reading(**fields | {"labels": None if labels is None else {(i, j): x for i, j, x in labels}})


def f1(predicted: list, gold_spans: list[set]) -> float:
    return sum((SpanMetric.of(trees.spans(t), g) for t, g in zip(predicted, gold_spans)), SpanMetric()).sentence_f1


if __name__ == "__main__":
    main()
