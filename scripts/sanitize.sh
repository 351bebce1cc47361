#!/usr/bin/env bash
# Builds everything in build-sanitize/ with AddressSanitizer, UndefinedBehaviorSanitizer and
# LeakSanitizer and runs the whole test suite there, but for the tests that
# scripts/sanitize-skipped-tests.txt names, each with its reason: they replay or fit whole shipped
# data sets through code that other tests run here, and they run in the release build
# (scripts/test.sh). Any sanitizer report aborts the program
# that made it, so the test that ran it fails. The build is clang's, with libFuzzer's coverage hooks too, so that
# scripts/fuzz.sh reuses it rather than building everything a second time; CUDA is left out
# (nvcc and ASan do not mix), and -O1 -g1 keeps the build short and the stacks readable.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-debian.sh --fuzz
scripts/configure-sanitized.sh
cmake --build build-sanitize -j"$(nproc)"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
skipped="$(grep -v -e '^#' -e '^$' scripts/sanitize-skipped-tests.txt | sed 's/\./\\./; s/.*/^&$/' | paste -sd'|')"
ctest --test-dir build-sanitize --output-on-failure -j"$(nproc)" -E "$skipped" "$@"
