#!/usr/bin/env bash
# Runs HERE, after scripts/device/prepare.sh: the GPU machine's run (scripts/device/run.sh) in
# its --rehearse form, from a clone of this checkout's HEAD elsewhere with .device copied in,
# so that the unpacking, the rewritten ctest paths, LD_LIBRARY_PATH, the wheel, every test and
# benchmark step (the gpu ones in their --cpu-smoke forms) are tried before a GPU minute is
# spent. Uncommitted changes are not in the clone: commit first. About 4 minutes on 2 cores.
#
#   scripts/device/rehearse.sh [OUTDIR [LABELS]]   # run.sh's $OUT (default
#                                                  # /tmp/mltool-rehearsal) and LABELS
# The files land in OUTDIR/gpu-runs/<date>-rehearsal/ (scripts/device/keep.sh refuses them: a
# rehearsal's figures are CPU ones) and OUTDIR/traces.tar.gz.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -f .device/build.tar.xz ] || { echo "rehearse: run scripts/device/prepare.sh first" >&2; exit 1; }
out=$(realpath -m "${1:-/tmp/mltool-rehearsal}")
clone=$(mktemp -d)
trap 'rm -rf "$clone"' EXIT
git clone -q . "$clone"
cp -r .device "$clone/"
ln -s "$(realpath .venv)" "$clone/.venv"
rm -rf "$out"
cd "$clone" && OUT=$out RUN_BUDGET_S=${RUN_BUDGET_S:-2400} bash scripts/device/run.sh --rehearse "${@:2}"
