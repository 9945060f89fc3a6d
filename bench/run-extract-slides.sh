#!/usr/bin/env bash
# `mltool extract SLIDES -o F` (tiles read from the slide files while the model computes, no
# tile store) against `mltool tile SLIDES -o STORE` + `mltool extract STORE -o F`, side by side
# in one run, on a 12-slide cohort (bench/slide_cohort.sh: 8 biopsies and 4 larger slides,
# generated JPEG tiled pyramidal TIFFs at 0.25 µm/px, made once in OUTDIR/slides). Wall time,
# peak RSS (/usr/bin/time -v) and the features of both compared (bench/extract_slides_bench.py
# says what is run). Prints a markdown table and writes it to OUTDIR/extract-slides.md, every
# number to OUTDIR/extract-slides.json.
#
#   bench/run-extract-slides.sh [OUTDIR]      (default ${MLTOOL_CACHE:-~/.cache/mltool}/bench-extract-slides)
#
# Geometries (each a case; EXTRACT_SLIDES_CASES replaces them: "NAME|OPTIONS[|GLOB]" lines,
# GLOB choosing slides by file name):
#   --mpp 0.6                    tiles resampled from level 1 (0.5 µm/px) by 0.83: tile
#                                decodes, resamples and encodes every tile (JPEG Q90)
#   --mpp 0.5 --tile-size 224    level 1 as it is, 224-px tiles across the slide's 256-px
#                                TIFF tiles: decoded and encoded by tile, not resampled
#   --mpp 0.5                    level 1 as it is, 256 px: the slide's own TIFF tiles, which
#                                tile passes through (passthrough), extract decodes
#   --level 0 --tile-size 256    level 0's own TIFF tiles, passed through; the 8 biopsies only
#                                (on the whole cohort: 4x the tiles of --mpp 0.5)
# Environment: EXTRACT_SLIDES_REPEATS (default 1), EXTRACT_SLIDES_THREADS (default 2),
# EXTRACT_SLIDES_MODEL (default builtin:color-texture) and EXTRACT_SLIDES_MODEL_ARGS (more
# extract options), MLTOOL_BUILD_DIR, MLTOOL_PYTHON (bench/common.sh). The work directory
# (stores and features, under 1 GB) is OUTDIR/work-slides, emptied first.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
source bench/slide_cohort.sh
bench_init extract-slides extract
[[ $# -le 1 && ${1:-} != -* ]] || { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 1; }
out=${1:-${MLTOOL_CACHE:-$HOME/.cache/mltool}/bench-extract-slides}
mkdir -p "$out"
out=$(cd "$out" && pwd)
[[ -x /usr/bin/time ]] || die "/usr/bin/time missing: apt-get install time"
"$py" -c 'import numpy' || die "$py lacks numpy"
[[ $("$mltool" help extract 2>&1) == *--mpp* ]] ||
  die "$mltool extract does not take slides yet (issue 29): build a version that does"

cohort_make "$out/slides"
work=$out/work-slides
rm -rf "$work"
mkdir -p "$work"

cases=()
if [[ -n ${EXTRACT_SLIDES_CASES:-} ]]; then
  mapfile -t cases <<< "$EXTRACT_SLIDES_CASES"
else
  cases=("resampled|--mpp 0.6" "level 1, 224 px|--mpp 0.5 --tile-size 224"
    "level 1, its tiles|--mpp 0.5" "level 0, its tiles|--level 0 --tile-size 256|biopsy-*")
fi
case_args=()
for c in "${cases[@]}"; do [[ -n $c ]] && case_args+=(--case "$c"); done
exec "$py" bench/extract_slides_bench.py --mltool "$mltool" --out "$out" --work "$work" \
  --slides "${cohort[@]}" "${case_args[@]}" --threads "${EXTRACT_SLIDES_THREADS:-2}" \
  --repeats "${EXTRACT_SLIDES_REPEATS:-1}" --model "${EXTRACT_SLIDES_MODEL:-builtin:color-texture}" \
  --model-args "${EXTRACT_SLIDES_MODEL_ARGS:-}" \
  --cohort "${#cohort[@]} slides (8 biopsies 6000 x 4500, 4 slides 20000 x 16000; 0.25 µm/px, JPEG Q80 tiled 256-px pyramidal TIFF, 30-45% tissue), $(du -shc "${cohort[@]}" | tail -1 | cut -f1)"
