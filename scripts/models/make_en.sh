#!/usr/bin/env bash
# Rebuild the shipped English models from ../shared/models and teachers/ (issues 28, 59 and 69), without retraining:
# - `ptb`, `ptb-backward`, `ptb-pair`: the bf16 ON-LSTM pair of ptb-bf16-seed141 repacked with the treebank tokenizer;
# - `ptb-pcfg`: the rank-128 TN-PCFG teachers/ptb-pcfg-scratch128s141.pt (issue 79's fourth session: a random start
#   focused for the paper's 10 epochs toward the grammar below, the `en` of 2026-12-04 and `ptb-pair`,
#   configs/pcfg-ptb-scratch128.toml) repacked, its chart pruned by `en`;
# - `ptb-pcfg-ensemble`: it and teachers/ptb-pcfg-rank128r2.pt (issue 80: the rank-500 grammar
#   teachers/ptb-pcfg-focus3r3.pt at rank 128, focused two epochs toward itself and two other teachers,
#   configs/pcfg-ptb-rank128.toml, then one more round toward itself, configs/pcfg-ptb-rank128r2.toml; the rank-500
#   grammar is the H200 seed2 fine-tuned by three rounds of parse-focusing, configs/pcfg-ptb-focus3*.toml,
#   teachers/README.md says how), their trees by span voting or their marginals summed (the better on the gold trees);
# - `en` (issue 79): a student of one teacher ($EN_TEACHER: by default `ptb-pcfg-ensemble` as just packed, its charts
#   pruned by the `en` before), on all 42,068 PTB training sentences, $EPOCHS epochs (12), the epoch kept by
#   agreement with the teacher on 1,000 validation sentences, a student of embedding size $EMB whose word embeddings
#   start from `ptb`'s (distill --embeddings: issue 79's fifth session); then `ptb-pcfg` and the ensemble are measured
#   again (their charts are pruned by the new `en`). The grammars' recipes: docs/pcfg.md (the earlier one chosen by
#   its NLTK-sample F1, issue 79's fixed before); the student's settings were fixed before it was scored.
# The teacher parses the training text once (a few minutes of a CPU core with its charts pruned; an epoch about 2);
# `RESUME=1` goes on with a stopped run (distill --resume). `FOCUSED=1` also retrains the focused grammars from
# ../shared/models: the three rank-500 rounds, the rank-128 grammar and its round (about an hour of one core), and the
# grammar from scratch (about 40 minutes of one core).
#   scripts/models/make_en.sh [MODELS=../shared/models] [OUT=runs]
set -euo pipefail
cd "$(dirname "$0")/../.."
models=${1:-../shared/models}
out=${2:-runs}
data=${PTB_LM:-../shared/data/ptb_lm}
gold=${NLTK_TREEBANK:-../shared/data/nltk/corpora/treebank/combined}
mkdir -p "$out/en"
head -n 1000 "$data/valid.txt" > "$out/en/valid.txt"
small=teachers/ptb-pcfg-rank128r2.pt
scratch=teachers/ptb-pcfg-scratch128s141.pt
keep() {  # keep NAME CONFIG FILE: the run's FILE (epoch-1.pt or best.pt) kept as $out/NAME.pt, float16 with provenance
    python scripts/models/keep_teacher.py "$out/$1/$3" "$out/$1.pt" --metrics "$out/$1/metrics.jsonl" \
        --note "grammar-induce train --config $2"
}
round() {  # round NAME CONFIG START FILE: START focused toward itself, the `en` of 2026-12-04 and `ptb-pair`, kept
    grammar-induce train --config "$2" --seed 141 --init "$3" --focus "$3" --focus teachers/en-2026-12-04.pt \
        --focus ptb-pair --out "$out/$1" --quiet
    keep "$1" "$2" "$4"
}
if [ -n "${FOCUSED:-}" ]; then  # the five rounds of focusing (about 13 CPU minutes each at rank 500), then the scratch run
    grammar-induce train --config configs/pcfg-ptb-focus3.toml --seed 141 --out "$out/ptb-pcfg-focus3" --quiet
    keep ptb-pcfg-focus3 configs/pcfg-ptb-focus3.toml epoch-1.pt
    round ptb-pcfg-focus3r2 configs/pcfg-ptb-focus3r2.toml "$out/ptb-pcfg-focus3.pt" epoch-1.pt
    round ptb-pcfg-focus3r3 configs/pcfg-ptb-focus3r3.toml "$out/ptb-pcfg-focus3r2.pt" epoch-1.pt
    round ptb-pcfg-rank128 configs/pcfg-ptb-rank128.toml "$out/ptb-pcfg-focus3r3.pt" best.pt
    round ptb-pcfg-rank128r2 configs/pcfg-ptb-rank128r2.toml "$out/ptb-pcfg-rank128.pt" epoch-1.pt
    small="$out/ptb-pcfg-rank128r2.pt"
    grammar-induce train --config configs/pcfg-ptb-scratch128.toml --seed 141 --focus "$small" \
        --focus teachers/en-2026-12-04.pt --focus ptb-pair --out "$out/ptb-pcfg-scratch128s141" --quiet
    keep ptb-pcfg-scratch128s141 configs/pcfg-ptb-scratch128.toml best.pt
    scratch="$out/ptb-pcfg-scratch128s141.pt"
fi
python scripts/models/pack_pretrained.py --language en --pair "$models/ptb-bf16-seed141" --pcfg "$scratch" \
    --pcfg-member "$small" --gold "$gold" --log "$out/pack-ptb.json"
resume=()
[ -z "${RESUME:-}" ] || resume=(--resume)
grammar-induce distill --model "${EN_TEACHER:-ptb-pcfg-ensemble}" --train "$data/train.txt" \
    --valid "$out/en/valid.txt" --out "$out/en/student" --epochs "${EPOCHS:-12}" --emb-size "${EMB:-100}" \
    --embeddings ptb --precision auto --force "${resume[@]}"
python scripts/models/pack_pretrained.py --language en --student "$out/en/student/best.pt" --gold "$gold" \
    --log "$out/pack-en.json"
python scripts/models/pack_pretrained.py --language en --pcfg "$scratch" --pcfg-member "$small" --gold "$gold" \
    --log "$out/pack-ptb-pcfg.json"
