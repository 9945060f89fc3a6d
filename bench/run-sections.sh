#!/usr/bin/env bash
# The seed-003 case on a GPU: a residual CNN on 28x28 images, batch 7500, trained plain and
# in 2, 4 and 8 sections by `mltool train --sections K`, against PyTorch's
# checkpoint_sequential over the same segments (bench/sections_bench.py says what each
# measures). Goals (issue 7): peak memory no higher than PyTorch's at equal segments, step
# time at most 40% over plain, and (--largest) a largest batch that fits at least 3x plain's.
# Writes OUTDIR/sections-bench.md (the table) and OUTDIR/sections-bench.json.
#
#   bench/run-sections.sh [OUTDIR] [sections_bench.py options: --batch, --sections, --largest]
#   bench/run-sections.sh OUTDIR --cpu-smoke     # tiny, on the CPU: checks the script
#
# OUTDIR defaults to ${MLTOOL_CACHE:-~/.cache/mltool}/bench-sections; the datasets are kept in
# SECTIONS_BENCH_WORK (default ${TMPDIR:-/tmp}/mltool-sections-bench) for later runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_init sections train
out=${MLTOOL_CACHE:-$HOME/.cache/mltool}/bench-sections
if [[ $# -gt 0 && $1 != -* ]]; then
  out=$1
  shift
fi
work=${SECTIONS_BENCH_WORK:-${TMPDIR:-/tmp}/mltool-sections-bench}
"$py" -c 'import torch, numpy, lmdb, PIL' || die "$py lacks torch, numpy, lmdb or Pillow"
mkdir -p "$out"
exec "$py" bench/sections_bench.py --mltool "$mltool" --out "$out" --work "$work" "$@"
