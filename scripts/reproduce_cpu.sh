#!/usr/bin/env bash
# Train configs/ptb-cpu.toml (the paper's recipe scaled to a laptop) for a wall-time budget on
# the PTB language-modelling text, then evaluate its trees on the NLTK Penn Treebank sample.
#
#   scripts/reproduce_cpu.sh [PTB_LM_DIR] [MINUTES] [OUT_DIR]
#   defaults: ../shared/data/ptb_lm, 70 minutes, runs/ptb-cpu
# The gold trees are read from $NLTK_TREEBANK (default ../shared/data/nltk/corpora/treebank/combined).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-../shared/data/ptb_lm}
minutes=${2:-70}
out=${3:-runs/ptb-cpu}
gold=${NLTK_TREEBANK:-../shared/data/nltk/corpora/treebank/combined}

grammar-induce train --config configs/ptb-cpu.toml --train "$data/train.txt" --valid "$data/valid.txt" \
    --test "$data/test.txt" --out "$out" --max-minutes "$minutes" --quiet ${RESUME:+--resume}
grammar-induce evaluate --model "$out/best.pt" --gold "$gold" --json "$out/evaluate.json" \
    --save-trees "$out/trees.txt"
