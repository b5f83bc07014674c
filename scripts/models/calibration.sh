#!/usr/bin/env bash
# How far each shipped English model's confidences mean what they say (issue 72), on the NLTK Penn Treebank sample:
# each model's calibration on all 3,914 trees, then a map fitted on the first half of the files (wsj_0001-0099,
# `evaluate --calibrate`) checked on the other half (wsj_0100-0199, `evaluate --calibration`). JSON reports in OUT.
#   scripts/models/calibration.sh [NLTK_TREEBANK=../shared/data/nltk/corpora/treebank/combined] [OUT=runs/calibration]
#   (MODELS="en ptb-pcfg ptb-pair" by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
gold=${1:-../shared/data/nltk/corpora/treebank/combined}
out=${2:-runs/calibration}
mkdir -p "$out"
cat "$gold"/wsj_00*.mrg > "$out/first-half.mrg"
cat "$gold"/wsj_01*.mrg > "$out/second-half.mrg"
for model in ${MODELS:-en ptb-pcfg ptb-pair}; do
    echo "== $model: all trees"
    grammar-induce evaluate --model "$model" --gold "$gold" --quiet --force --json "$out/$model.json" \
        | sed -n '/^calibration/,/^expected/p'
    echo "== $model: a map fitted on the first half, checked on the second"
    grammar-induce evaluate --model "$model" --gold "$out/first-half.mrg" --quiet --force \
        --calibrate "$out/$model.map.json" > /dev/null
    grammar-induce evaluate --model "$model" --gold "$out/second-half.mrg" --quiet --force \
        --json "$out/$model.second-half.json" | sed -n '/^calibration/,/^expected/p'
    grammar-induce evaluate --model "$model" --gold "$out/second-half.mrg" --quiet --force \
        --calibration "$out/$model.map.json" --json "$out/$model.second-half.mapped.json" \
        | sed -n '/^calibration/,/^expected/p'
done
