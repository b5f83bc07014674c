#!/usr/bin/env bash
# Distillation experiment (issue 23): the shipped ptb-pair (forward + backward, 10 fp32 epochs each) as
# teachers; a student learns their trees of the PTB LM training text; variants: two rounds of
# self-training (round-1.pt, round-2.pt), and confident spans only. Each is scored on the NLTK sample
# (paper's protocol, sentence F1), beside the teachers, and its parsing speed beside the pair's.
# Budget (chosen for time, not by F1): the first $SENTENCES training sentences, $EPOCHS epochs a round.
#   scripts/experiments/reproduce_distill.sh [PTB_LM_DIR] [OUT=runs/distill]
set -euo pipefail
data=${1:-../shared/data/ptb_lm}
out=${2:-runs/distill}
gold=${NLTK_TREEBANK:-../shared/data/nltk/corpora/treebank/combined}
sentences=${SENTENCES:-20000}
epochs=${EPOCHS:-2}
mkdir -p "$out"
head -n "$sentences" "$data/train.txt" > "$out/train.txt"
head -n 1000 "$data/valid.txt" > "$out/valid.txt"
gi() { grammar-induce "$@"; }
gi distill --model ptb-pair --train "$out/train.txt" --valid "$out/valid.txt" --out "$out/full" \
    --epochs "$epochs" --rounds 2 --force 2>&1 | tee "$out/full.log"
gi distill --model ptb-pair --train "$out/train.txt" --valid "$out/valid.txt" --out "$out/confident" \
    --epochs "$epochs" --confident --force 2>&1 | tee "$out/confident.log"
score() {  # name, then evaluate's model options
    local name=$1; shift
    gi evaluate "$@" --gold "$gold" --quiet --json "$out/$name.json" > "$out/$name.txt"
    python -c "import json,sys; r=json.load(open(sys.argv[1])); m=r['rows'][r['main']]; print(f\"{sys.argv[2]:28s} {100*m['sentence_f1']:5.1f}\")" \
        "$out/$name.json" "$name"
}
{
    echo "variant                      NLTK sentence F1"
    score forward --model ptb
    score backward-layer1-gap --model ptb-backward
    score pair --model ptb-pair
    score student-round1 --model "$out/full/round-1.pt"
    score student-round2 --model "$out/full/round-2.pt"
    score student-confident --model "$out/confident/best.pt"
    score pair+student --model ptb-pair --model "$out/full/round-1.pt" --layer 2 --layer 1 --layer 1 --decoder gap
} | tee "$out/table.txt"
# the spread over student seeds (round 1 only)
gi distill --model ptb-pair --train "$out/train.txt" --valid "$out/valid.txt" --out "$out/seed2" \
    --epochs "$epochs" --seed 2 --force 2>&1 | tee "$out/seed2.log"
score student-round1-seed2 --model "$out/seed2/best.pt" | tee -a "$out/table.txt"
python - "$out" <<'PY'
import sys, time
import grammar_induce as gi
out = sys.argv[1]
lines = [l for l in open(f"{out}/valid.txt").read().splitlines() if l.strip()]
for name, parser in (("ptb-pair", gi.load("ptb-pair")), ("student", gi.load(f"{out}/full/round-1.pt"))):
    began = time.time()
    n = sum(1 for _ in parser.parse_many(lines))
    print(f"{name:10s} parses {n / (time.time() - began):7.1f} sentences/s ({n} PTB valid sentences)")
PY
