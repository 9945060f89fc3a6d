#!/usr/bin/env bash
# `mltool tile` on a DICOM WSI series with and without passthrough (issue 29), beside the
# TIFF it was made from, in one run: bench/run-tile.sh's generated all-tissue 40960 x 40960
# JPEG-tiled TIFF (0.25 µm/px, Q80, 256-px tiles) copied into a DICOM series whose frames are
# its tiles (bench/dicom_from_tiff.py: one instance per level, TILED_FULL, JPEG baseline).
#   - mltool tile SERIES -o STORE --tile-size 256 --level 0 --threads $(nproc)
#       (--passthrough auto: every kept tile is one of the series' frames; and --passthrough
#       never: every tile read through OpenSlide's DICOM reader, decoded and encoded at Q90)
#   - the same on the TIFF, --passthrough auto, for comparison
# Each run starts warm (the inputs read once, mltool started once), best wall time of
# TILE_BENCH_REPEATS (default 2) under /usr/bin/time -v; prints a markdown table.
#
#   bench/run-tile-dicom.sh [OUTDIR]   (default ${MLTOOL_CACHE:-~/.cache/mltool}/bench-tile-dicom)
#
# writes OUTDIR/tile-dicom-bench.md. The TIFF is bench/run-tile.sh's cached
# ${MLTOOL_CACHE:-~/.cache/mltool}/bench-tile/slides/slide_40960x40960_f1_mpp0.25_jpegq80.tif
# (run bench/run-tile.sh once to generate it), or TILE_BENCH_SLIDE=PATH for another
# JPEG-tiled YCbCr TIFF; the series is written to OUTDIR/series (about as large as the TIFF)
# and removed at the end. The whole script takes about 2 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_init tile-dicom tile
cache=${MLTOOL_CACHE:-$HOME/.cache/mltool}
out=${1:-$cache/bench-tile-dicom}
slide=${TILE_BENCH_SLIDE:-$cache/bench-tile/slides/slide_40960x40960_f1_mpp0.25_jpegq80.tif}
repeats=${TILE_BENCH_REPEATS:-2}
threads=$(nproc)
[[ -s $slide ]] || die "$slide missing: run bench/run-tile.sh once (it generates it)"
[[ -x /usr/bin/time ]] || die "/usr/bin/time missing: apt-get install time"
mkdir -p "$out"
work=$(cd "$out" && pwd)
rm -rf "$work/series" "$work/store"
trap 'rm -rf "$work/series" "$work/store"' EXIT

echo "converting $(basename "$slide") to a DICOM series ..." >&2
"$py" bench/dicom_from_tiff.py "$slide" "$work/series"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $threads cores, $(free -g | awk '/^Mem:/{print $2}') GiB, $(uname -r); load average before the runs $(cut -d' ' -f1 /proc/loadavg)" >&2

# run LABEL INPUT ARGS...: best of $repeats; prints "label tiles passed wall rss"
run() {
  local label=$1 input=$2 best="" rss="" summary
  shift 2
  for rep in $(seq "$repeats"); do
    rm -rf "$work/store"
    sync
    cat "$input"/* "$input" 2> /dev/null > /dev/null || true
    "$mltool" --version > /dev/null
    /usr/bin/time -v -o "$work/time" "$mltool" tile "$input" -o "$work/store" --tile-size 256 \
      --level 0 --threads "$threads" --json -q "$@" > "$work/$label.json"
    local wall
    wall=$(wall_of "$work/time")
    if [[ -z $best ]] || awk -v a="$wall" -v b="$best" 'BEGIN{exit !(a < b)}'; then
      best=$wall rss=$(rss_of "$work/time")
    fi
  done
  summary=$("$py" -c 'import json,sys; s=json.load(open(sys.argv[1]))["slides"][0]; print(s["tiles"], s["passthrough"])' "$work/$label.json")
  echo "$label $summary $best $rss"
}

{
  echo "| input | mltool tile | tiles | passed through | wall s | tiles/s | peak RSS MiB |"
  echo "|---|---|---|---|---|---|---|"
  for spec in "DICOM series|auto|$work/series" "DICOM series|never|$work/series" \
              "TIFF|auto|$slide"; do
    IFS='|' read -r what mode input <<< "$spec"
    read -r _ tiles passed wall rss < <(run "$mode" "$input" --passthrough "$mode")
    awk -v w="$what" -v m="$mode" -v t="$tiles" -v p="$passed" -v s="$wall" -v r="$rss" \
      'BEGIN{printf "| %s | `--passthrough %s` | %d | %d | %.2f | %.0f | %.0f |\n", w, m, t, p, s, t / s, r / 1024}'
  done
} | tee "$work/tile-dicom-bench.md.partial"
mv "$work/tile-dicom-bench.md.partial" "$work/tile-dicom-bench.md"
echo "load average after the runs $(cut -d' ' -f1 /proc/loadavg)" >&2
