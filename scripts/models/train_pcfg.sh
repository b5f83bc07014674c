#!/usr/bin/env bash
# Train the TN-PCFGs (issue 37): English on the PTB language-modelling text (configs/pcfg-ptb.toml) and Chinese
# on the CTB 5.1 training sentences (configs/pcfg-ctb.toml, held out: the development sentences' words, written
# from dev.trees first), side by side, one CPU thread each, seed 141, bf16 where the CPU has bfloat16 units.
# last.pt is written every 5 minutes inside an epoch: RESUME=1 continues stopped runs where they were.
#   scripts/models/train_pcfg.sh [SHARED=../shared/data] [OUT=runs/pcfg]
#   (MINUTES=N: a wall-clock budget each; ONLY=ptb or ONLY=ctb: one of the two)
set -euo pipefail
cd "$(dirname "$0")/../.."
shared=${1:-../shared/data}
out=${2:-runs/pcfg}
mkdir -p "$out"
python scripts/experiments/trees_to_text.py "$shared/ctb51/dev.trees" "$out/ctb-dev.txt"
common=(--seed 141 --quiet --set run.checkpoint_minutes=5 ${MINUTES:+--max-minutes "$MINUTES"} ${RESUME:+--resume})
if [ "${ONLY:-ptb}" = ptb ]; then
    OMP_NUM_THREADS=1 grammar-induce train --config configs/pcfg-ptb.toml --train "$shared/ptb_lm/train.txt" \
        --valid "$shared/ptb_lm/valid.txt" --test "$shared/ptb_lm/test.txt" --out "$out/ptb" "${common[@]}" \
        >> "$out/ptb.log" 2>&1 &
fi
if [ "${ONLY:-ctb}" = ctb ]; then
    OMP_NUM_THREADS=1 grammar-induce train --config configs/pcfg-ctb.toml --train "$shared/ctb51/train.txt" \
        --valid "$out/ctb-dev.txt" --out "$out/ctb" "${common[@]}" >> "$out/ctb.log" 2>&1 &
fi
wait
