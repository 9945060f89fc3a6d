#!/usr/bin/env bash
# CRC32C and TFRecord throughput of mltool, side by side with TensorFlow's writer/reader and
# with raw write(2) of the same bytes, in one run; prints the ratios for docs/benchmarks.md.
#   bench/run-tfrecord.sh          (needs build/ and the TensorFlow venv of scripts/fixtures/)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MLTOOL_BUILD_DIR:-build}
tfpy=${MLTOOL_CACHE:-$HOME/.cache/mltool}/venv-tf/bin/python
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(uname -r)"
"$build/bin/bench_crc32c" --benchmark_min_time=0.5 --benchmark_format=json > /tmp/mltool-bench-crc.json
"$build/bin/bench_tfrecord" --benchmark_min_time=1 --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_format=json > /tmp/mltool-bench-tfr.json
TF_CPP_MIN_LOG_LEVEL=3 "$tfpy" bench/tfrecord_tensorflow.py 3 > /tmp/mltool-bench-tf.json 2>/dev/null
python3 - <<'PY'
import json
crc = {b["name"]: b["bytes_per_second"] / 1e9 for b in json.load(open("/tmp/mltool-bench-crc.json"))["benchmarks"]}
tfr = {b["run_name"]: b["bytes_per_second"] / 1e6 for b in json.load(open("/tmp/mltool-bench-tfr.json"))["benchmarks"]
       if b.get("aggregate_name") == "median"}
tf = json.load(open("/tmp/mltool-bench-tf.json"))
print("CRC32C GB/s (one core): hardware 1 MiB %.1f, 4 KiB %.1f; portable 1 MiB %.1f"
      % (crc["BM_Crc32cHardware/1048576"], crc["BM_Crc32cHardware/4096"], crc["BM_Crc32cPortable/1048576"]))
print(f"TensorFlow {tf['tensorflow']}")
print("| case | mltool MB/s | TensorFlow MB/s | mltool / TF | raw write MB/s | mltool / raw |")
print("|---|---|---|---|---|---|")
for kib, arg in ((1, 1024), (100, 102400)):
    w = tfr[f"BM_TFRecordWrite/{arg}/real_time"]
    raw = tfr[f"BM_RawWrite/{arg}/real_time"]
    r = tfr[f"BM_TFRecordRead/record:{arg}/verify_data:1/real_time"]
    print(f"| write {kib} KiB records | {w:.0f} | {tf[f'write_{kib}KiB_MBps']:.0f} | {w / tf[f'write_{kib}KiB_MBps']:.2f} | {raw:.0f} | {w / raw:.2f} |")
    print(f"| read {kib} KiB records, CRCs checked | {r:.0f} | {tf[f'read_{kib}KiB_MBps']:.0f} | {r / tf[f'read_{kib}KiB_MBps']:.2f} | | |")
PY
