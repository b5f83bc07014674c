#!/usr/bin/env bash
# The GPU check in one command, in about 6 minutes (8 at most: each step has its limit) on a machine with a GPU (and
# torch built for it), writing one report (gpu_check/report.txt) beside the figures: the `gpu` tests (every command
# on CUDA against the CPU), the TN-PCFG's training step at batch 32 and 10/20/40 words (fp32 and bf16: the batched
# sums over split points), the ON-LSTM's training and parsing rates at paper size against the matrix floor and the
# paper-style per-step code, with CUDA graphs and without, the StructFormer's training rate beside the ON-LSTM's
# (bf16: issue 63's 3x), and a short DDP run with NCCL.
#   bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=gpu_check
mkdir -p "$out"
report="$out/report.txt"
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: torch ' + torch.__version__)" \
    || exit 1
{ date; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } > "$report"
status=0
step() {  # step NAME SECONDS COMMAND...: run it, its output in gpu_check/NAME.txt and its tail in the report
    local name=$1 limit=$2
    shift 2
    local began=$SECONDS
    timeout "$limit" "$@" > "$out/$name.txt" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || status=1
    { echo; echo "== $name: exit $rc in $((SECONDS - began)) s"; tail -n 25 "$out/$name.txt"; } >> "$report"
}
step tests 150 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider
step pcfg-fp32 45 python scripts/bench/pcfg_step.py --device cuda --precision fp32 --paths tensor --json "$out/pcfg-fp32.json"
step pcfg-bf16 45 python scripts/bench/pcfg_step.py --device cuda --precision bf16 --paths tensor --json "$out/pcfg-bf16.json"
step onlstm 60 python scripts/bench/benchmark.py --device cuda --models ptb --quick --precisions fp32,bf16 \
    --json "$out/benchmark.json"
# the same without CUDA graphs (each time step's kernels launched one by one): what the graphs give
step onlstm-launched 60 env GRAMMAR_INDUCE_CUDA_GRAPHS=0 python scripts/bench/benchmark.py --device cuda --models ptb --quick \
    --precisions fp32,bf16 --json "$out/benchmark-launched.json"
step structformer 75 python scripts/bench/benchmark_structformer.py --device cuda --precisions bf16 --batches 5 \
    --json "$out/structformer.json"
gpus=$(python -c "import torch; print(torch.cuda.device_count())")
batch=$(( (20 + gpus - 1) / gpus * gpus ))  # the paper's global batch of 20, rounded to a multiple of the GPUs
step ddp 60 torchrun --standalone --nproc_per_node "$gpus" -m grammar_induce train --config configs/ptb.toml \
    --train data/synthetic/train.txt --valid data/synthetic/valid.txt --test data/synthetic/test.txt \
    --max-steps 20 --epochs 1 --device cuda --precision bf16 --set train.batch_size=$batch --out "$out/ddp" \
    --force --quiet
echo "gpu check: $gpus GPU(s), exit $status; the report is $report"
cat "$report"
exit $status
