#!/usr/bin/env bash
# Train configs/ptb-cpu.toml in float32 and in bf16 side by side, one CPU thread each, same seed,
# for a wall-time budget; then score both best models on the NLTK Penn Treebank sample, each
# parsed in both precisions, and print the README's parity table (scripts/experiments/precision_table.py).
# bf16 needs a CPU with bfloat16 units (AMX, AVX-512 BF16 or Arm BF16); without them training
# refuses --precision bf16.
#
#   scripts/experiments/reproduce_bf16.sh [PTB_LM_DIR] [MINUTES] [OUT_DIR]
#   defaults: ../shared/data/ptb_lm, 70 minutes, runs/bf16
# The gold trees are read from $NLTK_TREEBANK (default ../shared/data/nltk/corpora/treebank/combined).
default_minutes=70
default_out=runs/bf16
source "$(dirname "$0")/experiment_args.sh"

if [ -z "${SKIP_TRAINING:-}" ]; then
    train_side_by_side precision fp32 bf16
fi

for trained in fp32 bf16; do
    for parsed in fp32 bf16; do
        grammar-induce evaluate --model "$out/$trained/best.pt" --gold "$gold" --precision "$parsed" --quiet \
            --json "$out/eval-$trained-parsed-$parsed.json" --save-trees "$out/trees-$trained-parsed-$parsed.txt" \
            > "$out/eval-$trained-parsed-$parsed.txt"
    done
done
python scripts/experiments/precision_table.py "$out"
