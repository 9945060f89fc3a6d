#!/usr/bin/env bash
# Disk full: mounts a small tmpfs and runs mltool tile, extract, pack and train writing into it,
# a filler file leaving 0%, 10%, 50% and 90% of each output's size free, so each runs out of
# space at a different point. Checks a non-zero exit; stderr saying "No space left on device"
# and naming a file on the tmpfs; nothing published half-written (a tile-store slide marked
# done with tiles missing, a features.json / dataset / model export that is incomplete, temp
# files left behind); and, space freed, that the same command (train: --resume when a run.json
# exists; pack: --overwrite when a dataset was published) finishes with the reference's output.
# Needs root (mount); exits 77 (skipped) without it or when the mount fails.
#   scripts/disk-full.sh [--mltool PATH] [--size 64m] [WORKDIR]     (default WORKDIR: /tmp/mltool-diskfull)
# LD_LIBRARY_PATH and MLTOOL_TORCH_MODULE pass through to mltool.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mltool=$root/build/bin/mltool
python=${PYTHON:-$root/.venv/bin/python}
size=64m
work=/tmp/mltool-diskfull
while (($#)); do
  case $1 in
    --mltool) mltool=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "disk-full.sh: unknown option $1" >&2; exit 2 ;;
    *) work=$1; shift ;;
  esac
done
[ -x "$mltool" ] || { echo "disk-full.sh: $mltool is not executable (build first, or pass --mltool)" >&2; exit 2; }
if [ "$(id -u)" != 0 ]; then
  echo "disk-full.sh: skipped: mounting a tmpfs needs root" >&2
  exit 77
fi
mkdir -p "$work"
mnt=$(mktemp -d "$work/tmpfs.XXXXXX")
if ! mount -t tmpfs -o "size=$size" tmpfs "$mnt"; then
  rmdir "$mnt"
  echo "disk-full.sh: skipped: cannot mount a tmpfs on $mnt" >&2
  exit 77
fi
cleanup() { umount "$mnt" 2>/dev/null || umount -l "$mnt"; rmdir "$mnt"; }
trap cleanup EXIT
echo "== $("$mltool" --version | head -n 1) ($mltool); tmpfs of $size at $mnt"
"$python" "$root/scripts/reliability/diskfull.py" --mltool "$mltool" --mount "$mnt" "$work"
