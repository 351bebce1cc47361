#!/usr/bin/env bash
# A speed change must not change a figure: run the same set of simulations with two batchsim
# binaries and compare their output folders and terminal text byte for byte.
#
#   scripts/identity-check.sh OLD_BINARY NEW_BINARY [WORKDIR]
#
# The runs cover every preset on the Azure conversation trace, the code trace, prefix caching on
# the Mooncake replay, priorities and sjf, replicas and routers, closed-loop clients, streaming,
# tensor parallelism, disaggregation (pull and layer-wise), the iteration log, a small KV cache
# that forces preemption, and the H100-fitted profile. Run it from the repository root.
set -euo pipefail
old="$(realpath "$1")"; new="$(realpath "$2")"
work="${3:-$(mktemp -d)}"
conv=experiments/traces/azure-llm-2023/conv.csv.gz
code=experiments/traces/azure-llm-2023/code.csv.gz
moon=experiments/traces/mooncake-fast25/conversation.jsonl.gz
runs=(
  "--trace $conv --policy vllm"
  "--trace $conv --policy vllm-v1-2025"
  "--trace $conv --policy sarathi"
  "--trace $conv --policy vllm-v0"
  "--trace $conv --policy orca"
  "--trace $conv --policy static"
  "--trace $conv --policy hf-static --num-requests 3000"
  "--trace $conv --policy ft-static --num-requests 3000"
  "--trace $conv --policy tgi"
  "--trace $conv --policy tgi-router --num-requests 5000"
  "--trace $conv --policy trtllm"
  "--trace $conv --policy sglang"
  "--trace $conv --policy continuous --policy-opt preemption=swap --num-gpu-blocks 600"
  "--trace $conv --policy vllm --num-gpu-blocks 400"
  "--trace $conv --policy vllm --policy-opt max_num_batched_tokens=64 --num-requests 3000"
  "--trace $conv --policy trtllm --max-tokens fixed:512 --num-requests 5000"
  "--trace $code --policy vllm"
  "--trace $code --policy sarathi --trace-speedup 2"
  "--trace $moon --model mistral-7b --policy vllm --policy-opt prefix_caching=true --num-requests 3000"
  "--trace $conv --policy vllm --prefix groups:512:8 --policy-opt prefix_caching=true --num-requests 4000"
  "--trace $conv --policy vllm --priority classes:0=1,1=3 --policy-opt scheduling_policy=priority --trace-speedup 3 --num-requests 6000"
  "--trace $conv --policy vllm --policy-opt scheduling_policy=sjf --trace-speedup 3 --num-requests 6000"
  "--trace $conv --policy vllm --replicas 3 --router least-kv --trace-speedup 3"
  "--trace $conv --policy vllm --replicas 2 --router prefix --prefix groups:256:4 --policy-opt prefix_caching=true"
  "--trace $conv --policy vllm --max-concurrency 16 --arrival offline --num-requests 2000"
  "--policy vllm --arrival poisson:8 --num-requests 3000 --max-concurrency 24 --seed 5"
  "--trace $conv --policy vllm --streaming"
  "--trace $conv --policy tgi --streaming --max-tokens fixed:1024"
  "--trace $conv --policy vllm --model llama-2-13b --tp 2 --trace-speedup 2"
  "--trace $conv --prefill-replicas 1 --decode-replicas 2 --policy vllm --trace-speedup 2"
  "--trace $conv --prefill-replicas 2 --decode-replicas 1 --policy vllm --kv-transfer layerwise --trace-speedup 2"
  "--trace $conv --policy vllm --iteration-log=ids --num-requests 2000"
  "--trace $conv --policy vllm --goodput ttft:500 tpot:50"
  "--trace $conv --gpu h100-sxm-fitted --policy vllm --model Qwen/Qwen3-32B --tp 2 --trace-speedup 2"
  "--model Qwen/Qwen3-32B --gpu h100-sxm-fitted --tp 2 --policy vllm-v1-2025 --engine vllm-h100-fitted --arrival offline --max-concurrency 8 --num-requests 160 --prompt-len fixed:4096 --output-len fixed:512"
  "--policy hf-static --model opt-13b --gpu a100-40gb --arrival offline --num-requests 400 --prompt-len fixed:512 --output-len capexp:128:512"
)
fail=0
for i in "${!runs[@]}"; do
  for side in old new; do
    bin=$old; [ "$side" = new ] && bin=$new
    rm -rf "$work/$side/$i"; mkdir -p "$work/$side/$i"
    # shellcheck disable=SC2086
    "$bin" run ${runs[$i]} --out "$work/$side/$i/out" >"$work/$side/$i/stdout" 2>"$work/$side/$i/stderr" || echo "exit $?" >>"$work/$side/$i/stderr"
    sed -i "s#$work/$side#WORK#g" "$work/$side/$i/stdout" "$work/$side/$i/stderr"
  done
  if diff -r -q "$work/old/$i" "$work/new/$i" >/dev/null; then
    echo "same  $i: ${runs[$i]}"
  else
    echo "DIFF  $i: ${runs[$i]}"; diff -r -q "$work/old/$i" "$work/new/$i" | head -5; fail=1
  fi
done
[ "$fail" = 0 ] && echo "identity check: all ${#runs[@]} runs give the same bytes" || { echo "identity check: outputs differ"; exit 1; }
