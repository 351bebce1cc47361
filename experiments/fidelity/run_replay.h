// batchsim — replaying one recorded serving run request by request (`batchsim validate-serving
// --run DIR`, issue 44).
//
// A run folder in LLMServingSim's bench layout (casys-kaist/LLMServingSim, bench/; the shipped
// example is measured/llmservingsim/bench/examples/RTX4090/Llama-3.1-8B/vllm, docs/data.md):
//   requests.jsonl  one request a line: request_id, input_toks, output_toks, and vLLM's own
//                   timestamps in seconds (one monotonic clock): queued_ts (the engine took it),
//                   scheduled_ts (first scheduled), first_token_ts, last_token_ts
//   meta.json       engine_kwargs (the arguments the run was started with), and in newer runs
//                   kv_cache (the blocks vLLM sized), hardware and resolved_config
//   timeseries.csv  once a second: t, prompt_throughput, gen_throughput, running, waiting,
//                   kv_cache_pct (optional)
//   config.json     the model's Hugging Face config, in the folder or the one above it
//
// The replay sends every request when the engine queued it (queued_ts, relative to the first),
// with its recorded lengths, through vLLM's scheduler (the `vllm` preset, or --policy) with the
// run's engine arguments: max_num_seqs, max_num_batched_tokens, max_model_len, prefix caching, the
// KV blocks vLLM sized and TP. What a run leaves out is derived as vLLM derives it and listed in
// the report's `derived`: no kv_cache block, the KV size from GPU memory at gpu_memory_utilization
// (default 0.9) as vLLM's profile run does (hwmodel/README.md, "KV capacity"); a null
// max_model_len, the model's max_position_embeddings; no vllm_version, the current scheduler.
//
// Measured per request (vLLM's definitions, LLMServingSim's README): TTFT = first_token_ts -
// queued_ts, TPOT = (last_token_ts - first_token_ts) / (output - 1), e2e = last_token_ts -
// queued_ts. The report (write_run_replay_json) has, for each, the MAPE and mean signed error
// of predicted against measured per request and both sides' p50/p90/p99; every request's row;
// the Spearman rank correlation per figure; output throughput; and the queue and KV series
// beside timeseries.csv.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/run/run_config.h"
#include "experiments/run/runner.h"

namespace batchsim {

struct RecordedRequest {
  std::string id;
  int64_t input_tokens = 0, output_tokens = 0;
  double queued_s = 0, scheduled_s = 0, first_token_s = 0, last_token_s = 0;
  double ttft_s() const { return first_token_s - queued_s; }
  double e2e_s() const { return last_token_s - queued_s; }
  double tpot_s() const { return output_tokens > 1 ? (last_token_s - first_token_s) / double(output_tokens - 1) : 0; }
};

// A token count a run may record: a whole number from 1 to 2^31 - 1 (read as a double, so checked
// before any conversion).
bool is_token_count(double v);

struct RecordedSample {  // one line of timeseries.csv
  double t = 0, running = 0, waiting = 0, kv_percent = 0;
};

struct RecordedRun {
  std::filesystem::path dir;
  // The file the requests came from (requests.jsonl, a vLLM result, aiperf's export), and what
  // wrote it, as the report names it.
  std::filesystem::path requests_file;
  std::string source = "LLMServingSim run";
  std::vector<RecordedRequest> requests;  // in queued order
  // A benchmark that kept no send times and ran as a closed loop: its clients, the requests
  // replayed in order as each client frees (requests[i].queued_s then all 0). 0: replayed at
  // the recorded send times.
  std::vector<RecordedSample> timeseries;
  std::string model_id;                // engine_kwargs.model
  std::filesystem::path model_config;  // the config.json found (empty: none; model_id then)
  std::string vllm_version;            // empty: not recorded
  std::string device;                  // hardware.device_name, or ""
  int64_t max_num_seqs = 0, max_num_batched_tokens = 0, max_model_len = 0;  // 0: not set
  int tp = 1, dp = 1;
  bool expert_parallel = false;
  bool prefix_caching = true;                   // vLLM v1's default
  int64_t num_gpu_blocks = 0, block_size = 16;  // 0 blocks: not recorded
  double gpu_memory_utilization = 0.9;
  std::string kv_cache_dtype = "auto";
  std::vector<std::string> derived;  // what the run left out and how it was derived
  int64_t closed_loop_clients = 0;
  // Further --policy-opt settings of the replay (those above have their own fields).
  std::map<std::string, std::string> policy_opts;
};

// What the command line sets over (or, for a benchmark file that records no engine, in place of)
// what a run records: --model, --tp, --num-gpu-blocks, --max-model-len and --policy-opt KEY=VALUE (max_num_seqs,
// max_num_batched_tokens, block_size and prefix_caching into their fields, any other key into
// the replay's policy options).
struct ReplayOverrides {
  std::string model;
  int tp = 0;                                     // 0: the run's
  int64_t num_gpu_blocks = 0, max_model_len = 0;  // 0: the run's (--num-gpu-blocks, --max-model-len)
  std::map<std::string, std::string> policy_opts;
};

// Sets `overrides` on `run` (a UserError names a malformed --policy-opt value), then notes in
// `run.derived` each engine argument that neither the run nor the command line gave and how the
// replay derives it.
void apply_overrides_and_note_derived(RecordedRun& run, const ReplayOverrides& overrides);

// Reads a run folder. Throws UserError naming the file, line and field for a truncated or
// malformed requests.jsonl, a request whose timestamps go backwards, a meta.json without
// engine_kwargs, or a config that cannot be read.
RecordedRun read_recorded_run(const std::filesystem::path& dir, const ReplayOverrides& overrides = {});

// The run configuration that replays it on `gpu` (engine `engine`, policy `policy`; empty: the
// recorded vLLM version's engine, and the vllm preset), its requests in memory.
RunConfig replay_config(const RecordedRun& run, const std::string& gpu, const std::string& engine,
                        const std::string& policy);

// Spearman's rank correlation of two equal-length samples (average ranks for ties; 0 when either
// is constant). Throws std::invalid_argument for unequal lengths.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

struct RunReplayOptions {
  std::string run_dir, gpu, engine, policy, out;
  // Where to write the replay itself as `batchsim run --out` writes a run (summary.json,
  // bench.json, requests.csv, iterations.csv with each iteration's requests) and its Perfetto
  // trace (trace.json): to see why a request came out as it did. Row i of requests.csv is the
  // run's i-th request. Empty: not written.
  std::string run_out;
  ReplayOverrides overrides;
};
// `batchsim validate-serving --run PATH` (a run folder, or a benchmark file that
// benchmark_readers.h reads): replays the run, prints the table and where the largest
// errors sit, and writes --out. Returns 0.
int run_replay_command(const RunReplayOptions& options, std::ostream& out);

// The report of a replay as validate-serving --run writes it (see the header comment).
nlohmann::ordered_json run_replay_report(const RecordedRun& run, const RunConfig& config, const RunOutcome& outcome);

}  // namespace batchsim
