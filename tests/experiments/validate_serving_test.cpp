// `batchsim validate-serving`: each measured row is replayed as the benchmark ran it (closed-loop
// clients, fixed lengths, the row's model, TP and precision), rows it cannot replay are counted
// with their reason, and the figures on NVIDIA's H100 measurements are pinned (hwmodel/README.md
// quotes them; they are far from the targets until engine presets and profiles land).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "experiments/cli/cli.h"
#include "experiments/run/runner.h"
#include "hwmodel/base/error.h"
#include "hwmodel/hardware_profile.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string row(const std::string& model, const std::string& system, const std::string& mode, int pp, int c, int tp,
                const std::string& precision = "", int isl = 1024) {
  return fmt::format("x,src,vllm,0.12.0,{},{},{},{},{},128,,,{},{},{},,1,1,,,,,,,,,,,,,,,150.0,15.0\n", model, system,
                     precision, mode, isl, c, tp, pp);
}

// The run a replayed row of row() is, by hand: Llama-3.1-8B on the H100 profile, 8 closed-loop
// clients of 4 requests of 1024 + 128 tokens, all due at t = 0.
RunConfig row_run_by_hand(const std::string& policy) {
  RunConfig c = default_run_config();
  c.model = "llama-3.1-8b";
  c.gpu = "h100-sxm-fitted";
  c.policy = policy;
  c.workload.arrival = "offline";
  c.workload.prompt_len = "fixed:1024";
  c.workload.output_len = "fixed:128";
  c.workload.num_requests = 32;
  c.max_concurrency = 8;
  return c;
}

TEST(ValidateServing, ReplaysEachRowAsTheBenchmarkRanIt) {
  const auto dir = testing::scratch_dir("validate-serving");
  const auto csv = testing::write_text_file(
      dir, "silicon.csv",
      testing::kSiliconHeader + row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "agg", 1, 8, 1) +
          row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "agg", 1, 8, 1, "fp8") +
          row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "disagg", 1, 8, 1) +
          row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "agg", 2, 8, 1) +
          row("meta-llama/Llama-3.1-8B-Instruct", "b200_sxm", "agg", 1, 8, 1) +
          row("org/unknown-7b", "h100_sxm", "agg", 1, 8, 1));
  std::ostringstream out, err;
  ASSERT_EQ(cli_main({"validate-serving", "--measurements", csv.string(), "--gpu", "h100-sxm-fitted",
                      "--requests-per-client", "4", "--out", (dir / "r.json").string()},
                     out, err),
            0);
  // A disaggregated row without its pools' worker counts (experiments/validate_serving_moe_test.cpp
  // has the rows it can replay).
  EXPECT_THAT(out.str(), HasSubstr("skipped 1 rows: no worker counts in the row"));
  EXPECT_THAT(out.str(), HasSubstr("skipped 1 rows: pipeline parallelism"));
  EXPECT_THAT(out.str(), HasSubstr("skipped 1 rows: system b200_sxm"));
  EXPECT_THAT(out.str(), HasSubstr("skipped 1 rows: model org/unknown-7b"));
  std::ifstream in(dir / "r.json");
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["rows"].size(), 2u);
  // The same run by hand: the row's model by its Hugging Face id, 8 closed-loop clients, 32
  // requests of 1024 + 128 tokens, all due at t = 0, on the deployment aiconfigurator's generator
  // writes for it: 8 sequences, 8 + 1024 + 1500 tokens per step, an fp8 KV cache with fp8 weights.
  EXPECT_EQ(j["deployment"], "by-backend");
  EXPECT_EQ(j["rows"][0]["deployment"], "aiconfigurator");
  EXPECT_EQ(j["rows"][0]["policy"], "vllm-v1-2025");  // vLLM 0.12.0
  EXPECT_EQ(j["rows"][0]["policy_opts"]["max_num_batched_tokens"], "2532");
  RunConfig c = row_run_by_hand("vllm-v1-2025");
  c.policy_opts = {{"max_num_seqs", "8"}, {"max_num_batched_tokens", "2532"}};
  const RunOutcome bf16 = run_simulation(c);
  EXPECT_DOUBLE_EQ(j["rows"][0]["predicted_ttft_ms"].get<double>(), bf16.result.summary.ttft_s.mean * 1e3);
  EXPECT_DOUBLE_EQ(j["rows"][0]["predicted_tpot_ms"].get<double>(), bf16.result.summary.tpot_s.mean * 1e3);
  c.weight_dtype = "fp8";  // the fp8 row
  c.kv_cache_dtype = "fp8";
  EXPECT_EQ(j["rows"][1]["kv_cache_dtype"], "fp8");
  const RunOutcome fp8 = run_simulation(c);
  EXPECT_DOUBLE_EQ(j["rows"][1]["predicted_tpot_ms"].get<double>(), fp8.result.summary.tpot_s.mean * 1e3);
  const double ape = std::abs(bf16.result.summary.ttft_s.mean * 1e3 / 150.0 - 1) * 100 +
                     std::abs(fp8.result.summary.ttft_s.mean * 1e3 / 150.0 - 1) * 100;
  EXPECT_NEAR(j["ttft"]["mape"].get<double>(), ape / 2, 1e-9);
}

// aiconfigurator's generator rules, under each scheduler's own option names: SGLang's prefill
// budget isl + 1500 with mixed chunks, TensorRT-LLM's token budget rounded up to 32 tokens.
TEST(ValidateServing, TheDeploymentLimitsFollowEachBackendsGenerator) {
  const auto dir = testing::scratch_dir("validate-serving-deploy");
  std::string text = testing::kSiliconHeader;
  for (const char* backend : {"sglang", "trtllm"}) {
    std::string r = row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "agg", 1, 8, 1);
    r.replace(r.find(",vllm,"), 6, fmt::format(",{},", backend));
    text += r;
  }
  const auto csv = testing::write_text_file(dir, "s.csv", text);
  std::ostringstream out, err;
  ASSERT_EQ(
      cli_main({"validate-serving", "--measurements", csv.string(), "--gpu", "h100-sxm-fitted", "--requests-per-client",
                "2", "--deployment", "aiconfigurator", "--out", (dir / "r.json").string()},
               out, err),
      0);
  std::ifstream in(dir / "r.json");
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["policy"], "sglang");
  EXPECT_EQ(j["rows"][0]["policy_opts"]["max_prefill_tokens"], "2524");
  EXPECT_EQ(j["rows"][0]["policy_opts"]["max_running_requests"], "8");
  EXPECT_EQ(j["rows"][0]["policy_opts"]["enable_mixed_chunk"], "true");
  EXPECT_EQ(j["rows"][1]["policy"], "trtllm");
  EXPECT_EQ(j["rows"][1]["policy_opts"]["max_num_batched_tokens"], "2560");  // 8 + 1024 + 1500, to 32
  // --deployment defaults: the presets' own limits.
  ASSERT_EQ(cli_main({"validate-serving", "--measurements", csv.string(), "--gpu", "h100-sxm-fitted",
                      "--requests-per-client", "2", "--deployment", "defaults", "--out", (dir / "d.json").string()},
                     out, err),
            0);
  std::ifstream in2(dir / "d.json");
  const auto d = nlohmann::json::parse(in2);
  EXPECT_TRUE(d["rows"][0]["policy_opts"].empty());
  EXPECT_TRUE(d["rows"][1]["policy_opts"].empty());
}

// One Llama-3.1-8B row of `backend` (TP 1, 8 clients) per version, written to dir/s.csv and
// replayed with `requests_per_client`: the report.
nlohmann::json replay_versions(const std::filesystem::path& dir, const std::string& backend,
                               std::initializer_list<const char*> versions, int requests_per_client) {
  std::string text = testing::kSiliconHeader;
  for (const char* version : versions) {
    std::string r = row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "agg", 1, 8, 1);
    r.replace(r.find(",vllm,0.12.0,"), 13, fmt::format(",{},{},", backend, version));
    text += r;
  }
  const auto csv = testing::write_text_file(dir, "s.csv", text);
  std::ostringstream out, err;
  EXPECT_EQ(cli_main({"validate-serving", "--measurements", csv.string(), "--gpu", "h100-sxm-fitted",
                      "--requests-per-client", std::to_string(requests_per_client), "--out", (dir / "r.json").string()},
                     out, err),
            0)
      << err.str();
  std::ifstream in(dir / "r.json");
  return nlohmann::json::parse(in);
}

// SGLang sizes its KV pool by mem_fraction_static, whose rule changed in v0.5.3 (sglang #10975):
// a row of an older version runs with the fraction its version worked out, (81,559 - 10,240) /
// 81,559 = 0.874 on the H100 at TP 1 (sglang #7054's 9.5 + 1/2 GiB reserved); a newer one with the
// sglang policy's own rule. The fraction is what sizes the KV cache of the row's run.
TEST(ValidateServing, SglangRowsSizeTheirKvCacheAsTheirVersionDid) {
  const auto j =
      replay_versions(testing::scratch_dir("validate-serving-sglang-memory"), "sglang", {"0.5.1.post1", "0.5.3"}, 2);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["policy"], "sglang");
  EXPECT_EQ(j["rows"][0]["policy_opts"]["mem_fraction_static"], "0.874");
  EXPECT_FALSE(j["rows"][1]["policy_opts"].contains("mem_fraction_static"));
}

// TensorRT-LLM rows run with the KV share of aiconfigurator's engine template (0.80 of the
// memory free after the profile run), not the preset's 0.9; other backends get no such option.
TEST(ValidateServing, TrtllmRowsSizeTheirKvCacheAsTheirDeploymentDid) {
  const auto j = replay_versions(testing::scratch_dir("validate-serving-trtllm-memory"), "trtllm", {"1.0.0rc3"}, 2);
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["policy"], "trtllm");
  EXPECT_EQ(j["rows"][0]["policy_opts"]["free_gpu_memory_fraction"], "0.8");
  const auto v = replay_versions(testing::scratch_dir("validate-serving-vllm-memory"), "vllm", {"0.12.0"}, 2);
  EXPECT_FALSE(v["rows"][0]["policy_opts"].contains("free_gpu_memory_fraction"));
}

// Every row carries the run that replayed it: `batchsim run --config` of that block reruns the
// row (for its requests.csv, iterations or trace) and gives its prediction back, whatever the
// backend, deployment and policy options.
TEST(ValidateServing, EachRowsConfigRerunsItWithBatchsimRun) {
  const auto dir = testing::scratch_dir("validate-serving-row-config");
  for (const char* backend : {"vllm", "sglang", "trtllm"}) {
    const auto j = replay_versions(dir, backend, {backend == std::string("vllm") ? "0.12.0" : ""}, 3);
    ASSERT_EQ(j["rows"].size(), 1u) << backend;
    const auto& row = j["rows"][0];
    const auto config = testing::write_text_file(dir, fmt::format("{}.json", backend), row["config"].dump());
    std::ostringstream out, err;
    const auto run_dir = dir / fmt::format("{}-run", backend);
    ASSERT_EQ(cli_main({"run", "--config", config.string(), "--out", run_dir.string()}, out, err), 0) << err.str();
    std::ifstream in(run_dir / "summary.json");
    const auto summary = nlohmann::json::parse(in);
    EXPECT_DOUBLE_EQ(summary["latency"]["ttft_s"]["mean"].get<double>() * 1e3, row["predicted_ttft_ms"].get<double>())
        << backend;
    EXPECT_DOUBLE_EQ(summary["latency"]["tpot_s"]["mean"].get<double>() * 1e3, row["predicted_tpot_ms"].get<double>())
        << backend;
    EXPECT_EQ(summary["config"]["policy"], row["policy"]) << backend;
  }
}

// Each vLLM row runs as its version scheduled: 0.12 synchronously on V1's first-chunk admission,
// 0.14 to 0.18 asynchronously (the default from 0.14: one step of lag for a new request, the CPU
// overlapped), 0.19 on with full-prompt admission as well; the same run by hand for 0.14.
TEST(ValidateServing, VllmRowsRunAsTheirVersionScheduled) {
  const auto dir = testing::scratch_dir("validate-serving-versions");
  const auto j = replay_versions(dir, "vllm", {"0.12.0", "0.14.1", "0.19.0"}, 4);
  const auto csv = dir / "s.csv";
  ASSERT_EQ(j["rows"].size(), 3u);
  const auto& v12 = j["rows"][0];
  const auto& v14 = j["rows"][1];
  const auto& v19 = j["rows"][2];
  EXPECT_EQ(v12["policy"], "vllm-v1-2025");
  EXPECT_EQ(v12["engine"], "vllm");
  EXPECT_FALSE(v12["policy_opts"].contains("async_scheduling"));
  EXPECT_EQ(v14["policy"], "vllm-v1-2025");
  EXPECT_EQ(v14["engine"], "vllm-async");
  EXPECT_EQ(v14["policy_opts"]["async_scheduling"], "true");
  EXPECT_EQ(v19["policy"], "vllm");
  EXPECT_EQ(v19["engine"], "vllm-async");
  EXPECT_EQ(v19["policy_opts"]["async_scheduling"], "true");
  RunConfig c = row_run_by_hand("vllm-v1-2025");
  c.engine = "vllm-async";
  c.policy_opts = {{"max_num_seqs", "8"}, {"max_num_batched_tokens", "2532"}, {"async_scheduling", "true"}};
  const RunOutcome run = run_simulation(c);
  EXPECT_DOUBLE_EQ(v14["predicted_ttft_ms"].get<double>(), run.result.summary.ttft_s.mean * 1e3);
  EXPECT_DOUBLE_EQ(v14["predicted_tpot_ms"].get<double>(), run.result.summary.tpot_s.mean * 1e3);
  EXPECT_NE(v14["predicted_ttft_ms"].get<double>(), v12["predicted_ttft_ms"].get<double>());
  // An --engine for the backend replaces the version's engine, not its scheduling.
  std::ostringstream out, err;
  ASSERT_EQ(
      cli_main({"validate-serving", "--measurements", csv.string(), "--gpu", "h100-sxm-fitted", "--requests-per-client",
                "2", "--engine", "vllm=vllm-h100-fitted", "--out", (dir / "e.json").string()},
               out, err),
      0);
  std::ifstream in2(dir / "e.json");
  const auto e = nlohmann::json::parse(in2);
  EXPECT_EQ(e["rows"][1]["engine"], "vllm-h100-fitted");
  EXPECT_EQ(e["rows"][1]["policy_opts"]["async_scheduling"], "true");
}

// --profile-out records the figures in the profile's validation block, to a tenth, beside its
// kernel figures, and nothing else of the profile changes.
TEST(ValidateServing, ProfileOutAddsTheServingFigures) {
  const auto dir = testing::scratch_dir("validate-serving-profile");
  const auto csv = testing::write_text_file(
      dir, "s.csv", testing::kSiliconHeader + row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "agg", 1, 8, 1));
  std::ostringstream out, err;
  ASSERT_EQ(
      cli_main({"validate-serving", "--measurements", csv.string(), "--gpu", "h100-sxm-fitted", "--requests-per-client",
                "2", "--out", (dir / "r.json").string(), "--profile-out", (dir / "p.yaml").string()},
               out, err),
      0);
  std::ifstream in(dir / "r.json");
  const auto j = nlohmann::json::parse(in);
  const HardwareProfile written = load_hardware_profile(dir / "p.yaml");
  ASSERT_EQ(written.validation.serving.backends.size(), 1u);
  const ServingError& e = written.validation.serving.backends[0];
  EXPECT_EQ(e.backend, "vllm");
  EXPECT_EQ(e.count, 1);
  EXPECT_NEAR(e.ttft_mape_percent, j["ttft"]["mape"].get<double>(), 0.05);
  EXPECT_NEAR(e.tpot_mape_percent, j["tpot"]["mape"].get<double>(), 0.05);
  // And the error's sign, to a hundredth: one row's median is its own ratio.
  EXPECT_NEAR(e.ttft_median_ratio, j["ttft"]["median_ratio"].get<double>(), 0.005);
  EXPECT_NEAR(e.tpot_median_ratio, j["tpot"]["median_ratio"].get<double>(), 0.005);
  EXPECT_NEAR(e.ttft_median_ratio,
              j["rows"][0]["predicted_ttft_ms"].get<double>() / j["rows"][0]["measured_ttft_ms"].get<double>(), 0.005);
  EXPECT_THAT(written.validation.serving.measured_on, HasSubstr("1 rows of s.csv (h100_sxm)"));
  const HardwareProfile shipped = resolve_gpu("h100-sxm-fitted");
  EXPECT_EQ(written.validation.operators, shipped.validation.operators);
  EXPECT_EQ(written.hbm_bytes_per_s, shipped.hbm_bytes_per_s);
}

// --think-time gives each replayed client a turnaround: the row's run is the same run as
// `batchsim run` with that --think-time, and it is echoed in the report.
TEST(ValidateServing, ThinkTimeIsEachReplayedClientsTurnaround) {
  const auto dir = testing::scratch_dir("validate-serving-think");
  const auto csv = testing::write_text_file(
      dir, "silicon.csv",
      testing::kSiliconHeader + row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "agg", 1, 8, 1));
  std::string text;
  ASSERT_EQ(testing::run_cli(
                {"validate-serving", "--measurements", csv.string(), "--gpu", "h100-sxm-fitted",
                 "--requests-per-client", "4", "--think-time", "uniform:0:0.05", "--out", (dir / "r.json").string()},
                &text),
            0)
      << text;
  EXPECT_THAT(text, HasSubstr("(4 requests per client, think time uniform:0:0.05 s)"));
  std::ifstream in(dir / "r.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["think_time"], "uniform:0:0.05");
  EXPECT_EQ(j["rows"][0]["config"]["think_time"], "uniform:0:0.05");
  RunConfig c = row_run_by_hand("vllm-v1-2025");
  c.policy_opts = {{"max_num_seqs", "8"}, {"max_num_batched_tokens", "2532"}};
  const double eager_ttft_ms = run_simulation(c).result.summary.ttft_s.mean * 1e3;
  c.workload.think_time = "uniform:0:0.05";
  const RunOutcome thinking = run_simulation(c);
  EXPECT_DOUBLE_EQ(j["rows"][0]["predicted_ttft_ms"].get<double>(), thinking.result.summary.ttft_s.mean * 1e3);
  EXPECT_NE(j["rows"][0]["predicted_ttft_ms"].get<double>(), eager_ttft_ms);  // the clients no longer move together
}

TEST(ValidateServing, BadInputIsNamed) {
  auto error = [](std::vector<std::string> args) {
    return testing::user_error_of([&] {
      std::ostringstream o;
      args.insert(args.begin(), "validate-serving");
      std::ostringstream e;
      cli_main(args, o, e);
    });
  };
  EXPECT_THAT(error({"--gpu", "h100-sxm"}), HasSubstr("--measurements is required"));
  EXPECT_THAT(error({"--measurements", "/nonexistent.csv", "--gpu", "h100-sxm"}), HasSubstr("/nonexistent.csv"));
  EXPECT_THAT(error({"--measurements", "x.csv", "--gpu", "tpu"}), HasSubstr("unknown GPU 'tpu'"));
  EXPECT_THAT(error({"--measurements", "x.csv", "--gpu", "h100-sxm", "--deployment", "k8s"}),
              HasSubstr("--deployment: 'k8s'"));
  EXPECT_THAT(error({"--measurements", "x.csv", "--gpu", "h100-sxm", "--policy", "nope"}), HasSubstr("nope"));
  EXPECT_THAT(error({"--measurements", "x.csv", "--gpu", "h100-sxm", "--think-time", "uniform:1"}),
              HasSubstr("--think-time: \"uniform:1\": expected uniform:A:B"));
  EXPECT_THAT(error({"--measurements", "x.csv", "--gpu", "h100-sxm", "--profile-out", "p.yaml"}),
              HasSubstr("--profile-out: profile 'h100-sxm' has no validation block"));
  EXPECT_THAT(
      error({"--measurements", "x.csv", "--gpu", "h100-sxm-fitted", "--backend", "vllm", "--profile-out", "p.yaml"}),
      HasSubstr("drop --backend"));
  const auto dir = testing::scratch_dir("validate-serving-bad");
  const auto csv =
      testing::write_text_file(dir, "s.csv", testing::kSiliconHeader + row("org/unknown", "h100_sxm", "agg", 1, 8, 1));
  EXPECT_THAT(error({"--measurements", csv.string(), "--gpu", "h100-sxm"}), HasSubstr("no rows to replay"));
}

// NVIDIA's 534 measured H100 serving results, replayed with the shipped H100 profile, each
// backend's preset, engine profile and deployment: the figures the profile records, to 0.05
// points. Of issue 12's targets (10% TPOT and 20% TTFT on vLLM and SGLang) SGLang's TTFT is met
// on these engines and must stay met; the rest are not yet (hwmodel/README.md says where).
TEST(ValidateServing, FiguresOnNvidiasH100Measurements) {
  const auto dir = testing::scratch_dir("validate-serving-h100");
  std::ostringstream out, err;
  ASSERT_EQ(cli_main({"validate-serving", "--measurements",
                      (testing::measured_dir() / "aiconfigurator/silicon/h100_sxm_dense_agg.csv.gz").string(), "--gpu",
                      "h100-sxm-fitted", "--out", (dir / "r.json").string()},
                     out, err),
            0);
  std::ifstream in(dir / "r.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["ttft"]["count"], 534);
  // The figures are the shipped profile's validation.serving block (hwmodel/README.md says how
  // it is regenerated), which every run on it reports as its end-to-end trust figures.
  const HardwareProfile shipped = resolve_gpu("h100-sxm-fitted");
  ASSERT_EQ(shipped.validation.serving.backends.size(), 3u);
  for (const ServingError& e : shipped.validation.serving.backends) {
    const auto& b = j["by_backend"][e.backend];
    EXPECT_NEAR(b["ttft_mape"].get<double>(), e.ttft_mape_percent, 0.051) << e.backend;
    EXPECT_NEAR(b["tpot_mape"].get<double>(), e.tpot_mape_percent, 0.051) << e.backend;
    EXPECT_EQ(b["count"].get<int64_t>(), e.count) << e.backend;
    EXPECT_NEAR(b["ttft_median_ratio"].get<double>(), e.ttft_median_ratio, 0.0051) << e.backend;
    EXPECT_NEAR(b["tpot_median_ratio"].get<double>(), e.tpot_median_ratio, 0.0051) << e.backend;
  }
  EXPECT_THAT(shipped.validation.serving.measured_on, HasSubstr("534 rows of h100_sxm_dense_agg.csv.gz"));
  EXPECT_LE(j["by_backend"]["sglang"]["ttft_mape"].get<double>(), 20.0);
  // Each backend's rows run on its own scheduler and the deployment its rows show.
  for (const auto& row : j["rows"]) {
    const std::string backend = row["backend"];
    if (backend == "sglang") {
      EXPECT_EQ(row["policy"], "sglang");
      EXPECT_EQ(row["deployment"], "defaults");
    } else {
      EXPECT_EQ(row["policy"],
                backend == "vllm" ? "vllm-v1-2025" : "trtllm");  // vLLM 0.12: before full-prompt admission
      EXPECT_EQ(row["deployment"], "aiconfigurator");
    }
  }
  EXPECT_EQ(j["rows"][0]["engine"], j["rows"][0]["backend"]);

  // Where the error lies: each backend's rows grouped by prompt length, clients and TP, each
  // group's MAPE and median predicted / measured recomputed here from the rows.
  for (const auto& [backend, b] : j["by_backend"].items()) {
    for (const std::string key : {"isl", "concurrency", "tp"}) {
      int64_t rows_in_groups = 0;
      for (const auto& [value, g] : b["by_" + key].items()) {
        std::vector<double> ttft_ratios, tpot_ratios;
        double ttft_sum = 0;
        for (const auto& row : j["rows"]) {
          if (row["backend"] != backend || std::to_string(row[key].get<int64_t>()) != value) continue;
          const double ratio = row["predicted_ttft_ms"].get<double>() / row["measured_ttft_ms"].get<double>();
          ttft_ratios.push_back(ratio);
          tpot_ratios.push_back(row["predicted_tpot_ms"].get<double>() / row["measured_tpot_ms"].get<double>());
          ttft_sum += std::abs(ratio - 1) * 100;
        }
        const auto n = static_cast<int64_t>(ttft_ratios.size());
        ASSERT_EQ(g["count"].get<int64_t>(), n) << backend << " " << key << " " << value;
        rows_in_groups += n;
        EXPECT_NEAR(g["ttft_mape"].get<double>(), ttft_sum / static_cast<double>(n), 1e-9);
        for (auto* ratios : {&ttft_ratios, &tpot_ratios}) {
          std::sort(ratios->begin(), ratios->end());
          const double median = n % 2 == 1 ? (*ratios)[n / 2] : ((*ratios)[n / 2 - 1] + (*ratios)[n / 2]) / 2;
          EXPECT_DOUBLE_EQ(g[ratios == &ttft_ratios ? "ttft_median_ratio" : "tpot_median_ratio"].get<double>(), median)
              << backend << " " << key << " " << value;
        }
      }
      EXPECT_EQ(rows_in_groups, b["count"].get<int64_t>()) << backend << " by " << key;
    }
  }
  // The groups say which way the error goes: vLLM's long prompts are predicted short.
  EXPECT_LT(j["by_backend"]["vllm"]["by_isl"]["4096"]["ttft_median_ratio"].get<double>(), 0.8);
  EXPECT_GT(j["by_backend"]["vllm"]["by_isl"]["1024"]["ttft_median_ratio"].get<double>(), 0.85);
}

TEST(ValidateServing, BreakdownPrintsEachBackendsGroups) {
  const auto dir = testing::scratch_dir("validate-serving-breakdown");
  const auto csv = testing::write_text_file(
      dir, "s.csv",
      testing::kSiliconHeader + row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "agg", 1, 8, 2) +
          row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "agg", 1, 16, 2) +
          row("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "agg", 1, 8, 2, "", 2048));
  std::ostringstream plain, plain_err, detailed, detailed_err;
  ASSERT_EQ(
      cli_main({"validate-serving", "--measurements", csv.string(), "--gpu", "h100-sxm-fitted"}, plain, plain_err), 0);
  EXPECT_THAT(plain.str(), HasSubstr("TTFT p/m"));
  EXPECT_THAT(plain.str(), Not(HasSubstr("vllm by isl:")));
  ASSERT_EQ(cli_main({"validate-serving", "--measurements", csv.string(), "--gpu", "h100-sxm-fitted", "--breakdown"},
                     detailed, detailed_err),
            0);
  // Each group's label and row count, in the table's columns.
  auto group = [](const std::string& value, int rows) { return fmt::format("\n{:<10} {:>6} ", "  " + value, rows); };
  for (const std::string& text :
       {"\nvllm by isl:" + group("1024", 2), group("2048", 1), "\nvllm by concurrency:" + group("8", 2), group("16", 1),
        "\nvllm by tp:" + group("2", 3)}) {
    EXPECT_THAT(detailed.str(), HasSubstr(text));
  }
}

}  // namespace
}  // namespace batchsim
