#!/usr/bin/env bash
# Train the Chinese models (issue 31): a forward and a backward ON-LSTM of configs/ctb.toml on the CTB 5.1
# training sentences, side by side, one CPU thread each, seed 141, bf16 where the CPU has bfloat16 units,
# a wall-clock budget of $MINUTES minutes each (the last epoch ends past it), the last 3 epochs kept.
# Validation perplexity (which epoch is best.pt) is measured on the development sentences' words
# (no trees), written from dev.trees first.
#   scripts/models/train_chinese.sh [CTB_DIR=../shared/data/ctb51] [OUT=runs/ctb]   (RESUME=1 continues a stopped run)
set -euo pipefail
cd "$(dirname "$0")/../.."
ctb=${1:-../shared/data/ctb51}
out=${2:-runs/ctb}
minutes=${MINUTES:-55}
mkdir -p "$out"
python scripts/experiments/trees_to_text.py "$ctb/dev.trees" "$out/dev.txt"
for direction in forward backward; do
    OMP_NUM_THREADS=1 grammar-induce train --config configs/ctb.toml --train "$ctb/train.txt" \
        --valid "$out/dev.txt" --out "$out/$direction" --direction "$direction" --max-minutes "$minutes" \
        --keep-epochs 3 --precision auto --seed 141 --quiet ${RESUME:+--resume} >> "$out/$direction.log" 2>&1 &
done
wait
