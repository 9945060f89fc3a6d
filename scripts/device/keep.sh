#!/usr/bin/env bash
# Runs HERE, after a device tool call of scripts/device/run.sh: keeps the run's text files in
# the project. run.sh wrote them on the GPU machine into $OUT/gpu-runs/<date>-<gpu>/, and the
# tool brought them back under its files_at folder; this copies each such folder into
# bench/gpu-runs/<date>-<gpu>/ (bench/gpu-runs/README.md), to be committed. ../shared is
# read-only for the project and what is written there is lost: runs are kept here only.
#
#   scripts/device/keep.sh FILES_AT...   FILES_AT: the run's files_at folder (each
#                                        gpu-runs/*/ in it is kept) or one run folder
#
# Copied: the folder's plain files that are text (UTF-8, no NUL byte) of at most 1 MB, with
# names of letters, digits, '.', '_' and '-'. Refused, each with a line saying why: a larger
# file (run.sh cuts its logs to 1 MB; raw traces stay out), a file that is not text, a
# sub-folder, a rehearsal's folder (<date>-rehearsal: CPU smoke runs, not GPU figures). The
# folder keeps its name; where bench/gpu-runs/ has that name with other files, it takes the
# next free -2, -3, ...; with the same files, it is kept already and nothing is copied.
# Exit status: 0 all copied, 1 usage, 2 no run folder found, 4 some files refused (the rest
# copied).
set -uo pipefail
(( $# )) || { sed -n '2,18s/^# \{0,1\}//p' "$0" >&2; exit 1; }
root=$(cd "$(dirname "$0")/../.." && pwd)
dest_root=$root/bench/gpu-runs
limit=1048576
refused=0
kept=0

is_text() {  # FILE: UTF-8 text without NUL bytes (an empty file too)
  python3 -c 'import sys
b = open(sys.argv[1], "rb").read()
try:
    b.decode("utf-8")
except UnicodeDecodeError:
    sys.exit(1)
sys.exit(b"\0" in b)' "$1"
}

same_files() {  # DEST FILE...: DEST holds exactly these files, byte for byte
  local dest=$1 f have want
  shift
  have=$(find "$dest" -mindepth 1 -maxdepth 1 -printf '%f\n' | LC_ALL=C sort)
  want=$(for f in "$@"; do basename "$f"; done | LC_ALL=C sort)
  [[ $have == "$want" ]] || return 1
  for f in "$@"; do cmp -s "$f" "$dest/$(basename "$f")" || return 1; done
}

refuse() {
  echo "keep: refused $1: $2" >&2
  refused=$((refused + 1))
}

# keep_run DIR: DIR's acceptable files into bench/gpu-runs/<its name>[-N]/
keep_run() {
  local src=$1 name base dest f i
  name=$(basename "$src")
  if [[ $name == *-rehearsal* ]]; then
    refuse "$src" "a rehearsal (--cpu-smoke), not a GPU run"
    return
  fi
  local ok=()
  for f in "$src"/* "$src"/.[!.]*; do
    [[ -e $f || -L $f ]] || continue
    if [[ -L $f || ! -f $f ]]; then refuse "$f" "not a plain file (a run folder is flat)"
    elif [[ ! $(basename "$f") =~ ^[A-Za-z0-9._-]+$ ]]; then refuse "$f" "its name has odd characters"
    elif (( $(stat -c %s "$f") > limit )); then refuse "$f" "$(stat -c %s "$f") bytes, over 1 MB"
    elif ! is_text "$f"; then refuse "$f" "not text (UTF-8, no NUL byte)"
    else ok+=("$f"); fi
  done
  if (( ! ${#ok[@]} )); then
    echo "keep: nothing to keep in $src" >&2
    return
  fi
  base=$dest_root/$name
  dest=$base
  for (( i = 2; ; i++ )); do
    [[ -e $dest ]] || break
    if same_files "$dest" "${ok[@]}"; then
      echo "keep: $src is kept already, as ${dest#"$root"/}"
      kept=$((kept + 1))
      return
    fi
    dest=$base-$i
  done
  mkdir -p "$dest"
  for f in "${ok[@]}"; do
    cp "$f" "$dest/" && chmod u+w,go-w "$dest/$(basename "$f")"
  done
  [[ $dest == "$base" ]] ||
    echo "keep: ${base#"$root"/} exists with other files: this run is ${dest#"$root"/}"
  echo "keep: ${#ok[@]} file(s) of $src into ${dest#"$root"/} (commit it)"
  kept=$((kept + 1))
}

for arg in "$@"; do
  if [[ ! -d $arg ]]; then
    echo "keep: $arg is not a folder" >&2
    exit 1
  elif [[ -d $arg/gpu-runs ]]; then
    for run in "$arg"/gpu-runs/*/; do
      [[ -d $run ]] && keep_run "${run%/}"
    done
  elif [[ -f $arg/summary.txt ]]; then
    keep_run "${arg%/}"
  else
    echo "keep: $arg holds neither gpu-runs/ (run.sh's \$OUT) nor a run's summary.txt" >&2
  fi
done
(( kept + refused )) || { echo "keep: no run folder found in $*" >&2; exit 2; }
(( refused == 0 )) || exit 4
