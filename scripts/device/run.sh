#!/usr/bin/env bash
# Runs ON THE GPU MACHINE (through the device tool, from the repository root, with `.device`
# carried): unpacks the build that scripts/device/prepare.sh made here (mltool with OpenSlide
# and libvips, the test programs, the libraries they need; LibTorch is the machine's own torch
# 2.11.0+cu130, the wheel that build linked), runs the gpu tests, the GPU benchmarks, then the
# unit tests. Nothing is compiled there: the session's device time goes to the GPU. The run's
# text files go to $OUT/gpu-runs/<date>-<gpu>/, to be kept in the project (below).
#
#   from a session:  scripts/device/prepare.sh, then the device tool's run with
#     command: bash scripts/device/run.sh     carry: [".device"]     timeout_s: 600
#   then, here:      scripts/device/keep.sh FILES_AT   (the run's files_at folder), and commit
#     bench/gpu-runs/<date>-<gpu>/
#   rehearsal here:  scripts/device/rehearse.sh   (run.sh --rehearse from a clone elsewhere,
#     .device copied in: every step, the gpu tests and benchmarks in their --cpu-smoke forms)
#
#   run.sh [--rehearse] [LABELS]    ctest labels to run (default 'gpu|unit'; none: only the
#                                   benchmarks); gpu ones first
#
# Steps; a step that fails is reported and the later ones still run where they can:
#   1. unpack .device/build.tar.xz as build-device/, its ctest files pointed at this checkout
#      and this python3 (and /work/main, the compiled-in test data path, linked here where it
#      is absent); LD_LIBRARY_PATH = this torch's lib/ and its CUDA runtime; python-lmdb from
#      .device/wheels into /tmp/site (PYTHONPATH); `mltool --version` and ldd prove it loads
#   2. ctest -L gpu (-V: the measured differences are in the log even when they pass), the
#      slides of gpu_extract's `slides` check from .device/fixtures (MLTOOL_GPU_SLIDES)
#   3. bench/run-extract.sh /tmp/mltool-device-bench --stain --decode (ResNet-50; with
#      --stain-norm macenko too, issue 39's device goals; --decode device against host on
#      every core and on 4, and nvJPEG's pixel and feature differences, issue 50's), again with UNI (ViT-L/16, exported by
#      scripts/encoders.py with random weights; UNI_BENCH_N tiles, default 8192), then
#      bench/run-train.sh, then bench/run-sections.sh (issue 7's seed-003 case), each with what
#      is left (every table is appended to summary.txt), then scripts/device/profile.sh (--profile traces of train, sections and
#      UNI steps on the benchmarks' data: one summary line each in summary.txt, the traces in
#      $OUT/traces.tar.gz); DEVICE_BENCH (default "extract uni train sections profile") picks
#      which, e.g. DEVICE_BENCH="train sections profile" in a second call
#   4. ctest with the other LABELS, then cli_help and cli_index
# The whole run keeps within RUN_BUDGET_S (default 500) seconds of wall time, inside the
# device tool's 600 and leaving room in the session's 15 device minutes for a second call: each
# step's timeout is what is left, and the benchmark's tile count (EXTRACT_BENCH_N, else 20000)
# shrinks when little is left.
#
# Where the files go. Only what is written under $OUT comes back from the GPU machine (8 files
# at most, no deeper than $OUT/a/b/file), and ../shared is read-only for the project, what is
# written there lost: a run's text files are kept in the project, in bench/gpu-runs/<date>-<gpu>/
# (bench/gpu-runs/README.md). So run.sh writes them into $OUT/gpu-runs/<date>-<gpu>/ (the UTC
# date; the GPU's short lowercase name from nvidia-smi, else torch: h100, h200, a100, rtx4090;
# `rehearsal` in a rehearsal; -2, -3, ... where bench/gpu-runs/ or $OUT/gpu-runs/ has the name
# already), text only, each file cut to its first and last 500,000 bytes where it passes 1 MB,
# and the session runs scripts/device/keep.sh FILES_AT here afterwards, which copies that folder
# into bench/gpu-runs/ (refusing any file over 1 MB or not text):
#   $OUT/gpu-runs/<date>-<gpu>/  summary.txt (one line per step, the ctest totals, every
#                  benchmark table, one line per profile trace; also printed at the end),
#                  env.txt (GPU, tools, versions, mltool --version, the manifest),
#                  ctest-gpu.log, ctest-unit.log, bench.log, profile.log
#   $OUT/traces.tar.gz  the raw --profile traces (Chrome traces, often over 1 MB: not kept in
#                  the project; their summaries are in summary.txt and profile.log)
# The benchmarks write their tables and .json into /tmp/mltool-device-bench on the machine; the
# tables are folded into summary.txt, to keep within the 8 files.
set -uo pipefail
rehearse=0
if [[ ${1:-} == --rehearse ]]; then
  rehearse=1
  shift
fi
labels=${1:-gpu|unit}
budget=${RUN_BUDGET_S:-500}
t_start=$SECONDS
export PYTHONUNBUFFERED=1
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

[ -f .device/build.tar.xz ] && [ -f .device/manifest ] ||
  { echo "device: .device/build.tar.xz missing: run scripts/device/prepare.sh and carry .device" >&2; exit 1; }
manifest() { sed -n "s/^$1=//p" .device/manifest; }
python=$(command -v python3)
(( rehearse )) && [ -x .venv/bin/python ] && python=$PWD/.venv/bin/python
torch_lib=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
torch_version=$("$python" -c 'import torch; print(torch.__version__)')
# The CUDA runtime torch loads (mltool-torch.so needs libcudart.so.13 too), wherever it lies.
cuda_lib=$("$python" -c 'import os, torch; print(next((os.path.dirname(l.split()[-1]) for l in open("/proc/self/maps") if "libcudart.so" in l), ""))')

# The run's folder, $OUT/gpu-runs/<date>-<gpu> (see above).
gpu_name() {  # the GPU's short lowercase name: "NVIDIA H100 80GB HBM3" -> h100
  local name tok short=
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1)
  [[ -n $name ]] || name=$("$python" -c 'import torch
print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2> /dev/null)
  name=$(echo "$name" | tr '[:upper:]' '[:lower:]' | sed -E 's/\b(nvidia|tesla|geforce)\b//g; s/[^a-z0-9]+/ /g')
  for tok in $name; do  # the words up to the first with a digit: a100, rtx 4090, l40s
    short+=$tok
    [[ $tok == *[0-9]* ]] && break
  done
  echo "${short:-nogpu}"
}
top=${OUT:-/tmp/mltool-device-out}
gpu=rehearsal
(( rehearse )) || gpu=$(gpu_name)
run_name=$(date -u +%F)-$gpu
for (( i = 2; ; i++ )); do
  [[ -e bench/gpu-runs/$run_name || -e $top/gpu-runs/$run_name ]] || break
  run_name=$(date -u +%F)-$gpu-$i
done
out=$top/gpu-runs/$run_name
mkdir -p "$out"
summary=$out/summary.txt
: > "$summary"
# The benchmarks' tables and .json: kept on the machine (the tables go into summary.txt).
bench_dir=/tmp/mltool-device-bench
rm -rf "$bench_dir"

env_txt=$out/env.txt
{
  echo "date: $(date -u +%FT%TZ); $(nproc) cores; kernel $(uname -r); $(ldd --version | head -1)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi not available"
  echo "python3: $python; torch lib: $torch_lib; CUDA runtime: ${cuda_lib:-not loaded by torch}"
  "$python" -c 'import sys, torch, numpy, PIL; print("Python", sys.version.split()[0], "| torch", torch.__version__, "| CUDA available:", torch.cuda.is_available(), "| GPUs:", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())], "| numpy", numpy.__version__, "| Pillow", PIL.__version__)'
  "$python" -c 'import torchvision; print("torchvision", torchvision.__version__)' || echo "torchvision: missing (the benchmark uses its own ResNet-50 definition)"
  echo "cmake: $(cmake --version | head -1)"
  df -h /dev/shm /tmp | sed 1d   # DataLoader workers pass batches through /dev/shm
  echo "--- .device/manifest"
  cat .device/manifest
} > "$env_txt" 2>&1
head -3 "$env_txt"

# 1. The build, made on the build machine.
[[ $torch_version == "$(manifest torch)" ]] ||
  note "torch: this machine's is $torch_version, the build linked $(manifest torch): expect trouble"
rm -rf build-device
"$python" - "$(manifest root)" "$(manifest build)" "$(manifest python)" "$PWD" "$python" <<'PY' ||
import os, re, sys, tarfile
old_root, old_build, old_python, root, python = sys.argv[1:]
with tarfile.open(".device/build.tar.xz") as t:
    t.extractall(".", filter="fully_trusted")
# ctest's files name the build machine's checkout, build and python: this checkout's instead.
# The gtest lists stay newer than their programs, or ctest would rediscover with the build
# machine's CMake module path.
for d, _, files in os.walk("build-device"):
    for f in files:
        if not f.endswith(".cmake"):
            continue
        p = os.path.join(d, f)
        st = os.stat(p)
        s = open(p).read()
        s = s.replace(old_python, python)
        s = re.sub(re.escape(old_build) + r'(?=[/"\];\s]|$)', os.path.join(root, "build-device"), s)
        s = s.replace(old_root + "/", root + "/").replace('"' + old_root + '"', '"' + root + '"')
        open(p, "w").write(s)
        os.utime(p, (st.st_atime, st.st_mtime))
PY
  { echo "device: unpacking .device/build.tar.xz failed" >&2; exit 1; }
# The unit tests find their data at the build machine's path, compiled in.
old_root=$(manifest root)
if [[ ! -e $old_root ]]; then
  mkdir -p "$(dirname "$old_root")" && ln -s "$PWD" "$old_root"
fi
export LD_LIBRARY_PATH=$torch_lib${cuda_lib:+:$cuda_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MLTOOL_GPU_SLIDES=$PWD/.device/fixtures
mltool=build-device/bin/mltool
# The full LibTorch module (in a rehearsal too), whatever the program's own choice: it takes
# the CPU-only one where libcuda.so.1 does not load (env.txt says which it would take).
"$mltool" --version 2>&1 | sed -n 's/^module /module the program chooses here: /p' >> "$env_txt"
export MLTOOL_TORCH_MODULE=$PWD/build-device/lib/mltool-torch.so
built=0
{ echo "--- ldd $mltool build-device/lib/*.so: not found"; ldd "$mltool" build-device/lib/*.so | grep "not found"; } >> "$env_txt" 2>&1
if step "mltool --version" "$env_txt" 60 "$mltool" --version; then
  built=1
  sed -n '/^== mltool --version/,$p' "$env_txt" | sed 1d  # what the step logged
  "$mltool" help extract > /dev/null 2>&1 || note "mltool: NO extract subcommand in this build"
fi

# python-lmdb (the machine has no network and no lmdb module).
if "$python" -c 'import lmdb' 2> /dev/null; then
  :
elif ls .device/wheels/*.whl > /dev/null 2>&1; then
  if ! step wheels "$env_txt" 60 "$python" -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --upgrade --target /tmp/site .device/wheels/*.whl; then
    for w in .device/wheels/*.whl; do "$python" -m zipfile -e "$w" /tmp/site >> "$env_txt" 2>&1; done
    note "wheels: unpacked with python3 -m zipfile instead"
  fi
else
  note "wheels: MISSING (.device/wheels/*.whl: run scripts/device/prepare.sh); the gpu test and the benchmark need python-lmdb"
  failures=$((failures + 1))
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
"$python" -c 'import lmdb; print("python-lmdb", lmdb.__version__, "from", lmdb.__file__)' >> "$env_txt" 2>&1 ||
  note "python-lmdb: NOT importable (see env.txt)"

# 2. The gpu tests (in a rehearsal, the python ones in their --cpu-smoke forms).
if [[ $labels == *gpu* ]]; then
  if (( ! built )); then
    note "ctest -L gpu: SKIPPED (mltool does not run)"
  elif (( rehearse )); then
    for t in extract train oom; do
      step "gpu_$t --cpu-smoke" "$out/ctest-gpu.log" "$(min $(( $(left) - 20 )) 300)" \
        "$python" "tests/gpu/${t}_gpu_test.py" "$mltool" --cpu-smoke
    done
  else
    step "ctest -L gpu" "$out/ctest-gpu.log" "$(min $(( $(left) - 20 )) 300)" \
      ctest --test-dir build-device -V --output-on-failure -L '^gpu$'
  fi
fi

# 3. The benchmarks, the extract one with as many tiles as the time left allows.
benches=${DEVICE_BENCH:-extract uni train sections profile}
wants() { [[ " $benches " == *" $1 "* ]]; }
smoke=()
(( rehearse )) && smoke=(--cpu-smoke)
# bench NAME LIMIT DIR [VAR=VALUE...] [-- ARG...]: bench/run-NAME.sh DIR ARG... with those
# variables set
bench() {
  local name=$1 limit=$2 dir=$3 vars=()
  shift 3
  while (( $# )) && [[ $1 != -- ]]; do vars+=("$1"); shift; done
  (( $# )) && shift
  step "bench/run-$name.sh${*:+ $*}" "$out/bench.log" "$limit" env MLTOOL_BUILD_DIR=build-device \
    MLTOOL_PYTHON="$python" "${vars[@]}" bash "bench/run-$name.sh" "$dir" "${smoke[@]}" "$@"
}
# append DIR/TABLE.md to summary.txt (the device tool brings back 8 files at most)
append() { [ -f "$1/$2.md" ] && cat "$1/$2.md" >> "$summary" && rm "$1/$2.md"; }
if (( built )); then
  bench_limit=$(min $(( $(left) - 60 )) 300)
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
      extract_n=()
      decode_flag=(--decode)  # nvJPEG against libjpeg-turbo (issue 50); not on the CPU
      (( rehearse )) && decode_flag=()
      (( rehearse )) || extract_n=(EXTRACT_BENCH_N="$n")
      bench extract "$bench_limit" "$bench_dir" "${extract_n[@]}" EXTRACT_BENCH_WORK=/tmp/mltool-extract-bench \
        -- --stain "${decode_flag[@]}"
    fi
    # A foundation-model encoder: UNI (ViT-L/16) from scripts/encoders.py, random weights
    # (they cost what real ones do), bf16 and float32.
    if wants uni; then
      uni=/tmp/mltool-uni.pt
      uni_args=(--encoder "$uni" --tile-size 224)
      if (( rehearse )); then uni_args+=(--tiles 8 --batch 4 --amps none)
      else uni_args+=(--tiles "${UNI_BENCH_N:-8192}"); fi
      [ -f "$uni" ] || step "encoders.py export uni" "$out/bench.log" "$(min $(( $(left) - 60 )) 180)" \
        "$python" scripts/encoders.py export uni --random-weights -o "$uni"
      rm -rf /tmp/mltool-bench-uni
      [ -f "$uni" ] && bench extract "$(min $(( $(left) - 60 )) 240)" /tmp/mltool-bench-uni \
        EXTRACT_BENCH_WORK=/tmp/mltool-extract-bench-uni -- "${uni_args[@]}"
      append /tmp/mltool-bench-uni extract-bench
    fi
    # The train benchmark (pinned vs host vs sync feeds vs PyTorch loops) with what is left.
    if wants train; then
      bench train "$(min $(( $(left) - 60 )) 200)" "$bench_dir" TRAIN_BENCH_WORK=/tmp/mltool-train-bench
    fi
    # Sections vs checkpoint_sequential (seed 003), with what is left.
    if wants sections; then
      # shellcheck disable=SC2086  # SECTIONS_BENCH_ARGS: options of sections_bench.py, split
      bench sections "$(min $(( $(left) - 60 )) 400)" "$bench_dir" \
        SECTIONS_BENCH_WORK=/tmp/mltool-sections-bench -- --torch-traces /tmp/mltool-sections-traces \
        ${SECTIONS_BENCH_ARGS:-}
      append "$bench_dir" sections-bench
    fi
    # The profiling pass: traces of train, sections and UNI steps on the benchmarks' data,
    # summarised into summary.txt, the traces in $OUT/traces.tar.gz.
    if wants profile; then
      step "scripts/device/profile.sh" "$out/profile.log" "$(min $(( $(left) - 30 )) 150)" \
        env MLTOOL_PYTHON="$python" bash scripts/device/profile.sh "$mltool" "$top/traces.tar.gz" \
        "${smoke[@]}"
      grep -E '^(profile |[a-z0-9-]+\.json: )' "$out/profile.log" >> "$summary"
    fi
  else
    note "bench: SKIPPED (${bench_limit}s left for it)"
    failures=$((failures + 1))
  fi
else
  note "bench: SKIPPED (mltool does not run)"
fi

# 4. The other tests.
if (( built )) && [[ $labels != none ]]; then
  other=$(echo "$labels" | tr '|' '\n' | grep -vx gpu | paste -sd'|')
  if [[ -n $other ]]; then
    step "ctest -L '$other'" "$out/ctest-unit.log" "$(( $(left) - 5 ))" \
      ctest --test-dir build-device --output-on-failure -j "$(nproc)" -L "^($other)\$"
  fi
  step "ctest cli_help cli_index" "$out/ctest-unit.log" "$(( $(left) - 2 ))" \
    ctest --test-dir build-device --output-on-failure -R '^(cli_help|cli_index)$'
fi

# Totals.
{
  echo
  for log in ctest-gpu.log ctest-unit.log; do
    [ -f "$out/$log" ] || continue
    grep -hE 'tests passed|tests failed|^\s+[0-9]+ - .*\((Failed|Timeout|Not Run|SEGFAULT|Subprocess aborted)|Total Test time' "$out/$log" | sed "s/^/$log: /"
  done
  for table in extract-bench.md train-bench.md; do
    [ -f "$bench_dir/$table" ] || continue
    echo
    cat "$bench_dir/$table"
  done
  echo
  echo "run.sh: $failures step(s) not ok; $((SECONDS - t_start))s of the ${budget}s budget"
  echo "run.sh: the run's files are in gpu-runs/$run_name under \$OUT; keep them with"
  echo "  scripts/device/keep.sh FILES_AT   (here, then commit bench/gpu-runs/$run_name)"
} >> "$summary"
# The project keeps files of at most 1 MB: a longer log keeps its first and last 500,000 bytes.
for f in "$out"/*; do
  size=$(stat -c %s "$f")
  (( size > 1048576 )) || continue
  { head -c 500000 "$f"
    printf '\n[... %d bytes cut here by run.sh: the project keeps files of at most 1 MB ...]\n' \
      $(( size - 1000000 ))
    tail -c 500000 "$f"
  } > "$f.cut" && mv "$f.cut" "$f"
  [[ $f == "$summary" ]] || note "run.sh: $(basename "$f") cut from $size bytes to 1 MB"
done
echo "================ summary.txt"
cat "$summary"
(( failures == 0 ))
