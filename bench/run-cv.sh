#!/usr/bin/env bash
# `mltool train --folds all` against one fold and against a plain PyTorch loop doing the same
# five folds (bench/cv_bench.py says what each measures). Prints the figures as JSON and a
# markdown row for docs/benchmarks.md.
#
#   bench/run-cv.sh [cv_bench.py options: --bags 1000 --tiles 5000 --dims 1024 --epochs 2 ...]
#
# Environment: MLTOOL_BUILD_DIR (default build), MLTOOL_PYTHON, CV_BENCH_WORK (the cohort and
# the runs, reused by later runs of the same size; default ${TMPDIR:-/tmp}/mltool-cv-bench).
# The issue's size (1000 bags of 5000 tiles, 1024-d float16) is 10 GB of features; the
# default here, 500 tiles a bag, is 1 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_init cv train
"$py" -c 'import torch, numpy' || die "$py lacks torch or numpy"
exec "$py" bench/cv_bench.py --mltool "$mltool" --work "${CV_BENCH_WORK:-${TMPDIR:-/tmp}/mltool-cv-bench}" \
  --tiles 500 "$@"
