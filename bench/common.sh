# Sourced by the bench/run-*.sh scripts that drive mltool from Python (from the repository
# root): bench_init NAME COMMAND sets build (MLTOOL_BUILD_DIR, default build), mltool, and py
# (MLTOOL_PYTHON, else .venv/bin/python when there is one, else python3), and checks that the
# binary is built and has COMMAND; die MESSAGE stops the script naming it. wall_of FILE and
# rss_of FILE read the wall seconds and the peak RSS (KiB) of a `/usr/bin/time -v -o FILE`.
die() { echo "run-$bench_name.sh: $*" >&2; exit 1; }

bench_init() {
  bench_name=$1
  build=${MLTOOL_BUILD_DIR:-build}
  mltool=$(realpath -m "$build/bin/mltool")
  if [[ -n ${MLTOOL_PYTHON:-} ]]; then
    py=$MLTOOL_PYTHON
  elif [[ -x .venv/bin/python ]]; then
    py=$PWD/.venv/bin/python
  else
    py=$(command -v python3)
  fi
  [[ -x $mltool ]] || die "$mltool missing: build first (scripts/setup.sh; cmake --build $build)"
  "$mltool" help "$2" >/dev/null 2>&1 || die "$mltool has no '$2' subcommand (built without LibTorch?)"
}

wall_of() { awk -F': ' '/Elapsed \(wall clock\)/{n=split($2,p,":"); s=0; for(i=1;i<=n;i++) s=s*60+p[i]; print s}' "$1"; }
rss_of() { awk -F': ' '/Maximum resident set size/{print $2}' "$1"; }
