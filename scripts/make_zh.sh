#!/usr/bin/env bash
# Rebuild the shipped Chinese model `zh` (issue 31): the language models (scripts/train_chinese.sh: a forward
# and a backward ON-LSTM of configs/ctb.toml on the CTB 5.1 training sentences, $MINUTES minutes each, side by
# side), then a student distilled from the pair, then packed into the package with its numbers.
# The pair's layers (forward 2, backward 3) and decoder (gap) were chosen by looking at F1 on the CTB
# development trees (docs/chinese.md); the student keeps the epoch that agrees best with the pair on the
# development sentences' words (no trees).
#   scripts/make_zh.sh [CTB_DIR=../shared/data/ctb51] [OUT=runs]   (SKIP_LMS=1: use OUT/ctb as it is)
set -euo pipefail
cd "$(dirname "$0")/.."
ctb=${1:-../shared/data/ctb51}
out=${2:-runs}
[ -n "${SKIP_LMS:-}" ] || MINUTES=${MINUTES:-55} scripts/train_chinese.sh "$ctb" "$out/ctb"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} grammar-induce distill --model "$out/ctb/forward/best.pt" \
    --model "$out/ctb/backward/best.pt" --layer 2 --layer 3 --decoder gap --train "$ctb/train.txt" \
    --valid "$out/ctb/dev.txt" --out "$out/zh-student" --precision auto --epochs 2 --force
python scripts/pack_pretrained.py --language zh --student "$out/zh-student/best.pt" --gold "$ctb/dev.trees" \
    --log "$out/pack-zh.json"
