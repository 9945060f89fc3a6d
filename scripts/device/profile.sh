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
#   sections-k1, -k4  the seed-003 CNN, batch 7,500 (--cpu-smoke: 64), plain and 4 sections;
#                     sections-k4-pytorch: checkpoint_sequential's step at 4 segments (written
#                     by the sections benchmark, --torch-traces)
#   extract-uni-bf16  UNI over the UNI benchmark's tile store, bf16, batch 256 (batches 5-7);
#                     -start: batches 0-4, -start-nofuser: the same with PYTORCH_TENSOREXPR=0
#   extract-r50-bf16  the same three of ResNet-50 over the extract benchmark's store
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
  # PyTorch's checkpoint_sequential at 4 segments, traced by the sections benchmark, beside
  # mltool's: where the two peaks part
  cp /tmp/mltool-sections-traces/pytorch-k4.json "$traces/sections-k4-pytorch.json" 2> /dev/null ||
    echo "profile sections-k4-pytorch: missing (the sections benchmark wrote no PyTorch trace)"
else
  echo "profile sections: skipped (no $work/ds-*: the sections benchmark did not run)"
fi

# extract: the steady batches (5-7) and, apart, the start (batches 0-4: where the first
# batches' set-up goes), the latter with TorchScript's fuser and without (PYTORCH_TENSOREXPR=0:
# its kernels are compiled at the second batch).
amp=(--amp bf16)
(( smoke )) && amp=(--amp none)
extract_traces() {  # NAME STORE MODEL [ARG...]: the three traces of one model
  local name=$1 store=$2 model=$3
  shift 3
  local run=("$mltool" extract "$store" --model "$model" -o "$runs/$name" --overwrite --device "$device"
    "${amp[@]}" --batch 256 -q "$@")
  profile "$name" "${run[@]}" --profile "$traces/$name.json" --profile-skip 5 --profile-steps 3
  profile "$name-start" "${run[@]}" --profile "$traces/$name-start.json" --profile-skip 0 --profile-steps 5
  profile "$name-start-nofuser" env PYTORCH_TENSOREXPR=0 "${run[@]}" \
    --profile "$traces/$name-start-nofuser.json" --profile-skip 0 --profile-steps 5
}
store=$(ls -d /tmp/mltool-extract-bench-uni/tiles-*.lmdb 2> /dev/null | head -1)
if [ -n "$store" ] && [ -f /tmp/mltool-uni.pt ]; then
  extract_traces extract-uni-bf16 "$store" /tmp/mltool-uni.pt
else
  echo "profile extract-uni: skipped (no UNI benchmark store or model)"
fi
store=$(ls -d /tmp/mltool-extract-bench/tiles-*.lmdb 2> /dev/null | head -1)
if [ -n "$store" ] && [ -f /tmp/mltool-extract-bench/model.pt ]; then
  extract_traces extract-r50-bf16 "$store" /tmp/mltool-extract-bench/model.pt --input-size 224
else
  echo "profile extract-r50: skipped (no extract benchmark store or model)"
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
