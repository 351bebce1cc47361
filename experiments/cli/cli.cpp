#include "experiments/cli/cli.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <thread>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <fmt/ostream.h>

#include "experiments/cli/command_line.h"
#include "experiments/cli/fidelity_commands.h"
#include "experiments/cli/vllm_spellings.h"
#include "experiments/run/bench_result.h"
#include "experiments/run/chrome_trace.h"
#include "experiments/run/confidence.h"
#include "experiments/run/output.h"
#include "experiments/run/run_config.h"
#include "experiments/run/runner.h"
#include "experiments/run/slo.h"
#include "experiments/study/compare.h"
#include "experiments/study/experiment.h"
#include "experiments/study/plan.h"
#include "experiments/study/report.h"
#include "hwmodel/speculative.h"
#include "hwmodel/base/error.h"
#include "hwmodel/cost_model.h"
#include "hwmodel/hardware_profile.h"
#include "policies/registry.h"
#include "sim/kv_transfer.h"

namespace po = boost::program_options;
using nlohmann::ordered_json;

namespace batchsim {

int calibrate_shapes_command(const std::vector<std::string>& args, std::ostream& out);  // calibrate_shapes.cpp

namespace {

constexpr const char* kUsage = R"(usage: batchsim <command> [options]

commands:
  run       simulate one policy on one workload
  compare   run an experiment file (or --policies a,b,c) on the same request sequences:
            results.csv, report.md and figures
  merge     join the results folders of `compare --shard K/N` runs
  list      list built-in models, gpus, engines, policies, routers or KV links:
            batchsim list {models,gpus [PROFILE.yaml...],engines,policies,routers,links}
  bench     measure the simulator's own speed (simulated requests per wall-second)
  validate  fit the cost model on measured operator times and report its error per operator
  plan      the fewest replicas per GPU and TP degree that meet latency SLOs, replaying the
            workload itself: batchsim plan --model M --gpu G1,G2 --tp 1,2 --slo ttft_p99=2s ...
  validate-serving  replay measured serving benchmarks and report the TTFT and TPOT error
  calibrate fit a hardware profile on a GPU's measurements:  batchsim calibrate fit DIR --out P.yaml
            or move a fitted one onto another GPU's datasheet:
            batchsim calibrate transfer PROFILE --to GPU --out P.yaml

`batchsim <command> --help` shows a command's options.
)";

// Options that describe one run; shared by `run`, `compare` and `bench`.
// The model, GPU, engine, parallel layout, features and policy.
void add_model_options(po::options_description& d) {
  // One option a line, as --help lists them.
  // clang-format off
  d.add_options()
      ("config", po::value<std::string>(), "YAML file with any of these keys; flags override it")
      ("model", po::value<std::string>(), "built-in model name or HF config.json (default llama-2-7b)")
      ("gpu", po::value<std::string>(), "built-in GPU name or profile file (default a100-80gb)")
      ("engine", po::value<std::string>(), "engine profile: built-in name or file (default: the policy's "
       "engine; batchsim list engines)")
      ("tp", po::value<int>(), "tensor-parallel degree of attention (default 1; vLLM's --tensor-parallel-size)")
      ("dp", po::value<int>(), "attention data-parallel ranks of a mixture of experts, each with its own scheduler and "
       "KV cache, stepping together (default 1; vLLM --data-parallel-size, SGLang --dp with "
       "--enable-dp-attention, TensorRT-LLM enable_attention_dp)")
      ("ep", po::value<int>(), "expert parallelism: the experts sharded over EP GPUs (default 1; vLLM "
       "--enable-expert-parallel is --ep TP x DP; SGLang --ep-size; TensorRT-LLM moe_expert_parallel_size)")
      ("moe-tp", po::value<int>(), "the experts' tensor parallelism (default: TP x DP / EP; TensorRT-LLM "
       "moe_tensor_parallel_size)")
      ("moe-routing", po::value<std::string>(), "auto (default) | balanced | power:ALPHA: how tokens choose their "
       "experts; a power law makes the busiest expert rank set the step (NVIDIA's MoE tables use 1.01 and 1.2); "
       "auto: the power law aiconfigurator's estimator assumes, 1.01 for DeepSeek-style MLA models, else 1.2")
      ("eplb", po::bool_switch(), "spread hot experts over the ranks as an expert-load balancer does (vLLM and SGLang "
       "--enable-eplb): balanced routing")
      ("spec-decode", po::value<std::string>(), "speculative decoding METHOD:k=K:accept=RATES: METHOD ngram | "
       "eagle | eagle3 | mtp | draft:MODEL; k drafts per step; RATES the acceptance rate of each draft "
       "position (A1,A2,...; unconditional, as vLLM's synthetic sampler), one per-token rate for all, or a "
       "measured preset (batchsim list spec-presets)")
      ("kv-offload", po::value<std::string>(), "KV offload tiers cpu=GIB[,disk=GIB]: GiB of host memory (over the "
       "replica's GPUs) that keep the prefix cache's blocks by LRU and load them back over PCIe instead of "
       "recomputing them (vLLM --kv-offloading-size; needs prefix caching), and GiB of local disk written "
       "through beside it, read at the GPU profile's disk_bytes_per_s (LMCache's local disk)")
      ("policy", po::value<std::string>(), "policy or preset name (default continuous)")
      ("policy-opt", po::value<std::vector<std::string>>()->composing(), "KEY=VALUE policy option (repeatable)");
  // clang-format on
}

// The routers' names, "a | b | ...", as `batchsim list routers` lists them.
std::string router_names() {
  std::string names;
  for (const RouterInfo& r : routers()) names += (names.empty() ? "" : " | ") + std::string(r.name);
  return names;
}

// Replicas and their router, or prefill and decode pools and the link between them.
void add_deployment_options(po::options_description& d) {
  const std::string arrival_routers =
      router_names() + ": how arrivals pick a replica (default round-robin; batchsim list routers)";
  const std::string decode_routers =
      "how a prefilled request picks its decode replica: " + router_names() + " (default --router)";
  // One option a line, as --help lists them.
  // clang-format off
  d.add_options()
      ("replicas", po::value<int>(), "identical replicas (each --tp GPUs, its own policy and KV "
       "cache) behind a router (default 1)")
      ("router", po::value<std::string>(), arrival_routers.c_str())
      ("prefill-replicas", po::value<int>(), "disaggregated serving: P prefill replicas (with --decode-replicas; "
       "instead of --replicas). Arrivals go to them by --router; each request's first token is "
       "computed there and its KV moved to a decode replica")
      ("decode-replicas", po::value<int>(), "disaggregated serving: D decode replicas, picked by --decode-router")
      ("prefill-gpu", po::value<std::string>(), "the prefill pool's GPU (default --gpu)")
      ("decode-gpu", po::value<std::string>(), "the decode pool's GPU (default --gpu)")
      ("prefill-tp", po::value<int>(), "the prefill pool's tensor-parallel degree (default --tp)")
      ("decode-tp", po::value<int>(), "the decode pool's tensor-parallel degree (default --tp)")
      ("prefill-ep", po::value<int>(), "the prefill pool's expert parallelism (a mixture of experts; default --ep)")
      ("decode-ep", po::value<int>(), "the decode pool's expert parallelism (default --ep)")
      ("prefill-dp", po::value<int>(), "the prefill pool's attention data-parallel ranks per replica (a mixture "
       "of experts; default --dp)")
      ("decode-dp", po::value<int>(), "the decode pool's attention data-parallel ranks per replica (default --dp)")
      ("prefill-moe-tp", po::value<int>(), "the prefill pool's experts' tensor parallelism (default --moe-tp)")
      ("decode-moe-tp", po::value<int>(), "the decode pool's experts' tensor parallelism (default --moe-tp)")
      ("prefill-policy", po::value<std::string>(), "the prefill pool's policy (default --policy; its "
       "--policy-opt apply only to --policy)")
      ("decode-policy", po::value<std::string>(), "the decode pool's policy (default --policy)")
      ("prefill-policy-opt", po::value<std::vector<std::string>>()->composing(), "KEY=VALUE for the prefill pool's policy (repeatable)")
      ("decode-policy-opt", po::value<std::vector<std::string>>()->composing(), "KEY=VALUE for the decode pool's policy (repeatable)")
      ("prefill-engine", po::value<std::string>(), "the prefill pool's engine profile: built-in name or file "
       "(default --engine, else the prefill policy's engine; batchsim list engines)")
      ("decode-engine", po::value<std::string>(), "the decode pool's engine profile (default --engine, else "
       "the decode policy's engine)")
      ("prefill-num-gpu-blocks", po::value<int64_t>(), "the prefill pool's --num-gpu-blocks")
      ("decode-num-gpu-blocks", po::value<int64_t>(), "the decode pool's --num-gpu-blocks")
      ("decode-router", po::value<std::string>(), decode_routers.c_str())
      ("kv-link", po::value<std::string>(), "the link KV moves over: nvlink | ib | roce | pcie "
       "(default ib, 400 Gb/s per GPU; batchsim list links)")
      ("kv-link-gbps", po::value<double>(), "the link's bandwidth, Gb/s per GPU and direction (replaces --kv-link's)")
      ("kv-link-latency-us", po::value<double>(), "the link's fixed cost per transfer in us (replaces --kv-link's)")
      ("kv-transfer", po::value<std::string>(), "pull: the whole KV after the prefill, once the decode "
       "side has room (DistServe, vLLM NIXL) | layerwise: streamed during the prefill, the last "
       "layer's share exposed (Splitwise) (default pull)");
  // clang-format on
}

// Formats, the workload (arrivals, lengths, sessions, clients) and the KV size.
void add_workload_options(po::options_description& d) {
  // One option a line, as --help lists them.
  // clang-format off
  d.add_options()
      ("weight-dtype", po::value<std::string>(), "auto | bf16 | fp16 | fp8 | fp8-block | mxfp4 | nvfp4: the "
       "format of every quantisable layer's weights (vLLM --quantization fp8; auto: the checkpoint's)")
      ("kv-cache-dtype", po::value<std::string>(), "auto | bf16 | fp16 | fp8: KV cache element type (as vLLM's)")
      ("arrival", po::value<std::string>(), "offline | poisson:RATE | gamma:RATE:CV | trace")
      ("trace", po::value<std::string>(), "trace file (Azure CSV, generic CSV, Mooncake JSONL)")
      ("num-requests", po::value<int64_t>(), "number of requests (default 1000; with --trace, every "
       "request of the trace unless N is given: then its first N)")
      ("prompt-len", po::value<std::string>(), "fixed:N | uniform:A:B | capexp:MEAN:CAP | lognormal:MEDIAN:SIGMA")
      ("output-len", po::value<std::string>(), "as --prompt-len (default capexp:128:512)")
      ("trace-speedup", po::value<double>(), "divide trace arrival offsets by this factor")
      ("prefix", po::value<std::string>(), "shared:TOKENS | groups:TOKENS:N: every prompt starts with a shared "
       "prefix of TOKENS tokens (one of N), added to its sampled or trace length; for prefix caching")
      ("max-tokens", po::value<std::string>(), "the client's limit on output tokens, as --prompt-len: the "
       "output ends at EOS (--output-len or the trace's) or at max_tokens, whichever comes first; "
       "reserving policies reserve for it (default: the output length, or a trace's max_tokens column)")
      ("ignore-eos", po::bool_switch(), "every request runs to its max_tokens, as benchmarks send them "
       "(vllm bench serve --ignore-eos)")
      ("priority", po::value<std::string>(), "fixed:P | uniform:A:B | classes:P=W,P=W,...: each request's "
       "priority (smaller first under --policy-opt scheduling_policy=priority), from a random stream of "
       "its own; replaces a trace's priority column (default: the trace's, else 0)")
      ("seed", po::value<std::string>(), "random seed, 0 to 2^64-1 (default 0)")
      ("seeds", po::value<int64_t>(), "N runs, seeds --seed .. --seed + N - 1, each figure reported as its "
       "95% confidence interval over them (default 1); a trace replayed as recorded is then resampled "
       "(--resample block-bootstrap)")
      ("resample", po::value<std::string>(), "block-bootstrap | block-bootstrap:B: replay a replicate of the "
       "trace drawn from the seed, runs of B consecutive requests (default sqrt(n)) from random places "
       "of it (Kuensch's moving-block bootstrap; default: the trace as recorded)")
      ("gpu-memory-utilization", po::value<double>(), "fraction of GPU memory for weights + KV (default 0.9)")
      ("max-concurrency", po::value<int64_t>(), "closed-loop clients: at most C requests in flight, the next "
       "sent when one finishes (vllm bench serve --max-concurrency; with --arrival offline a pure "
       "closed loop; with --session-turns or --trace-sessions, C sessions at a time, the next started "
       "when one's last turn ends; default 0: open loop)")
      ("think-time", po::value<std::string>(), "fixed:S | uniform:A:B | exponential:MEAN (seconds): with "
       "--max-concurrency, how long a client waits before sending each request, after the response that "
       "freed it (a user reading the answer; the first ones from t = 0; default: none), from a random "
       "stream of its own; with --session-turns, the time between an answer and the session's next turn")
      ("session-turns", po::value<std::string>(), "a length distribution (fixed:N, uniform:A:B, ...): the "
       "workload is --num-requests multi-turn sessions, starting at --arrival, each of this many turns; a "
       "turn's prompt is the conversation so far (earlier inputs and answers) plus --prompt-len new "
       "tokens, its answer --output-len, and it is sent --think-time after the previous answer ends "
       "(with --max-concurrency C, C sessions at a time; default: independent requests)")
      ("trace-sessions", po::bool_switch(), "with a --trace whose rows carry hash_ids (Mooncake JSONL): link each "
       "row to the earlier row it continues (the one whose full prompt blocks begin its hash_ids) and send it "
       "at its recorded time, or when that row's answer ends if later (default: every row at its time)")
      ("client-connections", po::value<int64_t>(), "with --max-concurrency, the client's HTTP connection pool: "
       "at most N requests at the server, the others waiting at the client with their clock running "
       "(aiohttp's default pool holds 100, httpx's 100; default 0: no limit)")
      ("max-model-len", po::value<int64_t>(), "the longest context a request may fill, prompt + output (vLLM "
       "--max-model-len; default: the model's max_position_embeddings); longer requests are rejected")
      ("num-gpu-blocks", po::value<int64_t>(), "KV cache of N blocks instead of sizing it from GPU memory "
       "(vLLM --num-gpu-blocks-override): N x block_size tokens for paged policies, N x 16 for "
       "reserving ones (default 0: from memory)");
  // clang-format on
}

// SLOs and goodput, what is written, streaming, and help.
void add_output_options(po::options_description& d) {
  // One option a line, as --help lists them.
  // clang-format off
  d.add_options()
      ("slo", po::value<std::string>(), "KEY=BOUND,...: upper bounds on summary.json figures, by path "
       "(latency.ttft_s.p99) or as METRIC_STAT_s / _ms (ttft_p99_s=2,tbt_p99_s=0.1); summary.json's "
       "slo says whether the run met them (a rejected request is a violation)")
      ("goodput", po::value<std::vector<std::string>>()->multitoken(), "KEY:MS ... (ttft, tpot, e2el; "
       "vllm bench serve --goodput): a request is good when it completed within every threshold; "
       "summary.json's goodput and bench.json's request_goodput")
      ("percentile-metrics", po::value<std::string>(), "bench.json: metrics given mean/median/std/"
       "percentiles, of ttft,tpot,itl,e2el (vllm bench serve; default ttft,tpot,itl)")
      ("metric-percentiles", po::value<std::string>(), "bench.json: percentiles of those metrics, "
       "e.g. 50,90,99 (vllm bench serve; default 99)")
      ("out", po::value<std::string>(), "write summary.json, bench.json, requests.csv[, iterations.csv] here")
      ("iteration-log", po::value<std::string>()->implicit_value("true")->value_name("ids"),
       "also write iterations.csv; --iteration-log=ids adds each iteration's requests (columns "
       "prefill_chunks, decode_ids)")
      ("chrome-trace", po::value<std::string>()->value_name("FILE"), "write the run as a Chrome / "
       "Perfetto trace (open it in ui.perfetto.dev): iterations per replica, request phases, KV and "
       "queue counters")
      ("chrome-trace-requests", po::value<int64_t>()->value_name("N"), "the trace draws the phases of "
       "the first N requests (default 2000; 0: none); iterations and counters are always whole")
      ("streaming", po::bool_switch(), "bounded memory for long runs (run only): arrivals generated or a time-ordered "
       "--trace read lazily, "
       "state kept for requests in flight, requests.csv written as requests settle (in that order), "
       "percentiles from a DDSketch within 1% (default: on above 2000000 synthetic requests)")
      ("no-streaming", po::bool_switch(), "exact mode whatever the request count (every record kept)")
      ("streaming-slots", po::value<int64_t>()->value_name("N"), "streaming: requests in flight at most "
       "(default 262144; a run that has more stops with an error)")
      ("help,h", "show this help");
  // clang-format on
}

po::options_description run_options() {
  po::options_description d("run options (also accepted as keys of a --config YAML file)");
  add_model_options(d);
  add_deployment_options(d);
  add_workload_options(d);
  add_output_options(d);
  return d;
}

po::variables_map parse(const std::vector<std::string>& args, const po::options_description& desc,
                        const po::positional_options_description* positional = nullptr) {
  return parse_command_line(args, desc, positional);
}

// The run options of `args` with vLLM's spellings read as batchsim's (vllm_spellings.h), each
// said once on `err`.
VllmSpellings respelled(const std::vector<std::string>& args, std::ostream& err) {
  VllmSpellings spelled = read_vllm_spellings(args);
  for (const std::string& note : spelled.notes) fmt::print(err, "batchsim: note: {}\n", note);
  return spelled;
}

// vLLM's --enable-chunked-prefill: in batchsim the policy chunks prefills or does not, so the flag
// checks that `policy` does (the chunked-prefill presets, SGLang's, TensorRT-LLM's chunked context).
void check_chunks_prefills(const std::string& policy, const std::map<std::string, std::string>& opts) {
  if (!policy_chunks_prefills(policy, opts)) {
    throw UserError(
        fmt::format("--enable-chunked-prefill: policy '{}' does not chunk prefills; choose one that does "
                    "(vllm, sarathi, sglang: batchsim list policies)",
                    policy));
  }
}

// Applies the run flags present in `vm` on top of `c` (flags override a --config file or an
// experiment's base).
void apply_run_flags(const po::variables_map& vm, RunConfig& c) {
  if (vm.count("model")) c.model = vm["model"].as<std::string>();
  if (vm.count("gpu")) c.gpu = vm["gpu"].as<std::string>();
  if (vm.count("engine")) c.engine = vm["engine"].as<std::string>();
  if (vm.count("tp")) c.tp = vm["tp"].as<int>();
  if (vm.count("dp")) c.dp = vm["dp"].as<int>();
  if (vm.count("ep")) c.ep = vm["ep"].as<int>();
  if (vm.count("moe-tp")) c.moe_tp = vm["moe-tp"].as<int>();
  if (vm.count("moe-routing")) c.moe_routing = vm["moe-routing"].as<std::string>();
  if (vm.count("eplb") && vm["eplb"].as<bool>()) c.eplb = true;
  if (vm.count("spec-decode")) c.spec_decode = vm["spec-decode"].as<std::string>();
  if (vm.count("kv-offload")) c.kv_offload = vm["kv-offload"].as<std::string>();
  if (vm.count("weight-dtype")) c.weight_dtype = vm["weight-dtype"].as<std::string>();
  if (vm.count("kv-cache-dtype")) c.kv_cache_dtype = vm["kv-cache-dtype"].as<std::string>();
  if (vm.count("policy")) c.policy = vm["policy"].as<std::string>();
  if (vm.count("replicas")) c.replicas = vm["replicas"].as<int>();
  if (vm.count("router")) c.router = vm["router"].as<std::string>();
  if (vm.count("prefill-replicas")) c.prefill_replicas = vm["prefill-replicas"].as<int>();
  if (vm.count("decode-replicas")) c.decode_replicas = vm["decode-replicas"].as<int>();
  for (auto [pool, name] :
       {std::pair{&c.prefill, std::string("prefill")}, std::pair{&c.decode, std::string("decode")}}) {
    if (vm.count(name + "-gpu")) pool->gpu = vm[name + "-gpu"].as<std::string>();
    if (vm.count(name + "-tp")) pool->tp = vm[name + "-tp"].as<int>();
    if (vm.count(name + "-ep")) pool->ep = vm[name + "-ep"].as<int>();
    if (vm.count(name + "-dp")) pool->dp = vm[name + "-dp"].as<int>();
    if (vm.count(name + "-moe-tp")) pool->moe_tp = vm[name + "-moe-tp"].as<int>();
    if (vm.count(name + "-policy")) pool->policy = vm[name + "-policy"].as<std::string>();
    if (vm.count(name + "-engine")) pool->engine = vm[name + "-engine"].as<std::string>();
    if (vm.count(name + "-num-gpu-blocks")) pool->num_gpu_blocks = vm[name + "-num-gpu-blocks"].as<int64_t>();
    if (vm.count(name + "-policy-opt")) {
      for (const auto& text : vm[name + "-policy-opt"].as<std::vector<std::string>>()) {
        auto [k, v] = parse_policy_opt(text);
        pool->policy_opts[k] = v;
      }
    }
  }
  if (vm.count("decode-router")) c.decode_router = vm["decode-router"].as<std::string>();
  if (vm.count("kv-link")) c.kv_link = vm["kv-link"].as<std::string>();
  if (vm.count("kv-link-gbps")) c.kv_link_gbps = vm["kv-link-gbps"].as<double>();
  if (vm.count("kv-link-latency-us")) c.kv_link_latency_us = vm["kv-link-latency-us"].as<double>();
  if (vm.count("kv-transfer")) c.kv_transfer = vm["kv-transfer"].as<std::string>();
  if (vm.count("policy-opt")) {
    for (const auto& text : vm["policy-opt"].as<std::vector<std::string>>()) {
      auto [k, v] = parse_policy_opt(text);
      c.policy_opts[k] = v;
    }
  }
  if (vm.count("arrival")) c.workload.arrival = vm["arrival"].as<std::string>();
  if (vm.count("trace")) {
    c.workload.trace = vm["trace"].as<std::string>();
    // A trace brings its own length: read all of it unless --num-requests says otherwise.
    if (!vm.count("num-requests")) c.workload.num_requests = 0;
  }
  if (vm.count("num-requests")) c.workload.num_requests = vm["num-requests"].as<int64_t>();
  if (vm.count("prompt-len")) c.workload.prompt_len = vm["prompt-len"].as<std::string>();
  if (vm.count("output-len")) c.workload.output_len = vm["output-len"].as<std::string>();
  if (vm.count("trace-speedup")) c.workload.trace_speedup = vm["trace-speedup"].as<double>();
  if (vm.count("prefix")) c.workload.prefix = vm["prefix"].as<std::string>();
  if (vm.count("max-tokens")) c.workload.max_tokens = vm["max-tokens"].as<std::string>();
  if (vm["ignore-eos"].as<bool>()) c.workload.ignore_eos = true;
  if (vm.count("priority")) c.workload.priority = vm["priority"].as<std::string>();
  if (vm.count("seed")) c.workload.seed = parse_seed(vm["seed"].as<std::string>(), "--seed");
  if (vm.count("gpu-memory-utilization")) c.gpu_memory_utilization = vm["gpu-memory-utilization"].as<double>();
  if (vm.count("max-concurrency")) c.max_concurrency = vm["max-concurrency"].as<int64_t>();
  if (vm.count("think-time")) c.workload.think_time = vm["think-time"].as<std::string>();
  if (vm.count("session-turns")) c.workload.session_turns = vm["session-turns"].as<std::string>();
  if (vm["trace-sessions"].as<bool>()) c.workload.trace_sessions = true;
  if (vm.count("client-connections")) c.client_connections = vm["client-connections"].as<int64_t>();
  if (vm.count("resample")) c.workload.resample = vm["resample"].as<std::string>();
  if (vm.count("seeds")) c.seeds = vm["seeds"].as<int64_t>();
  if (vm.count("num-gpu-blocks")) c.num_gpu_blocks = vm["num-gpu-blocks"].as<int64_t>();
  if (vm.count("max-model-len")) c.max_model_len = vm["max-model-len"].as<int64_t>();
  if (vm.count("out")) c.out = vm["out"].as<std::string>();
  if (vm["streaming"].as<bool>() && vm["no-streaming"].as<bool>()) {
    throw UserError("--streaming, --no-streaming: give one or the other");
  }
  if (vm["streaming"].as<bool>()) c.streaming = true;
  if (vm["no-streaming"].as<bool>()) c.streaming = false;
  if (vm.count("streaming-slots")) {
    c.streaming_slots = vm["streaming-slots"].as<int64_t>();
    if (c.streaming_slots < 1)
      throw UserError(fmt::format("--streaming-slots: must be >= 1, got {}", c.streaming_slots));
  }
  if (vm.count("iteration-log")) set_iteration_log(c, vm["iteration-log"].as<std::string>(), "--iteration-log");
  if (vm.count("chrome-trace")) c.chrome_trace = vm["chrome-trace"].as<std::string>();
  if (vm.count("chrome-trace-requests")) c.chrome_trace_requests = vm["chrome-trace-requests"].as<int64_t>();
  if (vm.count("slo")) c.slo = parse_slo(vm["slo"].as<std::string>(), "--slo");
  if (vm.count("goodput")) c.goodput = parse_goodput(vm["goodput"].as<std::vector<std::string>>(), "--goodput");
  if (vm.count("percentile-metrics")) {
    c.percentile_metrics = parse_percentile_metrics(vm["percentile-metrics"].as<std::string>(), "--percentile-metrics");
  }
  if (vm.count("metric-percentiles")) {
    c.metric_percentiles = parse_metric_percentiles(vm["metric-percentiles"].as<std::string>(), "--metric-percentiles");
  }
}

RunConfig config_from(const po::variables_map& vm) {
  RunConfig c = default_run_config();
  if (vm.count("config")) apply_yaml_config(vm["config"].as<std::string>(), c);
  apply_run_flags(vm, c);
  return c;
}

void print_warnings(const RunOutcome& run, std::ostream& err) {
  if (const std::string line = rejection_warning(run); !line.empty())
    fmt::print(err, "batchsim: warning: {}: {}\n", run.config.policy, line);
}

// Commands other than `run` hold every run's records (tables, reports, sweeps): they refuse to stream.
void refuse_streaming(const po::variables_map& vm, std::string_view command) {
  if (vm.count("streaming") && vm["streaming"].as<bool>()) {
    throw UserError(
        fmt::format("--streaming with `batchsim {}`: not supported yet (only `batchsim run` streams)", command));
  }
}

// Whether `batchsim run` streams: as asked, or on its own above kStreamingAutoRequests synthetic
// requests when nothing in the run needs every record (it then says so in one line).
bool use_streaming(const RunConfig& c, std::ostream& err) {
  const std::string why_not = streaming_unsupported_reason(c);
  if (c.streaming.has_value()) {
    if (*c.streaming && !why_not.empty())
      throw UserError(fmt::format("--streaming with {}: not supported yet", why_not));
    return *c.streaming;
  }
  const bool known_count = c.workload.trace.empty() && c.workload.trace_columns == nullptr;
  if (!known_count || c.workload.num_requests <= kStreamingAutoRequests || !why_not.empty()) return false;
  fmt::print(err,
             "batchsim: note: {} requests > {}: streaming mode (memory bounded by the requests in flight, "
             "percentiles within 1%); --no-streaming for exact percentiles\n",
             c.workload.num_requests, kStreamingAutoRequests);
  return true;
}

// `engines`: what to print for the engine instead of the run's (a comparison's policies each run on
// their own: "engines hf-static hf-transformers, vllm-v0 vllm-v0").
void print_setup(std::ostream& out, const RunConfig& c, size_t num_requests, int64_t kv_tokens,
                 const std::string& engines = "") {
  std::string dtypes;
  if (c.weight_dtype != "auto") dtypes += " weights " + c.weight_dtype;
  if (c.kv_cache_dtype != "auto") dtypes += std::string(dtypes.empty() ? "" : ",") + " KV " + c.kv_cache_dtype;
  // A cluster says so: "4 replicas x (tp 1), router least-outstanding"; one replica reads as before.
  // A mixture of experts' layout reads as the engines spell it: "TP 1 x DP 8, EP 8".
  const std::string layout = c.layout().is_plain_tp() ? fmt::format("tp {}", c.tp) : c.layout().text();
  std::string group =
      c.replicas > 1 ? fmt::format("{} replicas x ({}), router {}", c.replicas, layout, c.router) : layout;
  if (is_disaggregated(c)) {
    // "1 prefill x (h100-sxm tp 1, vllm) + 3 decode x (a100-80gb tp 1, vllm, engine trtllm), KV over ib pull":
    // a pool's engine is named when the pool was given one of its own.
    const RunConfig p = pool_run_config(c, "prefill"), d = pool_run_config(c, "decode");
    auto engine_note = [](const PoolConfig& pool) {
      return pool.engine.empty() ? std::string() : ", engine " + pool.engine;
    };
    group = fmt::format("{} prefill x ({} tp {}, {}{}) + {} decode x ({} tp {}, {}{}), router {} / {}, KV over {} {}",
                        c.prefill_replicas, p.gpu, p.tp, p.policy, engine_note(c.prefill), c.decode_replicas, d.gpu,
                        d.tp, d.policy, engine_note(c.decode), c.router,
                        c.decode_router.empty() ? c.router : c.decode_router, c.kv_link, c.kv_transfer);
  }
  // Closed-loop clients set the pace: ", 100 clients (think time exponential:10 s)".
  // Or sessions: ", sessions of uniform:2:8 turns (think time exponential:5 s)", ", sessions
  // from the trace's hash_ids".
  const std::string at_a_time = c.max_concurrency > 0 ? fmt::format(", {} at a time", c.max_concurrency) : "";
  const std::string clients =
      c.workload.trace_sessions ? ", sessions from the trace's hash_ids" + at_a_time
      : !c.workload.session_turns.empty()
          ? fmt::format(", sessions of {} turns{}{}", c.workload.session_turns,
                        c.workload.think_time.empty() ? "" : fmt::format(" (think time {} s)", c.workload.think_time),
                        at_a_time)
      : c.max_concurrency == 0
          ? ""
          : fmt::format(", {} clients{}{}", c.max_concurrency,
                        c.workload.think_time.empty() ? "" : fmt::format(" (think time {} s)", c.workload.think_time),
                        c.client_connections > 0 && c.client_connections < c.max_concurrency
                            ? fmt::format(" over {} connections", c.client_connections)
                            : "");
  fmt::print(out, "model {}{} on {} ({}), {}, {} requests, arrival {}{}, KV capacity {} tokens{}\n", c.model,
             dtypes.empty() ? "" : " (" + dtypes.substr(1) + ")", c.gpu, group,
             engines.empty() ? "engine " + run_engine_name(c) : engines, num_requests,
             c.workload.arrival.empty() ? (c.workload.trace.empty() ? "offline" : "trace") : c.workload.arrival,
             clients, kv_tokens,
             c.replicas > 1        ? " per replica"
             : is_disaggregated(c) ? " per prefill replica"
                                   : "");
}

// Several seeds of a trace replayed as recorded would all be the same run: each seed replays a
// block-bootstrap replicate of it instead (sim/workload/workload.h, "resample"), and says so.
void resample_trace_for_seeds(WorkloadSpec& workload, int64_t seeds, std::ostream& err) {
  if (!replays_trace_timestamps(workload) || !workload.resample.empty()) return;
  workload.resample = "block-bootstrap";
  fmt::print(err,
             "batchsim: note: {} seeds of a trace replay: each seed replays a block-bootstrap replicate "
             "of {} (--resample block-bootstrap), so that the seeds vary the bursts it holds\n",
             seeds, workload.trace.filename().string());
}

// `run --seeds N`: seeds 2..N of `config` (the first ran already, its summary is `first`), then
// summary.json's `confidence` over all of them, printed. Each seed's SLO verdict is counted.
ordered_json run_other_seeds(const RunConfig& config, const ordered_json& first, std::ostream& out, std::ostream& err) {
  std::vector<ordered_json> summaries = {first};
  const std::vector<uint64_t> seeds = consecutive_seeds(config.workload.seed, config.seeds);
  for (size_t i = 1; i < seeds.size(); ++i) {
    RunConfig c = config;
    c.workload.seed = seeds[i];
    c.chrome_trace.clear();
    c.iteration_log = false;
    const BuiltWorkload built = build_workload(c.workload);
    const RunOutcome run = run_simulation(c, &built, {});
    print_warnings(run, err);
    summaries.push_back(summary_to_json(run));
  }
  std::vector<const ordered_json*> runs;
  for (const ordered_json& s : summaries) runs.push_back(&s);
  ordered_json confidence = confidence_json(runs, seeds, seed_variation(config.workload));
  print_confidence(out, confidence);
  if (!config.slo.empty()) {
    const auto met = std::count_if(summaries.begin(), summaries.end(),
                                   [](const ordered_json& s) { return s["slo"]["met"].get<bool>(); });
    fmt::print(out, "slo met in {} of {} seeds\n", met, summaries.size());
  }
  return confidence;
}

int cmd_run(const std::vector<std::string>& given, std::ostream& out, std::ostream& err) {
  const auto desc = run_options();
  const VllmSpellings spelled = respelled(given, err);
  const auto vm = parse(spelled.args, desc);
  if (vm.count("help")) {
    fmt::print(out, "usage: batchsim run [options]\n\n{}\n", fmt::streamed(desc));
    return 0;
  }
  RunConfig config = config_from(vm);
  validate(config);
  if (spelled.chunked_prefill_required) check_chunks_prefills(config.policy, config.policy_opts);
  if (config.iteration_log && config.out.empty()) {
    throw UserError("--iteration-log: iterations.csv is written into the --out folder; give --out DIR");
  }
  if (config.seeds > 1) {
    if (config.streaming.value_or(false))
      throw UserError("--streaming with --seeds: not supported (each seed's summary is kept)");
    config.streaming = false;
    resample_trace_for_seeds(config.workload, config.seeds, err);
  }
  const bool streaming = use_streaming(config, err);
  BuiltWorkload built;
  std::unique_ptr<RequestSource> source;
  std::optional<RequestsCsvWriter> requests_csv;  // streaming: rows as requests settle
  RunHooks hooks;
  if (streaming) {
    source = stream_workload(config.workload);
    hooks.source = source.get();
    if (!config.out.empty()) {
      requests_csv.emplace(config.out, config.replicas > 1);
      hooks.on_settled = [&](const RequestRecord& r) { requests_csv->add(r); };
    }
  } else {
    built = build_workload(config.workload);
    for (const auto& w : built.warnings) fmt::print(err, "batchsim: warning: {}\n", w);
  }
  const RunOutcome run = run_simulation(config, streaming ? nullptr : &built, hooks);
  if (requests_csv) requests_csv->finish();
  if (source) {
    for (const auto& w : source->warnings()) fmt::print(err, "batchsim: warning: {}\n", w);
  }
  print_setup(out, config, static_cast<size_t>(run.result.summary.requests_total), run.result.kv_capacity_tokens);
  if (streaming) {
    fmt::print(out,
               "streaming: percentiles from a DDSketch, within {:.0f}% of the exact ones (counts, means and "
               "totals exact); no bench.json, no p99-request breakdown or diagnosis\n",
               100 * run.result.summary.percentile_relative_error);
  }
  if (config.seeds > 1)
    fmt::print(out, "seed {} (the first of {}; the interval over all of them follows):\n", config.workload.seed,
               config.seeds);
  print_comparison_table(out, {&run});
  print_priority_classes(out, run.result.summary);
  // Why the slowest requests were slow, and what would have helped them.
  if (run.result.summary.requests_completed > 0) fmt::print(out, "{}\n", latency_breakdown_line(run.result.summary));
  fmt::print(out, "diagnosis: {}\n", run_diagnosis(run));
  if (const Summary& s = run.result.summary; s.prefill_cached_tokens > 0) {
    fmt::print(out, "prefix cache: {:.1f}% hit rate ({} of {} tokens to prefill found cached)\n",
               100 * s.prefix_hit_rate, s.prefill_cached_tokens, s.prefill_admitted_tokens);
  }
  fmt::print(out, "{}\n", trust_line(trust_json(run.gpu, run_engine_name(config))));
  ordered_json summary = summary_to_json(run);
  if (summary.contains("speculative_decoding")) {
    const ordered_json& d = summary["speculative_decoding"];
    fmt::print(out,
               "speculative decoding: {} k={}, mean acceptance length {:.2f} (rates {:.3g}: {}), {:.2f} tokens per "
               "verification step over {} steps\n",
               d["method"].get<std::string>(), d["k"].get<int>(), d["mean_acceptance_length"].get<double>(),
               fmt::join(d["acceptance_rates"].get<std::vector<double>>(), ", "),
               d["acceptance_source"].get<std::string>().substr(0, d["acceptance_source"].get<std::string>().find(':')),
               d["tokens_per_step"].get<double>(), d["verification_steps"].get<int64_t>());
  }
  if (summary.contains("slo")) fmt::print(out, "{}\n", slo_line(summary["slo"]));
  if (summary.contains("goodput")) fmt::print(out, "{}\n", goodput_line(summary["goodput"]));
  print_warnings(run, err);
  if (config.seeds > 1) summary["confidence"] = run_other_seeds(config, summary, out, err);
  if (!config.out.empty()) {
    write_run_outputs(run, config.out, summary);
    fmt::print(out, "wrote {}{}\n", config.out.string(),
               config.seeds > 1 ? fmt::format(" (seed {}'s files, with the interval over {} seeds in summary.json)",
                                              config.workload.seed, config.seeds)
                                : std::string());
  }
  if (!config.chrome_trace.empty()) {
    write_chrome_trace(run, config.chrome_trace);
    fmt::print(out, "wrote {} (open it in https://ui.perfetto.dev)\n", config.chrome_trace.string());
  }
  return 0;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

constexpr const char* kCompareUsage =
    R"(usage: batchsim compare EXPERIMENT.yaml --out DIR [--jobs N] [--shard K/N] [run flags]
       batchsim compare --policies a,b,c [run flags] [--out DIR]

The first form runs every combination of an experiment file (experiments/README.md) and writes
DIR/results.csv, DIR/report.md, DIR/figures/ and DIR/runs/<run>/. Run flags override the
experiment's base (e.g. --num-requests 200 for a quick look). The second form compares policies
on one workload given by run flags.
)";

// 0, or 1 when some runs of the set failed: the rest ran and was written, and the exit status
// says the set is not whole.
int exit_status_of(const ResultSet& results, bool wrote_report, std::ostream& err) {
  const auto failed = failed_runs(results);
  if (failed.empty()) return 0;
  fmt::print(err, "batchsim: error: {} of {} runs failed (listed above{})\n", failed.size(),
             results.capacities.empty() ? results.runs.size() : results.capacities.size(),
             wrote_report ? " and in report.md" : "");
  return 1;
}

// Quick mode (--policies) has one workload: the setup line says what it was, as `run` does.
void print_quick_setup(std::ostream& out, const Experiment& experiment, const ResultSet& results) {
  // A run that could not run has no figures (failed_run): the setup is read from one that ran.
  const auto ran = std::find_if(results.runs.begin(), results.runs.end(),
                                [](const nlohmann::ordered_json& r) { return !r.contains("error"); });
  if (ran != results.runs.end()) {
    // Quick mode has one workload: say what it was, as `run` does.
    const auto& first = *ran;
    // Each policy's own engine (the base's would name one that most did not run on).
    const auto engines = policy_engines(results);
    std::vector<std::string> each;
    for (const auto& [label, engine] : engines) each.push_back(label + " " + engine);
    const std::string engine_text = engines_warning(results).empty() && !engines.empty()
                                        ? "engine " + engines.front().second
                                        : fmt::format("engines {}", fmt::join(each, ", "));
    print_setup(out, experiment.base, first["requests"]["total"].get<size_t>(),
                first["kv"]["capacity_tokens"].get<int64_t>(), engine_text);
  }
}

int cmd_compare(const std::vector<std::string>& given, std::ostream& out, std::ostream& err) {
  const VllmSpellings spelled = respelled(given, err);
  const std::vector<std::string>& args = spelled.args;
  auto desc = run_options();
  // One option a line, as --help lists them.
  // clang-format off
  desc.add_options()
      ("experiment", po::value<std::string>(), "experiment file (also the first positional argument)")
      ("policies", po::value<std::string>(), "quick mode: comma-separated policies or presets")
      ("jobs,j", po::value<int>(), "simulations run in parallel (default: the machine's cores)")
      ("shard", po::value<std::string>(), "K/N: run only combinations i with i % N == K (K from 0)")
      ("no-plots", po::bool_switch(), "do not run plots/make_figures.py")
      ("max-runs", po::value<int64_t>(), "refuse an experiment that expands to more runs than "
       "this (default: the file's max-runs, else 100000)")
      ("dry-run", po::bool_switch(), "list the runs the experiment expands to, run nothing");
  // clang-format on
  po::positional_options_description positional;
  positional.add("experiment", 1);
  const auto vm = parse(args, desc, &positional);
  if (vm.count("help")) {
    fmt::print(out, "{}\n{}\n", kCompareUsage, fmt::streamed(desc));
    return 0;
  }
  refuse_streaming(vm, "compare");
  CompareOptions options;
  options.jobs =
      vm.count("jobs") ? vm["jobs"].as<int>() : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (options.jobs < 1) throw UserError("--jobs: must be >= 1");
  if (vm.count("shard")) parse_shard(vm["shard"].as<std::string>(), options);
  options.plots = !vm["no-plots"].as<bool>();
  if (vm.count("out")) options.out = vm["out"].as<std::string>();

  Experiment experiment;
  if (vm.count("experiment")) {
    for (const char* flag : {"policies", "policy", "config"}) {
      if (vm.count(flag)) {
        throw UserError(fmt::format("--{}: not with an experiment file (set it in the file)", flag));
      }
    }
    if (!vm.count("out") && !vm["dry-run"].as<bool>()) {
      throw UserError("compare EXPERIMENT.yaml: give --out DIR for the results");
    }
    const int64_t max_runs = vm.count("max-runs") ? vm["max-runs"].as<int64_t>() : 0;
    if (vm.count("max-runs") && max_runs < 1) throw UserError("--max-runs: must be >= 1");
    experiment = parse_experiment(
        vm["experiment"].as<std::string>(),
        [&](RunConfig& base) {
          apply_run_flags(vm, base);
          if (vm.count("trace")) base.workload.trace = std::filesystem::absolute(base.workload.trace);
          base.out.clear();
        },
        max_runs);
    if (vm.count("seed") || vm.count("seeds")) {
      // --seed S picks the first seed, --seeds N how many (default: the file's first, one).
      const uint64_t first =
          vm.count("seed") ? parse_seed(vm["seed"].as<std::string>(), "--seed") : experiment.seeds.front();
      experiment.seeds = consecutive_seeds(first, vm.count("seeds") ? vm["seeds"].as<int64_t>() : 1);
    }
    if (spelled.chunked_prefill_required) {
      throw UserError(
          "--enable-chunked-prefill: not with an experiment file (choose policies that chunk prefills in it)");
    }
  } else {
    const RunConfig base = config_from(vm);
    validate(base);
    const auto policies = split_list(vm.count("policies") ? vm["policies"].as<std::string>() : "hf-static,continuous");
    if (policies.empty()) throw UserError("--policies: give at least one policy");
    if (spelled.chunked_prefill_required) {
      for (const std::string& p : policies) check_chunks_prefills(p, base.policy_opts);
    }
    experiment = experiment_from_policies(base, policies);
  }
  if (vm["dry-run"].as<bool>()) {
    for (const PlannedRun& run : expand_runs(experiment)) {
      fmt::print(out, "{}{}\n", run.name,
                 run.index % options.shard_count == options.shard_index ? "" : "  (other shard)");
    }
    fmt::print(out, "{} {}\n", count_runs(experiment), experiment.capacity ? "capacity searches" : "runs");
    return 0;
  }
  const ResultSet results = run_experiment(experiment, options, err);
  if (!vm.count("experiment")) print_quick_setup(out, experiment, results);
  print_result_table(out, results);
  if (!options.out.empty()) fmt::print(out, "wrote {}\n", (options.out / "report.md").string());
  return exit_status_of(results, !options.out.empty(), err);
}

constexpr const char* kPlanUsage = R"(usage: batchsim plan --model M --gpu G1[,G2...] --tp 1[,2...] --slo BOUND=S[,...]
                    [--goodput ttft:MS tpot:MS [--attainment PCT]] [--disaggregated]
                    [--max-replicas N] [--price GPU=USD]... [workload options of run] [--out DIR]

For each GPU and TP degree, the fewest replicas (behind --router) that meet every SLO when the
workload itself is replayed: a trace with its own timestamps (--trace, --trace-speedup), or the
synthetic arrivals of `batchsim run`. Rows are sorted by total GPUs (by cost when every GPU has
a price: a profile's price_per_hour, or --price). Warns when no count up to --max-replicas
meets the SLOs (and by how much the best missed), and when the busiest --window of arrivals is
busier than the replicas found sustain. --out DIR writes plan.csv, plan.json, report.md and
figures/plan_slo.png.

--disaggregated adds prefill/decode deployments: for each GPU (or --prefill-gpu x --decode-gpu
pair) and TP pair (--prefill-tp x --decode-tp, default --tp), the P:D split with the fewest GPUs
(or lowest cost) that meets the SLOs, in the same table. --goodput ttft:MS tpot:MS makes
--attainment percent (default 90) of the requests meeting both one more objective, and reports
DistServe's per-GPU goodput of each answer: the highest rate (a factor on the replayed arrivals)
at which that share is still met, divided by its GPUs.

SLO bounds (--slo, comma-separated or repeated): any summary.json figure by its path
(latency.ttft_s.p99=2) or short form METRIC_STAT (ttft_p99, tbt_p99, tpot_p50, e2e_p99,
queueing_p50), in seconds with an optional unit: ttft_p99=2s,tbt_p99=100ms.
)";

// Copies `from` without the options named in `leave_out` (plan redefines --gpu and --tp as lists).
po::options_description options_without(const po::options_description& from, const std::set<std::string>& leave_out,
                                        const std::string& caption) {
  po::options_description d(caption);
  for (const auto& option : from.options()) {
    if (!leave_out.count(option->long_name())) d.add(option);
  }
  return d;
}

std::vector<int> parse_int_list(const std::string& text, const std::string& option) {
  std::vector<int> values;
  for (const std::string& item : split_list(text)) {
    try {
      size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      values.push_back(v);
    } catch (const std::exception&) {
      throw UserError(fmt::format("{} {}: '{}' is not a whole number", option, text, item));
    }
  }
  if (values.empty()) throw UserError(fmt::format("{}: give at least one value, e.g. {} 1,2", option, option));
  return values;
}

// The options plan reads itself: it searches the replicas and takes lists of GPUs and TP
// degrees; the rest are `run`'s.
const std::set<std::string>& plan_owned_options() {
  static const std::set<std::string> owns = {"gpu",
                                             "tp",
                                             "dp",
                                             "ep",
                                             "replicas",
                                             "out",
                                             "slo",
                                             "prefill-gpu",
                                             "decode-gpu",
                                             "prefill-tp",
                                             "decode-tp",
                                             "prefill-replicas",
                                             "decode-replicas"};
  return owns;
}

po::options_description plan_own_options() {
  po::options_description own("plan options");
  // One option a line, as --help lists them.
  // clang-format off
  own.add_options()
      ("gpu", po::value<std::string>(), "candidate GPUs: built-in names or profile files, comma-separated")
      ("tp", po::value<std::string>(), "candidate tensor-parallel degrees, comma-separated (default 1)")
      ("dp", po::value<std::string>(), "a mixture of experts' candidate attention data-parallel ranks, comma-separated "
       "(default 1; every --tp x --dp x --ep the model can run is planned)")
      ("ep", po::value<std::string>(), "a mixture of experts' candidate expert-parallel degrees, comma-separated "
       "(default 1)")
      ("slo", po::value<std::vector<std::string>>()->composing(), "KEY=BOUND[,...]: upper bounds every "
       "answer must meet, e.g. ttft_p99=2s,tbt_p99=100ms or ttft_p99_s=2 (repeatable; run's --slo keys)")
      ("max-replicas", po::value<int>()->default_value(32), "the most replicas tried per GPU and TP")
      ("price", po::value<std::vector<std::string>>()->composing(), "GPU=USD per GPU-hour, over the profile's "
       "price_per_hour (repeatable)")
      ("window", po::value<double>()->default_value(60), "busy-window width in seconds")
      ("recommend", po::value<std::string>()->default_value("busiest-window"), "what the recommendation asks: "
       "busiest-window (every SLO over the whole workload and in its busiest --window) | whole-workload")
      ("disaggregated", po::bool_switch(), "also search prefill/decode deployments: for each GPU (pair) and TP "
       "(pair), the P:D split with the fewest GPUs (lowest cost when priced) that meets the SLOs; the pools' "
       "other settings are run's --prefill-*/--decode-* options")
      ("prefill-gpu", po::value<std::string>(), "with --disaggregated: the prefill pool's candidate GPUs, "
       "comma-separated (default: each --gpu paired with itself)")
      ("decode-gpu", po::value<std::string>(), "with --disaggregated: the decode pool's candidate GPUs (default --gpu)")
      ("prefill-tp", po::value<std::string>(), "with --disaggregated: the prefill pool's TP degrees (default --tp)")
      ("decode-tp", po::value<std::string>(), "with --disaggregated: the decode pool's TP degrees (default --tp)")
      ("attainment", po::value<double>()->default_value(90), "with --goodput: the percentage of requests that "
       "must meet the thresholds, at the replayed rate and for per-GPU goodput (DistServe's SLO attainment)")
      ("jobs,j", po::value<int>(), "candidates planned in parallel (default: the machine's cores)")
      ("out", po::value<std::string>(), "write plan.csv, plan.json, report.md and figures/ here")
      ("no-plots", po::bool_switch(), "do not draw figures/plan_slo.png");
  // clang-format on
  return own;
}

PlanSpec plan_spec_of(const po::variables_map& vm) {
  PlanSpec spec;
  // The run options other than those plan owns apply as they do for `run`.
  po::variables_map run_vm = vm;
  for (const std::string& k : plan_owned_options()) run_vm.erase(k);
  spec.base = default_run_config();
  if (vm.count("config")) apply_yaml_config(vm["config"].as<std::string>(), spec.base);
  refuse_streaming(run_vm, "plan");
  apply_run_flags(run_vm, spec.base);
  if (spec.base.iteration_log)
    throw UserError("--iteration-log: plan writes no per-run files (run the answer with `batchsim run`)");
  if (!spec.base.chrome_trace.empty()) {
    throw UserError("--chrome-trace: plan writes no per-run files (trace the answer with `batchsim run`)");
  }
  if (!vm.count("gpu")) throw UserError("--gpu: give the candidate GPUs, e.g. --gpu h100-sxm,a100-80gb");
  spec.gpus = split_list(vm["gpu"].as<std::string>());
  spec.tps = vm.count("tp") ? parse_int_list(vm["tp"].as<std::string>(), "--tp") : std::vector<int>{1};
  if (vm.count("dp")) spec.dps = parse_int_list(vm["dp"].as<std::string>(), "--dp");
  if (vm.count("ep")) spec.eps = parse_int_list(vm["ep"].as<std::string>(), "--ep");
  if (vm.count("slo")) {
    std::string slo_text;
    for (const auto& s : vm["slo"].as<std::vector<std::string>>()) slo_text += (slo_text.empty() ? "" : ",") + s;
    spec.slo = parse_slo(slo_text, "--slo");
  } else {
    spec.slo = spec.base.slo;  // a --config file's slo: block
  }
  if (spec.slo.empty() && spec.base.goodput.empty()) {
    throw UserError(
        "--slo: give the SLOs every answer must meet, e.g. --slo ttft_p99=2s,tbt_p99=100ms (or goodput "
        "thresholds: --goodput ttft:MS tpot:MS)");
  }
  spec.disaggregated = vm["disaggregated"].as<bool>();
  if (vm.count("prefill-gpu")) spec.prefill_gpus = split_list(vm["prefill-gpu"].as<std::string>());
  if (vm.count("decode-gpu")) spec.decode_gpus = split_list(vm["decode-gpu"].as<std::string>());
  if (vm.count("prefill-tp")) spec.prefill_tps = parse_int_list(vm["prefill-tp"].as<std::string>(), "--prefill-tp");
  if (vm.count("decode-tp")) spec.decode_tps = parse_int_list(vm["decode-tp"].as<std::string>(), "--decode-tp");
  spec.attainment = vm["attainment"].as<double>() / 100;
  spec.max_replicas = vm["max-replicas"].as<int>();
  if (vm.count("price")) {
    for (const auto& p : vm["price"].as<std::vector<std::string>>()) spec.price_per_hour.insert(parse_price(p));
  }
  spec.window_s = vm["window"].as<double>();
  spec.recommend = vm["recommend"].as<std::string>();
  if (spec.recommend != "busiest-window" && spec.recommend != "whole-workload") {
    throw UserError(fmt::format("--recommend {}: expected busiest-window or whole-workload", spec.recommend));
  }
  spec.jobs =
      vm.count("jobs") ? vm["jobs"].as<int>() : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return spec;
}

int cmd_plan(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  auto desc = options_without(run_options(), plan_owned_options(), "workload, model and engine options (as for run)");
  desc.add(plan_own_options());
  const auto vm = parse(args, desc);
  if (vm.count("help")) {
    fmt::print(out, "{}\n{}\n", kPlanUsage, fmt::streamed(desc));
    return 0;
  }
  const PlanSpec spec = plan_spec_of(vm);
  const PlanResult plan = run_plan(spec, err);
  print_plan(out, plan);
  if (vm.count("out")) {
    const std::filesystem::path dir = vm["out"].as<std::string>();
    write_plan(plan, dir, !vm["no-plots"].as<bool>(), err);
    fmt::print(out, "wrote {}\n", (dir / "plan.csv").string());
  }
  return 0;
}

int cmd_merge(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  po::options_description desc("merge options");
  // One option a line, as --help lists them.
  // clang-format off
  desc.add_options()
      ("dirs", po::value<std::vector<std::string>>()->multitoken(), "results folders of the shards")
      ("out", po::value<std::string>(), "folder for the merged results (required)")
      ("no-plots", po::bool_switch(), "do not run plots/make_figures.py")
      ("help,h", "show this help");
  // clang-format on
  po::positional_options_description positional;
  positional.add("dirs", -1);
  const auto vm = parse(args, desc, &positional);
  if (vm.count("help")) {
    fmt::print(out,
               "usage: batchsim merge DIR... --out MERGED\n\nJoins the results folders of "
               "`compare --shard K/N` runs into one results.csv and report.\n\n{}\n",
               fmt::streamed(desc));
    return 0;
  }
  if (!vm.count("dirs")) throw UserError("merge: give the results folders to merge");
  if (!vm.count("out")) throw UserError("merge: give --out DIR for the merged results");
  std::vector<std::filesystem::path> dirs;
  for (const auto& d : vm["dirs"].as<std::vector<std::string>>()) dirs.emplace_back(d);
  const std::filesystem::path merged_dir = vm["out"].as<std::string>();
  const ResultSet results = merge_results(dirs, merged_dir, !vm["no-plots"].as<bool>(), err);
  print_result_table(out, results);
  fmt::print(out, "wrote {}\n", (merged_dir / "report.md").string());
  return exit_status_of(results, true, err);
}

constexpr const char* kListUsage =
    R"(usage: batchsim list {models,gpus [PROFILE.yaml...],engines,policies,routers,links}

  models    built-in models (any Hugging Face config.json also works as --model)
  gpus      built-in GPUs and shipped profiles, then the profile files given, each with where
            it came from: datasheet, fitted on ..., transferred from ... (any profile file
            also works as --gpu)
  engines   engine profiles: what the serving software costs (any engine file works as --engine)
  policies  policies and engine presets, and every policy option with its default
  routers   request routers for --replicas N
  links     KV links between prefill and decode pools (--kv-link)
  spec-presets  measured acceptance rates for --spec-decode METHOD:k=K:accept=PRESET
)";

void list_models(std::ostream& out) {
  // One row per built-in: its shapes, its attention (kind, and the layers that see a window or
  // a chunk of the context), its experts (routed, top-k, the shared experts' FFN, the dense
  // layers), the weight format, the KV one token caches over all layers, and the parameters.
  std::size_t width = 4;
  for (const ModelSpec& m : builtin_models()) width = std::max(width, m.name.size());
  const std::string row_format =
      "{:<{}} {:>6} {:>6} {:>5} {:>4} {:>19} {:>6} {:>7} {:>5} {:>6} {:>5} {:>15} {:>10} {:>9} {:>8} {:>7}\n";
  fmt::print(out, fmt::runtime(row_format), "name", width, "layers", "hidden", "heads", "kv", "attention", "ffn",
             "experts", "top-k", "shared", "dense", "weights", "KV/token", "context", "params", "active");
  for (const ModelSpec& m : builtin_models()) {
    std::string attention(attention_kind_name(m.attention));
    if (m.sliding_window_layers > 0) {
      attention += fmt::format(" sw{} {}/{}", m.sliding_window, m.sliding_window_layers, m.num_layers);
    } else if (m.chunked_attention_layers > 0) {
      attention += fmt::format(" chunk{} {}/{}", m.attention_chunk_size, m.chunked_attention_layers, m.num_layers);
    }
    auto or_dash = [&](int v) { return m.is_moe() && v > 0 ? std::to_string(v) : std::string("-"); };
    fmt::print(out, fmt::runtime(row_format), m.name, width, m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads,
               attention, m.ffn_size, or_dash(m.num_experts), or_dash(m.experts_per_token),
               or_dash(m.shared_expert_ffn_size), or_dash(m.dense_layers), m.weight_format_text(),
               fmt::format("{:.1f} KiB", static_cast<double>(m.kv_bytes_per_token()) / 1024), m.max_context_tokens,
               fmt::format("{:.1f}B", static_cast<double>(m.total_params()) / 1e9),
               fmt::format("{:.1f}B", static_cast<double>(m.active_params()) / 1e9));
  }
  fmt::print(out,
             "\nattention: gqa (grouped-query; MHA and MQA too) or mla (latent KV: kv_lora_rank + rope per token, "
             "whatever the heads), with swW N/L: N of L layers see a sliding window of W tokens, chunkC N/L: N "
             "layers attend within chunks of C.\nMoE rows: ffn is one routed expert's; experts routed per layer, "
             "top-k per token, shared the shared experts' FFN, dense the layers that keep a dense MLP;\nweights "
             "the quantisable layers' format (ATTN+EXPERTS where they differ); KV/token at the model's KV dtype; "
             "params every expert (what must fit), active what one token runs through.\n");
  fmt::print(out,
             "\nA Hugging Face id (--model deepseek-ai/DeepSeek-R1) or a config.json (or its folder) also works "
             "as --model.\n");
}

void list_gpus(const std::vector<std::string>& args, std::ostream& out) {
  // The built-ins, then the files named after `gpus` (a profile written by `calibrate fit` or
  // `calibrate transfer`), so that where a profile's numbers came from is one command away.
  std::vector<HardwareProfile> gpus = builtin_gpus();
  for (size_t i = 1; i < args.size(); ++i) gpus.push_back(load_hardware_profile(args[i]));
  size_t width = 16;
  for (const HardwareProfile& g : gpus) width = std::max(width, g.name.size());
  fmt::print(out, "{:<{}} {:>10} {:>10} {:>8}  {}\n", "name", width, "TFLOP/s", "HBM GB/s", "mem GB", "source");
  for (const HardwareProfile& g : gpus) {
    fmt::print(out, "{:<{}} {:>10.0f} {:>10.0f} {:>8.0f}  {}\n", g.name, width, g.peak_flops / 1e12,
               g.hbm_bytes_per_s / 1e9, static_cast<double>(g.memory_bytes) / 1e9, g.source);
  }
  fmt::print(out,
             "\nA hardware profile file (YAML/JSON) also works as --gpu; `batchsim list gpus FILE` "
             "lists it here.\n");
}

void list_engines(std::ostream& out) {
  fmt::print(out, "{:<18} {:>9} {:>8} {:>7} {:>9} {:>7} {:>7} {:>9} {:>14}  {}\n", "name", "cpu/iter", "cpu/seq",
             "overlap", "launch", "graphs", "allred", "kv write", "residual", "description");
  for (const EngineProfile& e : builtin_engines()) {
    const CpuOverhead& r = e.residual;
    const bool has_residual = r.per_iteration_s > 0 || r.per_sequence_s > 0 || r.per_extra_worker_s > 0;
    fmt::print(out, "{:<18} {:>7.2f}ms {:>6.1f}us {:>7} {:>7.0f}us {:>7} {:>7} {:>9} {:>14}  {}\n", e.name,
               e.cpu.per_iteration_s * 1e3, e.cpu.per_sequence_s * 1e6, e.cpu_overlaps_gpu ? "yes" : "no",
               e.launch_per_kernel_s * 1e6,
               e.cuda_graph_max_tokens > 0 ? fmt::format("<={}", e.cuda_graph_max_tokens) : "-",
               allreduce_impl_name(e.allreduce), kv_cache_write_name(e.kv_cache_write),
               has_residual ? fmt::format("{:.2f}ms+{:.0f}us", r.per_iteration_s * 1e3, r.per_sequence_s * 1e6) : "-",
               e.description);
  }
  fmt::print(out,
             "\ncpu/iter, cpu/seq: CPU per iteration and per sequence; overlap: run beside the GPU; launch: "
             "host time per kernel\noutside CUDA graphs; graphs: iterations of up to N tokens replay one; "
             "allred: all-reduce; kv write: in place or by concatenation;\nresidual: time per iteration + per sequence "
             "fitted to serving benchmarks (batchsim calibrate engine).\nEach number's source is "
             "in hwmodel/engines/NAME.yaml. An engine profile file also works as --engine.\n");
}

void list_policies(std::ostream& out) {
  for (const PolicyInfo& p : registered_policies()) {
    fmt::print(out, "{:<16} {} (engine {})\n", p.name, p.description, p.engine);
    if (!p.preset.empty()) {
      std::vector<std::string> kv;
      for (const auto& [k, v] : p.preset) kv.push_back(k + "=" + v);
      fmt::print(out, "{:<16}   preset of {}: {}\n", "", p.base, fmt::join(kv, " "));
    }
  }
  for (const std::string& base : policy_bases()) {
    fmt::print(out, "\noptions of {} (--policy-opt KEY=VALUE):\n", base);
    for (const PolicyOptionDoc& d : policy_option_docs(base)) {
      fmt::print(out, "  {:<30} default {:<26} {}\n", d.key, d.default_value, d.description);
    }
  }
}

void list_links(std::ostream& out) {
  for (const KvLink& l : kv_links()) {
    fmt::print(out, "{:<8} {:>6.0f} Gb/s {:>5.0f} us  {}\n", l.name, l.gbps, l.latency_us, l.description);
  }
  fmt::print(out,
             "\n--kv-link NAME for disaggregated runs (--prefill-replicas P --decode-replicas D); "
             "--kv-link-gbps and --kv-link-latency-us replace its figures. Bandwidth per GPU and "
             "direction: a tensor-parallel replica sends its shards in parallel.\n");
}

void list_routers(std::ostream& out) {
  for (const RouterInfo& r : routers()) fmt::print(out, "{:<18} {}\n", r.name, r.description);
  fmt::print(out, "\n--replicas N --router NAME: N identical replicas, each with its own policy and KV cache.\n");
}

void list_spec_presets(std::ostream& out) {
  for (const SpeculativePreset& p : speculative_presets()) {
    const std::vector<double> rates = p.rates(p.measured_k);
    fmt::print(out, "{:<30} {:<7} tau {:.2f} at k={} (rates {:.3f})\n  {}\n", p.name, draft_method_name(p.method),
               p.mean_accepted_length, p.measured_k, fmt::join(rates, ", "), p.source);
  }
  fmt::print(out,
             "\n--spec-decode METHOD:k=K:accept=PRESET takes a preset of its METHOD; a preset's rates are the "
             "geometric ones (position i accepted with alpha^i) whose mean acceptance length at its k is the "
             "measured tau, and a smaller k takes the first of them.\n");
}

int cmd_list(const std::vector<std::string>& args, std::ostream& out) {
  const std::string what = args.empty() ? "" : args[0];
  if (what == "--help" || what == "-h") {
    out << kListUsage;
    return 0;
  }
  if (args.size() > 1 && what != "gpus") {
    throw UserError(
        fmt::format("list: takes one of models, gpus, engines, policies, routers, links, spec-presets; got '{}'",
                    fmt::join(args, " ")));
  }
  using Lister = std::function<void()>;
  const std::map<std::string, Lister> listers = {
      {"models", [&] { list_models(out); }},
      {"gpus", [&] { list_gpus(args, out); }},
      {"engines", [&] { list_engines(out); }},
      {"policies", [&] { list_policies(out); }},
      {"links", [&] { list_links(out); }},
      {"routers", [&] { list_routers(out); }},
      {"spec-presets", [&] { list_spec_presets(out); }},
  };
  if (const auto it = listers.find(what); it != listers.end()) {
    it->second();
    return 0;
  }
  throw UserError(
      fmt::format("list: expected models, gpus, engines, policies, routers, links or spec-presets, got '{}'", what));
}

int cmd_bench(const std::vector<std::string>& given, std::ostream& out, std::ostream& err) {
  const VllmSpellings spelled = respelled(given, err);
  const std::vector<std::string>& args = spelled.args;
  auto desc = run_options();
  // One option a line, as --help lists them.
  // clang-format off
  desc.add_options()("repeat", po::value<int>()->default_value(5), "runs to time (the best is reported)")
      ("no-fast-forward", po::bool_switch(), "step every decode iteration one by one (to measure "
       "what fast-forward saves; results are identical)");
  // clang-format on
  const auto vm = parse(args, desc);
  if (vm.count("help")) {
    fmt::print(out, "usage: batchsim bench [options]\n\n{}\n", fmt::streamed(desc));
    return 0;
  }
  refuse_streaming(vm, "bench");
  RunConfig config = config_from(vm);
  if (spelled.chunked_prefill_required) check_chunks_prefills(config.policy, config.policy_opts);
  const int repeat = vm["repeat"].as<int>();
  if (repeat < 1) throw UserError("--repeat: must be >= 1");
  const BuiltWorkload built = build_workload(config.workload);
  const Workload& workload = built.requests;
  double best_s = 1e300;
  RunOutcome last;
  for (int i = 0; i < repeat; ++i) {
    RunHooks hooks;
    hooks.fast_forward = !vm["no-fast-forward"].as<bool>();
    last = run_simulation(config, &built, hooks);
    best_s = std::min(best_s, last.wall_s);
  }
  const Summary& s = last.result.summary;
  const double iterations = static_cast<double>(std::max<int64_t>(1, s.iterations));
  fmt::print(out,
             "policy {}: {} requests, {} iterations ({:.0f}% fast-forwarded, {:.0f}% with a decode "
             "cohort), {} output tokens simulated\n",
             config.policy, workload.size(), s.iterations,
             100.0 * static_cast<double>(last.result.fast_forwarded_iterations) / iterations,
             100.0 * static_cast<double>(last.result.cohort_iterations) / iterations, s.output_tokens);
  fmt::print(out,
             "best of {}: {:.4f} s wall = {:.0f} simulated requests/s, {:.0f} iterations/s, "
             "{:.3g} simulated tokens/s; simulated time {:.1f} s ({:.0f}x faster than real time)\n",
             repeat, best_s, static_cast<double>(workload.size()) / best_s, static_cast<double>(s.iterations) / best_s,
             static_cast<double>(s.output_tokens + s.prompt_tokens) / best_s, s.makespan_s, s.makespan_s / best_s);
  return 0;
}

}  // namespace

RunConfig run_config_from_args(const std::vector<std::string>& args) {
  RunConfig config = config_from(parse(args, run_options()));
  validate(config);
  return config;
}

void apply_run_args(const std::vector<std::string>& args, RunConfig& config) {
  apply_run_flags(parse(args, run_options()), config);
}

int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    out << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "run") return cmd_run(rest, out, err);
  if (command == "compare") return cmd_compare(rest, out, err);
  if (command == "merge") return cmd_merge(rest, out, err);
  if (command == "plan") return cmd_plan(rest, out, err);
  if (command == "list") return cmd_list(rest, out);
  if (command == "bench") return cmd_bench(rest, out, err);
  if (command == "validate") return validate_command(rest, out);
  // `calibrate shapes` (calibrate_shapes.cpp): a model's GEMMs for batchsim-calibrate.
  if (command == "calibrate" && !rest.empty() && rest[0] == "shapes") {
    return calibrate_shapes_command({rest.begin() + 1, rest.end()}, out);
  }
  if (command == "calibrate") return calibrate_command(rest, out);
  if (command == "validate-serving") return validate_serving_command(rest, out);
  throw UserError(fmt::format("unknown command '{}' (try `batchsim --help`)", command));
}

}  // namespace batchsim
