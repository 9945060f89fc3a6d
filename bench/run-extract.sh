#!/usr/bin/env bash
# `mltool extract` side by side with a PyTorch DataLoader pipeline over the same tile store and
# with the model alone, on a GPU, in one run (bench/extract_bench.py says what each measures):
#   - mltool extract STORE -o F --model r50.pt --input-size 224 --batch 256 --device cuda
#       [--amp bf16]                                  (tiles/s from its --json)
#   - DataLoader(num_workers = cores, pin_memory=True): python-lmdb + Pillow per worker, the
#       same resize/normalise and autocast on the GPU
#   - the model alone on random batches already on the GPU (the limit)
# on N synthetic 256-px JPEG Q90 tiles (default 20000) written with python-lmdb + Pillow
# (scripts/fixtures/tile_store.py), ResNet-50 from torchvision (weights=None, fc = Identity,
# TorchScript). Prints a markdown table with the ratios the goals are stated in (mltool /
# DataLoader >= 2x, mltool / model only >= 90%) and writes it to OUTDIR/extract-bench.md, every
# number to OUTDIR/extract-bench.json.
#
#   bench/run-extract.sh [OUTDIR] [extract_bench.py options: --tiles N, --amps bf16,none, ...]
#   bench/run-extract.sh OUTDIR --cpu-smoke      # on the CPU: small CNN, 96 tiles (a try-out)
#
# OUTDIR defaults to ${MLTOOL_CACHE:-~/.cache/mltool}/bench-extract. Environment:
# MLTOOL_BUILD_DIR (default build; the GPU machine's scripts/device/run.sh uses build-device),
# MLTOOL_PYTHON (default .venv/bin/python when there is one, else python3; needs torch, numpy,
# Pillow, python-lmdb, and torchvision for ResNet-50 — without it a local definition of the same
# network is used), EXTRACT_BENCH_WORK (the tile store, reused by later runs with the same
# parameters, the model and the features; default ${TMPDIR:-/tmp}/mltool-extract-bench — never
# OUTDIR, which stays small), EXTRACT_BENCH_N (tiles, when --tiles is not given).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_init extract extract
out=${MLTOOL_CACHE:-$HOME/.cache/mltool}/bench-extract
if [[ $# -gt 0 && $1 != -* ]]; then
  out=$1
  shift
fi
work=${EXTRACT_BENCH_WORK:-${TMPDIR:-/tmp}/mltool-extract-bench}

"$py" -c 'import torch, numpy, PIL, lmdb' || die "$py lacks torch, numpy, Pillow or python-lmdb"

args=()
if [[ -n ${EXTRACT_BENCH_N:-} && " $* " != *" --tiles "* ]]; then
  args+=(--tiles "$EXTRACT_BENCH_N")
fi
mkdir -p "$out"
exec "$py" bench/extract_bench.py --mltool "$mltool" --out "$out" --work "$work" "${args[@]}" "$@"
