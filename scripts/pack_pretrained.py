"""Pack trained PTB models into the package (grammar_induce/resources/models/) and measure what the
`grammar-induce models` table says of them. Run by scripts/train_pretrained.sh after training.

    python scripts/pack_pretrained.py RUN_DIR --gold NLTK_TREEBANK [--data PTB_LM_DIR]

RUN_DIR holds forward/ and backward/ run directories. Each best.pt (the epoch with the best
validation perplexity, as the paper keeps) is written with float16 weights (float32 when loaded)
and the treebank tokenizer (raw English split the Penn Treebank way, lowercased, numbers as N,
punctuation set aside). Then, with the shipped files: validation and test perplexity, trees of
the float16 weights against the float32 ones on the gold sentences, and NLTK-sample F1 of each
name. The pair's layers are chosen by agreement between its members (no gold trees); its decoder
and combiner are the ones with the best F1 on the NLTK sample (a setting chosen by looking at F1).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from grammar_induce import checkpoint, pretrained
from grammar_induce.data import Tokenizer
from grammar_induce.distances import parse_words
from grammar_induce.ensemble import ParseOptions, layers_by_agreement
from grammar_induce.scoring import EvalOptions, evaluate_models
from grammar_induce.train import perplexity
from grammar_induce.treebank import TagFilter, read_gold

ROOT = Path(__file__).resolve().parent.parent
TRAINING_TEXT = ("Penn Treebank language-modelling text (Mikolov et al. 2011; WSJ sections 0-20 for training, "
                 "887,521 words, 10k vocabulary, lowercased, numbers as N, no punctuation)")
LICENCE = ("Penn Treebank (LDC99T42), LDC User Agreement for Non-Members: research use; the weights are "
           "derived from it")
SHIPPED_TOKENIZER = Tokenizer("treebank", lowercase=True, replace_digits=True)


def pack(source: Path, target: Path) -> None:
    """A trained checkpoint as the package ships it: float16 weights, the treebank tokenizer, no training state."""
    loaded = checkpoint.load(source)
    loaded.model.half()
    checkpoint.save(target, loaded.model, loaded.vocab, SHIPPED_TOKENIZER, loaded.config)


def score(models: list, gold: str, options: ParseOptions):
    """The evaluation report of these models with these settings on the gold trees."""
    return evaluate_models(models, EvalOptions(gold, TagFilter(), quiet=True), options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--gold", required=True)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "ptb_lm")
    args = parser.parse_args()
    began = time.time()
    pretrained.MODELS_DIR.mkdir(parents=True, exist_ok=True)
    files = {"forward": "ptb-forward.pt", "backward": "ptb-backward.pt"}
    shipped, full = [], []  # forward, backward: the float16 files, and the float32 runs with the same tokenizer
    for direction, name in files.items():
        pack(args.run_dir / direction / "best.pt", pretrained.MODELS_DIR / name)
        shipped.append(checkpoint.load(pretrained.MODELS_DIR / name))
        full.append(replace(checkpoint.load(args.run_dir / direction / "best.pt"), tokenizer=SHIPPED_TOKENIZER))
    gold_trees, _ = read_gold(args.gold, TagFilter())
    sentences = [g.words for g in gold_trees]
    log: dict = {"gold": args.gold, "sentences": len(sentences), "pair": {}}

    parsed = [parse_words(loaded, sentences) for loaded in shipped]
    pair = {}  # (decoder, combiner) -> (layers, F1)
    for decoder in ("paper", "gap"):
        layers = layers_by_agreement(parsed, ParseOptions(decoder=decoder))  # --layer auto, no gold trees
        rows = score(shipped, args.gold, ParseOptions(layers=layers, decoder=decoder)).rows
        log["pair"][decoder] = {"layers_by_agreement": layers, "rows": {k: 100 * m.sentence_f1 for k, m in rows.items()}}
        pair |= {(decoder, how): (layers, 100 * rows[f"{how} of 2"].sentence_f1) for how in ("mbr", "mean")}
    (decoder, combine), (pair_layers, _) = max(pair.items(), key=lambda item: item[1][1])  # chosen by NLTK F1
    settings = {
        "ptb": ([0], ParseOptions()),
        "ptb-backward": ([1], ParseOptions(layers=pair_layers[1:], decoder=decoder)),
        "ptb-pair": ([0, 1], ParseOptions(layers=pair_layers, decoder=decoder, combine=combine)),
    }
    entries = {}
    for name, (members, options) in settings.items():
        report = score([shipped[k] for k in members], args.gold, options)
        reference = score([full[k] for k in members], args.gold, options)
        same = sum(a == b for a, b in zip(report.predicted, reference.predicted)) / len(report.predicted)
        entry = {"files": [list(files.values())[k] for k in members],
                 "direction": "+".join(list(files)[k] for k in members), "training_text": TRAINING_TEXT,
                 "licence": LICENCE, "parameters": sum(p.numel() for k in members for p in shipped[k].model.parameters()),
                 "nltk_f1": round(100 * report.rows[report.main_row].sentence_f1, 1), "layers": list(options.layers),
                 "decoder": options.decoder}
        if len(members) > 1:
            entry["combine"] = options.combine
        else:
            loaded = shipped[members[0]]
            entry["valid_ppl"] = round(perplexity(loaded, str(args.data / "valid.txt"),
                                                  loaded.config.train.eval_batch_size), 2)
            entry["test_ppl"] = round(perplexity(loaded, str(args.data / "test.txt"),
                                                 loaded.config.train.test_batch_size), 2)
        entries[name] = entry
        log[name] = {**entry, "same_trees_as_float32": 100 * same,
                     "rows": {k: 100 * m.sentence_f1 for k, m in report.rows.items()},
                     "float32_rows": {k: 100 * m.sentence_f1 for k, m in reference.rows.items()}}
    for direction in files:
        log[f"run_{direction}"] = _run_summary(args.run_dir / direction)
    pretrained.INDEX.write_text(to_toml(entries))
    log["seconds"] = round(time.time() - began, 1)
    (args.run_dir / "pack.json").write_text(json.dumps(log, indent=2))
    print(json.dumps(log, indent=2))
    print(pretrained.table())


def _run_summary(run_dir: Path) -> dict:
    """The run's epochs as its metrics.jsonl recorded them (float32 weights)."""
    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    epochs = [h for h in history if "valid_ppl" in h]
    return {"epochs": len(epochs), "valid_ppl": [h["valid_ppl"] for h in epochs],
            "seconds": round(sum(h.get("seconds", 0) for h in epochs), 1), "last": history[-1] if history else None}


def to_toml(entries: dict[str, dict]) -> str:
    """models.toml: written by this script; numbers measured with the shipped files."""
    lines = ["# Written by scripts/pack_pretrained.py: the shipped models and what they measured (see its docstring)."]
    for name, entry in entries.items():
        lines.append(f"\n[{json.dumps(name)}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in entry.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
