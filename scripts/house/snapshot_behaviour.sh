#!/usr/bin/env bash
# What the tool does, written to a folder, to check that a change of the code's shape changes no behaviour:
# run it before and after, then `diff -r BEFORE AFTER` (only `seconds` and times are taken out).
# Parse output (jsonl: trees and every distance) of each shipped model, of ensembles (span voting, mean gap
# scores, layers by agreement, a right-branching voter, a student beside language models) and in bf16;
# evaluate's numbers (json) of the same; a small distillation with a fixed seed (the weights' sums and its
# log); small seeded trainings of each trainable family (an ON-LSTM with the switch to averaged SGD, a TN-PCFG),
# one of them stopped and resumed (the weights' sums and the metrics). Needs ../shared (the treebank sample, PTB and CTB text); a few minutes on two cores.
#   scripts/house/snapshot_behaviour.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$1
shared=${SHARED:-../shared}
nltk=$shared/data/nltk/corpora/treebank/combined
ctb=$shared/data/ctb51/dev.trees
mkdir -p "$out"
head -n 200 "$shared/data/ptb_lm/valid.txt" > "$out/en.txt"
printf '%s\n' "The old man, who saw a dog, said: \"Hello!\"" "It's 5.5% of AT&T's U.S. sales." "" "..." \
    "Mr. Smith went to Washington. He stayed." >> "$out/en.txt"
sed -n '1,100p' "$shared/data/ctb51/train.txt" > "$out/zh.txt"
gi() { grammar-induce "$@"; }

parse() {  # name, then the flags
    local name=$1; shift
    gi parse "$@" --format jsonl < "$out/en.txt" > "$out/parse-$name.jsonl"
}
parse en --model en
parse ptb --model ptb
parse ptb-layer1 --model ptb --layer 1 --decoder gap
parse pair --model ptb-pair
parse backward --model ptb-backward
parse auto-mean --model ptb --model ptb-backward --layer auto --combine mean
parse auto-right --model ptb --model ptb-backward --layer auto --decoder gap --right-voter 0.5
parse student-and-lm --model en --model ptb --model ptb-backward
parse bf16 --model ptb-pair --precision auto
gi parse --model zh --format jsonl < "$out/zh.txt" > "$out/parse-zh.jsonl"
gi parse --model en --format brackets < "$out/en.txt" > "$out/parse-en.txt"

evaluate() {  # name, then the flags
    local name=$1; shift
    gi evaluate --gold "$nltk" --quiet --json "$out/evaluate-$name.json" "$@" > /dev/null
}
evaluate en --model en --max-length 20
evaluate ptb --model ptb --max-length 20
evaluate pair --model ptb-pair --max-length 20
evaluate auto --model ptb --model ptb-backward --layer auto --max-length 20
evaluate student-and-lm --model en --model ptb --max-length 20
gi evaluate --model zh --gold "$ctb" --treebank ctb --quiet --json "$out/evaluate-zh.json" > /dev/null

head -n 300 "$shared/data/ptb_lm/train.txt" > "$out/distill-train.txt"
head -n 60 "$shared/data/ptb_lm/test.txt" > "$out/distill-valid.txt"
rm -rf "$out/student"
gi distill --model ptb --model ptb-backward --layer auto --decoder gap --right-voter 0.5 \
    --train "$out/distill-train.txt" --valid "$out/distill-valid.txt" --out "$out/student" --epochs 2 \
    --emb-size 32 --hidden-size 32 --seed 7 --rounds 2 > /dev/null
python - "$out" <<'EOF'
import json, sys, torch
from pathlib import Path
out = Path(sys.argv[1])
state = torch.load(out / "student/best.pt", weights_only=True)
sums = {k: round(float(v.double().sum()), 10) for k, v in state["state_dict"].items()}
log = [{k: v for k, v in json.loads(line).items() if k != "seconds"}
       for line in (out / "student/distill.jsonl").read_text().splitlines()]
(out / "distill.json").write_text(json.dumps({"weights": sums, "log": log}, indent=1))
EOF
gi parse --model "$out/student/best.pt" --format jsonl < "$out/en.txt" > "$out/parse-distilled.jsonl"
rm -rf "$out/student"

rm -rf "$out/runs"
tiny=(--config configs/tiny.toml --seed 3 --quiet --set run.device=cpu)
gi train "${tiny[@]}" --epochs 4 --set train.nonmono=0 --out "$out/runs/onlstm" > /dev/null
# a PCFG's own config (a family reads only its own keys): the tiny config's text and training
cat > "$out/pcfg-tiny.toml" <<TOML
[model]
kind = "pcfg"
nonterminals = 6
preterminals = 8
rank = 8
symbol_dim = 16
[data]
train = "$PWD/data/synthetic/valid.txt"
valid = "$PWD/data/synthetic/test.txt"
[train]
batch_size = 8
lr = 0.01
max_length = 12
[run]
epochs = 2
seed = 3
device = "cpu"
TOML
pcfg=(--config "$out/pcfg-tiny.toml" --quiet)
gi train "${pcfg[@]}" --out "$out/runs/pcfg" > /dev/null
gi train "${pcfg[@]}" --max-steps 7 --out "$out/runs/pcfg-resumed" > /dev/null
gi train "${pcfg[@]}" --resume --out "$out/runs/pcfg-resumed" > /dev/null
python - "$out" <<'EOF'
import json, sys, torch
from pathlib import Path
out = Path(sys.argv[1])
for run in sorted((out / "runs").iterdir()):
    state = torch.load(run / "last.pt", weights_only=True)
    sums = {k: round(float(v.double().sum()), 10) for k, v in state["state_dict"].items()}
    log = [{k: v for k, v in json.loads(line).items() if k not in ("seconds", "tokens_per_s")}
           for line in (run / "metrics.jsonl").read_text().splitlines()]
    (out / f"train-{run.name}.json").write_text(json.dumps({"weights": sums, "log": log}, indent=1))
EOF
rm -rf "$out/runs"
