# Sourced by the reproduce_*.sh scripts after they set default_minutes and default_out: reads their
# arguments [PTB_LM_DIR] [MINUTES] [OUT_DIR], moves to the checkout and names the gold trees
# ($NLTK_TREEBANK, default ../shared/data/nltk/corpora/treebank/combined); defines train_side_by_side.
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${1:-../shared/data/ptb_lm}
minutes=${2:-$default_minutes}
out=${3:-$default_out}
gold=${NLTK_TREEBANK:-../shared/data/nltk/corpora/treebank/combined}
mkdir -p "$out"

# train_side_by_side FLAG VALUE1 VALUE2 [ARGS...]: train configs/ptb-cpu.toml twice at once, one CPU
# thread each, with --FLAG VALUE into $out/VALUE (log $out/VALUE.log) and ARGS; $RESUME resumes.
train_side_by_side() {
    local flag=$1 first=$2 second=$3
    shift 3
    for value in "$first" "$second"; do
        OMP_NUM_THREADS=1 grammar-induce train --config configs/ptb-cpu.toml --train "$data/train.txt" \
            --valid "$data/valid.txt" --test "$data/test.txt" --out "$out/$value" "--$flag" "$value" \
            --max-minutes "$minutes" --quiet ${RESUME:+--resume} "$@" > "$out/$value.log" 2>&1 &
    done
    wait
}
