#!/usr/bin/env bash
# README command A: install what batchsim needs, build it, and run the default comparison
# (static vs continuous batching on a default workload; no GPU needed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-debian.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target batchsim -j"$(nproc)"
exec build/experiments/batchsim compare --model opt-13b --gpu a100-40gb \
  --num-requests 1000 --prompt-len fixed:512 --output-len capexp:128:512 \
  --policies hf-static,continuous,vllm --out results/quickstart "$@"
