#!/usr/bin/env bash
# Configures build-sanitize/, the one sanitized build that scripts/sanitize.sh (the test suite
# under ASan + UBSan + LSan) and scripts/fuzz.sh (the libFuzzer harnesses) share: clang, the
# sanitizers and libFuzzer's coverage hooks on everything, no CUDA, and no Python module: an
# ASan-instrumented extension cannot be loaded into a python3 that is not built with ASan (the
# release build, scripts/test.sh, builds and tests it).
set -euo pipefail
cd "$(dirname "$0")/.."
CC=clang CXX=clang++ cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DBATCHSIM_FUZZ=ON -DBATCHSIM_WITH_CUDA=OFF \
  -DBATCHSIM_BUILD_BENCH=OFF -DBATCHSIM_PYTHON=OFF -DBATCHSIM_MIMALLOC=OFF >/dev/null
