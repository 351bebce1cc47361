// SLOs, goodput and bench.json (experiments/run/slo.h, experiments/run/bench_result.h): goodput and SLO
// verdicts on requests whose TTFT, TPOT and e2e are set by hand; rejected requests as
// violations; bench.json's figures with numpy's definitions and its keys against a recorded
// `vllm bench serve --save-result` file; the options' errors; an experiment's `slo:` block in
// the report.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include <sys/wait.h>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "experiments/cli/cli.h"
#include "experiments/run/bench_result.h"
#include "experiments/run/output.h"
#include "experiments/run/slo.h"
#include "experiments/study/experiment.h"
#include "hwmodel/base/error.h"
#include "sim/simulation.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::run_cli;

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using ::testing::HasSubstr;

RequestRecord served(RequestId id, double arrival_s, double first_token_s, double finished_s, int32_t output) {
  RequestRecord r;
  r.id = id;
  r.arrival = SimTime::from_seconds(arrival_s);
  r.prompt_tokens = 100;
  r.output_tokens = output;
  r.state = RequestState::kFinished;
  r.first_scheduled = r.arrival;
  r.first_token = SimTime::from_seconds(first_token_s);
  r.finished = SimTime::from_seconds(finished_s);
  r.generated_tokens = output;
  return r;
}

RequestRecord rejected(RequestId id, double arrival_s) {
  RequestRecord r;
  r.id = id;
  r.arrival = SimTime::from_seconds(arrival_s);
  r.prompt_tokens = 5000;
  r.output_tokens = 10;
  r.state = RequestState::kRejected;
  r.reject_reason = "prompt + output exceed max_model_len 4096: 5000 + 10 tokens";
  return r;
}

// Four requests, each figure chosen by hand:
//   0: TTFT 0.5 s, 11 tokens, e2e 1.5 s  -> TPOT (1.5 - 0.5) / 10 = 0.1 s, ten gaps of 0.1 s
//   1: TTFT 1.0 s, 11 tokens, e2e 3.0 s  -> TPOT 0.2 s, ten gaps of 0.2 s
//   2: arrives at 1 s, TTFT 0.2 s, 1 token -> TPOT 0 (vLLM: 0 for goodput, left out of TPOT)
//   3: rejected
// Makespan: first arrival 0 to last completion 3.0 s.
RunOutcome hand_run(bool with_rejection) {
  RunOutcome o;
  o.config = default_run_config();
  o.config.workload.arrival = "poisson:2";
  SimulationResult& res = o.result;
  res.requests = {served(0, 0, 0.5, 1.5, 11), served(1, 0, 1.0, 3.0, 11), served(2, 1.0, 1.2, 1.2, 1)};
  if (with_rejection) res.requests.push_back(rejected(3, 0.5));
  for (int i = 0; i < 10; ++i) res.tbt_s.add(0.1);
  for (int i = 0; i < 10; ++i) res.tbt_s.add(0.2);
  res.summary = summarize(res, 0);
  return o;
}

TEST(Goodput, EqualsACountByHand) {
  const RunOutcome o = hand_run(true);
  ASSERT_DOUBLE_EQ(o.result.summary.makespan_s, 3.0);
  // TTFT <= 800 ms and TPOT <= 150 ms: request 0 (0.5 s, 0.1 s) and request 2 (0.2 s, TPOT 0);
  // request 1 misses both, request 3 was never served.
  GoodputSpec spec = parse_goodput({"ttft:800", "tpot:150"});
  Goodput g = compute_goodput(o.result, spec, 3.0);
  EXPECT_EQ(g.good_requests, 2);
  EXPECT_EQ(g.total_requests, 4);
  EXPECT_DOUBLE_EQ(g.fraction, 0.5);
  EXPECT_DOUBLE_EQ(g.requests_per_s, 2.0 / 3.0);
  // Adding e2el <= 1000 ms drops request 0 (e2e 1.5 s): a request is good only when every
  // threshold holds.
  spec = parse_goodput({"ttft:800 tpot:150,e2el:1000"});
  EXPECT_EQ(compute_goodput(o.result, spec, 3.0).good_requests, 1);
  // A threshold is met at equality (vLLM: slo >= value): TTFT 1.0 s against 1000 ms.
  EXPECT_EQ(compute_goodput(o.result, parse_goodput({"ttft:1000"}), 3.0).good_requests, 3);
  EXPECT_EQ(compute_goodput(o.result, parse_goodput({"ttft:999.9"}), 3.0).good_requests, 2);
  // A rejected request is never good, however loose the thresholds.
  EXPECT_FALSE(is_good_request(o.result.requests[3], parse_goodput({"e2el:1e12"})));

  // summary.json's block says the same, over the makespan.
  RunOutcome judged = o;
  judged.config.goodput = parse_goodput({"ttft:800", "tpot:150"});
  const ordered_json s = summary_to_json(judged);
  EXPECT_DOUBLE_EQ(s["goodput"]["requests_per_s"].get<double>(), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(s["goodput"]["fraction"].get<double>(), 0.5);
  EXPECT_EQ(s["goodput"]["good_requests"], 2);
  EXPECT_EQ(s["goodput"]["thresholds_ms"], (ordered_json{{"ttft", 800.0}, {"tpot", 150.0}}));
  // bench.json's request_goodput is the same figure; null without --goodput, as vLLM writes it.
  EXPECT_DOUBLE_EQ(bench_json(judged)["request_goodput"].get<double>(), 2.0 / 3.0);
  EXPECT_TRUE(bench_json(o)["request_goodput"].is_null());
  EXPECT_FALSE(summary_to_json(o).contains("goodput"));
}

TEST(Slo, MetAndViolationsByHand) {
  RunOutcome o = hand_run(false);
  // Nearest-rank over TTFTs {0.2, 0.5, 1.0}: p99 = 1.0 s, p50 = 0.5 s; TBT p99 = 0.2 s.
  o.config.slo = parse_slo("ttft_p99_s=1.0,latency.tbt_s.p99=0.2");
  ordered_json s = summary_to_json(o);
  EXPECT_TRUE(s["slo"]["met"].get<bool>());
  EXPECT_TRUE(s["slo"]["violations"].empty());
  EXPECT_EQ(s["slo"]["bounds"], (ordered_json{{"latency.ttft_s.p99", 1.0}, {"latency.tbt_s.p99", 0.2}}));

  o.config.slo = parse_slo("ttft_p99_ms=900,ttft_p50_s=0.5,tbt_p99_s=0.15");
  s = summary_to_json(o);
  EXPECT_FALSE(s["slo"]["met"].get<bool>());
  ASSERT_EQ(s["slo"]["violations"].size(), 2u);
  EXPECT_EQ(s["slo"]["violations"][0]["metric"], "latency.ttft_s.p99");
  EXPECT_DOUBLE_EQ(s["slo"]["violations"][0]["bound"].get<double>(), 0.9);  // 900 ms in seconds
  EXPECT_DOUBLE_EQ(s["slo"]["violations"][0]["value"].get<double>(), 1.0);
  EXPECT_EQ(s["slo"]["violations"][1]["metric"], "latency.tbt_s.p99");
  EXPECT_DOUBLE_EQ(s["slo"]["violations"][1]["value"].get<double>(), 0.2);
  EXPECT_THAT(slo_line(s["slo"]), HasSubstr("NOT MET: latency.ttft_s.p99 1 > 0.9"));
}

TEST(Slo, RejectedRequestsAreViolations) {
  RunOutcome o = hand_run(true);
  // Every latency bound holds over the three served requests...
  o.config.slo = parse_slo("ttft_p99_s=10,e2e_p99_s=10");
  const ordered_json s = summary_to_json(o);
  // ...but one request was never served: the SLO is not met.
  EXPECT_FALSE(s["slo"]["met"].get<bool>());
  ASSERT_EQ(s["slo"]["violations"].size(), 1u);
  EXPECT_EQ(s["slo"]["violations"][0]["metric"], "requests.rejected");
  EXPECT_DOUBLE_EQ(s["slo"]["violations"][0]["value"].get<double>(), 1);
  EXPECT_THAT(slo_line(s["slo"]), HasSubstr("1 requests rejected"));
  EXPECT_EQ(s["requests"]["beyond_context"], 0);
  // One beyond the model's context, which no deployment serves, is left out of the verdict (of
  // run --slo and of the capacity searches alike), and said so.
  o.result.rejected_beyond_context = 1;
  const ordered_json beyond = summary_to_json(o);
  EXPECT_EQ(beyond["requests"]["beyond_context"], 1);
  EXPECT_TRUE(beyond["slo"]["met"].get<bool>());
  EXPECT_EQ(beyond["slo"]["left_out_beyond_context"], 1);
  EXPECT_THAT(slo_line(beyond["slo"]), HasSubstr("slo: met (latency.ttft_s.p99 <= 10, latency.e2e_s.p99 <= 10); "
                                                 "1 requests beyond the model's context left out"));
  EXPECT_FALSE(evaluate_slo(beyond, parse_slo("ttft_p99_s=0.001")).met);
  // bench.json counts it as vLLM's client would: failed.
  EXPECT_EQ(bench_json(o)["failed"], 1);
  EXPECT_EQ(bench_json(o)["completed"], 3);
}

TEST(BenchJson, FiguresByHandFollowNumpy) {
  RunOutcome o = hand_run(true);
  o.config.percentile_metrics = parse_percentile_metrics("e2el,ttft,tpot,itl");
  o.config.metric_percentiles = parse_metric_percentiles("50,99,99.9");
  const ordered_json b = bench_json(o);
  EXPECT_EQ(b["num_prompts"], 4);
  EXPECT_DOUBLE_EQ(b["request_rate"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(b["burstiness"].get<double>(), 1.0);
  EXPECT_TRUE(b["max_concurrency"].is_null());
  EXPECT_DOUBLE_EQ(b["duration"].get<double>(), 3.0);
  EXPECT_EQ(b["total_input_tokens"], 300);  // completed requests' prompts
  EXPECT_EQ(b["total_output_tokens"], 23);
  EXPECT_DOUBLE_EQ(b["request_throughput"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(b["output_throughput"].get<double>(), 23.0 / 3);
  EXPECT_DOUBLE_EQ(b["total_token_throughput"].get<double>(), 323.0 / 3);
  // One-second buckets from the first start: second 1 holds requests 0, 1 and 2.
  EXPECT_EQ(b["max_concurrent_requests"], 3);
  // TTFT {0.2, 0.5, 1.0} s: numpy mean, median, population std, linear percentiles.
  const double mean = (0.2 + 0.5 + 1.0) / 3;
  const double sd = std::sqrt((std::pow(0.2 - mean, 2) + std::pow(0.5 - mean, 2) + std::pow(1.0 - mean, 2)) / 3);
  EXPECT_NEAR(b["mean_ttft_ms"].get<double>(), mean * 1000, 1e-9);
  EXPECT_NEAR(b["median_ttft_ms"].get<double>(), 500, 1e-9);
  EXPECT_NEAR(b["std_ttft_ms"].get<double>(), sd * 1000, 1e-9);
  EXPECT_NEAR(b["p50_ttft_ms"].get<double>(), 500, 1e-9);
  EXPECT_NEAR(b["p99_ttft_ms"].get<double>(), (0.5 + 0.98 * 0.5) * 1000, 1e-6);     // rank 1.98
  EXPECT_NEAR(b["p99.9_ttft_ms"].get<double>(), (0.5 + 0.998 * 0.5) * 1000, 1e-6);  // rank 1.998
  // TPOT over the two requests with more than one token: {0.1, 0.2} s.
  EXPECT_NEAR(b["mean_tpot_ms"].get<double>(), 150, 1e-6);
  EXPECT_NEAR(b["std_tpot_ms"].get<double>(), 50, 1e-6);
  EXPECT_NEAR(b["p99_tpot_ms"].get<double>(), 199, 1e-6);
  // ITL: ten gaps of 0.1 s and ten of 0.2 s; the median interpolates ranks 9 and 10.
  EXPECT_NEAR(b["mean_itl_ms"].get<double>(), 150, 1e-6);
  EXPECT_NEAR(b["median_itl_ms"].get<double>(), 150, 1e-6);
  EXPECT_NEAR(b["std_itl_ms"].get<double>(), 50, 1e-6);
  EXPECT_NEAR(b["p99_itl_ms"].get<double>(), 200, 1e-6);
  // e2el {0.2, 1.5, 3.0} s.
  EXPECT_NEAR(b["median_e2el_ms"].get<double>(), 1500, 1e-6);
  EXPECT_NEAR(b["p50_e2el_ms"].get<double>(), 1500, 1e-6);
  // Metrics in vLLM's order (ttft, tpot, itl, e2el) whatever order they were given in.
  std::vector<std::string> means;
  for (const auto& [k, v] : b.items()) {
    if (k.rfind("mean_", 0) == 0) means.push_back(k);
  }
  EXPECT_EQ(means, (std::vector<std::string>{"mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2el_ms"}));
  // Only the selected metrics: the default leaves e2el out, as vLLM's does.
  o.config.percentile_metrics = RunConfig{}.percentile_metrics;
  o.config.metric_percentiles = RunConfig{}.metric_percentiles;
  const ordered_json d = bench_json(o);
  EXPECT_FALSE(d.contains("mean_e2el_ms"));
  EXPECT_TRUE(d.contains("p99_itl_ms"));
  EXPECT_FALSE(d.contains("p50_ttft_ms"));
}

TEST(BenchJson, WeightedSamplesMatchNumpy) {
  // numpy over [1, 2, 2, 4]: percentile 25 = 1.75, median 2, percentile 90 = 3.4, std 1.0897.
  WeightedSamples s;
  s.add(4);
  s.add(1);
  s.add(2, 2);
  EXPECT_DOUBLE_EQ(s.interpolated_percentile(0.25), 1.75);
  EXPECT_DOUBLE_EQ(s.interpolated_percentile(0.5), 2);
  EXPECT_NEAR(s.interpolated_percentile(0.9), 3.4, 1e-12);
  EXPECT_DOUBLE_EQ(s.interpolated_percentile(1.0), 4);
  EXPECT_DOUBLE_EQ(s.interpolated_percentile(0.0), 1);
  EXPECT_NEAR(s.stddev(), std::sqrt(4.75 / 4), 1e-12);
  EXPECT_EQ(WeightedSamples().stddev(), 0);
  EXPECT_EQ(WeightedSamples().interpolated_percentile(0.99), 0);
}

TEST(BenchJson, ArrivalsAsVllmWouldBeGivenThem) {
  RunOutcome o = hand_run(false);
  o.config.workload.arrival = "gamma:3:0.5";
  o.config.max_concurrency = 8;
  ordered_json b = bench_json(o);
  EXPECT_DOUBLE_EQ(b["request_rate"].get<double>(), 3);
  EXPECT_DOUBLE_EQ(b["burstiness"].get<double>(), 4);  // shape 1/CV^2
  EXPECT_EQ(b["max_concurrency"], 8);
  o.config.workload.arrival = "offline";
  EXPECT_EQ(bench_json(o)["request_rate"], "inf");
  o.config.workload.arrival = "";
  o.config.workload.trace = "x.csv";  // a trace's own timestamps: no rate to state
  b = bench_json(o);
  EXPECT_FALSE(b.contains("request_rate"));
  EXPECT_FALSE(b.contains("burstiness"));
}

ordered_json read_json(const fs::path& file) {
  std::ifstream in(file);
  return ordered_json::parse(in);
}

// The names bench.json writes against a result file of `vllm bench serve --save-result`.
// tests/data/vllm_bench_serve_result.json is written by hand from vLLM's schema, not by a run:
// its keys are those vllm/benchmarks/serve.py (local-inference-lab/vllm @28be48f) saves for a
// generative model without --save-detailed — main()'s result_json (date, endpoint_type,
// backend, label, model_id, tokenizer_id, num_prompts, request_rate, burstiness,
// max_concurrency), then benchmark()'s `result` dict (duration ... rtfx) and
// process_one_metric's mean_/median_/std_/p{N}_{metric}_ms — for
// `--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 --goodput ttft:2000
// tpot:100 --request-rate 4 --max-concurrency 32`; its values are illustrative.
TEST(BenchJson, KeysMatchARecordedVllmResult) {
  const ordered_json vllm = read_json(testing::source_dir() / "tests/data/vllm_bench_serve_result.json");
  const fs::path out = testing::scratch_dir("bench_json_keys");
  ASSERT_EQ(run_cli({"run",
                     "--policy",
                     "vllm",
                     "--arrival",
                     "poisson:4",
                     "--max-concurrency",
                     "32",
                     "--num-requests",
                     "200",
                     "--prompt-len",
                     "fixed:512",
                     "--output-len",
                     "fixed:128",
                     "--percentile-metrics",
                     "ttft,tpot,itl,e2el",
                     "--metric-percentiles",
                     "50,90,99",
                     "--goodput",
                     "ttft:2000",
                     "tpot:100",
                     "--out",
                     out.string()}),
            0);
  const ordered_json ours = read_json(out / "bench.json");
  // What batchsim cannot produce as vLLM defines it, and leaves out (README, bench.json).
  const std::set<std::string> left_out = {"date",         "endpoint_type",          "backend", "label", "model_id",
                                          "tokenizer_id", "max_output_tokens_per_s"};
  std::vector<std::string> expected, got;
  for (const auto& [k, v] : vllm.items()) {
    if (!left_out.count(k)) expected.push_back(k);
  }
  for (const auto& [k, v] : ours.items()) got.push_back(k);
  EXPECT_EQ(got, expected);  // the same names, in the same order
  for (const auto& [k, v] : vllm.items()) {
    if (!ours.contains(k)) continue;
    EXPECT_EQ(ours[k].is_number(), v.is_number()) << k;  // the same kinds of value
  }
  // The figures are the run's, in vLLM's units: ms against summary.json's seconds.
  const ordered_json summary = read_json(out / "summary.json");
  EXPECT_EQ(ours["completed"], summary["requests"]["completed"]);
  EXPECT_DOUBLE_EQ(ours["duration"].get<double>(), summary["makespan_s"].get<double>());
  EXPECT_NEAR(ours["mean_ttft_ms"].get<double>(), summary["latency"]["ttft_s"]["mean"].get<double>() * 1000, 1e-6);
  EXPECT_NEAR(ours["mean_itl_ms"].get<double>(), summary["latency"]["tbt_s"]["mean"].get<double>() * 1000, 1e-6);
  EXPECT_DOUBLE_EQ(ours["request_goodput"].get<double>(), summary["goodput"]["requests_per_s"].get<double>());
  EXPECT_LE(ours["max_concurrent_requests"].get<int64_t>(), 32 + 1);  // a client cap, at second granularity
}

// A real run: summary.json's goodput is the count of requests.csv rows within the thresholds.
TEST(Goodput, RealRunMatchesItsRequestsCsv) {
  const fs::path out = testing::scratch_dir("goodput_real_run");
  std::string text;
  ASSERT_EQ(run_cli({"run", "--policy", "vllm", "--arrival", "poisson:12", "--num-requests", "300", "--prompt-len",
                     "uniform:64:1024", "--output-len", "uniform:1:256", "--goodput", "ttft:150", "tpot:30", "--slo",
                     "ttft_p99_s=100", "--out", out.string()},
                    &text),
            0);
  std::ifstream csv(out / "requests.csv");
  std::string line;
  std::getline(csv, line);
  int good = 0, total = 0;
  while (std::getline(csv, line)) {
    ++total;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    if (f[5] != "finished") continue;
    const double ttft = std::stod(f[9]), tpot = std::stod(f[11]);  // ttft_s, tpot_s columns
    good += ttft <= 0.150 + 1e-9 && tpot <= 0.030 + 1e-9;
  }
  const ordered_json s = read_json(out / "summary.json");
  EXPECT_EQ(total, 300);
  EXPECT_GT(good, 0);
  EXPECT_LT(good, total);  // the thresholds bite: neither all nor none
  EXPECT_EQ(s["goodput"]["good_requests"], good);
  EXPECT_DOUBLE_EQ(s["goodput"]["fraction"].get<double>(), good / 300.0);
  EXPECT_TRUE(s["slo"]["met"].get<bool>());
  EXPECT_THAT(text, HasSubstr("slo: met (latency.ttft_s.p99 <= 100)"));
  EXPECT_THAT(text, HasSubstr(fmt::format("of 300 requests good (ttft <= 150 ms, tpot <= 30 ms)")));
}

TEST(Slo, BadOptionsNameTheOption) {
  const auto error = [](std::vector<std::string> args) {
    args.insert(args.begin(), "run");
    args.insert(args.end(), {"--num-requests", "5"});
    return testing::user_error_of([&] { run_cli(args); });
  };
  EXPECT_THAT(error({"--slo", "ttft_p95_s=2"}), HasSubstr("--slo: 'ttft_p95_s' is not an SLO figure"));
  EXPECT_THAT(error({"--slo", "latency.ttft_s.p100=2"}), HasSubstr("--slo: 'latency.ttft_s.p100'"));
  EXPECT_THAT(error({"--slo", "ttft_p99_s"}), HasSubstr("--slo: 'ttft_p99_s': expected KEY=BOUND"));
  EXPECT_THAT(error({"--slo", "ttft_p99_s=fast"}), HasSubstr("--slo: ttft_p99_s: the bound 'fast' is not a number"));
  EXPECT_THAT(error({"--slo", "ttft_p99_s=-1"}), HasSubstr("--slo"));
  EXPECT_THAT(error({"--slo", "ttft_p99_s=1,latency.ttft_s.p99=2"}), HasSubstr("bounded twice"));
  EXPECT_THAT(error({"--slo", ","}), HasSubstr("--slo: give KEY=BOUND pairs"));
  EXPECT_THAT(error({"--goodput", "ttft=2000"}), HasSubstr("--goodput: 'ttft=2000': expected KEY:VALUE"));
  EXPECT_THAT(error({"--goodput", "itl:20"}),
              HasSubstr("--goodput: unknown metric 'itl' (expected ttft, tpot or e2el"));
  EXPECT_THAT(error({"--goodput", "ttft:-5"}), HasSubstr("--goodput: ttft: the threshold '-5'"));
  EXPECT_THAT(error({"--goodput", "ttft:1", "ttft:2"}), HasSubstr("--goodput: ttft is given twice"));
  EXPECT_THAT(error({"--percentile-metrics", "ttft,latency"}),
              HasSubstr("--percentile-metrics: unknown metric 'latency' (expected ttft, tpot, itl or e2el"));
  EXPECT_THAT(error({"--percentile-metrics", ""}), HasSubstr("--percentile-metrics: give metric names"));
  EXPECT_THAT(error({"--metric-percentiles", "99,101"}), HasSubstr("--metric-percentiles: '101' is not a percentile"));
  EXPECT_THAT(error({"--metric-percentiles", "p99"}), HasSubstr("--metric-percentiles: 'p99'"));
  // The same keys in a --config file name the file, line and key.
  const fs::path dir = testing::scratch_dir("slo_bad_config");
  const fs::path cfg = testing::write_text_file(dir, "c.yaml", "num-requests: 5\nslo: {ttft_p99_s: 2, tbt_p42_s: 1}\n");
  EXPECT_THAT(testing::user_error_of([&] {
                run_cli({"run", "--config", cfg.string()});
              }),
              HasSubstr("c.yaml:2: slo: 'tbt_p42_s' is not an SLO figure"));
  const fs::path cfg2 = testing::write_text_file(dir, "g.yaml", "num-requests: 5\ngoodput: {ttft: 100, queue: 5}\n");
  EXPECT_THAT(testing::user_error_of([&] {
                run_cli({"run", "--config", cfg2.string()});
              }),
              HasSubstr("g.yaml:2: goodput: unknown metric 'queue'"));
}

// The binary itself: a bad value is one line naming the option and exit status 2.
TEST(Slo, BadOptionsExitNonZero) {
  const fs::path binary = fs::path(BATCHSIM_BINARY_DIR) / "experiments" / "batchsim";
  if (!fs::exists(binary)) GTEST_SKIP() << "the batchsim binary is not built";
  const fs::path log = testing::scratch_dir("slo_exit") / "err.txt";
  for (const std::string flags :
       {"--slo ttft_p95_s=2", "--goodput itl:20", "--percentile-metrics foo", "--metric-percentiles 200"}) {
    const std::string cmd = fmt::format("{} run --num-requests 5 {} 2> {}", binary.string(), flags, log.string());
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << flags;
    EXPECT_EQ(WEXITSTATUS(status), 2) << flags;
    EXPECT_THAT(testing::read_text_file(log), HasSubstr(flags.substr(0, flags.find(' ')))) << flags;
  }
}

// An experiment's `slo:` block judges every run: summary.json's slo and goodput, results.csv's
// columns, and the report's SLO pass/fail and goodput columns with the violations listed.
TEST(SloExperiment, ReportHasPassFailAndGoodput) {
  const fs::path dir = testing::scratch_dir("slo_experiment");
  const fs::path file = testing::write_text_file(dir, "slo.yaml", R"(
name: slo-check
base: {num-requests: 60, arrival: "poisson:4", prompt-len: "fixed:256", output-len: "fixed:32"}
policies: [vllm]
axes:
  strictness:
    - {label: loose, slo: {ttft_p99_s: 100, e2e_p99_s: 100}}
    - {label: tight, slo: "ttft_p99_ms=0"}
slo:
  ttft_p99_s: 100
  goodput: {ttft: 5000, e2el: 60000}
)");
  const fs::path out = dir / "out";
  std::string text;
  ASSERT_EQ(run_cli({"compare", file.string(), "--out", out.string(), "--no-plots", "--jobs", "1"}, &text), 0);
  const std::string report = testing::read_text_file(out / "report.md");
  EXPECT_THAT(report, HasSubstr("| group | policy | SLO |"));
  EXPECT_THAT(report, HasSubstr("| strictness=loose | vllm | pass |"));
  EXPECT_THAT(report, HasSubstr("| strictness=tight | vllm | FAIL |"));
  EXPECT_THAT(report, HasSubstr("goodput req/s"));
  EXPECT_THAT(report, HasSubstr("good %"));
  EXPECT_THAT(report, HasSubstr("Runs that missed the SLO"));
  EXPECT_THAT(report, HasSubstr("`latency.ttft_s.p99`"));
  const std::string csv = testing::read_text_file(out / "results.csv");
  EXPECT_THAT(csv, HasSubstr("slo.met"));
  EXPECT_THAT(csv, HasSubstr("goodput.requests_per_s"));
  EXPECT_THAT(text, HasSubstr("SLO"));  // the terminal table too
  for (const auto& entry : fs::directory_iterator(out / "runs")) {
    EXPECT_TRUE(fs::exists(entry.path() / "bench.json")) << entry.path();
    const ordered_json s = read_json(entry.path() / "summary.json");
    EXPECT_DOUBLE_EQ(s["goodput"]["fraction"].get<double>(), 1.0) << entry.path();  // loose thresholds
  }
}

// A bad `slo:` block names the file, the line and the key.
TEST(SloExperiment, BadBlocksNameFileLineAndKey) {
  const fs::path dir = testing::scratch_dir("slo_experiment_bad");
  const auto error = [&](const std::string& text) {
    const fs::path file = testing::write_text_file(dir, "bad.yaml", text);
    return testing::user_error_of([&] { parse_experiment(file); });
  };
  EXPECT_THAT(error("slo: [1, 2]\n"), HasSubstr("bad.yaml:1: slo: expected a mapping"));
  EXPECT_THAT(error("base: {num-requests: 5}\nslo:\n  ttft_p99_s: 2\n  ttft_p95_s: 1\n"),
              HasSubstr("bad.yaml:4: slo: 'ttft_p95_s' is not an SLO figure"));
  EXPECT_THAT(error("slo:\n  goodput: {ttft: fast}\n"),
              HasSubstr("bad.yaml:2: key 'goodput.ttft' has a value of the wrong type"));
  EXPECT_THAT(error("capacity: {slo: {ttft_p99_x: 1}}\n"),
              HasSubstr("capacity.slo.ttft_p99_x: not a numeric summary.json figure"));
  EXPECT_THAT(error("capacity: {rate-low: 1}\n"), HasSubstr("capacity.slo: missing"));
}

// A capacity block without SLO bounds searches under the experiment's own `slo:`.
TEST(SloExperiment, CapacitySearchesUnderTheTopLevelSlo) {
  const fs::path dir = testing::scratch_dir("slo_capacity");
  const fs::path file = testing::write_text_file(dir, "cap.yaml", R"(
base: {num-requests: 40, prompt-len: "fixed:128", output-len: "fixed:16"}
slo: {ttft_p99_s: 0.5}
capacity: {rate-low: 1, rate-high: 8}
)");
  const Experiment e = parse_experiment(file);
  ASSERT_TRUE(e.capacity.has_value());
  EXPECT_EQ(e.capacity->slo, (SloBounds{{"latency.ttft_s.p99", 0.5}}));
}

}  // namespace
}  // namespace batchsim
