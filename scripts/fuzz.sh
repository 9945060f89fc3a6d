#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a while.
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     (default 600)
#   FUZZ_TARGETS="fuzz_json fuzz_labels" scripts/fuzz.sh 60     (only those targets)
# Corpora persist in .fuzz/corpus/<target> (git-ignored), seeded from tests/data and
# fuzz/seeds/<target>; a finding leaves its input in .fuzz/ and makes the script exit
# non-zero (after the other targets have run).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
build=build-fuzz
for p in clang libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null; }
done
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMLTOOL_FUZZ=ON -DMLTOOL_WITH_TORCH=OFF -DMLTOOL_WITH_SLIDE=OFF -DMLTOOL_BUILD_APPS=OFF \
    -DMLTOOL_BUILD_TESTS=OFF -DMLTOOL_BUILD_BENCH=OFF >/dev/null
fi
cmake --build "$build" -j "$(nproc)"
targets="fuzz_tfrecord fuzz_npy fuzz_example fuzz_json fuzz_labels fuzz_dicom fuzz_dicom_json"
for target in $targets; do mkdir -p ".fuzz/corpus/$target"; done
cp -n tests/data/*.tfrecord .fuzz/corpus/fuzz_tfrecord/ 2>/dev/null || true
cp -n tests/data/*.npy .fuzz/corpus/fuzz_npy/ 2>/dev/null || true
for target in fuzz_example fuzz_json fuzz_labels fuzz_dicom fuzz_dicom_json; do
  cp -n fuzz/seeds/"$target"/* ".fuzz/corpus/$target/" 2>/dev/null || true
done
found=
for target in ${FUZZ_TARGETS:-$targets}; do
  echo "== $target: ${seconds}s"
  status=0
  "$build/bin/$target" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix=.fuzz/ \
    ".fuzz/corpus/$target" > ".fuzz/$target.log" 2>&1 || status=$?
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|Done|SUMMARY)' ".fuzz/$target.log" || true
  echo "corpus: $(find ".fuzz/corpus/$target" -type f | wc -l) files"
  [ "$status" -eq 0 ] || { echo "$target: finding (see .fuzz/$target.log)"; found="$found $target"; }
done
[ -z "$found" ] || { echo "findings in:$found"; exit 1; }
