#!/usr/bin/env bash
# Fails (exit 1, naming the files) when a C, C++ or CUDA source of the project is not formatted
# as .clang-format says. scripts/test.sh runs it, so CI checks it; fix with
#   clang-format -i $(scripts/check-format.sh --list)
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.c' '*.cc' '*.cpp' '*.h' '*.hpp' '*.cu' | grep -v '^third_party/')
if [ "${1:-}" = "--list" ]; then printf '%s\n' "${files[@]}"; exit 0; fi
command -v clang-format >/dev/null || { echo "check-format: clang-format is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} file(s) not formatted as .clang-format says ($(clang-format --version | head -1)):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix: clang-format -i ${bad[*]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
