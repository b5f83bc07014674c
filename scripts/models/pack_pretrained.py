"""Pack trained models into the package (grammar_induce/resources/models/) and measure what the
`grammar-induce models` table says of them.

    python scripts/models/pack_pretrained.py --language en --pair RUN_DIR [--student STUDENT.pt] --gold GOLD
    python scripts/models/pack_pretrained.py --language zh --student STUDENT.pt --gold ctb51/dev.trees --valid DEV_TEXT
    python scripts/models/pack_pretrained.py --language en --pcfg runs/pcfg/ptb/best.pt --gold GOLD   (ptb-pcfg)
        [--pcfg-member OTHER.pt ...]   (and ptb-pcfg-ensemble: ptb-pcfg with the others)

RUN_DIR holds forward/ and backward/ run directories. Each best.pt (the epoch with the best validation
perplexity, as the paper keeps) is written with float16 weights (float32 when loaded) and the language's
tokenizer for raw text (English: split the Penn Treebank way, lowercased, numbers as N, punctuation set
aside; Chinese: segmented by jieba, full-width forms folded, numbers as N, punctuation set aside), as is a
distilled student. Then, with the shipped files: validation and test perplexity of the language models,
trees of the float16 weights against the float32 ones on the gold sentences, and the F1 of each name.
The pair's layers are chosen by agreement between its members (no gold trees); its decoder and combiner
are the ones with the best F1 on the gold trees (a setting chosen by looking at F1). Entries of the other
language in models.toml are kept; the default model is listed first. A JSON log goes to --log.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

from grammar_induce.families import checkpoint, pretrained, registry
from grammar_induce.inference.ensemble import ParseOptions, layers_by_agreement, layers_named
from grammar_induce.inference.members import Members, read_sentences
from grammar_induce.inference.pruning import Pruning
from grammar_induce.text.corpus import file_hash
from grammar_induce.text.tokenizer import Tokenizer
from grammar_induce.text.treebank import TagFilter, read_gold
from grammar_induce.workflows.scoring import EvalOptions, evaluate_models
from grammar_induce.workflows.train import perplexity

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"


@dataclass(frozen=True)
class Language:
    code: str
    prefix: str  # of the language models' names: PREFIX, PREFIX-backward, PREFIX-pair
    tokenizer: Tokenizer  # for raw text
    treebank: str  # evaluate's preset for the gold trees
    gold: str  # what the F1 is measured on, as the models table says it
    training_text: str
    licence: str


LANGUAGES = {
    "en": Language("en", "ptb", Tokenizer("treebank", lowercase=True, replace_digits=True), "ptb", pretrained.GOLD_NLTK,
                   "Penn Treebank language-modelling text (Mikolov et al. 2011; WSJ sections 0-20 for training, "
                   "887,521 words, 10k vocabulary, lowercased, numbers as N, no punctuation)",
                   "Penn Treebank (LDC99T42), LDC User Agreement for Non-Members: research use; the weights are "
                   "derived from it"),
    "zh": Language("zh", "zh-lm", Tokenizer("jieba", lowercase=True, replace_digits=True, punctuation_aside=True,
                                            fold_width=True), "ctb",
                   "Chinese Treebank 5.1 development trees (352 trees, PU and -NONE- leaves dropped)",
                   "Chinese Treebank 5.1 training sentences, without their trees (18,104 sentences, 493,930 words, "
                   "CTB segmentation; the standard protocol of unsupervised parsing on Chinese)",
                   "Chinese Treebank 5.1 (LDC2005T01), LDC User Agreement for Non-Members: research use; the "
                   "weights are derived from it"),
}


def pack(source: Path, target: Path, tokenizer: Tokenizer) -> None:
    """A trained checkpoint as the package ships it: float16 weights, the raw-text tokenizer, no training state, its
    provenance with no path of the machine that made it (`portable`)."""
    loaded = checkpoint.load(source)
    loaded.model.half()
    checkpoint.save(target, loaded.model, loaded.vocab, tokenizer, loaded.config,
                    provenance=portable(loaded.provenance))


def portable(made):
    """A provenance whose file paths say what they were, not where they lay on the machine that made it: a shipped
    model's `resources/models/NAME (blake2b ...)` (its hash when packed: the file a later pack replaces is still named),
    a teacher kept in the project `teachers/NAME`, a file of ../shared `../shared/...`, any other file its name."""
    if isinstance(made, dict):
        return {key: portable(value) for key, value in made.items()}
    if isinstance(made, list):
        return [portable(value) for value in made]
    if not isinstance(made, str) or not made.startswith("/"):
        return made
    path = Path(made)
    if path.parent.name == "models" and path.parent.parent.name == "resources":
        return f"resources/models/{path.name}" + (f" (blake2b {file_hash(path)[:16]})" if path.is_file() else "")
    if path.parent.name == "teachers":
        return f"teachers/{path.name}"
    if "shared" in path.parts:
        return "../" + "/".join(path.parts[path.parts.index("shared"):])
    return path.name


def score(models: list, gold: str, language: Language, options: ParseOptions):
    """The evaluation report of these models with these settings on the gold trees."""
    return evaluate_models(Members.of(models, options),
                           EvalOptions(gold, TagFilter.from_options(language.treebank, None), quiet=True))


def entry_of(language: Language, gold: str, files: list[str], direction: str | None, models: list,
             options: ParseOptions, float32: list) -> tuple[dict, dict]:
    """The models.toml entry of a name, and what the log keeps of it (`direction`: an ON-LSTM's)."""
    report = score(models, gold, language, options)
    reference = score(float32, gold, language, options)
    same = sum(a == b for a, b in zip(report.predicted, reference.predicted)) / len(report.predicted)
    entry = {"files": files, "kind": models[0].config.model.kind, **({"direction": direction} if direction else {}),
             "language": language.code,
             "training_text": language.training_text, "licence": language.licence,
             "parameters": sum(p.numel() for m in models for p in m.model.parameters()),
             "f1": round(100 * report.rows[report.main_row].sentence_f1, 1), "gold": language.gold,
             "layers": list(options.layers), "decoder": options.decoder}
    if len(models) > 1:
        entry |= {"combine": options.combine, "right_voter": options.right_voter}
    log = {**entry, "same_trees_as_float32": 100 * same, "rows": {k: 100 * m.sentence_f1 for k, m in report.rows.items()}}
    return entry, log


def pack_pair(language: Language, run_dir: Path, gold: str, perplexity_files: tuple[str | None, str | None],
              log: dict) -> dict[str, dict]:
    """The forward and backward models of RUN_DIR as PREFIX, PREFIX-backward and PREFIX-pair."""
    files = {"forward": f"{language.prefix}-forward.pt", "backward": f"{language.prefix}-backward.pt"}
    shipped, full = [], []
    for direction, name in files.items():
        pack(run_dir / direction / "best.pt", pretrained.MODELS_DIR / name, language.tokenizer)
        shipped.append(checkpoint.load(pretrained.MODELS_DIR / name))
        full.append(replace(checkpoint.load(run_dir / direction / "best.pt"), tokenizer=language.tokenizer))
        log[f"run_{direction}"] = _run_summary(run_dir / direction)
    tags = TagFilter.from_options(language.treebank, None)
    sentences = [g.words for g in read_gold(gold, tags)[0]]
    parsed = [read_sentences(loaded, sentences) for loaded in shipped]
    pair = {}  # (decoder, combiner) -> (layers, F1)
    log["pair"] = {}
    for decoder in ("paper", "gap"):
        layers = layers_by_agreement(parsed, ParseOptions(decoder=decoder))  # --layer auto, no gold trees
        rows = score(shipped, gold, language, ParseOptions(layers=layers, decoder=decoder)).rows
        log["pair"][decoder] = {"layers_by_agreement": layers, "rows": {k: 100 * m.sentence_f1 for k, m in rows.items()}}
        pair |= {(decoder, how): (layers, 100 * rows[f"{how} of 2"].sentence_f1) for how in ("mbr", "mean")}
    (decoder, combine), (pair_layers, _) = max(pair.items(), key=lambda item: item[1][1])  # chosen by F1 on gold
    settings = {
        language.prefix: ([0], ParseOptions()),
        f"{language.prefix}-backward": ([1], ParseOptions(layers=pair_layers[1:], decoder=decoder)),
        f"{language.prefix}-pair": ([0, 1], ParseOptions(layers=pair_layers, decoder=decoder, combine=combine)),
    }
    entries = {}
    for name, (members, options) in settings.items():
        models = [shipped[k] for k in members]
        entry, log[name] = entry_of(language, gold, [list(files.values())[k] for k in members],
                                    "+".join(list(files)[k] for k in members), models, options,
                                    [full[k] for k in members])
        if len(members) == 1:
            for key, path, part in (("valid_ppl", perplexity_files[0], "valid"), ("test_ppl", perplexity_files[1], "test")):
                if path:
                    entry[key] = log[name][key] = round(perplexity(models[0], path, part), 2)
        entries[name] = entry
    return entries


def pack_student(language: Language, student: Path, gold: str, log: dict) -> dict[str, dict]:
    """A distilled student as the language's own name (en, zh)."""
    name = f"{language.code}.pt"
    pack(student, pretrained.MODELS_DIR / name, language.tokenizer)
    shipped = checkpoint.load(pretrained.MODELS_DIR / name)
    full = replace(checkpoint.load(student), tokenizer=language.tokenizer)
    entry, log[language.code] = entry_of(language, gold, [name], None, [shipped], ParseOptions(), [full])
    entry["teachers"] = log[language.code]["teachers"] = describe_teachers(shipped.provenance)
    log[language.code]["provenance"] = shipped.provenance
    return {language.code: entry}


def describe_teachers(made: dict | None) -> str:
    """What a student learned from, in a line: its teachers (kind and file), how their trees were combined, the text."""
    if not made:
        return ""
    kinds = made.get("teacher_kinds") or ["onlstm"] * len(made["teachers"])  # students before kinds were recorded
    names = {"onlstm": "ON-LSTM", "pcfg": "TN-PCFG", "student": "student"}
    teachers = ", ".join(f"{names.get(kind, kind)} {'/'.join(Path(path).parts[-3:])}"
                         for kind, path in zip(kinds, made["teachers"]))
    own_trees = [registry.family_of(kind).yields.own_trees for kind in kinds]
    decoder = f"{made['decoder']} decoder, " if made["decoder"] else ""  # None: each member's own (no distances read)
    combined = f"layers {layers_named(made['layers'], own_trees)}, {decoder}span voting"
    if made.get("weights"):
        combined += f" (weights {','.join(f'{w:g}' for w in made['weights'])})"
    if made.get("right_voter"):
        combined += f", right-branching voter {made['right_voter']:g}"
    settings = made["settings"]
    return (f"{teachers} ({combined}); {made['training_sentences']:,} training sentences, {settings['epochs']} epochs, "
            f"the epoch kept by {settings['keep']}")


def pcfg_name(language: Language) -> str:
    return f"{language.code if language.code != 'en' else language.prefix}-pcfg"


def pruned(language: Language) -> ParseOptions:
    """How the language's PCFGs parse by default: their charts pruned by its own student, where one ships."""
    student = pretrained.find(language.code)
    return ParseOptions(pruning=Pruning(checkpoint.load(student.paths[0]))) if student else ParseOptions()


def pack_pcfg(language: Language, source: Path, gold: str, perplexity_files: tuple[str | None, str | None],
              log: dict) -> dict[str, dict]:
    """A trained PCFG (its best.pt: the best held-out likelihood) as PREFIX-pcfg (ptb-pcfg, zh-pcfg)."""
    name = pcfg_name(language)
    pack(source, pretrained.MODELS_DIR / f"{name}.pt", language.tokenizer)
    shipped = checkpoint.load(pretrained.MODELS_DIR / f"{name}.pt")
    full = replace(checkpoint.load(source), tokenizer=language.tokenizer)
    options = pruned(language)
    entry, log[name] = entry_of(language, gold, [f"{name}.pt"], None, [shipped], options, [full])
    if options.pruning:
        entry["prune"] = language.code
    for key, path in (("valid_ppl", perplexity_files[0]), ("test_ppl", perplexity_files[1])):
        if path:
            entry[key] = log[name][key] = round(perplexity(shipped, path, key.removesuffix("_ppl")), 2)
    log[name]["run"] = _run_summary(source.parent, source.with_suffix(".metrics.jsonl"),
                                    (shipped.provenance or {}).get("metrics"))
    entry["label_map"] = label_map(name, gold, language)
    return {name: entry}


def pack_pcfg_ensemble(language: Language, sources: list[Path], gold: str, log: dict) -> dict[str, dict]:
    """PREFIX-pcfg (its source first, packed by pack_pcfg) and more trained PCFGs (packed as PREFIX-pcfg-2.pt, ...) as
    PREFIX-pcfg-ensemble: their trees by span voting or their span marginals summed, whichever has the better F1 on
    the gold trees (a setting chosen by looking at F1, as the pair's combiner), each chart pruned as PREFIX-pcfg's."""
    name = pcfg_name(language)
    files = [f"{name}.pt"] + [f"{name}-{k}.pt" for k in range(2, len(sources) + 1)]
    for source, file in zip(sources[1:], files[1:]):
        pack(source, pretrained.MODELS_DIR / file, language.tokenizer)
    shipped = [checkpoint.load(pretrained.MODELS_DIR / file) for file in files]
    full = [replace(checkpoint.load(source), tokenizer=language.tokenizer) for source in sources]
    alone = pruned(language)  # the student loaded once for every scoring
    scored = {how: score(shipped, gold, language, replace(alone, combine=how)) for how in ("mbr", "marginals")}
    log[f"{name}-ensemble combiners"] = {how: 100 * report.rows[report.main_row].sentence_f1
                                         for how, report in scored.items()}
    combine = max(scored, key=lambda how: scored[how].rows[scored[how].main_row].sentence_f1)
    options = replace(alone, combine=combine)
    entry, log[f"{name}-ensemble"] = entry_of(language, gold, files, None, shipped, options, full)
    if options.pruning:
        entry["prune"] = language.code
    return {f"{name}-ensemble": entry}


def label_map(name: str, gold: str, language: Language) -> str:
    """The shipped PCFG's label map (its labels' best matches on the gold trees, many-to-one), written beside it as
    NAME.labels.json; `parse --label-map NAME` reads it."""
    import json

    from grammar_induce import api

    report = api.load(pretrained.MODELS_DIR / f"{name}.pt").grammar(gold=gold, treebank=language.treebank)
    made = json.loads(report.map_json()) | {
        "learned_from": f"{gold} (grammar-induce grammar --gold ... --save-map): each induced label's category of "
                        "most of its constituents that are gold constituents, many-to-one; not supervised labels",
        "model": f"{name}.pt (shipped)"}
    (pretrained.MODELS_DIR / f"{name}.labels.json").write_text(json.dumps(made, indent=1) + "\n")
    return f"{name}.labels.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--language", choices=LANGUAGES, default="en")
    parser.add_argument("--pair", type=Path, help="a folder with forward/ and backward/ runs")
    parser.add_argument("--student", type=Path, help="a distilled student's checkpoint")
    parser.add_argument("--pcfg", type=Path, help="a trained PCFG's best.pt (shipped as ptb-pcfg or zh-pcfg)")
    parser.add_argument("--pcfg-member", type=Path, action="append", default=[],
                        help="with --pcfg: another trained PCFG; with it, PREFIX-pcfg-ensemble")
    parser.add_argument("--gold", required=True)
    parser.add_argument("--valid", help="text for the validation perplexity [en: PTB valid]")
    parser.add_argument("--test", help="text for the test perplexity [en: PTB test]")
    parser.add_argument("--log", type=Path, default=Path("runs/pack.json"))
    args = parser.parse_args()
    language = LANGUAGES[args.language]
    if language.code == "en":
        args.valid, args.test = args.valid or str(SHARED / "ptb_lm/valid.txt"), args.test or str(SHARED / "ptb_lm/test.txt")
    began = time.time()
    pretrained.MODELS_DIR.mkdir(parents=True, exist_ok=True)
    log: dict = {"gold": args.gold, "language": language.code}
    entries = {name: _as_entry(m) for name, m in pretrained.catalogue().items()}
    if args.student:
        entries |= pack_student(language, args.student, args.gold, log)
    if args.pair:
        entries |= pack_pair(language, args.pair, args.gold, (args.valid, args.test), log)
    if args.pcfg:
        entries |= pack_pcfg(language, args.pcfg, args.gold, (args.valid, args.test), log)
        if args.pcfg_member:
            entries |= pack_pcfg_ensemble(language, [args.pcfg, *args.pcfg_member], args.gold, log)
    ordered = dict(sorted(entries.items(), key=lambda item: (item[0] != pretrained.DEFAULT_MODEL,
                                                            item[1]["language"] != "en")))  # stable: packing order
    pretrained.INDEX.write_text(to_toml(ordered))
    log["seconds"] = round(time.time() - began, 1)
    args.log.parent.mkdir(parents=True, exist_ok=True)
    args.log.write_text(json.dumps(log, indent=2))
    print(json.dumps(log, indent=2))
    print(pretrained.table())


def _as_entry(model: pretrained.Pretrained) -> dict:
    """A catalogue entry as models.toml writes it (None values left out)."""
    from dataclasses import asdict

    from grammar_induce.families.registry import family_of

    own_trees = family_of(model.kind).yields.own_trees  # a direction is an ON-LSTM's
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(model).items()
            if k != "name" and v is not None and not (k == "direction" and own_trees) and v != ""}


def _run_summary(run_dir: Path, beside: Path | None = None, kept: list[dict] | None = None) -> dict:
    """The run's epochs as its metrics.jsonl recorded them (float32 weights); `beside`: the metrics of a checkpoint
    kept outside its run folder (../shared/models/pcfg-ptb-h200/seed2.metrics.jsonl), used when the folder has none;
    `kept`: those a kept teacher carries in its provenance (scripts/models/keep_teacher.py), used when there is neither."""
    metrics = run_dir / "metrics.jsonl"
    if beside is not None and not metrics.exists():
        metrics = beside
    history = kept if kept is not None and not metrics.exists() else \
        [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    epochs = [h for h in history if "valid_ppl" in h]
    return {"epochs": len(epochs), "valid_ppl": [h["valid_ppl"] for h in epochs],
            "seconds": round(sum(h.get("seconds", 0) for h in epochs), 1), "last": history[-1] if history else None}


def to_toml(entries: dict[str, dict]) -> str:
    """models.toml: written by this script; numbers measured with the shipped files."""
    lines = ["# Written by scripts/models/pack_pretrained.py: the shipped models and what they measured (see its docstring)."]
    for name, entry in entries.items():
        lines.append(f"\n[{json.dumps(name)}]")
        lines += [f"{key} = {json.dumps(value, ensure_ascii=False)}" for key, value in entry.items()
                  if value is not None]  # TOML has no null: an unset field takes its default
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
