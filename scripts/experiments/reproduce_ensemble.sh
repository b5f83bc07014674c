#!/usr/bin/env bash
# Train a forward and a backward ON-LSTM (configs/ptb-cpu.toml) side by side, one CPU thread each,
# for a wall-time budget, keeping their last 5 epochs; then score on the NLTK Penn Treebank sample:
# each model alone (paper and gap decoders), the pair combined (span voting and mean gap scores),
# and the snapshot ensembles of their last epochs. Prints the table the README shows.
#
#   scripts/experiments/reproduce_ensemble.sh [PTB_LM_DIR] [MINUTES] [OUT_DIR]
#   defaults: ../shared/data/ptb_lm, 105 minutes, runs/ensemble
# The gold trees are read from $NLTK_TREEBANK (default ../shared/data/nltk/corpora/treebank/combined).
default_minutes=105
default_out=runs/ensemble
source "$(dirname "$0")/experiment_args.sh"

if [ -z "${SKIP_TRAINING:-}" ]; then
    train_side_by_side direction forward backward --keep-epochs 5
fi

score() {  # score NAME ARGS...: evaluate, keeping the table and every number
    local name=$1
    shift
    grammar-induce evaluate --gold "$gold" --quiet --json "$out/eval-$name.json" "$@" > "$out/eval-$name.txt"
}
fwd=$out/forward/best.pt
bwd=$out/backward/best.pt
for decoder in paper gap; do
    score "forward-$decoder" --model "$fwd" --decoder "$decoder"
    score "backward-$decoder" --model "$bwd" --decoder "$decoder"
    score "pair-$decoder" --model "$fwd" --model "$bwd" --decoder "$decoder"
    score "snapshots-forward-$decoder" $(printf -- '--model %s ' "$out"/forward/epoch-*.pt) --decoder "$decoder"
    score "snapshots-both-$decoder" $(printf -- '--model %s ' "$out"/forward/epoch-*.pt "$out"/backward/epoch-*.pt) \
        --decoder "$decoder"
done
# each member's layer chosen by agreement between the members (no gold trees)
score "pair-gap-auto" --model "$fwd" --model "$bwd" --decoder gap --layer auto
score "snapshots-both-gap-auto" $(printf -- '--model %s ' "$out"/forward/epoch-*.pt "$out"/backward/epoch-*.pt) \
    --decoder gap --layer auto
python scripts/experiments/ensemble_table.py "$out"
