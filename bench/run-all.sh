#!/usr/bin/env bash
# Runs every bench/run-*.sh in turn, on this machine, and says where each figure goes in
# docs/benchmarks.md. Names the machine first (CPU model, cores, memory, GPU). The GPU
# benchmarks (run-extract.sh, run-train.sh, run-sections.sh) are skipped, with a line saying so, when
# nvidia-smi finds no GPU. A benchmark that fails is reported and the others go on; the exit
# status is 1 if any failed.
#
#   bench/run-all.sh [--list] [--out DIR] [NAME...]
#
#   --list     print the machine and what would run (scripts, arguments, outputs), run nothing
#   --out DIR  where each benchmark's log (NAME.log) and output folder (NAME/) go
#              (default ${MLTOOL_CACHE:-~/.cache/mltool}/bench-all/YYYYMMDD-HHMMSS)
#   NAME...    only these (tfrecord, tile, tile-dicom, tile-lazyslide, tile-memory, view, pack, inspect, extract, train)
#
# Each script keeps its own defaults and environment variables (see its header); their inputs
# are cached under /tmp or ~/.cache/mltool and reused by later runs. Together they take tens of
# minutes and several GB of disk (run-tile-memory.sh makes a 100000² slide, run-inspect.sh a
# 1.6 GB dataset).
# They need a Release build (scripts/setup.sh), the venv (.venv), and some of them the
# TensorFlow venv (scripts/fixtures/tf_interop.sh), libvips-tools and /usr/bin/time.
set -euo pipefail
cd "$(dirname "$0")/.."

list=0 out= names=()
while [ $# -gt 0 ]; do
  case $1 in
    --list) list=1; shift ;;
    --out) [ $# -ge 2 ] || { echo "run-all.sh: --out needs a directory" >&2; exit 1; }; out=$2; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run-all.sh: unknown option $1 (see --help)" >&2; exit 1 ;;
    *) names+=("$1"); shift ;;
  esac
done
out=${out:-${MLTOOL_CACHE:-$HOME/.cache/mltool}/bench-all/$(date +%Y%m%d-%H%M%S)}
for n in "${names[@]}"; do
  [[ $n != all && -f bench/run-$n.sh ]] || { echo "run-all.sh: no bench/run-$n.sh" >&2; exit 1; }
done

# name | needs a GPU | takes OUTDIR as its first argument | what it writes | where it goes in docs/benchmarks.md
table='tfrecord|no|no|stdout|"CRC32C and TFRecord (foundation)": the CRC32C line and the mltool / TensorFlow / raw write table
tile|no|yes|OUTDIR/tile-bench.md|"mltool tile": the table of mltool tile vs vips dzsave vs DeepZoomGenerator
tile-dicom|no|yes|OUTDIR/tile-dicom-bench.md|"mltool tile", "DICOM WSI passthrough": the DICOM series with and without passthrough, beside its TIFF (needs run-tile.sh'"'"'s cached slide)
tile-lazyslide|no|yes|OUTDIR/tile-lazyslide.md, tile-lazyslide.json|"mltool tile", "Against LazySlide": mltool tile against LazySlide on the real slide and a 16384² slide (LazySlide'"'"'s venv made on first use)
tile-memory|no|yes|OUTDIR/tile-memory.md|"mltool tile": the peak-RSS-against-slide-size table (bench/run-tile-memory.sh); "mltool extract SLIDES": its extract-against-tile peak RSS table
view|no|yes|OUTDIR/view.md|"mltool view (issue 55)": mltool view against dzsave on the real slide and a generated 20000² slide (VIEW_BENCH_SIZE=100000: the large case)
extract-slides|no|yes|OUTDIR/extract-slides.md, extract-slides.json|"mltool extract SLIDES": the tile + extract STORE against extract SLIDES table
trident|no|yes|OUTDIR/trident.md, trident.json|"mltool extract SLIDES": the table against TRIDENT (needs TRIDENT_DIR, a TRIDENT checkout: bench/run-trident.sh --help)
pack|no|no|stdout|"mltool pack": a row of the mltool / TensorFlow table (default size: the 625,000-record row)
inspect|no|no|stdout|"mltool inspect": the inspect / inspect --deep table (also docs/inspect.md, "Performance")
extract|yes|yes|OUTDIR/extract-bench.md, extract-bench.json|"GPU": mltool extract vs the DataLoader baseline and the model alone, with the device name
train|yes|yes|OUTDIR/train-bench.md, train-bench.json|"GPU": mltool train feeds vs the PyTorch loops, with the device name (also docs/train.md, "Performance")
sections|yes|yes|OUTDIR/sections-bench.md, sections-bench.json|"GPU": mltool train --sections 2/4/8 vs plain vs checkpoint_sequential (seed 003), with the device name'

field() { awk -F'|' -v n="$1" -v f="$2" '$1 == n { print $f }' <<<"$table"; }
docs_for() {  # where bench NAME's figures go
  local d
  d=$(field "$1" 5)
  echo "${d:-no entry yet: add bench/run-$1.sh to the table in bench/run-all.sh and a section to docs/benchmarks.md}"
}
output_of() {  # what bench NAME writes its figures to
  local w
  w=$(field "$1" 4)
  w=${w:-stdout}
  if [ "$w" = stdout ]; then echo "$out/$1.log"; else echo "${w//OUTDIR/$out/$1}"; fi
}

# --- the machine ---------------------------------------------------------------------------
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
mem=$(free -g | awk '/^Mem:/ { print $2 }')
gpu=
if command -v nvidia-smi >/dev/null 2>&1; then
  # "NAME, MEMORY" per GPU; anything else ("No devices were found") is no GPU
  gpu=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | grep ', ' | sed 's/, / (/; s/$/)/' |
        awk '{ a[$0]++ } END { for (g in a) printf "%s%d x %s", (n++ ? ", " : ""), a[g], g }' || true)
fi
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores, ${mem} GiB memory, $(uname -r)"
echo "GPU: ${gpu:-none (nvidia-smi finds no GPU)}"
echo "build: $(build/bin/mltool --version 2>/dev/null | head -n 1 || echo 'build/bin/mltool missing: run scripts/setup.sh')"

# --- what to run: the table's order, then any bench/run-*.sh it does not know yet ----------
all=($(cut -d'|' -f1 <<<"$table"))
for f in bench/run-*.sh; do
  name=${f#bench/run-}
  name=${name%.sh}
  [[ $name == all || " ${all[*]} " == *" $name "* ]] || all+=("$name")
done
scripts=()
for name in "${all[@]}"; do
  [ -f "bench/run-$name.sh" ] || continue
  if [ ${#names[@]} -gt 0 ] && [[ " ${names[*]} " != *" $name "* ]]; then continue; fi
  scripts+=("$name")
done

args_for() {  # the arguments run-all passes to bench/run-NAME.sh
  if [ "$(field "$1" 3)" = yes ]; then echo "$out/$1"; fi
}

echo
echo "output: $out (NAME.log: everything a benchmark printed; NAME/: its own output folder)"
for name in "${scripts[@]}"; do
  needs=$(field "$name" 2)
  if [ "$needs" = yes ] && [ -z "$gpu" ]; then
    printf '  %-12s skipped: no GPU\n' "$name"
  else
    printf '  %-12s bench/run-%s.sh %s\n' "$name" "$name" "$(args_for "$name")"
  fi
done
if (( list )); then
  echo
  echo "where the figures go in docs/benchmarks.md:"
  for name in "${scripts[@]}"; do
    printf '  %-12s %s\n      → %s\n' "$name" "$(output_of "$name")" "$(docs_for "$name")"
  done
  exit 0
fi

# --- run -----------------------------------------------------------------------------------
mkdir -p "$out"
results=()
failed=0
for name in "${scripts[@]}"; do
  if [ "$(field "$name" 2)" = yes ] && [ -z "$gpu" ]; then
    echo "== $name: skipped: no GPU"
    results+=("$(printf '%-12s %-8s %6s  %s' "$name" skipped - "no GPU")")
    continue
  fi
  mapfile -t args < <(args_for "$name")
  echo "== $name: bench/run-$name.sh ${args[*]} (log: $out/$name.log)"
  start=$SECONDS
  set +e
  bash "bench/run-$name.sh" "${args[@]}" 2>&1 | tee "$out/$name.log"
  code=${PIPESTATUS[0]}
  set -e
  if [ "$code" = 0 ]; then status=ok; else status="exit $code"; failed=1; fi
  results+=("$(printf '%-12s %-8s %5ds  %s' "$name" "$status" $((SECONDS - start)) "$out/$name.log")")
done

echo
echo "== summary ($out)"
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores, ${mem} GiB memory; GPU: ${gpu:-none}"
printf '%s\n' "${results[@]}"
echo
echo "where the figures go in docs/benchmarks.md (give the machine line above with them, and the date):"
for name in "${scripts[@]}"; do
  if [ "$(field "$name" 2)" = yes ] && [ -z "$gpu" ]; then
    printf '  %-12s skipped (no GPU)\n      → %s\n' "$name" "$(docs_for "$name")"
  else
    printf '  %-12s %s\n      → %s\n' "$name" "$(output_of "$name")" "$(docs_for "$name")"
  fi
done
echo "  (the LMDB layer's figures come from build/bin/bench_lmdb: ctest --test-dir build -L bench)"
exit "$failed"
