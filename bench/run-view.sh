#!/usr/bin/env bash
# `mltool view` side by side with libvips' dzsave (pyvips) on the real slide and a generated
# generic TIFF, in one run; the tables of docs/benchmarks.md ("mltool view (issue 55)").
# Everything else: bench/view_bench.py --help.
#
#   bench/run-view.sh [OUTDIR]   (default ${MLTOOL_CACHE:-~/.cache/mltool}/bench-view)
#
# Environment: VIEW_BENCH_SIZE (the generated slide's side, default 20000; the docs' large case
# is 100000: 1.7 GB, minutes to make and dzsave), VIEW_BENCH_REPEATS (runs of each, default 1),
# MLTOOL_BUILD_DIR, MLTOOL_PYTHON (bench/common.sh; the python with pyvips).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_init view view
[[ $# -le 1 && ${1:-} != -* ]] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 1; }
out=${1:-${MLTOOL_CACHE:-$HOME/.cache/mltool}/bench-view}
exec "$py" bench/view_bench.py "$mltool" --out "$out" --size "${VIEW_BENCH_SIZE:-20000}" \
  --repeats "${VIEW_BENCH_REPEATS:-1}"
