#!/usr/bin/env bash
# Crash consistency of mltool tile, extract, pack and train. For each command: an uninterrupted
# reference run (and a control run that must compare equal to it); then N trials, each starting
# the command on a fresh output, sending SIGKILL to it after a delay drawn uniformly within the
# reference run's duration (seeded; the seed is printed), running it again — the same command
# for tile and extract (they resume), with --overwrite for pack (pack.md: an existing output is
# refused otherwise), with --resume for train — and checking that the re-run exits 0, that its
# output equals the reference (tile store: every key/value of every LMDB database; extract,
# pack, train: files byte for byte; metrics.jsonl line by line without wall times), that
# `mltool inspect --deep` accepts each packed dataset, and that no temporary file is left in
# the output. Prints one line a trial and a summary per command; exits 1 on any failure.
#   scripts/crash-consistency.sh [--trials N] [--mltool PATH] [--seed S] [--commands tile,extract,pack,train]
#                                [--trial K] [WORKDIR]        (default WORKDIR: /tmp/mltool-crash)
# LD_LIBRARY_PATH and MLTOOL_TORCH_MODULE pass through to mltool.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mltool=$root/build/bin/mltool
python=${PYTHON:-$root/.venv/bin/python}
trials=20
extra=()
work=/tmp/mltool-crash
while (($#)); do
  case $1 in
    --trials) trials=$2; shift 2 ;;
    --mltool) mltool=$2; shift 2 ;;
    --seed | --commands | --trial) extra+=("$1" "$2"); shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "crash-consistency.sh: unknown option $1" >&2; exit 2 ;;
    *) work=$1; shift ;;
  esac
done
[ -x "$mltool" ] || { echo "crash-consistency.sh: $mltool is not executable (build first, or pass --mltool)" >&2; exit 2; }
echo "== $("$mltool" --version | head -n 1) ($mltool); $(nproc) cores; $(uname -sr)"
exec "$python" "$root/scripts/reliability/crash.py" --mltool "$mltool" --trials "$trials" "${extra[@]}" "$work"
