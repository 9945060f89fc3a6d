#!/usr/bin/env bash
# The whole test suite (ctest labels unit + cli) on an AddressSanitizer + UndefinedBehavior-
# Sanitizer build of mltool, its library, the torch module and the test programs, in
# build-asan/ (set-up as scripts/test.sh; ccache shared). Any report fails the run: ASan
# aborts on the first error, UBSan halts on the first finding (halt_on_error), and
# LeakSanitizer checks every process at exit, with suppressions only for leaks whose
# allocation stack lies wholly in third-party libraries (scripts/sanitize.supp says which
# and why).
#   scripts/sanitize.sh [ctest arguments]     (default: -L 'unit|cli')
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export MLTOOL_BUILD_DIR=build-asan
export MLTOOL_CMAKE_ARGS="-DMLTOOL_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo ${MLTOOL_CMAKE_ARGS:-}"
scripts/setup.sh
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:protect_shadow_gap=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/scripts/sanitize.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-L 'unit|cli')
cd build-asan
ctest --output-on-failure -j "$(nproc)" "${args[@]}"
