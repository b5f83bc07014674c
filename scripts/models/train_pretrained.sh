#!/usr/bin/env bash
# Train the shipped English models (grammar-induce models): a forward and a backward ON-LSTM,
# configs/ptb-cpu.toml on the PTB language-modelling text, side by side, one CPU thread each,
# fixed seed, a fixed budget of epochs (reproducible whatever else the machine does), every epoch
# kept; then pack the chosen checkpoints into grammar_induce/resources/models/ (scripts/models/pack_pretrained.py).
#
#   scripts/models/train_pretrained.sh [PTB_LM_DIR] [EPOCHS] [OUT_DIR]
#   defaults: ../shared/data/ptb_lm, 10 epochs, runs/pretrained (RESUME=1 continues an interrupted run)
# --precision auto: bf16 where the CPU has bfloat16 units, float32 elsewhere.
# The gold trees for the table are read from $NLTK_TREEBANK (default ../shared/data/nltk/corpora/treebank/combined).
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${1:-../shared/data/ptb_lm}
epochs=${2:-10}
out=${3:-runs/pretrained}
gold=${NLTK_TREEBANK:-../shared/data/nltk/corpora/treebank/combined}
mkdir -p "$out"

if [ -z "${SKIP_TRAINING:-}" ]; then
    for direction in forward backward; do
        OMP_NUM_THREADS=1 grammar-induce train --config configs/ptb-cpu.toml --train "$data/train.txt" \
            --valid "$data/valid.txt" --test "$data/test.txt" --out "$out/$direction" --direction "$direction" \
            --epochs "$epochs" --keep-epochs "$epochs" --precision auto --seed 141 --quiet ${RESUME:+--resume} \
            >> "$out/$direction.log" 2>&1 &
    done
    wait
fi
python scripts/models/pack_pretrained.py "$out" --gold "$gold"
