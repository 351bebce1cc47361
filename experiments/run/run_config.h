// batchsim — the configuration of one simulation run, from flags and/or a YAML file.
//
// Every key can be given as a command-line flag (--model) or in a YAML file passed with
// --config (model: ...); flags override the file. Keys are spelled with dashes or
// underscores alike. Policy options are --policy-opt KEY=VALUE (repeatable) or a `policy-opt`
// map in YAML.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "experiments/run/slo.h"
#include "hwmodel/parallel_layout.h"
#include "hwmodel/model_spec.h"
#include "sim/workload/workload.h"

namespace YAML {
class Node;
}

namespace batchsim {

// One pool of a disaggregated run: what differs from the run's own settings (unset: the run's).
// The run's policy options apply to a pool that runs the run's policy; a pool given a policy
// of its own starts from none. Its own options are added on top.
struct PoolConfig {
  std::string gpu;
  std::optional<int> tp;
  // The pool's attention DP ranks, expert parallelism and experts' TP (a mixture of experts;
  // default the run's). A pool's DP ranks take its role (DpAttentionPolicy).
  std::optional<int> dp;
  std::optional<int> ep;
  std::optional<int> moe_tp;
  std::string policy;
  std::map<std::string, std::string> policy_opts;
  std::optional<int64_t> num_gpu_blocks;
  // The pool's engine profile (built-in name or file): pools may run different serving
  // software (Splitwise's and DistServe's prototypes each ran their own prefill and decode
  // workers). Empty: the run's --engine, else the pool's policy's own engine.
  std::string engine;
};

struct RunConfig {
  std::string model = "llama-2-7b";
  std::string gpu = "a100-80gb";
  int tp = 1;
  // A mixture of experts' layout (hwmodel/parallel_layout.h): attention data-parallel ranks,
  // expert parallelism, and the experts' tensor parallelism (0: what the GPUs left over give).
  int dp = 1;
  int ep = 1;
  int moe_tp = 0;
  ParallelLayout layout() const { return ParallelLayout{tp, dp, ep, moe_tp}; }
  // How tokens choose their experts: "balanced" (every expert alike: T k / E rows each, the
  // collector's synthetic best case), "power:ALPHA" (per-expert loads from a power law of
  // exponent ALPHA, as NVIDIA's MoE tables measure them; the busiest expert rank sets the step),
  // or "auto": the power law NVIDIA's aiconfigurator estimator assumes for the architecture when
  // it predicts serving (sdk/config.py workload_distribution "power_law"; alpha 1.01 for
  // DeepSeek-style MLA models, sdk/models/deepseek.py l.170, and 1.2 for the other MoE models,
  // sdk/models/moe.py l.128). A router's tokens pile on popular experts; balanced routing reads
  // every expert from T k >= E tokens, so it steps the decode time at 16 sequences of a
  // 128-expert top-8 model where measured TPOT grows smoothly (docs/validation.md, "Routing").
  // `eplb` spreads hot experts over the ranks as an expert-load balancer does (vLLM/SGLang
  // --enable-eplb), modelled as balanced routing.
  std::string moe_routing = "auto";
  bool eplb = false;
  // Speculative decoding (--spec-decode METHOD:k=K:accept=RATES, hwmodel/speculative.h); empty: off.
  std::string spec_decode;
  // KV offload tiers (--kv-offload cpu=GIB[,disk=GIB]); empty: none.
  std::string kv_offload;
  // Element types as vLLM spells them (--quantization fp8 / --kv-cache-dtype fp8): "auto" keeps
  // the model's (16-bit unless its config.json says fp8), else bf16 | fp16 | fp8.
  std::string weight_dtype = "auto";
  std::string kv_cache_dtype = "auto";
  std::string policy = "continuous";
  std::map<std::string, std::string> policy_opts;
  // Engine profile (built-in name or file, hwmodel/engines/); empty: the policy's own engine
  // (policies/registry.h, policy_engine).
  std::string engine;
  // A cluster of identical replicas (each `tp` GPUs, its own policy and KV cache) behind a
  // router (sim/simulation.h, Router): 1 is a single replica.
  int replicas = 1;
  std::string router = "round-robin";
  // Prefill/decode disaggregation (sim/simulation.h, "Disaggregated pools"): P prefill and D
  // decode replicas instead of `replicas`; 0 and 0: colocated. Arrivals are routed by `router`
  // to the prefill pool, hand-offs by `decode_router` (empty: `router`) to the decode pool.
  int prefill_replicas = 0;
  int decode_replicas = 0;
  PoolConfig prefill, decode;
  std::string decode_router;
  // The KV link (sim/kv_transfer.h): a named one, its bandwidth (Gb/s per GPU) and latency (us)
  // replaced when given; pull | layerwise.
  std::string kv_link = "ib";
  std::optional<double> kv_link_gbps;
  std::optional<double> kv_link_latency_us;
  std::string kv_transfer = "pull";
  WorkloadSpec workload;
  double gpu_memory_utilization = 0.9;
  // Closed-loop clients (vllm bench serve --max-concurrency): at most this many requests in
  // flight; 0 = open loop. See SimulationOptions::max_concurrency.
  int64_t max_concurrency = 0;
  // The closed-loop client's connection pool: at most this many of its requests at the server,
  // the rest waiting at the client with their clock running; 0 = no limit. See
  // SimulationOptions::client_connections.
  int64_t client_connections = 0;
  // KV cache size in blocks (vLLM --num-gpu-blocks-override; SimulationOptions::num_gpu_blocks);
  // 0: from GPU memory.
  int64_t num_gpu_blocks = 0;
  // vLLM's --max-model-len: the context a request may fill (prompt + output), at most the
  // model's max_position_embeddings; 0: that.
  int64_t max_model_len = 0;
  // --seeds N (`run`, and `compare` without a file's seeds): N runs, seeds workload.seed ..
  // workload.seed + N - 1, reported with confidence intervals (experiments/run/confidence.h).
  // On a trace replayed as recorded, N > 1 resamples it (workload.resample = block-bootstrap).
  // Not in summary.json's config echo: each run there is one seed's.
  int64_t seeds = 1;
  // Streaming mode (sim/simulation.h, "Streaming"; `batchsim run` only): unset: automatic
  // (on above kStreamingAutoRequests synthetic requests, experiments/run/runner.h); true:
  // --streaming; false: --no-streaming. Not in summary.json's config echo (a streaming run
  // says so in its own keys), so that exact runs' files stay as they were.
  std::optional<bool> streaming;
  int64_t streaming_slots = 1 << 18;  // --streaming-slots: requests in flight at most
  std::filesystem::path out;          // empty: print only
  bool iteration_log = false;
  // --iteration-log=ids: iterations.csv also lists each iteration's requests (implies
  // iteration_log).
  bool iteration_log_ids = false;
  // --chrome-trace FILE: the run as a Chrome / Perfetto trace (experiments/run/chrome_trace.h);
  // empty: none. In an experiment a file name, written into each run's folder.
  std::filesystem::path chrome_trace;
  // --chrome-trace-requests N: how many requests (the first N) get slices of their own; unset:
  // kDefaultChromeTraceRequests. Only with chrome_trace.
  std::optional<int64_t> chrome_trace_requests;
  // How the results are judged and reported (nothing here changes the simulation):
  // SLO bounds and goodput thresholds (experiments/run/slo.h; summary.json's `slo` and `goodput`
  // when given), and which figures bench.json carries (experiments/run/bench_result.h; vLLM's
  // defaults).
  SloBounds slo;
  GoodputSpec goodput;
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl"};
  std::vector<double> metric_percentiles = {99};
};

// The defaults a bare `batchsim run` uses: 1000 requests arriving at once with Anyscale-style
// lengths (prompt 512, output capexp:128:512).
RunConfig default_run_config();

// "num_requests" -> "num-requests": run keys are spelled with dashes or underscores alike.
std::string normalize_key(std::string key);

// Applies a YAML mapping of run keys to `config`. Throws UserError naming the file and key.
void apply_yaml_config(const std::filesystem::path& file, RunConfig& config);
// Applies the run keys of a YAML mapping (as apply_yaml_config does for a whole file); errors
// name `file`, the line and `key_prefix` + the key (an experiment file passes e.g. "base.").
void apply_yaml_mapping(const YAML::Node& mapping, const std::filesystem::path& file, RunConfig& config,
                        const std::string& key_prefix = "");
// One run key `raw` with value `v`; `key_node` is where the key is written (its line names an
// unknown key). For values read from a file: a cloned node has no line of its own.
void apply_yaml_key(const std::string& raw, const YAML::Node& key_node, const YAML::Node& v,
                    const std::filesystem::path& file, RunConfig& config, const std::string& key_prefix = "");
// Parses "KEY=VALUE" (from --policy-opt). Throws UserError naming the option.
std::pair<std::string, std::string> parse_policy_opt(const std::string& text);

// A seed as typed: a whole number from 0 to 2^64-1 (no sign, no wrap-around of "-1").
uint64_t parse_seed(const std::string& text, const std::string& option);
// first, first + 1, ..., first + count - 1 (`--seeds N` from `--seed S`). Throws UserError
// for count < 1 or a seed past 2^64-1.
std::vector<uint64_t> consecutive_seeds(uint64_t first, int64_t count);
// Sets iteration_log (and iteration_log_ids) from an --iteration-log value: "true" or "false"
// (a bare --iteration-log is "true"), or "ids". Throws UserError naming `option`.
void set_iteration_log(RunConfig& config, const std::string& value, const std::string& option);
// The first requests that get slices in a Chrome trace when --chrome-trace-requests is not
// given: enough for the requests of a busy minute, few enough (a track each) for a viewer.
constexpr int64_t kDefaultChromeTraceRequests = 2000;
int64_t chrome_trace_requests(const RunConfig& config);

// Checks ranges that no single parser sees (tp >= 1, utilization in (0, 1], ...).
void validate(const RunConfig& config);
// The model the run simulates: `model` (built-in or config.json) with the run's dtypes.
ModelSpec resolve_run_model(const RunConfig& config);
// The routing a run's cost model of `model` uses (--moe-routing, --eplb; "auto" by the model's
// architecture). Throws UserError naming the option for a malformed spec.
MoeRouting run_moe_routing(const RunConfig& config, const ModelSpec& model);
// --kv-offload cpu=GIB[,disk=GIB]: the host and disk tiers' bytes (0 when none; a disk tier
// needs the host tier). Throws UserError naming the option on anything else.
struct KvOffloadBytes {
  double cpu = 0, disk = 0;
};
KvOffloadBytes parse_kv_offload(const std::string& spec);
// Checks a --moe-routing spec without a model; throws UserError naming `option`.
void check_moe_routing(const std::string& spec, const char* option = "--moe-routing");
// The engine the run simulates: `engine`, or the policy's default.
std::string run_engine_name(const RunConfig& config);

// Whether any --prefill-*/--decode-* setting (or --decode-router) is given: a colocated run
// refuses them rather than ignore them.
bool has_pool_settings(const RunConfig& c);
// A disaggregated run: both pool sizes set.
inline bool is_disaggregated(const RunConfig& c) { return c.prefill_replicas > 0 || c.decode_replicas > 0; }
// The run as one pool sees it (its GPU, TP, policy and options, engine), for building that
// pool's cost model and policies; `role` is "prefill" or "decode".
RunConfig pool_run_config(const RunConfig& config, const std::string& role);

}  // namespace batchsim
