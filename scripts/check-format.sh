#!/usr/bin/env bash
# CI's formatting rail (issue 47): every C++ file of the repository as clang-format formats it
# with the repository's .clang-format. Prints the files that differ and fails; `clang-format -i
# FILE` fixes one, `scripts/check-format.sh --fix` all.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check-format: clang-format is not installed (scripts/setup-debian.sh)"; exit 1; }
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'check-format: not formatted: %s\n' "${bad[@]}"
  echo "check-format: ${#bad[@]} of ${#files[@]} files differ from .clang-format (scripts/check-format.sh --fix)"
  exit 1
fi
echo "check-format: all ${#files[@]} C++ files as .clang-format formats them ($(clang-format --version | head -1))"
