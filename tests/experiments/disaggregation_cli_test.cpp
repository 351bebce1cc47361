// Disaggregated runs from the command line and experiment files: bad pool sizes, links and
// roles are refused naming the option (or the file's line); a run echoes its pools in
// summary.json (`config.prefill`, `pools.prefill`, `pools.decode`, `pools.kv_transfer`),
// counts its GPUs for goodput per GPU, and writes each request's hand-off in requests.csv;
// heterogeneous pools (an H100 prefill pool before A100 decode replicas) take their own GPU.
#include "experiments/cli/cli.h"

#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "experiments/study/experiment.h"
#include "hwmodel/base/error.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::cli_error_of;
using testing::run_cli;

using ::testing::HasSubstr;

std::vector<std::string> pooled(std::vector<std::string> extra) {
  std::vector<std::string> args = {"run", "--num-requests", "20", "--arrival", "poisson:10", "--policy", "vllm"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(DisaggregationCli, BadInputIsRefusedByName) {
  EXPECT_THAT(cli_error_of(pooled({"--prefill-replicas", "0", "--decode-replicas", "2"})),
              HasSubstr("--prefill-replicas 0"));
  EXPECT_THAT(cli_error_of(pooled({"--prefill-replicas", "1"})), HasSubstr("--decode-replicas 0"));
  EXPECT_THAT(cli_error_of(pooled({"--prefill-replicas", "1", "--decode-replicas", "-3"})),
              HasSubstr("--decode-replicas -3"));
  EXPECT_THAT(cli_error_of(pooled({"--prefill-replicas", "1", "--decode-replicas", "1", "--replicas", "2"})),
              HasSubstr("--replicas 2"));
  for (const char* gbps : {"0", "-400", "nan"}) {
    EXPECT_THAT(cli_error_of(pooled({"--prefill-replicas", "1", "--decode-replicas", "1", "--kv-link-gbps", gbps})),
                HasSubstr(std::string("--kv-link-gbps ") + (std::string(gbps) == "nan" ? "" : gbps)));
  }
  EXPECT_THAT(cli_error_of(pooled({"--prefill-replicas", "1", "--decode-replicas", "1", "--kv-link-latency-us", "-1"})),
              HasSubstr("--kv-link-latency-us"));
  EXPECT_THAT(
      cli_error_of(pooled({"--prefill-replicas", "1", "--decode-replicas", "1", "--kv-link", "carrier-pigeon"})),
      HasSubstr("--kv-link 'carrier-pigeon'"));
  EXPECT_THAT(cli_error_of(pooled({"--prefill-replicas", "1", "--decode-replicas", "1", "--kv-transfer", "push"})),
              HasSubstr("--kv-transfer 'push'"));
  EXPECT_THAT(cli_error_of(pooled({"--prefill-replicas", "1", "--decode-replicas", "1", "--decode-router", "nearest"})),
              HasSubstr("--decode-router 'nearest'"));
  EXPECT_THAT(cli_error_of(pooled({"--prefill-replicas", "1", "--decode-replicas", "1", "--decode-tp", "0"})),
              HasSubstr("--decode-tp 0"));
  EXPECT_THAT(cli_error_of(pooled({"--prefill-replicas", "1", "--decode-replicas", "1", "--decode-gpu", "tpu-v9"})),
              HasSubstr("tpu-v9"));
  // A pool's expert layout: its range and what the model allows, named by the pool's options.
  const std::vector<std::string> moe = {"--model", "qwen3-30b-a3b",     "--gpu", "h100-sxm",    "--prefill-replicas",
                                        "1",       "--decode-replicas", "1",     "--decode-tp", "4"};
  auto moe_with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = moe;
    a.insert(a.end(), extra.begin(), extra.end());
    return cli_error_of(pooled(a));
  };
  EXPECT_THAT(moe_with({"--decode-ep", "0"}), HasSubstr("--decode-ep 0"));
  EXPECT_THAT(moe_with({"--prefill-moe-tp", "-2"}), HasSubstr("--prefill-moe-tp -2"));
  const std::string wide = moe_with({"--decode-ep", "3"});  // 128 experts over EP 3 of TP 4
  EXPECT_THAT(wide, HasSubstr("the decode pool (--decode-tp 4, --decode-ep 3)"));
  EXPECT_THAT(cli_error_of(pooled({"--decode-ep", "2"})), HasSubstr("--prefill-replicas P"));
  // Pool options without pools would be silently ignored.
  EXPECT_THAT(cli_error_of(pooled({"--decode-gpu", "h100-sxm"})), HasSubstr("--prefill-replicas P"));
  // A policy that cannot serve a role, named by its option.
  const std::string static_decode =
      cli_error_of(pooled({"--prefill-replicas", "1", "--decode-replicas", "1", "--decode-policy", "hf-static"}));
  EXPECT_THAT(static_decode, HasSubstr("--decode-policy hf-static"));
  EXPECT_THAT(static_decode, HasSubstr("static batching"));
  EXPECT_THAT(
      cli_error_of(pooled({"--prefill-replicas", "1", "--decode-replicas", "1", "--prefill-policy", "ft-static"})),
      HasSubstr("--prefill-policy ft-static"));
  // A pool's DP ranks are range-checked by their own option.
  EXPECT_THAT(cli_error_of(pooled({"--prefill-replicas", "1", "--decode-replicas", "1", "--decode-dp", "0"})),
              HasSubstr("--decode-dp 0: must be in [1, 1024]"));
  // A pool policy's options are checked as --policy-opt's are.
  EXPECT_THAT(cli_error_of(pooled(
                  {"--prefill-replicas", "1", "--decode-replicas", "1", "--decode-policy-opt", "max_num_seqz=4"})),
              HasSubstr("max_num_seqz"));
  // YAML keys: an unknown pool key names the file and line.
  const auto dir = testing::scratch_dir("disagg-cli-bad");
  std::ofstream(dir / "bad.yaml") << "prefill-replicas: 1\ndecode-replicas: 1\ndecode-gpus: a100-80gb\n";
  const std::string bad = cli_error_of({"run", "--config", (dir / "bad.yaml").string(), "--num-requests", "5"});
  EXPECT_THAT(bad, HasSubstr("bad.yaml:3"));
  EXPECT_THAT(bad, HasSubstr("decode-gpus"));
}

TEST(DisaggregationCli, HeterogeneousPoolsAreEchoedAndReported) {
  const auto dir = testing::scratch_dir("disagg-cli-run");
  std::ofstream(dir / "pools.yaml") << "model: llama-2-7b\ngpu: a100-80gb\npolicy: vllm\n"
                                       "prefill-replicas: 1\ndecode-replicas: 2\nprefill-gpu: h100-sxm\n"
                                       "decode-router: least-kv\nkv-link: ib\nkv-transfer: layerwise\n"
                                       "decode-policy-opt:\n  max_num_seqs: 64\n";
  std::string text;
  ASSERT_EQ(run_cli({"run", "--config", (dir / "pools.yaml").string(), "--arrival", "poisson:8", "--num-requests", "60",
                     "--goodput", "ttft:2000", "tpot:100", "--out", (dir / "out").string()},
                    &text),
            0);
  EXPECT_THAT(text, HasSubstr("1 prefill x (h100-sxm tp 1, vllm) + 2 decode x (a100-80gb tp 1, vllm)"));
  EXPECT_THAT(text, HasSubstr("KV over ib layerwise"));
  const auto s = nlohmann::json::parse(testing::read_text_file(dir / "out" / "summary.json"));
  EXPECT_EQ(s["config"]["prefill_replicas"], 1);
  EXPECT_EQ(s["config"]["prefill"]["gpu"], "h100-sxm");
  EXPECT_EQ(s["config"]["decode"]["gpu"], "a100-80gb");
  EXPECT_EQ(s["config"]["decode"]["policy_opts"]["max_num_seqs"], "64");
  EXPECT_EQ(s["config"]["decode_router"], "least-kv");
  EXPECT_EQ(s["gpus"], 3);
  EXPECT_EQ(s["pools"]["prefill"]["gpu"], "h100-sxm");
  EXPECT_EQ(s["pools"]["prefill"]["requests"], 60);
  EXPECT_EQ(s["pools"]["decode"]["replicas"], 2);
  // The H100 and the A100 have about the same memory, but their KV capacities are their own.
  EXPECT_NE(s["pools"]["prefill"]["kv"]["capacity_tokens"], s["pools"]["decode"]["kv"]["capacity_tokens"]);
  // Each after a profile run of its own pool's limits: vLLM's H100 defaults, the A100's 2048
  // tokens with the decode pool's 64 sequences.
  EXPECT_EQ(s["pools"]["prefill"]["kv"]["capacity_rule"],
            "--gpu-memory-utilization 0.9 after a profile run of 8192 tokens in 1024 sequences");
  EXPECT_EQ(s["pools"]["decode"]["kv"]["capacity_rule"],
            "--gpu-memory-utilization 0.9 after a profile run of 2048 tokens in 64 sequences");
  const auto& t = s["pools"]["kv_transfer"];
  EXPECT_EQ(t["mode"], "layerwise");
  EXPECT_EQ(t["gbps_per_gpu"], 400.0);
  int64_t multi_token = 0;
  const std::string requests = testing::read_text_file(dir / "out" / "requests.csv");
  std::istringstream lines(requests);
  std::string header, line;
  std::getline(lines, header);
  EXPECT_THAT(header,
              ::testing::EndsWith(",replica,prefill_replica,handoff_s,kv_wait_s,kv_queue_s,kv_transfer_s,kv_bytes"));
  while (std::getline(lines, line)) {
    // A request of more than one token was moved: its kv_bytes field is set.
    if (line.back() != ',') ++multi_token;
  }
  EXPECT_EQ(t["transfers"].get<int64_t>(), multi_token);
  EXPECT_GT(multi_token, 30);
  EXPECT_DOUBLE_EQ(s["goodput"]["requests_per_s_per_gpu"].get<double>(),
                   s["goodput"]["requests_per_s"].get<double>() / 3);
  // The run's own summary.json runs it again, to the byte.
  ASSERT_EQ(run_cli({"run", "--config", (dir / "out" / "summary.json").string(), "--out", (dir / "again").string()}),
            0);
  EXPECT_EQ(testing::read_text_file(dir / "again" / "requests.csv"), requests);
}

// A mixture of experts' decode pool in wide EP beside a TP prefill pool: summary.json echoes
// each pool's layout, and the decode pool's experts are costed in it (the same pool with its
// experts split by TP decodes at another pace; the prefill pool, unchanged, prefills alike).
TEST(DisaggregationCli, MoePoolsRunTheirOwnExpertLayouts) {
  const auto dir = testing::scratch_dir("disagg-cli-moe");
  const auto run = [&](const std::string& name, std::vector<std::string> decode) {
    std::vector<std::string> args = {"run",
                                     "--model",
                                     "qwen3-30b-a3b",
                                     "--gpu",
                                     "h100-sxm",
                                     "--policy",
                                     "vllm",
                                     "--arrival",
                                     "poisson:4",
                                     "--num-requests",
                                     "40",
                                     "--prefill-replicas",
                                     "1",
                                     "--decode-replicas",
                                     "1",
                                     "--prefill-tp",
                                     "2",
                                     "--decode-tp",
                                     "4",
                                     "--out",
                                     (dir / name).string()};
    args.insert(args.end(), decode.begin(), decode.end());
    EXPECT_EQ(run_cli(args), 0) << name;
    return nlohmann::json::parse(testing::read_text_file(dir / name / "summary.json"));
  };
  const auto ep = run("ep", {"--decode-ep", "4"});
  const auto tp = run("tp", {});
  EXPECT_EQ(ep["config"]["decode"]["ep"], 4);
  EXPECT_FALSE(ep["config"]["prefill"].contains("ep"));
  EXPECT_FALSE(tp["config"]["decode"].contains("ep"));
  EXPECT_NE(ep["latency"]["tpot_s"]["p50"], tp["latency"]["tpot_s"]["p50"]);
  EXPECT_EQ(ep["pools"]["prefill"]["requests"], tp["pools"]["prefill"]["requests"]);
}

// Deployments as an experiment axis: a colocated value and P:D values side by side.
TEST(DisaggregationCli, PoolSizesAreExperimentAxes) {
  const auto dir = testing::scratch_dir("disagg-cli-axes");
  std::ofstream(dir / "e.yaml") << "base: {model: llama-2-7b, num-requests: 20, arrival: 'poisson:5'}\n"
                                   "policies: [vllm]\n"
                                   "axes:\n  deployment:\n"
                                   "    - {label: colocated, replicas: 2}\n"
                                   "    - {label: 1P1D, prefill-replicas: 1, decode-replicas: 1, kv-link: nvlink}\n";
  const Experiment e = parse_experiment(dir / "e.yaml");
  const auto runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].config.replicas, 2);
  EXPECT_EQ(runs[1].config.prefill_replicas, 1);
  EXPECT_EQ(runs[1].config.kv_link, "nvlink");
  // The report puts the deployments side by side, a disaggregated row naming its pools.
  std::string text;
  ASSERT_EQ(
      run_cli({"compare", (dir / "e.yaml").string(), "--out", (dir / "out").string(), "--no-plots", "--jobs", "1"},
              &text),
      0);
  EXPECT_THAT(text, HasSubstr("1P+1D"));
  const std::string report = testing::read_text_file(dir / "out" / "report.md");
  EXPECT_THAT(report, HasSubstr("## Prefill/decode disaggregation"));
  EXPECT_THAT(report, HasSubstr("| colocated x2 |"));
  EXPECT_THAT(report, HasSubstr("| 1P:1D |"));
  const std::string results = testing::read_text_file(dir / "out" / "results.csv");
  EXPECT_THAT(results, HasSubstr("pools.kv_transfer.transfer_s.p99"));
  std::ofstream(dir / "bad.yaml")
      << "base: {model: llama-2-7b, num-requests: 20}\npolicies: [vllm]\n"
         "axes:\n  deployment:\n    - {label: broken, prefill-replicas: 1, decode-replicas: 0}\n";
  EXPECT_THAT(testing::user_error_of([&] { parse_experiment(dir / "bad.yaml"); }), HasSubstr("--decode-replicas 0"));
}

// Pools may run different serving software: the decode pool's engine times the decode
// iterations (its per-iteration CPU cost shows in TPOT), the prefill pool's the prefills (TTFT),
// and summary.json echoes each, so that the run replays as given.
TEST(DisaggregationCli, EachPoolRunsItsOwnEngine) {
  const auto dir = testing::scratch_dir("disagg-cli-engine");
  auto run = [&](std::vector<std::string> extra, const std::string& name) {
    std::vector<std::string> args =
        pooled({"--prefill-replicas", "1", "--decode-replicas", "1", "--out", (dir / name).string()});
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(run_cli(args), 0);
    return nlohmann::json::parse(testing::read_text_file(dir / name / "summary.json"));
  };
  // vLLM with 20 ms of scheduling per iteration in series with the GPU (synchronous), a profile
  // file of the test's own.
  const auto slow =
      testing::write_text_file(dir, "slow.yaml", "base: vllm\nname: slow-vllm\ncpu:\n  per_iteration_s: 0.02\n");
  const auto same = run({}, "same");
  const auto slow_decode = run({"--decode-engine", slow.string()}, "slow-decode");
  const auto slow_prefill = run({"--prefill-engine", slow.string()}, "slow-prefill");
  EXPECT_EQ(same["config"]["decode"]["engine"], "vllm-async");
  EXPECT_EQ(slow_decode["config"]["decode"]["engine"], slow.string());
  EXPECT_EQ(slow_decode["config"]["prefill"]["engine"], "vllm-async");
  const auto tpot = [](const nlohmann::json& s) { return s["latency"]["tpot_s"]["p50"].get<double>(); };
  const auto ttft = [](const nlohmann::json& s) { return s["latency"]["ttft_s"]["p50"].get<double>(); };
  EXPECT_GT(tpot(slow_decode), tpot(same) + 0.015);  // most of the 20 ms shows in every decode step
  EXPECT_DOUBLE_EQ(ttft(slow_decode), ttft(same));   // the prefill side did not change
  EXPECT_GT(ttft(slow_prefill), ttft(same) + 0.015);
  // The echo replays the run to the byte.
  ASSERT_EQ(
      run_cli({"run", "--config", (dir / "slow-decode" / "summary.json").string(), "--out", (dir / "again").string()}),
      0);
  EXPECT_EQ(testing::read_text_file(dir / "again" / "requests.csv"),
            testing::read_text_file(dir / "slow-decode" / "requests.csv"));
  // Bad values are named by their option, or by file and line.
  EXPECT_THAT(
      cli_error_of(pooled({"--prefill-replicas", "1", "--decode-replicas", "1", "--decode-engine", "warp-drive"})),
      HasSubstr("--decode-engine warp-drive: unknown engine 'warp-drive'"));
  EXPECT_THAT(cli_error_of(pooled({"--prefill-engine", "vllm"})), HasSubstr("--prefill-replicas P"));
  std::ofstream(dir / "bad.yaml") << "prefill-replicas: 1\ndecode-replicas: 1\nprefill:\n  engine: 42\n";
  const std::string bad = cli_error_of({"run", "--config", (dir / "bad.yaml").string(), "--num-requests", "5"});
  EXPECT_THAT(bad, HasSubstr("--prefill-engine 42"));
  std::ofstream(dir / "good.yaml") << "prefill-replicas: 1\ndecode-replicas: 1\ndecode-engine: " << slow.string()
                                   << "\n"
                                      "policy: vllm\nnum-requests: 20\narrival: 'poisson:10'\n";
  ASSERT_EQ(run_cli({"run", "--config", (dir / "good.yaml").string(), "--out", (dir / "yaml").string()}), 0);
  EXPECT_EQ(testing::read_text_file(dir / "yaml" / "requests.csv"),
            testing::read_text_file(dir / "slow-decode" / "requests.csv"));
}

TEST(DisaggregationCli, ListLinksShowsTheirBandwidths) {
  std::string text;
  ASSERT_EQ(run_cli({"list", "links"}, &text), 0);
  for (const char* l : {"nvlink", "ib", "roce", "pcie", "400 Gb/s", "ConnectX-7"}) EXPECT_THAT(text, HasSubstr(l));
}

}  // namespace
}  // namespace batchsim
