#!/usr/bin/env bash
# The GPU figures in one command, in under 5 minutes on a machine with a GPU (and torch built for it):
# training throughput fp32 and bf16 at paper size (configs/ptb.toml) against the matrix floor, parsing
# throughput, and a short DDP run with NCCL on every GPU present. Writes gpu_check/ (benchmark JSON, logs).
#   bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu_check
mkdir -p "$out"
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: torch ' + torch.__version__)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpus.csv"
gpus=$(python -c "import torch; print(torch.cuda.device_count())")
# training and parsing rates, fp32 and bf16, paper size (a few batches: --quick)
timeout 240 python scripts/benchmark.py --device cuda --models ptb --quick --precisions fp32,bf16 \
    --json "$out/benchmark.json" | tee "$out/benchmark.txt"
# DDP with NCCL on all GPUs: 20 steps of the paper-size model on the synthetic data (the global batch, 20 in the
# paper, rounded up to a multiple of the GPUs: it is split across them)
batch=$(( (20 + gpus - 1) / gpus * gpus ))
timeout 120 torchrun --standalone --nproc_per_node "$gpus" -m grammar_induce train --config configs/ptb.toml \
    --train data/synthetic/train.txt --valid data/synthetic/valid.txt --test data/synthetic/test.txt \
    --max-steps 20 --epochs 1 --device cuda --precision bf16 --set train.batch_size=$batch --out "$out/ddp" \
    --force --quiet 2>&1 | tee "$out/ddp.log"
echo "gpu check: $gpus GPU(s); figures in $out/"
