#!/usr/bin/env bash
# README command A: install what batchsim needs, build it, and run the default comparison:
# the Anyscale continuous-batching throughput benchmark (OPT-13B on an A100-40GB, 1000 requests
# at once; static vs continuous batching as the output length cap grows). No GPU needed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-debian.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target batchsim -j"$(nproc)"
build/experiments/batchsim compare experiments/data/anyscale-throughput.yaml \
  --out results/anyscale-throughput "$@"
echo
echo "Report with tables and figures: results/anyscale-throughput/report.md"
