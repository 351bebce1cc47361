#!/usr/bin/env bash
# The threaded parts under ThreadSanitizer: `compare` and `plan` run their simulations on a pool
# of threads (--jobs), and `merge` and the reports read what they wrote. Builds the experiments'
# test suite and the CLI with -fsanitize=thread (clang) and runs the suites that start threads:
# every test of the experiment, plan, SLO and CLI files, whose compares and plans use --jobs 2 or
# more. Any data race stops the test that met it (halt_on_error). CI runs this (.ci/run).
#   scripts/tsan.sh [ctest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-debian.sh --fuzz
CC=clang CXX=clang++ cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS="-fsanitize=thread" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DBATCHSIM_WITH_CUDA=OFF -DBATCHSIM_BUILD_BENCH=OFF \
  -DBATCHSIM_PYTHON=OFF -DBATCHSIM_MIMALLOC=OFF >/dev/null
cmake --build build-tsan --target batchsim batchsim_experiments_tests -j"$(nproc)"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
ctest --test-dir build-tsan --output-on-failure -j"$(nproc)" \
  -R '^(Experiment|Experiments|ShippedExperiments|Compare|Merge|Plan|PlanDisaggregated|PlanGoodput|Slo|Goodput|Cli|NewUser)[A-Za-z]*\.' "$@"
