#!/usr/bin/env bash
# Rebuild the shipped Chinese model `zh` (issue 38): teachers of two families trained on the CTB 5.1 training
# sentences without their trees, a forward and a backward ON-LSTM (scripts/train_chinese.sh, $MINUTES minutes of
# wall time each) and a TN-PCFG (scripts/train_pcfg.sh, ONLY=ctb: its config's 10 epochs, about 4 hours of one
# thread, or $PCFG_MINUTES minutes; its best.pt is the epoch of the best held-out likelihood), then a
# student distilled from the three with settings fixed before any development F1 was seen: each ON-LSTM's layer by
# agreement with the other family's trees (no gold trees), the gap decoder, span voting with weights 1 each and a
# right-branching voter of 0.5 (English's rule), 2 epochs, the epoch kept by agreement with the teachers on the
# development sentences' words (no trees), embedding 100; then packed into the package with its numbers.
#   scripts/make_zh.sh [CTB_DIR=../shared/data/ctb51] [OUT=runs]
#   (SKIP_TEACHERS=1: use OUT/ctb/{forward,backward} and OUT/pcfg/ctb as they are; RESUME=1 continues stopped teachers)
set -euo pipefail
cd "$(dirname "$0")/.."
ctb=${1:-../shared/data/ctb51}
out=${2:-runs}
if [ -z "${SKIP_TEACHERS:-}" ]; then
    MINUTES=${MINUTES:-80} scripts/train_chinese.sh "$ctb" "$out/ctb" &
    ONLY=ctb MINUTES=${PCFG_MINUTES:-} scripts/train_pcfg.sh "$(dirname "$ctb")" "$out/pcfg" &
    wait
fi
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} grammar-induce distill --model "$out/ctb/forward/best.pt" \
    --model "$out/ctb/backward/best.pt" --model "$out/pcfg/ctb/best.pt" --layer auto --decoder gap --right-voter 0.5 \
    --train "$ctb/train.txt" --valid "$out/ctb/dev.txt" --out "$out/zh-student" --precision auto --epochs 2 \
    --emb-size 100 --force
python scripts/pack_pretrained.py --language zh --student "$out/zh-student/best.pt" --gold "$ctb/dev.trees" \
    --log "$out/pack-zh.json"
