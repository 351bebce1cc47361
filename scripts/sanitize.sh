#!/usr/bin/env bash
# Builds everything in build-asan/ with AddressSanitizer, UndefinedBehaviorSanitizer and
# LeakSanitizer (GCC; CUDA left out: nvcc and ASan do not mix) and runs the whole test suite
# there, the documented commands and shipped experiments included. Any sanitizer report aborts
# the program that made it, so the test that ran it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-debian.sh
build=build-asan
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBATCHSIM_SANITIZE=ON \
  -DBATCHSIM_WITH_CUDA=OFF -DBATCHSIM_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j"$(nproc)"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "$@"
