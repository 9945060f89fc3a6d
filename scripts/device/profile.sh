#!/usr/bin/env bash
# The profiling pass of a GPU run (scripts/device/run.sh, after the benchmarks): --profile
# traces of a few steps of what the benchmarks measured, on the data they made, then one
# summary line a trace (trace_summary.py: step time, GPU kernel share, host synchronisations,
# launches, peak memory) and the traces in one archive for Perfetto.
#
#   profile.sh MLTOOL ARCHIVE.tar.gz [--cpu-smoke]
#
# Traces (each skipped, with a line saying so, where its benchmark's data is absent):
#   train-mlp         the train benchmark's MLP, batch 512, pinned feed (steps 20-29)
#   sections-k1, -k4  the seed-003 CNN, batch 7,500 (--cpu-smoke: 64), plain and 4 sections
#   extract-uni-bf16  UNI over the UNI benchmark's tile store, bf16, batch 256 (batches 5-7)
set -uo pipefail
mltool=$1
archive=$2
smoke=0
[[ ${3:-} == --cpu-smoke ]] && smoke=1
here=$(cd "$(dirname "$0")" && pwd)
device=cuda
(( smoke )) && device=cpu
python=${MLTOOL_PYTHON:-python3}
traces=$(mktemp -d)
runs=$(mktemp -d)
trap 'rm -rf "$traces" "$runs"' EXIT

profile() {  # NAME COMMAND...: runs it, says how it went
  local name=$1
  shift
  if "$@" > "$runs/$name.log" 2>&1; then
    echo "profile $name: ok"
  else
    echo "profile $name: FAILED: $(tail -3 "$runs/$name.log")"
  fi
}

work=/tmp/mltool-train-bench
if [ -f "$work/ds/dataset.json" ]; then
  profile train-mlp "$mltool" train "$work/ds" --model "$work/mlp.json" -o "$runs/mlp" --overwrite \
    --device "$device" --feed pinned --batch 512 --epochs 1 --max-steps 40 --log-every 1000 -q \
    --profile "$traces/train-mlp.json" --profile-skip 20 --profile-steps 10
else
  echo "profile train-mlp: skipped (no $work/ds: the train benchmark did not run)"
fi

work=/tmp/mltool-sections-bench
ds=$(ls -d "$work"/ds-*/ 2> /dev/null | head -1)
if [ -n "$ds" ] && [ -f "$work/cnn.json" ]; then
  batch=7500
  (( smoke )) && batch=64
  for k in 1 4; do
    profile "sections-k$k" "$mltool" train "$ds" --model "$work/cnn.json" -o "$runs/k$k" --overwrite \
      --device "$device" --feed pinned --batch "$batch" --sections "$k" --epochs 1 --max-steps 6 \
      --log-every 1000 -q --profile "$traces/sections-k$k.json" --profile-skip 3 --profile-steps 2
  done
else
  echo "profile sections: skipped (no $work/ds-*: the sections benchmark did not run)"
fi

store=$(ls -d /tmp/mltool-extract-bench-uni/tiles-*.lmdb 2> /dev/null | head -1)
if [ -n "$store" ] && [ -f /tmp/mltool-uni.pt ]; then
  amp=(--amp bf16)
  (( smoke )) && amp=(--amp none)
  profile extract-uni-bf16 "$mltool" extract "$store" --model /tmp/mltool-uni.pt -o "$runs/uni" \
    --overwrite --device "$device" "${amp[@]}" --batch 256 -q \
    --profile "$traces/extract-uni-bf16.json" --profile-skip 5 --profile-steps 3
else
  echo "profile extract-uni: skipped (no UNI benchmark store or model)"
fi

shopt -s nullglob
files=("$traces"/*.json)
if (( ${#files[@]} )); then
  "$python" "$here/trace_summary.py" "${files[@]}" | sed "s|$traces/||"
  tar -czf "$archive" -C "$traces" .
  echo "profile: ${#files[@]} trace(s) in $(basename "$archive")"
else
  echo "profile: no trace written"
fi
