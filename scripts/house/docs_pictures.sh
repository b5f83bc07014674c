#!/usr/bin/env bash
# The README's pictures (docs/*.png): a tree with its distances, an ensemble's parse page, the
# evaluation report and learning curves of the forward/backward pair, and a Chinese tree.
#
#   scripts/house/docs_pictures.sh RUN_DIR ZH_MODEL
#   RUN_DIR: where scripts/experiments/reproduce_ensemble.sh trained (forward/, backward/); ZH_MODEL: a jieba model
set -euo pipefail
cd "$(dirname "$0")/../.."
run=${1:-runs/ensemble}
zh=${2:-runs/zh/best.pt}
gold=${NLTK_TREEBANK:-../shared/data/nltk/corpora/treebank/combined}
work=$(mktemp -d)
sentence="the old man saw a dog near the river with his son"
grammar-induce parse --model "$run/forward/best.pt" --format svg "$sentence" > "$work/tree.svg"
grammar-induce parse --model "$run/forward/best.pt" --model "$run/backward/best.pt" --format html \
    --output "$work/ensemble.html" "$sentence"
grammar-induce evaluate --model "$run/forward/best.pt" --gold "$gold" --quiet --max-length 12 \
    --report "$work/report.html" --report-sentences 20 > /dev/null
grammar-induce plot "$run/forward" "$run/backward" --output "$work/curves.svg" > /dev/null
grammar-induce parse --model "$zh" --format svg "我们在北京的大学学习中文和历史" > "$work/chinese.svg"
mkdir -p docs
python scripts/house/screenshots.py docs "$work/tree.svg" --width 620 --height 350
python scripts/house/screenshots.py docs "$work/chinese.svg" --width 560 --height 330
python scripts/house/screenshots.py docs "$work/ensemble.html" --width 1400 --height 520
python scripts/house/screenshots.py docs "$work/report.html" --width 1000 --height 1500
python scripts/house/screenshots.py docs "$work/curves.svg" --width 1130 --height 310
