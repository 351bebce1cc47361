// `batchsim validate-serving --run DIR` (issue 44, item 2): the reader on the shipped LLMServingSim
// run (RTX 4090, vLLM 0.19), a replay of a run whose answer is known (batchsim's own run written
// out in the bench layout replays to itself, request for request), what an older meta.json leaves
// out being derived and said, bad input refused by file, line and field, Spearman by hand, and
// --max-model-len; and a user's own vLLM or aiperf benchmark file read as such a run.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "experiments/fidelity/benchmark_readers.h"
#include "experiments/fidelity/run_replay.h"
#include "experiments/run/runner.h"
#include "hwmodel/base/csv_table.h"
#include "hwmodel/base/error.h"
#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim {
namespace {

namespace fs = std::filesystem;
using testing::cli;
using ::testing::HasSubstr;
using testing::user_error_of;

fs::path shipped_run() { return testing::measured_dir() / "llmservingsim/bench/examples/RTX4090/Llama-3.1-8B/vllm"; }

TEST(RunReplay, ReadsTheShippedRtx4090Run) {
  const RecordedRun run = read_recorded_run(shipped_run());
  ASSERT_EQ(run.requests.size(), 300u);
  EXPECT_EQ(run.requests.front().id, "bench-0");
  EXPECT_EQ(run.requests.front().input_tokens, 2358);
  EXPECT_EQ(run.requests.front().output_tokens, 531);
  EXPECT_NEAR(run.requests.front().ttft_s(), 27537.350135653 - 27536.660701067, 1e-9);
  EXPECT_EQ(run.model_id, "meta-llama/Llama-3.1-8B");
  EXPECT_EQ(run.vllm_version, "0.19.0");
  EXPECT_EQ(run.device, "NVIDIA GeForce RTX 4090");
  EXPECT_EQ(run.max_num_seqs, 256);
  EXPECT_EQ(run.max_num_batched_tokens, 2048);
  EXPECT_EQ(run.max_model_len, 32768);
  EXPECT_EQ(run.num_gpu_blocks, 2588);
  EXPECT_EQ(run.block_size, 16);
  EXPECT_TRUE(run.prefix_caching);
  EXPECT_TRUE(run.derived.empty());
  EXPECT_TRUE(run.model_config.empty()) << "the config.json beside it is LLMServingSim's cluster file, not the model's";
  ASSERT_EQ(run.timeseries.size(), 184u);
  EXPECT_EQ(run.timeseries[1].running, 16);
  EXPECT_DOUBLE_EQ(run.timeseries[1].kv_percent, 39.7);
  const RunConfig c = replay_config(run, "rtx-4090", "", "");
  EXPECT_EQ(c.policy, "vllm");
  EXPECT_EQ(c.policy_opts.at("max_num_seqs"), "256");
  EXPECT_EQ(c.policy_opts.at("max_num_batched_tokens"), "2048");
  EXPECT_EQ(c.num_gpu_blocks, 2588);
  EXPECT_EQ(c.max_model_len, 32768);
  EXPECT_EQ(resolve_run_model(c).name, "llama-3.1-8b");
}

// Writes `outcome` in LLMServingSim's bench layout, as vLLM's timestamps would record it.
void write_run(const RunOutcome& outcome, const fs::path& dir, const std::string& meta) {
  fs::create_directories(dir);
  std::ofstream req(dir / "requests.jsonl");
  const double t0 = 1000;
  for (const RequestRecord& r : outcome.result.requests) {
    req << fmt::format(
        "{{\"request_id\": \"r{}\", \"input_toks\": {}, \"output_toks\": {}, \"queued_ts\": {:.9f}, "
        "\"scheduled_ts\": {:.9f}, \"first_token_ts\": {:.9f}, \"last_token_ts\": {:.9f}}}\n",
        r.id, r.prompt_tokens, r.output_tokens, t0 + r.arrival.seconds(), t0 + r.first_scheduled.seconds(),
        t0 + r.first_token.seconds(), t0 + r.finished.seconds());
  }
  std::ofstream(dir / "meta.json") << meta;
}

// Issue 44, item 3: the shipped RTX 4090 run replayed on the profile fitted only on that GPU's
// per-layer profile (rtx-4090-fitted). Figures pinned as measured (docs/validation.md); the
// issue's targets that hold are asserted as targets, TPOT (5.2% against <= 5%) is pinned.
TEST(RunReplay, ShippedRtx4090RunOnItsOwnFittedProfile) {
  const fs::path out = testing::scratch_dir("rtx4090") / "replay.json";
  const auto r =
      cli({"validate-serving", "--run", shipped_run().string(), "--gpu", "rtx-4090-fitted", "--out", out.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(testing::read_text_file(out));
  EXPECT_LE(j["ttft"]["mape"].get<double>(), 15);
  EXPECT_LE(j["e2e"]["mape"].get<double>(), 8);
  EXPECT_LE(std::abs(j["output_throughput"]["error_percent"].get<double>()), 3);
  EXPECT_GE(j["e2e"]["spearman"].get<double>(), 0.9);
  EXPECT_NEAR(j["ttft"]["mape"].get<double>(), 4.7, 0.1);
  EXPECT_NEAR(j["tpot"]["mape"].get<double>(), 5.2, 0.1);
  EXPECT_NEAR(j["e2e"]["mape"].get<double>(), 2.1, 0.1);
  EXPECT_NEAR(j["output_throughput"]["error_percent"].get<double>(), 1.3, 0.1);
  EXPECT_EQ(j["requests_completed"], 300);
  EXPECT_EQ(j["timeseries"].size(), 184u);
  EXPECT_TRUE(j["timeseries"][10].contains("predicted"));
}

TEST(RunReplay, ARunOfKnownAnswerReplaysToItself) {
  // batchsim's own run of Llama-3.1-8B on an H100 with vLLM's arguments: replayed with the same
  // GPU, its every request must come out as recorded (to the nanosecond rounding of the file).
  RunConfig c = default_run_config();
  apply_run_args({"--model",
                  "llama-3.1-8b",
                  "--gpu",
                  "h100-sxm",
                  "--policy",
                  "vllm",
                  "--engine",
                  "vllm-async",
                  "--arrival",
                  "poisson:12",
                  "--num-requests",
                  "150",
                  "--prompt-len",
                  "uniform:50:3000",
                  "--output-len",
                  "uniform:2:400",
                  "--num-gpu-blocks",
                  "3000",
                  "--max-model-len",
                  "8192",
                  "--policy-opt",
                  "max_num_seqs=64",
                  "--policy-opt",
                  "max_num_batched_tokens=1024"},
                 c);
  const RunOutcome truth = run_simulation(c);
  const fs::path dir = testing::scratch_dir("known") / "vllm";
  write_run(truth, dir, R"({"vllm_version": "0.19.0", "engine_kwargs": {"model": "meta-llama/Llama-3.1-8B-Instruct",
    "tensor_parallel_size": 1, "max_num_seqs": 64, "max_num_batched_tokens": 1024, "max_model_len": 8192},
    "kv_cache": {"num_gpu_blocks": 3000, "block_size": 16, "enable_prefix_caching": true}})");
  const fs::path out = dir.parent_path() / "report.json";
  const auto r = cli({"validate-serving", "--run", dir.string(), "--gpu", "h100-sxm", "--out", out.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto report = nlohmann::json::parse(testing::read_text_file(out));
  for (const char* figure : {"ttft", "tpot", "e2e"}) {
    EXPECT_LT(report[figure]["mape"].get<double>(), 1e-4) << figure;
    EXPECT_NEAR(report[figure]["spearman"].get<double>(), 1.0, 1e-9) << figure;
  }
  EXPECT_NEAR(report["output_throughput"]["error_percent"].get<double>(), 0, 0.01);
  EXPECT_EQ(report["requests"].size(), 150u);
  EXPECT_THAT(r.out, HasSubstr("ttft"));
  EXPECT_THAT(r.out, HasSubstr("largest errors:"));
  // --run-out: the replay as `batchsim run --out` writes a run, row i of requests.csv the run's
  // i-th request, each iteration with its requests, and the Perfetto trace.
  const fs::path replay_dir = dir.parent_path() / "replay";
  const auto written =
      cli({"validate-serving", "--run", dir.string(), "--gpu", "h100-sxm", "--run-out", replay_dir.string()});
  ASSERT_EQ(written.rc, 0) << written.err;
  EXPECT_THAT(written.out, HasSubstr("trace.json"));
  CsvTable rows(replay_dir / "requests.csv");
  size_t i = 0;
  const double t0 = truth.result.requests.front().arrival.seconds();
  for (; rows.next(); ++i) {
    ASSERT_LT(i, truth.result.requests.size());
    const RequestRecord& t = truth.result.requests[i];
    EXPECT_EQ(rows.integer("prompt_tokens"), t.prompt_tokens) << i;
    EXPECT_NEAR(rows.number("first_token_s"), t.first_token.seconds() - t0, 1e-6) << i;
  }
  EXPECT_EQ(i, truth.result.requests.size());
  CsvTable iterations(replay_dir / "iterations.csv");
  ASSERT_TRUE(iterations.next());
  EXPECT_FALSE(iterations.text("prefill_chunks").empty()) << "each iteration's requests";
  EXPECT_TRUE(nlohmann::json::parse(testing::read_text_file(replay_dir / "trace.json")).contains("traceEvents"));
  EXPECT_TRUE(nlohmann::json::parse(testing::read_text_file(replay_dir / "summary.json")).contains("latency"));
  // A different GPU moves it, and the report says by how much.
  const auto slower = cli({"validate-serving", "--run", dir.string(), "--gpu", "a100-80gb", "--out", out.string()});
  ASSERT_EQ(slower.rc, 0) << slower.err;
  EXPECT_GT(nlohmann::json::parse(testing::read_text_file(out))["tpot"]["mean_error"].get<double>(), 10);
}

TEST(RunReplay, WhatAnOlderMetaLeavesOutIsDerivedAndSaid) {
  const fs::path dir = testing::scratch_dir("old") / "vllm";
  fs::create_directories(dir);
  std::ofstream(dir / "requests.jsonl")
      << R"({"request_id": "a", "input_toks": 100, "output_toks": 5, "queued_ts": 1.0, "scheduled_ts": 1.0, "first_token_ts": 1.1, "last_token_ts": 1.3})"
      << "\n";
  std::ofstream(dir / "meta.json")
      << R"({"engine_kwargs": {"model": "meta-llama/Llama-3.1-8B", "max_model_len": null}})";
  const RecordedRun run = read_recorded_run(dir);
  ASSERT_EQ(run.derived.size(), 5u);
  EXPECT_THAT(run.derived[0], HasSubstr("sized from GPU memory at gpu_memory_utilization 0.9"));
  EXPECT_THAT(run.derived[1], HasSubstr("max_position_embeddings"));
  const RunConfig c = replay_config(run, "h100-sxm", "", "");
  EXPECT_EQ(c.num_gpu_blocks, 0);
  EXPECT_EQ(c.max_model_len, 0);
  const auto r = cli({"validate-serving", "--run", dir.string(), "--gpu", "h100-sxm"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("derived: KV cache: no kv_cache block"));
}

TEST(RunReplay, BadInputIsRefusedByFileLineAndField) {
  const fs::path root = testing::scratch_dir("bad");
  int n = 0;
  auto folder = [&](const std::string& requests, const std::string& meta) {
    const fs::path dir = root / fmt::format("r{}", n++) / "vllm";
    fs::create_directories(dir);
    std::ofstream(dir / "requests.jsonl") << requests;
    std::ofstream(dir / "meta.json") << meta;
    return dir;
  };
  const std::string good =
      R"({"request_id": "a", "input_toks": 100, "output_toks": 5, "queued_ts": 1.0, "first_token_ts": 1.1, "last_token_ts": 1.3})";
  const std::string meta = R"({"engine_kwargs": {"model": "meta-llama/Llama-3.1-8B"}})";
  EXPECT_THAT(user_error_of([&] { read_recorded_run(folder(good + "\n{\"request_id\": \"b\", \"input", meta)); }),
              HasSubstr("requests.jsonl:2: not a JSON object (a truncated line?)"));
  EXPECT_THAT(
      user_error_of([&] {
        read_recorded_run(folder(
            R"({"input_toks": 1, "output_toks": 5, "queued_ts": 2.0, "first_token_ts": 1.1, "last_token_ts": 1.3})",
            meta));
      }),
      HasSubstr("requests.jsonl:1: request line-1 ends before it starts"));
  EXPECT_THAT(user_error_of([&] { read_recorded_run(folder(R"({"input_toks": 1, "queued_ts": 1})", meta)); }),
              HasSubstr("requests.jsonl:1: field 'output_toks' is missing or not a number"));
  EXPECT_THAT(
      user_error_of([&] {
        read_recorded_run(folder(
            R"({"input_toks": 1e300, "output_toks": 5, "queued_ts": 1, "first_token_ts": 1, "last_token_ts": 1})",
            meta));
      }),
      HasSubstr("requests.jsonl:1: input_toks and output_toks must be whole numbers from 1 to 2^31-1"));
  EXPECT_THAT(
      user_error_of([&] { read_recorded_run(folder(good, R"({"engine_kwargs": {"max_num_seqs": 2.5e300}})")); }),
      HasSubstr("meta.json: 'max_num_seqs' must be a whole number"));
  EXPECT_THAT(user_error_of([&] { read_recorded_run(folder(good, R"({"model": "x"})")); }),
              HasSubstr("meta.json: no engine_kwargs object"));
  const fs::path bad_config = folder(good, R"({"engine_kwargs": {}})");
  std::ofstream(bad_config / "config.json") << "{ not json";
  EXPECT_THAT(user_error_of([&] { read_recorded_run(bad_config); }), HasSubstr("config.json: not valid JSON"));
  EXPECT_THAT(testing::cli_error_of({"validate-serving", "--run", (root / "none").string(), "--gpu", "h100-sxm"}),
              HasSubstr("none: no such file or folder"));
  EXPECT_THAT(testing::cli_error_of({"validate-serving", "--run", shipped_run().string()}), HasSubstr("--gpu"));
}

TEST(RunReplay, SpearmanByHand) {
  // One swapped pair of four: 1 - 6 * 2 / (4 * 15) = 0.8.
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {1, 3, 2, 4}), 0.8, 1e-12);
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {40, 30, 20, 10}), -1, 1e-12);
  // Ties take their average rank: ranks (1.5, 1.5, 3) against (1, 2, 3): 0.8660254.
  EXPECT_NEAR(spearman({5, 5, 9}, {1, 2, 3}), std::sqrt(3.0) / 2, 1e-9);
  EXPECT_EQ(spearman({1, 1, 1}, {1, 2, 3}), 0);
  EXPECT_THROW(spearman({1}, {1, 2}), std::invalid_argument);
}

TEST(RunReplay, MaxModelLenRejectsLongerRequestsAndIsBoundedByTheModel) {
  const auto r = cli({"run", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-requests", "10", "--prompt-len",
                      "fixed:3000", "--output-len", "fixed:100", "--max-model-len", "2048"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("10 of 10 requests rejected"));
  EXPECT_THAT(r.err, HasSubstr("max_model_len 2048"));
  EXPECT_THAT(
      testing::cli_error_of({"run", "--model", "llama-3-8b", "--num-requests", "5", "--max-model-len", "100000"}),
      HasSubstr("--max-model-len 100000: more than model 'llama-3-8b' allows (max_position_embeddings 8192)"));
}

// A user's own benchmark (experiments/fidelity/benchmark_readers.h): the shipped RTX 4090 run
// written as vLLM's `bench serve --save-detailed` result and as aiperf's profile_export.jsonl
// replays to the same figures as the run folder itself, given on the command line the engine
// arguments such files do not record; a closed loop without send times replays as a closed
// loop; what a file lacks is said or refused with the file, request and field named.

// What the shipped run's meta.json records and a benchmark file does not.
const std::vector<std::string> kEngineArguments = {
    "--policy-opt", "max_num_seqs=256", "--policy-opt", "max_num_batched_tokens=2048", "--num-gpu-blocks",
    "2588",         "--max-model-len",  "32768"};

// The run's requests, listed in an order other than sent (as a benchmark's records may be).
std::vector<RecordedRequest> shuffled_requests() {
  std::vector<RecordedRequest> requests = read_recorded_run(shipped_run()).requests;
  std::shuffle(requests.begin(), requests.end(), std::mt19937(7));
  return requests;
}

nlohmann::json replay(const std::string& what, const std::vector<std::string>& extra) {
  const fs::path out = testing::scratch_dir("replay-" + what) / "report.json";
  std::vector<std::string> args = {"validate-serving", "--gpu", "rtx-4090-fitted", "--out", out.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = cli(args);
  EXPECT_EQ(r.rc, 0) << r.err;
  return nlohmann::json::parse(testing::read_text_file(out));
}

void expect_same_figures(const nlohmann::json& a, const nlohmann::json& b) {
  for (const char* figure : {"ttft", "tpot", "e2e"}) {
    for (const char* key : {"mape", "mean_error", "spearman"}) {
      EXPECT_NEAR(a[figure][key].get<double>(), b[figure][key].get<double>(), 1e-6) << figure << " " << key;
    }
  }
  EXPECT_NEAR(a["output_throughput"]["predicted_tokens_per_s"].get<double>(),
              b["output_throughput"]["predicted_tokens_per_s"].get<double>(), 1e-9);
  EXPECT_NEAR(a["output_throughput"]["measured_tokens_per_s"].get<double>(),
              b["output_throughput"]["measured_tokens_per_s"].get<double>(), 1e-6);
  EXPECT_EQ(a["requests_completed"], b["requests_completed"]);
}

TEST(BenchmarkReaders, AVllmBenchResultReplaysAsTheRunItself) {
  const fs::path file = testing::scratch_dir("bench-readers") / "vllm-result.json";
  nlohmann::json j = {{"backend", "vllm"},
                      {"model_id", "meta-llama/Llama-3.1-8B"},
                      {"request_rate", 10.0},
                      {"max_concurrency", nullptr},
                      {"num_prompts", 300}};
  for (const RecordedRequest& r : shuffled_requests()) {
    j["input_lens"].push_back(r.input_tokens);
    j["output_lens"].push_back(r.output_tokens);
    j["start_times"].push_back(r.queued_s + 5000);  // perf_counter: any origin
    j["ttfts"].push_back(r.ttft_s());
    const double gap = r.output_tokens > 1 ? (r.last_token_s - r.first_token_s) / double(r.output_tokens - 1) : 0;
    j["itls"].push_back(std::vector<double>(static_cast<size_t>(r.output_tokens - 1), gap));
    j["errors"].push_back("");
  }
  // One request that failed: left out, and said.
  j["input_lens"].push_back(100);
  j["output_lens"].push_back(0);
  j["start_times"].push_back(5001.0);
  j["ttfts"].push_back(0.0);
  j["itls"].push_back(nlohmann::json::array());
  j["errors"].push_back("ClientConnectorError: cannot connect");
  std::ofstream(file) << j.dump();

  const nlohmann::json folder = replay("folder", {"--run", shipped_run().string()});
  std::vector<std::string> args = {"--run", file.string()};
  args.insert(args.end(), kEngineArguments.begin(), kEngineArguments.end());
  const nlohmann::json bench = replay("vllm", args);
  expect_same_figures(bench, folder);
  EXPECT_EQ(bench["source"]["format"], "vLLM bench serve result");
  EXPECT_THAT(bench["derived"].dump(), HasSubstr("1 failed requests (errors) left out"));
  EXPECT_THAT(bench["derived"].dump(), HasSubstr("vllm_version: not recorded"));
  EXPECT_THAT(bench["derived"].dump(), ::testing::Not(HasSubstr("max_num_seqs")));  // given on the command line
  // Without the engine arguments, the replay derives them as vLLM would and says so.
  const nlohmann::json bare = replay("vllm-bare", {"--run", file.string()});
  EXPECT_THAT(bare["derived"].dump(), HasSubstr("KV cache: no kv_cache block"));
  EXPECT_THAT(bare["derived"].dump(), HasSubstr("max_num_seqs: not given"));
}

TEST(BenchmarkReaders, AnAiperfExportReplaysAsTheRunItself) {
  const fs::path dir = testing::scratch_dir("bench-readers") / "aiperf";
  fs::create_directories(dir);
  std::ofstream(dir / "profile_export_aiperf.json")
      << R"({"input_config": {"endpoint": {"model_names": ["meta-llama/Llama-3.1-8B"]}, "loadgen": {"concurrency": 300}}})";
  std::ofstream out(dir / "profile_export.jsonl");
  const int64_t epoch_ns = 1'759'813'207'532'900'363;
  int i = 0;
  for (const RecordedRequest& r : shuffled_requests()) {
    const auto ns = [](double s) { return static_cast<int64_t>(std::llround(s * 1e9)); };
    nlohmann::json rec = {{"metadata",
                           {{"x_request_id", fmt::format("req-{}", i++)},
                            {"request_start_ns", epoch_ns + ns(r.queued_s)},
                            {"benchmark_phase", "profiling"}}},
                          {"metrics",
                           {{"input_sequence_length", {{"value", r.input_tokens}, {"unit", "tokens"}}},
                            {"output_sequence_length", {{"value", r.output_tokens}, {"unit", "tokens"}}},
                            {"time_to_first_token", {{"value", r.ttft_s() * 1e3}, {"unit", "ms"}}},
                            {"request_latency", {{"value", r.e2e_s() * 1e3}, {"unit", "ms"}}}}},
                          {"error", nullptr}};
    out << rec.dump() << "\n";
  }
  out << R"({"metadata": {"request_start_ns": 1759813207532900363}, "metrics": {"error_isl": {"value": 550, "unit": "tokens"}}, "error": {"code": 499, "type": "RequestCancellationError", "message": "cancelled"}})"
      << "\n";
  out.close();
  const nlohmann::json folder = replay("folder", {"--run", shipped_run().string()});
  std::vector<std::string> args = {"--run", dir.string()};  // the artifact folder, or the file in it
  args.insert(args.end(), kEngineArguments.begin(), kEngineArguments.end());
  const nlohmann::json aiperf = replay("aiperf", args);
  // aiperf keeps times to the nanosecond and milliseconds to the double: the same figures.
  expect_same_figures(aiperf, folder);
  EXPECT_EQ(aiperf["source"]["format"], "aiperf profile export");
  EXPECT_EQ(aiperf["model"], "meta-llama/Llama-3.1-8B");
  EXPECT_THAT(aiperf["derived"].dump(), HasSubstr("1 failed requests (errors) left out"));
  args[1] = (dir / "profile_export.jsonl").string();
  expect_same_figures(replay("aiperf-file", args), folder);
}

// Before vLLM 0.11 a result kept no send times: a closed loop (max_concurrency, rate inf) replays
// as one, the requests sent in order as clients free.
TEST(BenchmarkReaders, AClosedLoopWithoutSendTimesReplaysAsAClosedLoop) {
  const fs::path file = testing::scratch_dir("bench-readers") / "closed.json";
  nlohmann::json j = {
      {"model_id", "meta-llama/Llama-3.1-8B-Instruct"}, {"request_rate", "inf"}, {"max_concurrency", 4}};
  for (int i = 0; i < 40; ++i) {
    j["input_lens"].push_back(200 + 10 * i);
    j["output_lens"].push_back(50);
    j["ttfts"].push_back(0.05);
    j["itls"].push_back(std::vector<double>(49, 0.01));
  }
  std::ofstream(file) << j.dump();
  ReplayOverrides none;
  const RecordedRun run = read_recording(file, none);
  EXPECT_EQ(run.closed_loop_clients, 4);
  ASSERT_EQ(run.requests.size(), 40u);
  EXPECT_EQ(run.requests[3].input_tokens, 230);  // in the order sent
  EXPECT_DOUBLE_EQ(run.requests[3].e2e_s(), 0.05 + 49 * 0.01);
  EXPECT_THAT(fmt::format("{}", fmt::join(run.derived, "; ")),
              HasSubstr("replayed as the closed loop it ran, 4 clients"));
  const RunConfig c = replay_config(run, "h100-sxm", "", "");
  EXPECT_EQ(c.max_concurrency, 4);
  const nlohmann::json report = replay("closed", {"--run", file.string(), "--tp", "2"});
  EXPECT_EQ(report["closed_loop_clients"], 4);
  EXPECT_EQ(report["engine_arguments"]["tensor_parallel_size"], 2);
  EXPECT_EQ(report["requests_completed"], 40);
}

// --model (and --policy-opt) as the command line would set them.
ReplayOverrides model_override(const std::string& model, std::map<std::string, std::string> policy_opts = {}) {
  ReplayOverrides o;
  o.model = model;
  o.policy_opts = std::move(policy_opts);
  return o;
}

TEST(BenchmarkReaders, WhatAFileLacksIsRefusedByName) {
  const fs::path dir = testing::scratch_dir("bench-readers-bad");
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return dir / name;
  };
  ReplayOverrides none;
  EXPECT_THAT(user_error_of([&] { read_recording(write("summary.json", R"({"mean_ttft_ms": 12})"), none); }),
              HasSubstr("no per-request 'input_lens': a vLLM bench serve result keeps its requests only when saved "
                        "with --save-result --save-detailed"));
  EXPECT_THAT(user_error_of([&] {
                read_recording(write("rate.json", R"({"model_id": "m", "request_rate": 4.0, "input_lens": [5],
                  "output_lens": [3], "ttfts": [0.1], "itls": [[0.01, 0.01]]})"),
                               none);
              }),
              HasSubstr("no start_times (vLLM before 0.11 kept none), and the run sent requests at request_rate 4.0"));
  EXPECT_THAT(user_error_of([&] {
                read_recording(write("short.json", R"({"input_lens": [5, 6], "output_lens": [3], "ttfts": [0.1, 0.2],
                  "itls": [[0.01, 0.01], [0.02, 0.02]]})"),
                               none);
              }),
              HasSubstr("'output_lens' has 1 entries, 'input_lens' 2"));
  EXPECT_THAT(user_error_of([&] {
                read_recording(write("neg.json", R"({"model_id": "m", "max_concurrency": 2, "input_lens": [5],
                  "output_lens": [3], "ttfts": [-0.1], "itls": [[0.01, 0.01]]})"),
                               none);
              }),
              HasSubstr("request 0 ttfts: must be a finite number of seconds >= 0, got -0.1"));
  EXPECT_THAT(user_error_of([&] {
                read_recording(write("nomodel.json", R"({"max_concurrency": 2, "input_lens": [5], "output_lens": [3],
                  "ttfts": [0.1], "itls": [[0.01, 0.01]]})"),
                               none);
              }),
              HasSubstr("does not name the model; give --model"));
  const std::string good_record =
      R"({"metadata": {"request_start_ns": 1000}, "metrics": {"input_sequence_length": {"value": 5, "unit": "tokens"}, "output_sequence_length": {"value": 3, "unit": "tokens"}, "time_to_first_token": {"value": 20, "unit": "ms"}, "request_latency": {"value": 40, "unit": "ms"}}, "error": null})";
  EXPECT_THAT(
      user_error_of([&] { read_recording(write("a.jsonl", good_record + "\n{\"metadata\": {\"request_st"), none); }),
      HasSubstr("a.jsonl:2: not a JSON object (a truncated line?)"));
  EXPECT_THAT(
      user_error_of([&] {
        read_recording(
            write(
                "b.jsonl",
                R"({"metadata": {"request_start_ns": 1}, "metrics": {"input_sequence_length": {"value": 5}, "output_sequence_length": {"value": 3}, "time_to_first_token": {"value": 20, "unit": "fortnights"}, "request_latency": {"value": 40}}, "error": null})"),
            model_override("llama-3.1-8b"));
      }),
      HasSubstr("b.jsonl:1: metric 'time_to_first_token' in unit 'fortnights'"));
  EXPECT_THAT(user_error_of([&] {
                read_recording(
                    write("c.jsonl", R"({"metadata": {"request_start_ns": "soon"}, "metrics": {}, "error": null})"),
                    none);
              }),
              HasSubstr("c.jsonl:1: metadata.request_start_ns must be a whole number of ns"));
  EXPECT_THAT(user_error_of([&] { read_recording(dir / "missing.json", none); }), HasSubstr("no such file or folder"));
  EXPECT_THAT(user_error_of([&] { read_recording(dir, none); }),
              HasSubstr("neither requests.jsonl (LLMServingSim's bench layout) nor profile_export.jsonl (aiperf)"));
  EXPECT_THAT(user_error_of([&] {
                read_recording(write("d.jsonl", good_record), model_override("x", {{"max_num_seqs", "lots"}}));
              }),
              HasSubstr("--policy-opt max_num_seqs: 'lots' is not an integer"));
  // The command line's own checks.
  EXPECT_THAT(
      testing::cli_error_of({"validate-serving", "--measurements", "x.csv", "--gpu", "h100-sxm", "--tp", "2"}),
      HasSubstr("--model, --tp, --num-gpu-blocks, --max-model-len, --policy-opt, --run-out: apply to --run only"));
  EXPECT_THAT(
      testing::cli_error_of({"validate-serving", "--measurements", "x.csv", "--gpu", "h100-sxm", "--run-out", "d"}),
      HasSubstr("--run-out: apply to --run only"));
  EXPECT_THAT(testing::cli_error_of(
                  {"validate-serving", "--run", (dir / "d.jsonl").string(), "--gpu", "h100-sxm", "--tp", "0"}),
              HasSubstr("--tp 0: must be from 1 to 1024"));
}

}  // namespace
}  // namespace batchsim
