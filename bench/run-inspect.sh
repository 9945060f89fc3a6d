#!/usr/bin/env bash
# `mltool inspect` throughput from the page cache, plain and --deep (every CRC, record, index
# line and row index verified), on a dataset made by `mltool pack`: tile records (index, label,
# slide) from a synthetic one-column float16 feature store with MILLIONS million rows, one of
# four labels each, packed into SHARDS shards. Prints MB/s of shard bytes for docs/benchmarks.md.
#
#   bench/run-inspect.sh [MILLIONS [SHARDS]]      default 20 16 (about 1.6 GB of shards)
#
# Needs build/ and the venv (.venv, numpy). The dataset is kept in
# ${INSPECT_BENCH_WORK:-/tmp/mltool-inspect-bench} for later runs. Best of 3 for each mode.
set -euo pipefail
cd "$(dirname "$0")/.."
millions=${1:-20} shards=${2:-16}
build=${MLTOOL_BUILD_DIR:-build}
mltool=$(realpath "$build/bin/mltool")
py=.venv/bin/python
work=${INSPECT_BENCH_WORK:-/tmp/mltool-inspect-bench}/$millions-$shards
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(uname -r)"
if [ ! -f "$work/ds/dataset.json" ]; then
  mkdir -p "$work/features"
  "$py" - "$work" "$millions" <<'PY'
import json, os, sys
import numpy as np
work, rows = sys.argv[1], int(float(sys.argv[2]) * 1_000_000)
store = os.path.join(work, "features")
slides = 1000
per_slide = -(-rows // slides)
mm = np.lib.format.open_memmap(os.path.join(store, "features.npy"), mode="w+", dtype="<f2", shape=(rows, 1))
mm[:, 0] = np.arange(rows) % 1000
mm.flush()
del mm
names = np.array(["tumor", "stroma", "necrosis", "normal"])
labels = names[np.random.default_rng(0).integers(0, 4, size=rows)]
with open(os.path.join(store, "keys.txt"), "w") as keys, open(os.path.join(work, "labels.csv"), "w") as csv:
    csv.write("key,label\n")
    for start in range(0, rows, 1_000_000):
        block = [f"slide-{r // per_slide:05d}/{(r % per_slide) // 1000:06d}_{r % 1000:06d}"
                 for r in range(start, min(rows, start + 1_000_000))]
        keys.write("\n".join(block) + "\n")
        csv.write("".join(f"{k},{l}\n" for k, l in zip(block, labels[start:start + len(block)])))
with open(os.path.join(store, "features.json"), "w") as f:
    json.dump({"format": "mltool.features", "format_version": 1, "created_by": "run-inspect.sh",
               "rows": rows, "dims": 1, "dtype": "float16",
               "files": {"keys": "keys.txt", "matrix": "features.npy"}, "model": {"name": "synthetic"}}, f)
PY
  "$mltool" pack "$work/features" --labels "$work/labels.csv" -o "$work/ds" --split train=1 \
    --shards "$shards" --overwrite -q
fi
cat "$work"/ds/*.tfrecord "$work"/ds/*.idx > /dev/null  # into the page cache
bytes=$(cat "$work"/ds/*.tfrecord | wc -c)
records=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['records'])" "$work/ds/dataset.json")
echo "dataset: $records records in $shards shards, $bytes bytes ($((bytes / records)) bytes a frame)"
# Peak anonymous memory (heap, stacks) of a run, polled from /proc: the shards' pages mapped
# from the page cache count in the RSS but are not memory inspect allocates.
anon_peak() {
  "$@" > /dev/null & local pid=$! peak=0 kb
  while kill -0 "$pid" 2>/dev/null; do
    kb=$(awk '/^RssAnon/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    if [ -n "$kb" ] && [ "$kb" -gt "$peak" ]; then peak=$kb; fi
    sleep 0.01
  done
  wait "$pid"
  echo "$peak"
}
echo "| mode | seconds (best of 3) | MB/s | records/s | peak RSS MiB (mapped shards included) | peak anonymous MiB |"
echo "|---|---|---|---|---|---|"
for mode in plain deep; do
  flag=$([ "$mode" = deep ] && echo --deep || true)
  best= rss=
  for _ in 1 2 3; do
    t0=$(date +%s.%N)
    /usr/bin/time -f %M -o "$work/rss" "$mltool" inspect "$work/ds" $flag --json > "$work/$mode.json"
    t=$(echo "$(date +%s.%N) - $t0" | bc)
    if [ -z "$best" ] || (( $(echo "$t < $best" | bc) )); then best=$t rss=$(cat "$work/rss"); fi
  done
  anon=$(anon_peak "$mltool" inspect "$work/ds" $flag --json -q)
  echo "| inspect${flag:+ $flag} | $(printf %.3f "$best") | $(echo "$bytes / $best / 1000000" | bc) |" \
       "$(echo "$records / $best / 1000000" | bc -l | xargs printf %.1f) M | $((rss / 1024)) | $(echo "$anon / 1024" | bc -l | xargs printf %.1f) |"
done
