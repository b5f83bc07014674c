#!/usr/bin/env bash
# Rebuild the shipped English models (issue 28) from ../shared/models: `ptb`, `ptb-backward` and `ptb-pair`
# repacked from the bf16 pair (seed 141, 16 epochs; how it was trained: ../shared/models/README.md, or
# from scratch, slower: scripts/train_pretrained.sh ../shared/data/ptb_lm 16 runs/pretrained with
# --precision bf16), then `en`: a student distilled from that pair's trees of the first 20,000 PTB
# training sentences (layers by agreement, gap decoder, span voting with a right-branching voter of weight
# $RIGHT: 0.5, a tie-breaker between the two teachers, chosen by NLTK-sample F1, docs/experiments.md),
# $EPOCHS epochs, the epoch kept by agreement with the teachers on 1,000 validation sentences (no gold
# trees), a student of embedding size $EMB (100: the wheel stays under 30 MB with both languages), packed
# with its numbers.
#   scripts/make_en.sh [PAIR=../shared/models/ptb-bf16-seed141] [OUT=runs]
set -euo pipefail
cd "$(dirname "$0")/.."
pair=${1:-../shared/models/ptb-bf16-seed141}
out=${2:-runs}
data=${PTB_LM:-../shared/data/ptb_lm}
gold=${NLTK_TREEBANK:-../shared/data/nltk/corpora/treebank/combined}
mkdir -p "$out/en"
head -n "${SENTENCES:-20000}" "$data/train.txt" > "$out/en/train.txt"
head -n 1000 "$data/valid.txt" > "$out/en/valid.txt"
grammar-induce distill --model "$pair/forward/best.pt" --model "$pair/backward/best.pt" --layer auto --decoder gap \
    --right-voter "${RIGHT:-0.5}" --train "$out/en/train.txt" --valid "$out/en/valid.txt" --out "$out/en/student" \
    --epochs "${EPOCHS:-2}" --emb-size "${EMB:-100}" --precision auto --force
python scripts/pack_pretrained.py --language en --pair "$pair" --student "$out/en/student/best.pt" --gold "$gold" \
    --log "$out/pack-en.json"
