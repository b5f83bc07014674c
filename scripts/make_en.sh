#!/usr/bin/env bash
# Rebuild the shipped English models from ../shared/models and teachers/ (issues 28, 59 and 69), without retraining:
# - `ptb`, `ptb-backward`, `ptb-pair`: the bf16 ON-LSTM pair of ptb-bf16-seed141 repacked with the treebank tokenizer;
# - `ptb-pcfg`: the focused TN-PCFG teachers/ptb-pcfg-focus3.pt (issue 79: the H200 seed2 fine-tuned for one epoch by
#   parse-focusing toward three teachers of different kinds at the paper's code's effective strength,
#   configs/pcfg-ptb-focus3.toml; teachers/README.md says how) repacked, its chart pruned by `en`;
# - `en` (issue 79): a student of one focused grammar alone ($EN_TEACHER: by default teachers/ptb-pcfg-focused.pt, the
#   grammar shipped as ptb-pcfg until 2026-12-07, which the shipped `en` learned from; EN_TEACHER=teachers/ptb-pcfg-
#   focus3.pt makes a student of the grammar shipped now), on all 42,068 PTB training sentences, $EPOCHS epochs (8),
#   the epoch kept by agreement with the teacher on 1,000 validation sentences, a student of embedding size $EMB.
#   The grammars' recipes: docs/pcfg.md (the earlier one chosen by its NLTK-sample F1, issue 79's fixed before); the
#   student's settings were fixed before it was scored.
# The teachers parse the training text once (the PCFG's MBR trees are most of it: about 20 minutes of a CPU core);
# `RESUME=1` goes on with a stopped run (distill --resume). `FOCUSED=1` also retrains the focused grammar from
# ../shared/models (about 20 minutes of 2 cores, or scripts/train_teachers.sh on a GPU) before packing it.
#   scripts/make_en.sh [MODELS=../shared/models] [OUT=runs]
set -euo pipefail
cd "$(dirname "$0")/.."
models=${1:-../shared/models}
out=${2:-runs}
data=${PTB_LM:-../shared/data/ptb_lm}
gold=${NLTK_TREEBANK:-../shared/data/nltk/corpora/treebank/combined}
mkdir -p "$out/en"
head -n 1000 "$data/valid.txt" > "$out/en/valid.txt"
focused=teachers/ptb-pcfg-focus3.pt
if [ -n "${FOCUSED:-}" ]; then
    grammar-induce train --config configs/pcfg-ptb-focus3.toml --out "$out/ptb-pcfg-focus3" --quiet
    python scripts/keep_teacher.py "$out/ptb-pcfg-focus3/epoch-1.pt" "$out/ptb-pcfg-focus3.pt" \
        --metrics "$out/ptb-pcfg-focus3/metrics.jsonl" --note "grammar-induce train --config configs/pcfg-ptb-focus3.toml"
    focused="$out/ptb-pcfg-focus3.pt"
fi
python scripts/pack_pretrained.py --language en --pair "$models/ptb-bf16-seed141" --pcfg "$focused" --gold "$gold" \
    --log "$out/pack-ptb.json"
resume=()
[ -z "${RESUME:-}" ] || resume=(--resume)
grammar-induce distill --model "${EN_TEACHER:-teachers/ptb-pcfg-focused.pt}" --train "$data/train.txt" \
    --valid "$out/en/valid.txt" --out "$out/en/student" --epochs "${EPOCHS:-8}" --emb-size "${EMB:-100}" \
    --precision auto --force "${resume[@]}"
python scripts/pack_pretrained.py --language en --student "$out/en/student/best.pt" --gold "$gold" --log "$out/pack-en.json"
