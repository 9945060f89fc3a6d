#!/usr/bin/env bash
# Runs ON THE GPU MACHINE (through the device tool, from the repository root, with `.device`
# carried): builds mltool against the machine's own torch and CUDA (MLTOOL_WITH_SLIDE=OFF: no
# `mltool tile`, but `mltool extract`), runs the gpu tests, the extract benchmark, then the
# unit tests and the cli tests that need no slides. Results and logs go to $OUT.
#
#   from a session:  scripts/device/prepare.sh, then the device tool's run with
#     command: bash scripts/device/run.sh     carry: [".device"]     timeout_s: 600
#
#   run.sh [LABELS]    ctest labels to run (default 'gpu|unit'); gpu ones first
#
# Steps, what only this machine can tell first; a step that fails is reported and the later
# ones still run where they can:
#   1. python-lmdb from .device/wheels into /tmp/site (PYTHONPATH): the gpu test and the
#      benchmark write tile stores with it
#   2. configure build-device; build mltool and the gpu test programs
#   3. ctest -L gpu (-V: the measured differences are in the log even when they pass)
#   4. bench/run-extract.sh $OUT/bench, then bench/run-train.sh $OUT/bench, then
#      bench/run-sections.sh $OUT/bench (issue 7's seed-003 case; its table is appended to
#      summary.txt), each with what is left; DEVICE_BENCH (default "extract train sections")
#      picks which, e.g. DEVICE_BENCH=sections in a second call
#   5. build everything else; ctest with the other LABELS, then cli_help and cli_index
# The whole run keeps within RUN_BUDGET_S (default 560) seconds of wall time, inside the
# device tool's 600: each step's timeout is what is left, and the benchmark's tile count
# (EXTRACT_BENCH_N, else 20000) shrinks when little is left. build-device stays on the machine
# while it is warm, so a second run continues an interrupted build.
#
# $OUT (the device tool brings back at most 8 files): summary.txt (one line per step, the
# ctest totals and the benchmark table; also printed at the end), env.txt (GPU, tools,
# versions, mltool --version), build.log, ctest-gpu.log, ctest-unit.log, bench.log,
# bench/extract-bench.md, bench/train-bench.md (the .json the benchmarks write beside them are
# moved to /tmp/mltool-bench-json, to keep within the 8 files; the .md tables hold the figures).
set -uo pipefail
labels=${1:-gpu|unit}
budget=${RUN_BUDGET_S:-560}
t_start=$SECONDS
out=${OUT:-/tmp/mltool-device-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
summary=$out/summary.txt
: > "$summary"
failures=0

left() { echo $(( budget - (SECONDS - t_start) )); }
min() { if (( $1 < $2 )); then echo "$1"; else echo "$2"; fi; }
note() { echo "$*" | tee -a "$summary"; }

# step NAME LOG LIMIT CMD...: CMD (output appended to LOG) under a timeout of LIMIT seconds;
# one line in summary.txt; returns CMD's status (99: skipped for lack of time).
step() {
  local name=$1 log=$2 limit=$3
  shift 3
  if (( limit < 5 )); then
    note "$name: SKIPPED (${limit}s left of the ${budget}s budget)"
    failures=$((failures + 1))
    return 99
  fi
  echo "== $name (limit ${limit}s): $*" >> "$log"
  local t=$SECONDS rc
  timeout -k 10 "$limit" "$@" >> "$log" 2>&1
  rc=$?
  local took=$((SECONDS - t))
  if (( rc == 0 )); then
    note "$name: ok (${took}s)"
  else
    failures=$((failures + 1))
    if (( rc == 124 || rc == 137 )); then
      note "$name: TIMED OUT after ${took}s (limit ${limit}s; see $(basename "$log"))"
    else
      note "$name: FAILED (exit $rc, ${took}s; see $(basename "$log"))"
    fi
    echo "--- last lines of $(basename "$log"):"
    tail -n 30 "$log"
    echo "---"
  fi
  return $rc
}

prefix=$(pwd)/.device/prefix
[ -d "$prefix/usr" ] || { echo "device: .device/prefix missing: run scripts/device/prepare.sh and carry .device" >&2; exit 1; }
multiarch=$prefix/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$multiarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$multiarch/pkgconfig:$prefix/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$prefix

env_txt=$out/env.txt
{
  echo "date: $(date -u +%FT%TZ); $(nproc) cores; kernel $(uname -r)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi not available"
  echo "python3: $(command -v python3)"
  python3 -c 'import sys, torch, numpy, PIL; print("Python", sys.version.split()[0], "| torch", torch.__version__, "| CUDA available:", torch.cuda.is_available(), "| GPUs:", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())], "| numpy", numpy.__version__, "| Pillow", PIL.__version__)'
  python3 -c 'import torchvision; print("torchvision", torchvision.__version__)' || echo "torchvision: missing (the benchmark uses its own ResNet-50 definition)"
  cmake --version | head -1
  echo "ninja $(ninja --version)"
  nvcc --version | tail -1
  c++ --version | head -1
  df -h /dev/shm /tmp | sed 1d   # DataLoader workers pass batches through /dev/shm
} > "$env_txt" 2>&1
head -3 "$env_txt"

# 1. python-lmdb (the machine has no network and no lmdb module).
if ls .device/wheels/*.whl > /dev/null 2>&1; then
  if ! step wheels "$env_txt" 60 python3 -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --upgrade --target /tmp/site .device/wheels/*.whl; then
    for w in .device/wheels/*.whl; do python3 -m zipfile -e "$w" /tmp/site >> "$env_txt" 2>&1; done
    note "wheels: unpacked with python3 -m zipfile instead"
  fi
else
  note "wheels: MISSING (.device/wheels/*.whl: run scripts/device/prepare.sh); the gpu test and the benchmark need python-lmdb"
  failures=$((failures + 1))
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -c 'import lmdb; print("python-lmdb", lmdb.__version__, "from", lmdb.__file__)' >> "$env_txt" 2>&1 ||
  note "python-lmdb: NOT importable (see env.txt)"

# 2. Configure and build what the gpu tests and the benchmark need.
build_log=$out/build.log
: > "$build_log"
torch_prefix=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
built=0
if step configure "$build_log" "$(min "$(left)" 240)" cmake -S . -B build-device -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" \
    -DProtobuf_PROTOC_EXECUTABLE="$prefix/usr/bin/protoc" \
    -DPython3_EXECUTABLE="$(command -v python3)" \
    -DMLTOOL_WITH_SLIDE=OFF; then
  step "build mltool + gpu tests" "$build_log" "$(( $(left) - 15 ))" \
    cmake --build build-device -j "$(nproc)" --target mltool mltool_gpu_tests && built=1
fi
if (( built )); then
  build-device/bin/mltool --version 2>&1 | tee -a "$env_txt"  # also loads LibTorch once
  build-device/bin/mltool help extract > /dev/null 2>&1 || note "mltool: NO extract subcommand in this build"
fi

# 3. The gpu tests.
if [[ $labels == *gpu* ]]; then
  if (( built )); then
    step "ctest -L gpu" "$out/ctest-gpu.log" "$(min $(( $(left) - 20 )) 300)" \
      ctest --test-dir build-device -V --output-on-failure -L '^gpu$'
  else
    note "ctest -L gpu: SKIPPED (not built)"
  fi
fi

# 4. The extract benchmark, with as many tiles as the time left allows.
benches=${DEVICE_BENCH:-extract train sections}
wants() { [[ " $benches " == *" $1 "* ]]; }
if (( built )); then
  bench_limit=$(min $(( $(left) - 60 )) 330)
  n=${EXTRACT_BENCH_N:-}
  if [[ -z $n ]]; then
    if (( bench_limit >= 240 )); then n=20000
    elif (( bench_limit >= 150 )); then n=10000
    elif (( bench_limit >= 80 )); then n=4000
    else n=0; fi
  fi
  if ! wants extract || (( n > 0 )); then
    if wants extract; then
      note "bench: $n tiles (limit ${bench_limit}s)"
      step "bench/run-extract.sh" "$out/bench.log" "$bench_limit" env MLTOOL_BUILD_DIR=build-device \
        MLTOOL_PYTHON="$(command -v python3)" EXTRACT_BENCH_N="$n" \
        EXTRACT_BENCH_WORK=/tmp/mltool-extract-bench bash bench/run-extract.sh "$out/bench"
    fi
    # The train benchmark (pinned vs host vs sync feeds vs PyTorch loops) with what is left.
    if wants train; then
      train_limit=$(min $(( $(left) - 60 )) 200)
      step "bench/run-train.sh" "$out/bench.log" "$train_limit" env MLTOOL_BUILD_DIR=build-device \
        MLTOOL_PYTHON="$(command -v python3)" TRAIN_BENCH_WORK=/tmp/mltool-train-bench \
        bash bench/run-train.sh "$out/bench"
    fi
    # Sections vs checkpoint_sequential (seed 003), with what is left.
    if wants sections; then
      sections_limit=$(min $(( $(left) - 60 )) 400)
      step "bench/run-sections.sh" "$out/bench.log" "$sections_limit" env MLTOOL_BUILD_DIR=build-device \
        MLTOOL_PYTHON="$(command -v python3)" SECTIONS_BENCH_WORK=/tmp/mltool-sections-bench \
        bash bench/run-sections.sh "$out/bench" ${SECTIONS_BENCH_ARGS:-}
      [ -f "$out/bench/sections-bench.md" ] && { cat "$out/bench/sections-bench.md" >> "$summary"; \
        mkdir -p /tmp/mltool-bench-json && mv "$out/bench/sections-bench.md" /tmp/mltool-bench-json/; }
    fi
  else
    note "bench: SKIPPED (${bench_limit}s left for it)"
    failures=$((failures + 1))
  fi
else
  note "bench: SKIPPED (not built)"
fi

# 5. Everything else, and the other tests.
if (( built )) && step "build all" "$build_log" "$(( $(left) - 10 ))" cmake --build build-device -j "$(nproc)"; then
  other=$(echo "$labels" | tr '|' '\n' | grep -vx gpu | paste -sd'|')
  if [[ -n $other ]]; then
    step "ctest -L '$other'" "$out/ctest-unit.log" "$(( $(left) - 5 ))" \
      ctest --test-dir build-device --output-on-failure -j 4 -L "^($other)\$"
  fi
  step "ctest cli_help cli_index" "$out/ctest-unit.log" "$(( $(left) - 2 ))" \
    ctest --test-dir build-device --output-on-failure -R '^(cli_help|cli_index)$'
fi

# The device tool brings back 8 files at most: the .json beside the .md tables stay here.
mkdir -p /tmp/mltool-bench-json && mv "$out"/bench/*.json /tmp/mltool-bench-json/ 2> /dev/null

# Totals.
{
  echo
  for log in ctest-gpu.log ctest-unit.log; do
    [ -f "$out/$log" ] || continue
    grep -hE 'tests passed|tests failed|^\s+[0-9]+ - .*\((Failed|Timeout|Not Run|SEGFAULT|Subprocess aborted)|Total Test time' "$out/$log" | sed "s/^/$log: /"
  done
  for table in extract-bench.md train-bench.md; do
    [ -f "$out/bench/$table" ] || continue
    echo
    cat "$out/bench/$table"
  done
  echo
  echo "run.sh: $failures step(s) not ok; $((SECONDS - t_start))s of the ${budget}s budget"
} >> "$summary"
echo "================ summary.txt"
cat "$summary"
(( failures == 0 ))
