#!/usr/bin/env bash
# Train configs/ptb-cpu.toml (the paper's recipe scaled to a laptop) for a wall-time budget on
# the PTB language-modelling text, then evaluate its trees on the NLTK Penn Treebank sample.
# Matrix products run in bf16 where the CPU has bfloat16 units ($PRECISION, default auto; the
# README's PTB-recipe table was made in fp32, before bf16 existed).
#
#   scripts/experiments/reproduce_cpu.sh [PTB_LM_DIR] [MINUTES] [OUT_DIR]
#   defaults: ../shared/data/ptb_lm, 70 minutes, runs/ptb-cpu
# The gold trees are read from $NLTK_TREEBANK (default ../shared/data/nltk/corpora/treebank/combined).
default_minutes=70
default_out=runs/ptb-cpu
source "$(dirname "$0")/experiment_args.sh"

grammar-induce train --config configs/ptb-cpu.toml --train "$data/train.txt" --valid "$data/valid.txt" \
    --test "$data/test.txt" --out "$out" --max-minutes "$minutes" --precision "${PRECISION:-auto}" --quiet \
    ${RESUME:+--resume}
grammar-induce evaluate --model "$out/best.pt" --gold "$gold" --json "$out/evaluate.json" \
    --save-trees "$out/trees.txt"
