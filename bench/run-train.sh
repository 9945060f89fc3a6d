#!/usr/bin/env bash
# `mltool train`'s feeds against each other and against PyTorch training loops in Python, on
# one packed dataset of 1024-d float16 features with an MLP, batch 512, on a GPU
# (bench/train_bench.py says what each measures):
#   - mltool train --feed pinned | host | sync --device cuda   (samples/s of training steps)
#   - a torch DataLoader loop (pin_memory, workers) and a loop with the matrix resident on
#     the GPU, both in Python, same model, optimizer and batch
# Prints a markdown table with the ratios the goals are stated in (pinned/sync >= 10x,
# pinned/host >= 2x, pinned/DataLoader >= 2x) and writes it to OUTDIR/train-bench.md, every
# number to OUTDIR/train-bench.json.
#
#   bench/run-train.sh [OUTDIR] [train_bench.py options: --rows N, --epochs E, ...]
#   bench/run-train.sh OUTDIR --cpu-smoke      # on the CPU, small data (a try-out)
#
# OUTDIR defaults to ${MLTOOL_CACHE:-~/.cache/mltool}/bench-train. Environment:
# MLTOOL_BUILD_DIR (default build), MLTOOL_PYTHON (default .venv/bin/python when there is
# one, else python3; needs torch and numpy), TRAIN_BENCH_WORK (the feature store and dataset,
# reused by later runs of the same size, and the runs; default ${TMPDIR:-/tmp}/mltool-train-bench),
# TRAIN_BENCH_ROWS (rows, when --rows is not given; default 400000, 800 MB of features).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_init train train
out=${MLTOOL_CACHE:-$HOME/.cache/mltool}/bench-train
if [[ $# -gt 0 && $1 != -* ]]; then
  out=$1
  shift
fi
work=${TRAIN_BENCH_WORK:-${TMPDIR:-/tmp}/mltool-train-bench}

"$py" -c 'import torch, numpy' || die "$py lacks torch or numpy"

args=()
if [[ -n ${TRAIN_BENCH_ROWS:-} && " $* " != *" --rows "* ]]; then
  args+=(--rows "$TRAIN_BENCH_ROWS")
fi
mkdir -p "$out"
exec "$py" bench/train_bench.py --mltool "$mltool" --out "$out" --work "$work" "${args[@]}" "$@"
