#!/usr/bin/env bash
# Builds everything in build-sanitize/ with AddressSanitizer, UndefinedBehaviorSanitizer and
# LeakSanitizer and runs the whole test suite there, the shipped experiments included, but for
# the documentation check: its commands run in the release build (scripts/test.sh), and under
# the sanitizers its long trace replays took 12 of CI's 35 minutes while exercising the code the
# unit tests, shipped experiments and fuzzers cover; and for the check that the shipped fitted
# engines equal a fresh fit, which replays NVIDIA's 534 serving benchmarks three to four times
# (about 1,900 runs) through code that validate-serving's figures test and the small engine-fit
# tests run under the sanitizers too (it runs in the release build); for the figures on NVIDIA's
# 333 measured MoE serving runs, replayed twice (balanced and power-law routing, about 460 runs,
# 7 minutes and more under the sanitizers), whose reading, layouts, rules and pools the other
# ValidateServingMoe tests run here on small files (it runs in the release build); for the checks
# that the shipped H100 and B200 profiles equal a fresh fit on NVIDIA's ~400k kernel rows (about
# 100 s each here), whose fitting code the held-out tests run under the sanitizers on the same
# rows; and for the sweep on a
# one-node Slurm cluster, which checks the scripts of experiments/data/slurm/ and Slurm around the
# shard and merge code that the release build's run and the unit tests cover. Any sanitizer report aborts the program
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
ctest --test-dir build-sanitize --output-on-failure -j"$(nproc)" \
  -E '^Docs\.|^EngineFit\.ShippedFittedEnginesEqualAFreshFit$|^ValidateServingMoe\.FiguresOnNvidiasH100MoeMeasurements$|^KernelTables\.ShippedH100ProfileIsAFreshFit$|^KernelTables\.ShippedB200ProfileIsAFreshFitWithNvfp4Gemms$|^AttentionRegimes\.ShippedH100RegimesAreAFreshFit$|^Slurm\.ArraySweepEqualsUnsharded$' "$@"
