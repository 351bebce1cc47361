#!/usr/bin/env bash
# A speed change must not change a figure: run the same set of simulations with two batchsim
# binaries and compare their output folders and terminal text byte for byte.
#
#   scripts/identity-check.sh OLD_BINARY NEW_BINARY [WORKDIR]
#
# The runs cover every preset on the Azure conversation trace, the code trace, prefix caching on
# the Mooncake replay, priorities and sjf, replicas and routers, closed-loop clients, streaming,
# tensor parallelism, disaggregation (pull and layer-wise), mixtures of experts (TP, DP attention
# with EP, P/D pools of DP ranks, MLA, sliding windows), the iteration log, a small KV cache
# that forces preemption, and the H100-fitted profile; then every other command once (compare,
# plan, merge is covered by the Slurm test, list, bench's figures excepted, validate on both
# table layouts, validate-serving, calibrate fit / transfer / engine) and every command's
# --help. Output folders are compared byte for byte, and so is what each command printed. Run
# it from the repository root.
set -euo pipefail
old="$(realpath "$1")"; new="$(realpath "$2")"
work="${3:-$(mktemp -d)}"
conv=experiments/data/traces/azure-llm-2023/conv.csv.gz
code=experiments/data/traces/azure-llm-2023/code.csv.gz
moon=experiments/data/traces/mooncake-fast25/conversation.jsonl.gz
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
  "--trace $conv --gpu h200 --model deepseek-r1 --tp 8 --policy vllm --num-requests 4000"
  "--trace $conv --gpu h200 --model deepseek-r1 --tp 1 --dp 8 --ep 8 --policy vllm --num-requests 4000"
  "--trace $conv --gpu h200 --model deepseek-r1 --tp 1 --dp 8 --ep 8 --policy sglang --num-requests 4000"
  "--trace $conv --gpu h100-sxm-fitted --model qwen3-235b-a22b --tp 8 --ep 8 --policy trtllm --num-requests 3000"
  "--trace $conv --gpu h100-sxm-fitted --model gpt-oss-120b --policy vllm --num-requests 3000"
  "--trace $conv --gpu h200 --model deepseek-r1 --tp 1 --prefill-replicas 1 --decode-replicas 1 --prefill-dp 8 --decode-dp 8 --ep 8 --policy vllm --num-requests 3000"
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
    echo "DIFF  $i: ${runs[$i]}"; diff -r -q "$work/old/$i" "$work/new/$i" | head -5 || true; fail=1
  fi
done
# A folder's text with its own path replaced by WORK, and the wall-clock figures (plan's and
# compare's timings: a `wall_s` key or column, "(1.2 s wall)") by T: the one thing allowed to
# differ between two runs of the same binary.
normalize() {
  python3 - "$1" <<'PY'
import csv, io, json, pathlib, re, sys
d = pathlib.Path(sys.argv[1])
for f in d.rglob("*"):
    if not f.is_file() or f.suffix in (".png", ".gz"):
        continue
    t = f.read_text(errors="replace").replace(str(d), "WORK")
    t = re.sub(r"[0-9.]+ (s|ms) wall", r"T \1 wall", t)
    t = re.sub(r" [0-9]+\.[0-9] s$", " T s", t, flags=re.M)  # plan's table: its last column, wall
    if f.suffix == ".json":
        def strip(o):
            if isinstance(o, dict):
                return {k: ("T" if "wall" in k else strip(v)) for k, v in o.items()}
            return [strip(v) for v in o] if isinstance(o, list) else o
        try:
            t = json.dumps(strip(json.loads(t)), indent=1)
        except ValueError:
            pass
    elif f.suffix == ".csv":
        rows = list(csv.reader(io.StringIO(t)))
        if rows:
            keep = [i for i, h in enumerate(rows[0]) if "wall" not in h]
            out = io.StringIO()
            csv.writer(out).writerows([[r[i] for i in keep if i < len(r)] for r in rows])
            t = out.getvalue()
    f.write_text(t)
PY
}

# Whole commands (the output folder is WORK/out), with each --help. compare runs one job at a
# time (and plan too), so that their progress lines come in one order.
silicon=hwmodel/measured/aiconfigurator/silicon/h100_sxm_dense_agg.csv.gz
commands=(
  "compare experiments/data/anyscale-throughput.yaml --num-requests 300 --jobs 1 --out WORK/out"
  "compare --policies vllm,sarathi,static --trace $conv --num-requests 1500 --jobs 1 --out WORK/out"
  "plan --model llama-3-8b --gpu h100-sxm-fitted --tp 1,2 --trace $conv --trace-speedup 3 --num-requests 2000 --slo ttft_p99=2s,tbt_p99=100ms --jobs 1 --out WORK/out"
  "list models"
  "list gpus"
  "list policies"
  "list engines"
  "validate --measurements hwmodel/measured/vidur --device a100 --fit-on llama-2-7b --out WORK/out/v.json --profile-out WORK/out/p.yaml"
  "validate --measurements hwmodel/measured/aiconfigurator/h100_sxm --out WORK/out/v.json --rows-out WORK/out/rows.csv"
  "validate-serving --measurements $silicon --gpu h100-sxm-fitted --backend sglang --out WORK/out/s.json"
  "validate-serving --measurements hwmodel/measured/aiconfigurator/silicon/h100_sxm_moe.csv.gz --gpu h100-sxm-fitted --backend trtllm --out WORK/out/m.json"
  "calibrate fit hwmodel/measured/vidur/compute/a40/meta-llama/Llama-2-7b-hf/mlp.csv.gz --out WORK/out/a40.yaml"
  "calibrate transfer h100-sxm-fitted --to h200 --out WORK/out/h200.yaml"
  "calibrate engine --backend sglang --gpu h100-sxm-fitted --measurements $silicon --out WORK/out/e.yaml --report WORK/out/e.json"
  "--help"
  "run --help"
  "compare --help"
  "merge --help"
  "plan --help"
  "list --help"
  "bench --help"
  "validate --help"
  "validate-serving --help"
  "calibrate --help"
  "calibrate fit --help"
  "calibrate transfer --help"
  "calibrate engine --help"
  "run --bogus-option"
  "validate-serving --measurements $silicon"
)
for i in "${!commands[@]}"; do
  for side in old new; do
    bin=$old; [ "$side" = new ] && bin=$new
    dir="$work/$side/c$i"; rm -rf "$dir"; mkdir -p "$dir/out"
    # shellcheck disable=SC2086
    "$bin" ${commands[$i]//WORK/$dir} >"$dir/stdout" 2>"$dir/stderr" || echo "exit $?" >>"$dir/stderr"
    normalize "$dir"
  done
  if diff -r -q "$work/old/c$i" "$work/new/c$i" >/dev/null; then
    echo "same c$i: ${commands[$i]}"
  else
    echo "DIFF c$i: ${commands[$i]}"; diff -r "$work/old/c$i" "$work/new/c$i" | head -8 || true; fail=1
  fi
done
[ "$fail" = 0 ] && echo "identity check: all ${#runs[@]} runs and ${#commands[@]} commands give the same bytes" || { echo "identity check: outputs differ"; exit 1; }
