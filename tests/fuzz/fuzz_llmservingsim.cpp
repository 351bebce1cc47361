// libFuzzer harness: the readers of recorded runs and GPU profiles (issue 44): LLMServingSim's
// recorded run (requests.jsonl and meta.json, experiments/fidelity/run_replay.h) and per-layer
// GPU profile (dense.csv, attention.csv, per_sequence.csv beside a meta.yaml,
// hwmodel/fit/llmservingsim_profile.h), and a user's benchmark: vLLM's `bench serve
// --save-detailed` result and aiperf's profile_export.jsonl (experiments/fidelity/benchmark_readers.h).
// The first byte picks the file the rest becomes; the other files are the shipped ones' first
// lines. Seeds: tests/fuzz/seeds/llmservingsim (scripts/fuzz.sh).
#include <filesystem>
#include <string>

#include "experiments/fidelity/benchmark_readers.h"
#include "experiments/fidelity/run_replay.h"
#include "fuzz_input.h"
#include "hwmodel/base/error.h"
#include "hwmodel/fit/llmservingsim_profile.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const fs::path root = batchsim::fuzz::as_file(data, 0, "unused").parent_path() / "llmservingsim";
  fs::remove_all(root);
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int which = data[0] % 7;
  const std::string request =
      R"({"request_id": "a", "input_toks": 100, "output_toks": 5, "queued_ts": 1.0, "first_token_ts": 1.1, "last_token_ts": 1.3})";
  const std::string meta =
      R"({"vllm_version": "0.19.0", "engine_kwargs": {"model": "meta-llama/Llama-3.1-8B", "max_num_seqs": 8}})";
  // What every run reader promises: requests in queued order, each one's timestamps in order.
  auto check = [](const batchsim::RecordedRun& r) {
    for (size_t i = 0; i < r.requests.size(); ++i) {
      const auto& q = r.requests[i];
      if (q.input_tokens < 1 || q.output_tokens < 1 || q.ttft_s() < 0 || q.e2e_s() < q.ttft_s()) __builtin_trap();
      if (i > 0 && q.queued_s < r.requests[i - 1].queued_s) __builtin_trap();
    }
  };
  try {
    if (which <= 1) {
      const fs::path run = root / "run";
      batchsim::fuzz::write_file(run / "requests.jsonl", which == 0 ? text : request + "\n");
      batchsim::fuzz::write_file(run / "meta.json", which == 1 ? text : meta);
      check(batchsim::read_recorded_run(run));
    } else if (which >= 5) {
      // A benchmark file: a vLLM result (.json) or an aiperf export (.jsonl).
      const fs::path file = root / (which == 5 ? "result.json" : "profile_export.jsonl");
      batchsim::fuzz::write_file(file, text);
      const batchsim::RecordedRun r =
          batchsim::read_recording(file, batchsim::ReplayOverrides{.model = "llama-3.1-8b"});
      check(r);
      if (r.requests.empty() || r.requests.front().queued_s != 0) __builtin_trap();  // timed from the first send
    } else {
      const fs::path model = root / "profiler/perf/RTX4090/meta-llama/Llama-3.1-8B/bf16";
      batchsim::fuzz::write_file(model / "meta.yaml",
                                 "profiler_version: 1.0.0\nmodel: meta-llama/Llama-3.1-8B\nvllm_version: 0.19.0\n");
      batchsim::fuzz::write_file(model / "tp1/dense.csv",
                                 which == 2 ? text : "layer,tokens,time_us\nqkv_proj,1,54.9\n");
      batchsim::fuzz::write_file(
          model / "tp1/attention.csv",
          which == 3 ? text : "prefill_chunk,kv_prefill,n_decode,kv_decode,time_us\n0,0,1,16,9.3\n");
      batchsim::fuzz::write_file(model / "tp1/per_sequence.csv",
                                 which == 4 ? text : "layer,sequences,time_us\nsampler,1,50\n");
      const batchsim::Measurements m = batchsim::read_llmservingsim_profile(root / "profiler");
      for (const auto& row : m.token_ops) {
        if (row.num_tokens < 1) __builtin_trap();
      }
      for (const auto& a : m.attention) {
        if (!(a.median_s > 0)) __builtin_trap();
      }
    }
  } catch (const batchsim::UserError&) {
  }
  return 0;
}
