#!/usr/bin/env bash
# `mltool tile` side by side with its peers, in one run, on two generated slides of the same
# size (JPEG-compressed tiled pyramidal TIFF, 0.25 µm/px): one all tissue, one about 30% tissue.
#   - mltool tile SLIDE -o STORE --tile-size 256 --level 0 --format jpeg --quality 90
#       --threads $(nproc)                      (tissue detection on, --min-tissue 0.5; the
#       slide's own 256-px JPEG tiles pass through, --passthrough auto; once more, for
#       information, with --passthrough never: every tile decoded and encoded again)
#   - vips dzsave SLIDE OUT --depth one --tile-size 256 --overlap 0 --suffix .jpg[Q=90]
#       (libvips-tools; VIPS_CONCURRENCY defaults to the cores; writes every tile, background too)
#   - openslide-python DeepZoomGenerator, deepest level, Pillow JPEG Q90 into memory, one
#       process (bench/tile_deepzoom.py)
# Each under /usr/bin/time -v (wall time, peak RSS). Prints a markdown table with the ratios
# the goals are stated in, the size of mltool's store against the disk's write rate (dd, 1 GiB,
# fdatasync: the limit of a run that only copies compressed tiles), and writes it to
# OUTDIR/tile-bench.md.
#
#   bench/run-tile.sh [OUTDIR]      (default ${MLTOOL_CACHE:-~/.cache/mltool}/bench-tile)
#
# Needs build/bin/mltool (scripts/setup.sh + cmake --build build), the venv .venv
# (scripts/requirements.txt) and `vips` (apt-get install libvips-tools). Generated slides are
# kept in OUTDIR/slides/, named by their parameters, and reused by later runs.
# Environment: TILE_BENCH_SIZE (square side in px, default 40960: on 2 cores the peers run
# 15-55 s, mltool 5-12 s, the whole script about 8 min once the slides exist), TILE_BENCH_REPEATS (runs of each
# tool, the best wall time is kept, default 2), TILE_BENCH_DZG_MAX_TILES (above this many
# tiles DeepZoomGenerator is timed on an evenly spread subset and its whole-slide time
# extrapolated, default 60000, ~2 min), TILE_BENCH_THREADS1 (1: also time, once each, mltool
# --threads 1, to see how it scales, and, where mltool has --reader, --reader openslide, to
# see what OpenSlide's read_region costs; default 1), TILE_BENCH_SKIP_BLANKS (1: also time
# `vips dzsave --skip-blanks 5` on the 30% slide, dzsave's own background skipping; default 1).
# These two extra rows are for information; the goals are against plain dzsave and DZG.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MLTOOL_BUILD_DIR:-build}
mltool=$(realpath -m "$build/bin/mltool")
py=$(realpath -m "${MLTOOL_VENV:-.venv}")/bin/python
out=${1:-${MLTOOL_CACHE:-$HOME/.cache/mltool}/bench-tile}
size=${TILE_BENCH_SIZE:-40960}
repeats=${TILE_BENCH_REPEATS:-2}
dzg_max=${TILE_BENCH_DZG_MAX_TILES:-60000}
threads1=${TILE_BENCH_THREADS1:-1}
skip_blanks=${TILE_BENCH_SKIP_BLANKS:-1}
threads=$(nproc)

die() { echo "run-tile.sh: $*" >&2; exit 1; }
[[ -x $mltool ]] || die "$mltool missing: build first (scripts/setup.sh; cmake --build $build)"
"$mltool" help tile >/dev/null 2>&1 || die "$mltool has no 'tile' subcommand"
[[ -x $py ]] || die "$py missing: scripts/setup.sh makes the venv"
command -v vips >/dev/null || die "vips missing: apt-get install libvips-tools"
[[ -x /usr/bin/time ]] || die "/usr/bin/time missing: apt-get install time"
"$py" -c 'import openslide, PIL, pyvips' || die "the venv lacks openslide-python/Pillow/pyvips"
has_reader=$("$mltool" help tile 2>&1 | grep -e '--reader' || true)
has_passthrough=$("$mltool" help tile 2>&1 | grep -e '--passthrough' || true)

mkdir -p "$out/slides"
out=$(cd "$out" && pwd)
work=$out/work
rm -rf "$work"
mkdir -p "$work"
results=$work/results.tsv
: > "$results"

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $threads cores, $(free -g | awk '/^Mem:/{print $2}') GiB, $(uname -r)" >&2
load_before="load average before the runs $(cut -d' ' -f1 /proc/loadavg), compilers (cc1plus) running: $(pgrep -c cc1plus || true)"
echo "$load_before" >&2

# Generated slides, cached by their parameters (a half-written one is never reused).
slide_for() {  # FRACTION -> path
  local frac=$1 name path
  name=slide_${size}x${size}_f${frac}_mpp0.25_jpegq80.tif
  path=$out/slides/$name
  if [[ ! -s $path ]]; then
    echo "generating $name ..." >&2
    /usr/bin/time -f "  generated in %e s, peak RSS %M KB" \
      "$py" scripts/fixtures/make_slides.py "$out/slides" --size "${size}x${size}" \
      --tissue-fraction "$frac" --mpp 0.25 --compression jpeg --quality 80 \
      --name ".partial-$name" >/dev/null
    mv "$out/slides/.partial-$name" "$path"
  fi
  echo "$path"
}

# Every timed run starts warm: this VM's kernel pages out memory left idle for ~30 s (DAMON
# proactive reclaim, kdamond), page cache and the tools' own libraries included, so the slide
# is read again and each tool started once (untimed) right before every timed run.
warm() {
  cat "$slide" > /dev/null
  "$mltool" --version > /dev/null
  vips --version > /dev/null
  "$py" -c 'import openslide, openslide.deepzoom, PIL.Image'
}

# timed LABEL SLIDEKEY REP CMD... : runs CMD under /usr/bin/time -v, stdout to $work/LABEL.out
timed() {
  local label=$1 key=$2 rep=$3
  shift 3
  sync
  warm
  /usr/bin/time -v -o "$work/$label.time" "$@" > "$work/$label.out" 2> "$work/$label.err" || {
    local rc=$?
    cat "$work/$label.err" >&2
    die "$label failed (exit $rc): $*"
  }
  local wall rss cpu
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/{n=split($2,p,":"); s=0; for(i=1;i<=n;i++) s=s*60+p[i]; print s}' "$work/$label.time")
  rss=$(awk -F': ' '/Maximum resident set size/{print $2}' "$work/$label.time")
  cpu=$(awk -F': ' '/Percent of CPU/{sub("%","",$2); print $2}' "$work/$label.time")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$key" "$label" "$rep" "$wall" "$rss" "$cpu" >> "$results"
}

for frac in 1 0.3; do
  slide=$(slide_for "$frac")
  key=f$frac
  for rep in $(seq "$repeats"); do
    echo "slide $key, run $rep/$repeats ..." >&2
    rm -rf "$work/store"
    timed "$key.mltool.$rep" "$key" "$rep" "$mltool" tile "$slide" -o "$work/store" \
      --tile-size 256 --level 0 --format jpeg --quality 90 --threads "$threads" --json
    du -sk "$work/store" | cut -f1 > "$work/$key.mltool.$rep.kb"  # what it wrote, for the disk rate
    rm -rf "$work/store"
    if [[ -n $has_passthrough && $rep == 1 ]]; then  # today's path: decode and encode every tile
      timed "$key.mltoolnp.$rep" "$key" "$rep" "$mltool" tile "$slide" -o "$work/store" \
        --tile-size 256 --level 0 --format jpeg --quality 90 --threads "$threads" \
        --passthrough never --json
      rm -rf "$work/store"
    fi
    if [[ $threads1 == 1 && $rep == 1 ]]; then  # once: where the time goes, not a goal
      timed "$key.mltool1.$rep" "$key" "$rep" "$mltool" tile "$slide" -o "$work/store" \
        --tile-size 256 --level 0 --format jpeg --quality 90 --threads 1 --json
      rm -rf "$work/store"
      if [[ -n $has_reader ]]; then  # OpenSlide's read_region instead of mltool's own decoder
        timed "$key.mltoolos.$rep" "$key" "$rep" "$mltool" tile "$slide" -o "$work/store" \
          --tile-size 256 --level 0 --format jpeg --quality 90 --threads "$threads" \
          --reader openslide --json
        rm -rf "$work/store"
      fi
    fi
    rm -rf "$work/dz" "$work/dz_files" "$work/dz.dzi"
    timed "$key.dzsave.$rep" "$key" "$rep" vips dzsave "$slide" "$work/dz" --depth one \
      --tile-size 256 --overlap 0 --suffix '.jpg[Q=90]'
    find "$work/dz_files" -name '*.jpg' | wc -l > "$work/$key.dzsave.$rep.out"
    rm -rf "$work/dz_files" "$work/dz.dzi"
    if [[ $skip_blanks == 1 && $frac != 1 ]]; then  # dzsave's own background skipping
      timed "$key.dzskip.$rep" "$key" "$rep" vips dzsave "$slide" "$work/dz" --depth one \
        --tile-size 256 --overlap 0 --suffix '.jpg[Q=90]' --skip-blanks 5
      find "$work/dz_files" -name '*.jpg' | wc -l > "$work/$key.dzskip.$rep.out"
      rm -rf "$work/dz_files" "$work/dz.dzi"
    fi
    timed "$key.dzg.$rep" "$key" "$rep" "$py" bench/tile_deepzoom.py "$slide" \
      --tile-size 256 --quality 90 --max-tiles "$dzg_max"
  done
done

# The disk's sequential write rate, the limit of a tool that only copies compressed tiles:
# 1 GiB written and fdatasync'ed (LMDB syncs at each commit), in the directory of the stores.
disk=$(dd if=/dev/zero of="$work/dd.test" bs=1M count=1024 conv=fdatasync 2>&1 |
  awk '/copied/{print $(NF-1), $NF}')
rm -f "$work/dd.test"
# mltool's fixed cost: starting the binary (its linked libraries) before any slide is read.
"$mltool" --version > /dev/null
startup=$(for i in 1 2 3; do /usr/bin/time -f '%e %M' "$mltool" --version 2>&1 >/dev/null | tail -1; done |
  sort -n | head -1)
versions="$("$mltool" --version 2>&1 | grep -E '^(mltool|OpenSlide|libvips)' | paste -sd' ' | sed 's/ OpenSlide/ with OpenSlide/; s/ libvips/, libvips/'); $(vips --version);"
versions+=" DeepZoomGenerator: $("$py" -c 'import openslide, PIL; print(f"OpenSlide {openslide.__library_version__} (openslide-python {openslide.__version__}), Pillow {PIL.__version__}")')"
"$py" - "$work" "$size" "$threads" "$versions" "$load_before" "$startup" "$disk" <<'PY' | tee "$out/tile-bench.md"
import collections, json, os, subprocess, sys
work, size, threads, versions, load = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
startup_s, startup_kb = sys.argv[6].split()
disk = sys.argv[7]
runs = collections.defaultdict(list)
for line in open(os.path.join(work, "results.tsv")):
    key, label, rep, wall, rss, cpu = line.split("\t")
    tool = label.split(".")[-2]
    out = open(os.path.join(work, label + ".out")).read()
    r = {"wall": float(wall), "rss": int(rss) / 1024, "cpu": int(cpu)}
    if tool.startswith("mltool"):
        j = json.loads(out)
        s = j["slides"][0]
        r.update(tiles=j["tiles"], grid=s["grid_tiles"], tissue=s["tissue_fraction"],
                 reader=s.get("reader"), passthrough=s.get("passthrough"))
        kb = os.path.join(work, label + ".kb")
        if os.path.exists(kb):
            r["store_mb"] = int(open(kb).read()) / 1024
    elif tool in ("dzsave", "dzskip"):
        r["tiles"] = int(out)
    else:
        j = json.loads(out)
        r.update(tiles=j["tiles"], level_tiles=j["level_tiles"], subset=j["subset"], dzg=j)
        if j["subset"]:  # whole-slide time extrapolated from the subset's rate
            r["measured_wall"] = r["wall"]
            r["wall"] = j["whole_slide_seconds"]
            r["tiles"] = j["level_tiles"]
    runs[(key, tool)].append(r)
best = {k: min(v, key=lambda r: r["wall"]) for k, v in runs.items()}
nmax = max(len(v) for v in runs.values())
for k, v in runs.items():  # peak RSS: the largest over the repeats
    best[k]["rss"] = max(r["rss"] for r in v)
    best[k]["n"] = len(v)

machine = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True,
                         capture_output=True, text=True).stdout.strip()
mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
print(f"Machine: {machine}, {threads} cores, {mem:.0f} GiB, kernel {os.uname().release}; "
      f"{load}; load average after the runs {open('/proc/loadavg').read().split()[0]}.")
print(f"{versions}.")
print(f"Slides: {size}x{size} px at 0.25 µm/px, JPEG Q80 tiled (256) pyramidal TIFF "
      f"(scripts/fixtures/make_slides.py); tiles 256 px at level 0, JPEG Q90. "
      f"Wall time is the best of {nmax} run(s), all warm "
      f"(slide read and each tool started once right before every run); peak RSS the largest.")
print()
names = {"mltool": f"mltool tile --threads {threads}", "mltool1": "mltool tile --threads 1",
         "mltoolnp": f"mltool tile --threads {threads} --passthrough never",
         "mltoolos": f"mltool tile --threads {threads} --reader openslide",
         "dzsave": "vips dzsave", "dzskip": "vips dzsave --skip-blanks 5", "dzg": "DeepZoomGenerator + Pillow (1 process)"}
slides = {"f1": "all tissue", "f0.3": "~30% tissue"}
print("| slide | tool | tiles | wall s | tiles/s | CPU % | peak RSS MiB "
      "| mltool speed-up, wall | mltool speed-up, tiles/s |")
print("|---|---|---|---|---|---|---|---|---|")
goals = []
for key in ("f1", "f0.3"):
    m = best.get((key, "mltool"))
    if not m:
        continue
    for tool in ("mltool", "mltoolnp", "mltool1", "mltoolos", "dzsave", "dzskip", "dzg"):
        r = best.get((key, tool))
        if not r:
            continue
        rate = r["tiles"] / r["wall"]
        label = names[tool] + (f" ({r['n']} run)" if r["n"] < nmax else "")
        tiles = f"{r['tiles']}"
        if tool.startswith("mltool"):
            tiles += f" of {r['grid']} (tissue {r['tissue']:.2f})"
            if r.get("reader"):
                label += f" [reader: {r['reader']}]"
            if r.get("passthrough"):
                label += f" [passed through: {r['passthrough']}]"
        if tool == "dzg" and r["subset"]:
            tiles += f" (timed on {r['dzg']['tiles']}, extrapolated)"
            rate = r["dzg"]["tiles_per_s"]
        up_wall = up_rate = ""
        if tool in ("dzsave", "dzskip", "dzg"):
            up_wall = f"{r['wall'] / m['wall']:.2f}"
            up_rate = f"{(m['tiles'] / m['wall']) / rate:.2f}"
            goal = {("f1", "dzsave"): 5, ("f0.3", "dzsave"): 3}.get((key, tool), 20)
            if tool != "dzskip":
                goals.append((slides[key], names[tool], r["wall"] / m["wall"], goal))
        print(f"| {slides[key]} | {label} | {tiles} | {r['wall']:.2f} | {rate:.0f} "
              f"| {r['cpu']} | {r['rss']:.0f} | {up_wall} | {up_rate} |")
print()
print("Output: mltool commits the tiles to LMDB (fdatasync at each commit); dzsave writes one "
      "file per tile (no fsync); DeepZoomGenerator encodes into memory and writes nothing. "
      "Tiles/s = tiles produced / wall time of the whole process (mltool: tissue tiles only; "
      "dzsave and DeepZoomGenerator: every tile, background included).")
print(f"mltool's fixed cost, in every mltool row: `mltool --version` alone takes "
      f"{float(startup_s):.2f} s and peaks at {int(startup_kb) / 1024:.0f} MiB RSS (warm).")
for key in ("f1", "f0.3"):
    m = best.get((key, "mltool"))
    if m and m.get("store_mb"):
        print(f"Disk: {slides[key]}, mltool wrote a {m['store_mb']:.0f} MB store in {m['wall']:.2f} s "
              f"({m['store_mb'] / m['wall']:.0f} MB/s); the disk writes {disk} "
              f"(dd, 1 GiB, fdatasync).")
print()
print("Goals (time to finish the whole slide, mltool's wall time against the peer's):")
print()
for slide, tool, ratio, goal in goals:
    ok = "met" if ratio >= goal else f"MISSED (needs {goal / ratio:.2f}x faster)"
    print(f"- {slide}, vs {tool}: {ratio:.2f}x (goal ≥ {goal}x): {ok}")
PY
rm -rf "$work/store" "$work/dz_files"
