#!/usr/bin/env bash
# The main job, end to end, on a built-in default. It grows with each subcommand that lands;
# today it sets up, reports the build, and indexes a TFRecord file written by TensorFlow
# (tests/data/tf_written.tfrecord) so NVIDIA DALI can read it by random access.
#   scripts/example.sh [WORKDIR]      (default: example-run/, git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-example-run}
scripts/setup.sh
mltool=build/bin/mltool
mkdir -p "$work"
echo "== mltool --version"
"$mltool" --version
echo "== mltool index (a TFRecord file written by TensorFlow → DALI index)"
cp tests/data/tf_written.tfrecord "$work/"
"$mltool" index "$work/tf_written.tfrecord" --json
echo "== first index entries ($work/tf_written.idx: offset size)"
head -n 3 "$work/tf_written.idx"
