#!/usr/bin/env bash
# `mltool tile` side by side with LazySlide (find_tissues + tile_tissues + reading the tiles) on
# the real slide and a generated 16384² slide; the table of docs/benchmarks.md ("Against
# LazySlide"). LazySlide runs in its own venv, made on first use from
# bench/requirements-lazyslide.txt (${MLTOOL_CACHE:-~/.cache/mltool}/bench-lazyslide), never the
# project's .venv. Everything else: bench/tile_lazyslide_bench.py --help.
#
#   bench/run-tile-lazyslide.sh [OUTDIR]   (default ${MLTOOL_CACHE:-~/.cache/mltool}/bench-tile-lazyslide)
#
# Environment: TILE_LAZYSLIDE_SIZE (the generated slide's side, default 16384),
# TILE_LAZYSLIDE_REPEATS (runs of each tool, the best kept, default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MLTOOL_BUILD_DIR:-build}
out=${1:-${MLTOOL_CACHE:-$HOME/.cache/mltool}/bench-tile-lazyslide}
exec python3 bench/tile_lazyslide_bench.py "$build/bin/mltool" --out "$out" \
  --size "${TILE_LAZYSLIDE_SIZE:-16384}" --repeats "${TILE_LAZYSLIDE_REPEATS:-3}"
