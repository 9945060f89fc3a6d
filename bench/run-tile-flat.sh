#!/usr/bin/env bash
# Does tiling a flat (non-pyramidal) image need its decoded size in memory? Generates a
# SIZE x SIZE slide (default 50000: 7.0 GiB of decoded RGB; ~30% tissue, 0.25 µm/px, by
# scripts/fixtures/make_slides.py, streamed), rewrites its level 0 as a strip BigTIFF (LZW,
# pyvips' tiffsave, streamed) and runs, under /usr/bin/time -v,
#   mltool tile FLAT.tif -o STORE --slide-mpp 0.25 --mpp 0.5 --threads 2
# and the same on the pyramid it came from, for comparison. Prints a markdown table and writes
# it to OUTDIR/tile-flat.md.
#
#   bench/run-tile-flat.sh [OUTDIR]    (default ${MLTOOL_CACHE:-~/.cache/mltool}/bench-tile)
#
# Both slides and stores are deleted at the end. Needs build/bin/mltool and the venv (pyvips).
# Environment: FLAT_SIZE (default 50000).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
bench_init tile-flat tile
out=${1:-${MLTOOL_CACHE:-$HOME/.cache/mltool}/bench-tile}
size=${FLAT_SIZE:-50000}
[[ -x /usr/bin/time ]] || die "/usr/bin/time missing: apt-get install time"
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$out/work-flat
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
rss_mib() { echo $(( $(rss_of "$1") / 1024 )); }
# Peak RssAnon and RssFile (MiB) of PID, sampled every 0.2 s while it runs: the file pages
# are the input that libtiff/libvips map (clean, given back under pressure), not a working set.
sample_rss() {
  local pid=$1 anon=0 file=0 a f
  while kill -0 "$pid" 2> /dev/null; do
    read -r a f < <(awk '/^RssAnon/{a=$2} /^RssFile/{f=$2} END{print a+0, f+0}' "/proc/$pid/status" 2> /dev/null || echo "0 0")
    (( a > anon )) && anon=$a
    (( f > file )) && file=$f
    sleep 0.2
  done
  echo "$(( anon / 1024 )) $(( file / 1024 ))"
}

echo "generating a ${size}x${size} pyramid ..." >&2
/usr/bin/time -v -o "$work/gen.time" "$py" scripts/fixtures/make_slides.py "$work" \
  --size "${size}x${size}" --tissue-fraction 0.3 --mpp 0.25 --compression jpeg --quality 80 \
  --name pyramid.tif > /dev/null
echo "rewriting level 0 as a strip BigTIFF ..." >&2
/usr/bin/time -v -o "$work/flat.time" "$py" -c 'import sys, pyvips
pyvips.Image.new_from_file(sys.argv[1], page=0, access="sequential").tiffsave(
    sys.argv[2], compression="lzw", bigtiff=True, xres=4000, yres=4000)' "$work/pyramid.tif" "$work/flat.tif"
rows=()
for slide in flat pyramid; do
  sync
  cat "$work/$slide.tif" > /dev/null
  echo "tiling $slide.tif ..." >&2
  /usr/bin/time -v -o "$work/tile-$slide.time" "$mltool" tile "$work/$slide.tif" \
    -o "$work/store-$slide" --slide-mpp 0.25 --mpp 0.5 --threads 2 --json \
    > "$work/tile-$slide.json" 2> "$work/tile-$slide.err" &
  timer=$!
  sleep 0.5
  split=$(sample_rss "$(pgrep -P "$timer" -n)")
  wait "$timer" || { cat "$work/tile-$slide.err" >&2; die "mltool tile failed on $slide.tif"; }
  rows+=("$slide $(stat -c %s "$work/$slide.tif") $(wall_of "$work/tile-$slide.time") $(rss_mib "$work/tile-$slide.time") $split $work/tile-$slide.json")
  rm -rf "$work/store-$slide"
done
/usr/bin/time -v -o "$work/base.time" "$mltool" help tile > /dev/null
printf '%s\n' "${rows[@]}" > "$work/rows.txt"
"$py" - "$work/rows.txt" "$size" "$(rss_mib "$work/base.time")" \
  "$(rss_mib "$work/flat.time")" "$("$mltool" --version 2>/dev/null | grep -E 'OpenSlide|libvips' | paste -sd, -)" <<'PY' | tee "$out/tile-flat.md"
import json, os, subprocess, sys
rows, size, base, vips_rss, versions = open(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:6]
machine = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True,
                         capture_output=True, text=True).stdout.strip()
mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
print(f"Machine: {machine}, {os.cpu_count()} cores, {mem:.0f} GiB; {versions}.")
print(f"`mltool tile SLIDE -o STORE --slide-mpp 0.25 --mpp 0.5 --threads 2`, a {size} x {size} "
      f"slide ({size * size * 3 / 2**30:.1f} GiB decoded RGB, ~30% tissue):")
print()
print("| slide | file | reader | grid tiles | tiles | wall s | peak RSS MiB | of which anonymous / file-backed (peaks) | decoded size / peak |")
print("|---|---|---|---|---|---|---|---|---|")
for line in rows:
    name, nbytes, wall, rss, anon, filed, js = line.split()
    s = json.load(open(js))["slides"][0]
    kind = "strip BigTIFF (LZW)" if name == "flat" else "tiled pyramidal TIFF (JPEG Q80)"
    print(f"| {kind} | {int(nbytes) / 2**30:.2f} GiB | {s['reader']} | {s['grid_tiles']} "
          f"| {s['tiles']} | {float(wall):.0f} | {rss} | {anon} / {filed} "
          f"| {size * size * 3 / 2**20 / int(rss):.0f}x |")
print()
print(f"Startup baseline (`mltool help tile`): {base} MiB. pyvips writing the strip "
      f"TIFF peaked at {vips_rss} MiB.")
PY
