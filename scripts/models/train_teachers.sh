#!/usr/bin/env bash
# Teachers in minutes (issue 61): N TN-PCFG seeds trained side by side on one device (a GPU: each run is bound by
# launching small ops, so several share a card well), each one's best epoch (by held-out likelihood) packed to
# float16 weights at the end, then ranked without gold trees (`grammar-induce rank`: each one's lead in agreement
# over right-branching trees, what `--weights auto` weighs them by) on the first 2,000 validation sentences. The runs
# are resumable: the same command goes on with each run from its last.pt.
#   scripts/models/train_teachers.sh [SEEDS="2 141 7 8"] [OUT=runs/teachers]
# Environment: CONFIG (configs/pcfg-ptb.toml), DEVICE (cuda), DATA (../shared/data/ptb_lm), SETTINGS (extra
# --set flags; the H200 teachers of ../shared/models used "--set train.batch_size=32 --set train.lr=0.002"),
# MINUTES (each run's time budget, 0: none), EXTRA (more flags for train, e.g. --max-steps 3 for a smoke run).
# Focused grammars (parse-focusing, issue 69): CONFIG=configs/pcfg-ptb-focus.toml (from the H200 seed2, toward the
# shipped en's trees: made once in the cache by the first run to need them, so start one seed alone first, or let the
# runs share the work: each chunk is written whole).
set -euo pipefail
cd "$(dirname "$0")/../.."
seeds=${1:-2 141 7 8}
out=${2:-runs/teachers}
config=${CONFIG:-configs/pcfg-ptb.toml}
data=${DATA:-../shared/data/ptb_lm}
mkdir -p "$out"
pids=()
for seed in $seeds; do
    run="$out/seed$seed"
    resume=()
    [ ! -f "$run/last.pt" ] || resume=(--resume)
    # shellcheck disable=SC2086
    grammar-induce train --config "$config" --train "$data/train.txt" --valid "$data/valid.txt" \
        --test "$data/test.txt" --device "${DEVICE:-cuda}" --seed "$seed" --max-minutes "${MINUTES:-0}" \
        --out "$run" --quiet "${resume[@]}" ${SETTINGS:-} ${EXTRA:-} > "$out/seed$seed.log" 2>&1 &
    pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
[ "$failed" -eq 0 ] || { echo "a run failed: see $out/seed*.log"; exit 1; }
packed=()
for seed in $seeds; do  # the best epoch with float16 weights and no training state, as the shared teachers are
    python scripts/models/keep_teacher.py "$out/seed$seed/best.pt" "$out/seed$seed.pt" --metrics "$out/seed$seed/metrics.jsonl"
    packed+=(--model "$out/seed$seed.pt")
    echo "seed $seed: $(tail -n 1 "$out/seed$seed/metrics.jsonl")"
done
head -n 2000 "$data/valid.txt" > "$out/rank-text.txt"
grammar-induce rank "${packed[@]}" --input "$out/rank-text.txt" --device "${DEVICE:-cuda}" | tee "$out/ranking.txt"
