#!/usr/bin/env bash
# Does `mltool tile`'s peak memory grow with the slide? Generates a 100000x100000 slide and a
# 20000x20000 one with the same tissue pattern (about 30% tissue, 0.25 µm/px, JPEG-compressed
# tiled pyramidal TIFF, scripts/fixtures/make_slides.py, which streams), then runs
#   mltool tile SLIDE -o STORE --mpp 0.5 --threads 2
# on each under /usr/bin/time -v and reports peak RSS, tiles and seconds (also those of the
# generator). When mltool extract takes slides (issue 29), it also runs, on the same slide,
#   mltool extract SLIDE -o F --mpp 0.5 --threads 2 [$TILE_MEMORY_EXTRACT_ARGS]
# (default model builtin:color-texture) and reports its peak RSS against tile's, and against
# the RSS LibTorch alone takes (`mltool --version` loads it; tile never does).
# Prints a markdown table and writes it to OUTDIR/tile-memory.md.
#
#   bench/run-tile-memory.sh [--keep] [OUTDIR]    (default ${MLTOOL_CACHE:-~/.cache/mltool}/bench-tile)
#
# The 100000x100000 slide (about 1 GB) and both tile stores are deleted at the end unless
# --keep is given (a kept slide is reused by the next run); the 20000x20000 slide is small
# and stays cached in OUTDIR/slides/. Needs build/bin/mltool and the venv .venv.
# Environment: TILE_MEMORY_SIZES (default "20000 100000"), TILE_MEMORY_EXTRACT (default 1 when
# extract takes slides; 0 skips it), TILE_MEMORY_EXTRACT_ARGS (more extract options).
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
if [[ ${1:-} == --keep ]]; then keep=1; shift; fi
build=${MLTOOL_BUILD_DIR:-build}
mltool=$(realpath -m "$build/bin/mltool")
py=$(realpath -m "${MLTOOL_VENV:-.venv}")/bin/python
out=${1:-${MLTOOL_CACHE:-$HOME/.cache/mltool}/bench-tile}
sizes=${TILE_MEMORY_SIZES:-20000 100000}
huge=100000  # slides at least this wide are deleted at the end without --keep

source bench/common.sh  # die, wall_of, rss_of
bench_name=tile-memory
[[ -x $mltool ]] || die "$mltool missing: build first (scripts/setup.sh; cmake --build $build)"
"$mltool" help tile >/dev/null 2>&1 || die "$mltool has no 'tile' subcommand"
[[ -x $py ]] || die "$py missing: scripts/setup.sh makes the venv"
[[ -x /usr/bin/time ]] || die "/usr/bin/time missing: apt-get install time"
with_extract=${TILE_MEMORY_EXTRACT:-1}
if [[ $with_extract == 1 && $("$mltool" help extract 2>&1) != *--mpp* ]]; then
  echo "mltool extract does not take slides (issue 29): tile only" >&2
  with_extract=0
fi
read -r -a extract_args <<< "${TILE_MEMORY_EXTRACT_ARGS:-}"

mkdir -p "$out/slides"
out=$(cd "$out" && pwd)
work=$out/work-memory
rm -rf "$work"
mkdir -p "$work"
: > "$work/results.tsv"
cleanup=()
trap 'if [[ $keep == 0 ]]; then rm -rf "$work"/store-* "$work"/features-* "${cleanup[@]}"; fi' EXIT


echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/^Mem:/{print $2}') GiB" >&2
load_before="load average before the runs $(cut -d' ' -f1 /proc/loadavg), compilers (cc1plus) running: $(pgrep -c cc1plus || true)"
echo "$load_before" >&2
for size in $sizes; do
  name=slide_${size}x${size}_f0.3_mpp0.25_jpegq80.tif
  slide=$out/slides/$name
  (( size >= huge )) && cleanup+=("$slide" "$slide.gen")
  if [[ ! -s $slide || ! -s $slide.gen ]]; then
    # About 0.1 byte per pixel at 30% tissue (JPEG Q80); ask for 3x that, plus 2 GB.
    need_kb=$(( size * size / 10 * 3 / 1024 + 2 * 1024 * 1024 ))
    avail_kb=$(df -Pk "$out/slides" | awk 'NR==2{print $4}')
    (( avail_kb > need_kb )) || die "only $((avail_kb / 1024)) MiB free in $out; ${size}x$size needs about $((need_kb / 1024)) MiB"
    echo "generating $name (free disk $((avail_kb / 1024 / 1024)) GiB) ..." >&2
    /usr/bin/time -v -o "$work/gen-$size.time" "$py" scripts/fixtures/make_slides.py \
      "$out/slides" --size "${size}x${size}" --tissue-fraction 0.3 --mpp 0.25 \
      --compression jpeg --quality 80 --name ".partial-$name" > /dev/null
    mv "$out/slides/.partial-$name" "$slide"
    # The generator's wall seconds and peak RSS MiB, kept beside the slide for later runs.
    echo "$(wall_of "$work/gen-$size.time") $(( $(rss_of "$work/gen-$size.time") / 1024 ))" > "$slide.gen"
    echo "  generated in $(cut -d' ' -f1 "$slide.gen") s, peak RSS $(cut -d' ' -f2 "$slide.gen") MiB, $(du -h "$slide" | cut -f1)" >&2
  fi
  read -r gen_wall gen_rss < "$slide.gen"
  store=$work/store-$size
  rm -rf "$store"
  sync
  # Warm: this VM pages out memory idle for ~30 s (DAMON), page cache included.
  cat "$slide" > /dev/null
  "$mltool" --version > /dev/null
  echo "tiling $name ..." >&2
  /usr/bin/time -v -o "$work/tile-$size.time" "$mltool" tile "$slide" -o "$store" \
    --mpp 0.5 --threads 2 --json > "$work/tile-$size.json" 2> "$work/tile-$size.err" || {
    rc=$?; cat "$work/tile-$size.err" >&2; die "mltool tile failed (exit $rc) on $slide"; }
  ex_wall=- ex_rss=- ex_json=-
  if [[ $with_extract == 1 ]]; then
    features=$work/features-$size
    rm -rf "$features"
    cat "$slide" > /dev/null
    echo "extracting features of $name straight from the slide ..." >&2
    /usr/bin/time -v -o "$work/extract-$size.time" "$mltool" extract "$slide" -o "$features" \
      --mpp 0.5 --threads 2 "${extract_args[@]}" --json > "$work/extract-$size.json" \
      2> "$work/extract-$size.err" || {
      rc=$?; cat "$work/extract-$size.err" >&2; die "mltool extract failed (exit $rc) on $slide"; }
    ex_wall=$(wall_of "$work/extract-$size.time") ex_rss=$(rss_of "$work/extract-$size.time")
    ex_json=$work/extract-$size.json
    rm -rf "$features"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$(stat -c %s "$slide")" \
    "$gen_wall" "$gen_rss" "$(wall_of "$work/tile-$size.time")" "$(rss_of "$work/tile-$size.time")" \
    "$(du -sk "$store" | cut -f1)" "$work/tile-$size.json" "$ex_wall" "$ex_rss" "$ex_json" \
    >> "$work/results.tsv"
  echo "  $(tail -1 "$work/results.tsv")" >&2
  rm -rf "$store"
done

# What mltool tile holds before it reads anything: the libraries it is linked with (`help tile`
# starts the program as `tile` does, without the LibTorch module that --version loads).
/usr/bin/time -v -o "$work/version.time" "$mltool" help tile > /dev/null
baseline=$(( $(rss_of "$work/version.time") / 1024 ))
# What extract holds before it reads anything: LibTorch, which `mltool --version` loads.
/usr/bin/time -v -o "$work/torch.time" "$mltool" --version > /dev/null 2>&1
torch_baseline=$(( $(rss_of "$work/torch.time") / 1024 ))
"$py" - "$work/results.tsv" "$("$mltool" --version 2>&1 | head -1)" "$load_before" "$baseline" \
  "$torch_baseline" "${TILE_MEMORY_EXTRACT_ARGS:-}" <<'PY' | tee "$out/tile-memory.md"
import json, os, subprocess, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
machine = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True,
                         capture_output=True, text=True).stdout.strip()
mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
print(f"Machine: {machine}, {os.cpu_count()} cores, {mem:.0f} GiB, kernel {os.uname().release}; "
      f"{sys.argv[3]}. {sys.argv[2]}.")
print("`mltool tile SLIDE -o STORE --mpp 0.5 --threads 2` on generated slides "
      "(0.25 µm/px, JPEG Q80 tiled pyramidal TIFF, about 30% tissue in the same pattern).")
print()
print("| slide px | slide file | generation s / peak RSS MiB | grid tiles | tiles | tissue "
      "| mltool wall s | tiles/s | mltool peak RSS MiB | store MiB |")
print("|---|---|---|---|---|---|---|---|---|---|")
rss = []
for size, nbytes, gw, gr, wall, rk, store_kb, js, *_ in rows:
    j = json.load(open(js))
    s = j["slides"][0]
    gen = f"{float(gw):.0f} / {gr}"
    rss.append(int(rk) / 1024)
    print(f"| {int(size)}x{int(size)} | {int(nbytes) / 2**20:.0f} MiB | {gen} | {s['grid_tiles']} "
          f"| {j['tiles']} | {s['tissue_fraction']:.2f} | {float(wall):.1f} "
          f"| {j['tiles'] / float(wall):.0f} | {rss[-1]:.0f} | {int(store_kb) / 1024:.0f} |")
print()
print(f"Startup baseline: `mltool help tile` alone peaks at {sys.argv[4]} MiB RSS (the linked "
      "libraries and their initialisers), before any slide is opened.")
if len(rss) > 1:
    print(f"Peak RSS, largest slide / smallest: {rss[-1] / rss[0]:.2f} "
          f"(pixels {int(rows[-1][0]) ** 2 / int(rows[0][0]) ** 2:.0f}x); above the startup "
          f"baseline: {rss[0] - int(sys.argv[4]):.0f} MiB and {rss[-1] - int(sys.argv[4]):.0f} MiB.")
print("Generation figures are those of the run that made the slide (kept beside it as .gen).")
ex = [r for r in rows if r[9] != "-"]
if ex:
    torch0 = int(sys.argv[5])
    print()
    print(f"`mltool extract SLIDE -o F --mpp 0.5 --threads 2 {sys.argv[6]}`".replace(" `", "`")
          + " on the same slides (default model builtin:color-texture unless given), against "
          f"tile's peak; LibTorch alone (`mltool --version`) peaks at {torch0} MiB, which tile "
          "never loads:")
    print()
    print("| slide px | tiles | extract wall s | extract peak RSS MiB | tile peak RSS MiB "
          "| extract / tile | above each one's start: extract / tile (MiB) |")
    print("|---|---|---|---|---|---|---|")
    for size, _, _, _, wall, rk, _, js, ew, er, ejs in ex:
        e = json.load(open(ejs))
        t_mib, e_mib = int(rk) / 1024, int(er) / 1024
        print(f"| {int(size)}x{int(size)} | {e.get('rows')} | {float(ew):.1f} | {e_mib:.0f} "
              f"| {t_mib:.0f} | **{e_mib / t_mib:.2f}** (goal <= 1.2) "
              f"| {e_mib - torch0:.0f} / {t_mib - int(sys.argv[4]):.0f} |")
PY
