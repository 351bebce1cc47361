// Confidence intervals over seeds and paired differences (experiments/run/confidence.h, issue
// 45 items 1 and 2): the t interval's figures by hand, its coverage where the answer is known
// (normal samples, and a simulated workload whose expected e2e latency is enumerated exactly),
// the paired test turning significant as an effect grows, `run --seeds`, `compare --seeds`'s
// paired columns and report, and a trace replay whose seeds now vary something.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli_run.h"
#include "experiments/run/confidence.h"
#include "experiments/run/output.h"
#include "experiments/run/runner.h"
#include "hwmodel/base/random.h"
#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim {
namespace {

using nlohmann::ordered_json;
using testing::cli;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(Confidence, StudentIntervalByHand) {
  // mean 3, s = sqrt(2.5), t(0.975, 4) = 2.776445 (scipy.stats.t.ppf): half-width 1.963243.
  const std::vector<double> x = {1, 2, 3, 4, 5};
  const Interval iv = mean_interval(x);
  EXPECT_DOUBLE_EQ(iv.mean, 3);
  EXPECT_NEAR(iv.half_width(), 2.7764451051977987 * std::sqrt(2.5) / std::sqrt(5.0), 1e-9);
  EXPECT_EQ(iv.n, 5);
  // One sample: no interval, the value itself.
  const Interval one = mean_interval(std::vector<double>{7});
  EXPECT_EQ(one.lo, 7);
  EXPECT_EQ(one.hi, 7);
}

TEST(Confidence, PairedPValueByHand) {
  // Differences 1..5: t = 3 / (sqrt(2.5) / sqrt(5)) = 4.2426, 4 degrees of freedom:
  // two-sided p = 0.0132356 (scipy.stats.t.sf(4.2426, 4) * 2).
  const std::vector<double> a = {10, 10, 10, 10, 10}, b = {11, 12, 13, 14, 15};
  const PairedDifference d = paired_difference(a, b);
  EXPECT_NEAR(d.p_value, 0.013235599564943768, 1e-9);
  EXPECT_DOUBLE_EQ(d.difference.mean, 3);
  EXPECT_TRUE(d.significant());
  // The same figures, every seed: no difference at all.
  EXPECT_EQ(paired_difference(a, a).p_value, 1.0);
  EXPECT_FALSE(paired_difference(a, a).significant());
  // A difference that is the same in every seed is certain.
  const std::vector<double> shifted = {10.5, 10.5, 10.5, 10.5, 10.5};
  EXPECT_EQ(paired_difference(a, shifted).p_value, 0.0);
  EXPECT_THROW(paired_difference(a, std::vector<double>{1, 2}), std::invalid_argument);
}

TEST(Confidence, CoversAKnownMeanNinetyFivePercentOfTheTime) {
  // 4000 intervals of 5 normal samples around a known mean: the share covering it is 95% up to
  // the binomial noise of 4000 trials (sd 0.34%).
  Rng rng(11);
  int covered = 0;
  constexpr int kTrials = 4000;
  for (int t = 0; t < kTrials; ++t) {
    std::vector<double> x;
    for (int i = 0; i < 5; ++i) x.push_back(10 + 2 * sample_standard_normal(rng));
    const Interval iv = mean_interval(x);
    covered += iv.lo <= 10 && 10 <= iv.hi;
  }
  EXPECT_NEAR(covered / double(kTrials), 0.95, 0.012);
}

TEST(Confidence, PairedTestTurnsSignificantAsTheEffectGrows) {
  // A policy that is `effect` noise-sds slower than the baseline, seed by seed, with the
  // baseline's own seed-to-seed variation 10x larger (the workload's, which pairing cancels).
  Rng rng(5);
  std::vector<double> base, noise;
  for (int s = 0; s < 8; ++s) {
    base.push_back(100 + 10 * sample_standard_normal(rng));
    noise.push_back(sample_standard_normal(rng));
  }
  std::vector<double> p;
  for (double effect : {0.0, 0.1, 0.3, 1.0, 3.0}) {
    std::vector<double> other;
    for (size_t s = 0; s < base.size(); ++s) other.push_back(base[s] + effect + noise[s]);
    p.push_back(paired_difference(base, other).p_value);
  }
  EXPECT_GT(p.front(), 0.05) << "no effect: not significant";
  EXPECT_LT(p.back(), 0.001) << "an effect of 3 sds over 8 seeds";
  for (size_t i = 1; i < p.size(); ++i) EXPECT_LT(p[i], p[i - 1]) << "p falls as the effect grows";
  // Unpaired, the same 3-sd effect drowns in the workload's variation: the two intervals overlap.
  std::vector<double> other;
  for (size_t s = 0; s < base.size(); ++s) other.push_back(base[s] + 3 + noise[s]);
  EXPECT_LT(mean_interval(other).lo, mean_interval(base).hi);
}

// One request at a time (a single closed-loop client): each request's e2e is its own service
// time, so the expected mean e2e of a seed is the average of e2e(output) over the output lengths,
// which single-request runs enumerate exactly.
RunConfig one_at_a_time(int64_t requests, uint64_t seed, const std::string& output_len) {
  RunConfig c = default_run_config();
  c.policy = "vllm";
  c.max_concurrency = 1;
  c.workload.num_requests = requests;
  c.workload.prompt_len = "fixed:256";
  c.workload.output_len = output_len;
  c.workload.seed = seed;
  return c;
}

TEST(Confidence, CoversTheExpectedE2eOfAWorkloadWhoseAnswerIsKnown) {
  constexpr int kMinOut = 1, kMaxOut = 40;
  double truth = 0;
  for (int o = kMinOut; o <= kMaxOut; ++o) {
    truth += run_simulation(one_at_a_time(1, 0, fmt::format("fixed:{}", o))).result.summary.e2e_s.mean;
  }
  truth /= kMaxOut - kMinOut + 1;
  const std::string lengths = fmt::format("uniform:{}:{}", kMinOut, kMaxOut);
  constexpr int kIntervals = 200, kSeeds = 5;
  int covered = 0;
  for (int k = 0; k < kIntervals; ++k) {
    std::vector<ordered_json> summaries;
    std::vector<uint64_t> seeds;
    for (int s = 0; s < kSeeds; ++s) {
      const uint64_t seed = static_cast<uint64_t>(k * kSeeds + s);
      summaries.push_back(summary_to_json(run_simulation(one_at_a_time(12, seed, lengths))));
      seeds.push_back(seed);
    }
    std::vector<const ordered_json*> runs;
    for (const auto& s : summaries) runs.push_back(&s);
    const ordered_json c = confidence_json(runs, seeds, "output lengths");
    const auto& e2e = c["metrics"]["e2e_mean_s"];
    covered += e2e["lo"].get<double>() <= truth && truth <= e2e["hi"].get<double>();
  }
  // 200 intervals: 95% +- 3 binomial sds (1.5% each).
  EXPECT_GE(covered, 181);
  EXPECT_LE(covered, 199);
}

TEST(Confidence, SeedsThatVaryNothingGiveAWarningNotAZeroWidthInterval) {
  RunConfig c = default_run_config();
  c.workload.num_requests = 20;  // offline, fixed lengths: the seed is never drawn from
  c.workload.output_len = "fixed:128";
  std::vector<ordered_json> summaries;
  for (uint64_t s : {0, 1, 2}) {
    c.workload.seed = s;
    summaries.push_back(summary_to_json(run_simulation(c)));
  }
  const ordered_json conf =
      confidence_json({&summaries[0], &summaries[1], &summaries[2]}, {0, 1, 2}, seed_variation(c.workload));
  ASSERT_TRUE(conf.contains("warning"));
  EXPECT_THAT(conf["warning"].get<std::string>(), HasSubstr("nothing in this workload depends on the seed"));
  EXPECT_FALSE(conf["metrics"]["ttft_p99_s"].contains("lo"));
  const auto r = cli({"run", "--num-requests", "20", "--output-len", "fixed:128", "--seeds", "3"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("over 3 seeds: the 3 seeds gave the same figures"));
}

TEST(Confidence, RunSeedsWritesTheIntervalOfTheSeedsItRan) {
  const auto dir = testing::scratch_dir("seeds");
  const std::vector<std::string> base = {
      "run", "--model",      "llama-3-8b",     "--gpu",  "h100-sxm", "--arrival", "poisson:6", "--num-requests",
      "120", "--output-len", "uniform:10:300", "--seed", "7"};
  auto args = base;
  args.insert(args.end(), {"--seeds", "4", "--out", dir.string()});
  const auto r = cli(args);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("TTFT p99"));
  EXPECT_THAT(r.out, HasSubstr(" ± "));
  const ordered_json summary = ordered_json::parse(testing::read_text_file(dir / "summary.json"));
  ASSERT_TRUE(summary.contains("confidence"));
  const auto& conf = summary["confidence"];
  EXPECT_EQ(conf["seeds"], ordered_json({7, 8, 9, 10}));
  EXPECT_EQ(conf["level"], 0.95);
  EXPECT_THAT(conf["varies"].get<std::string>(), HasSubstr("arrival times"));
  // The same interval as the seeds run one by one give, key for key.
  std::vector<double> p99;
  for (int s = 7; s <= 10; ++s) {
    const auto one = testing::scratch_dir(fmt::format("seed{}", s));
    auto a = base;
    a[a.size() - 1] = std::to_string(s);
    a.insert(a.end(), {"--out", one.string()});
    ASSERT_EQ(cli(a).rc, 0);
    p99.push_back(
        ordered_json::parse(testing::read_text_file(one / "summary.json"))["latency"]["ttft_s"]["p99"].get<double>());
  }
  const Interval iv = mean_interval(p99);
  EXPECT_DOUBLE_EQ(conf["metrics"]["ttft_p99_s"]["mean"].get<double>(), iv.mean);
  EXPECT_DOUBLE_EQ(conf["metrics"]["ttft_p99_s"]["lo"].get<double>(), iv.lo);
  EXPECT_DOUBLE_EQ(conf["metrics"]["ttft_p99_s"]["hi"].get<double>(), iv.hi);
  // The files beside it are the first seed's.
  EXPECT_EQ(summary["latency"]["ttft_s"]["p99"].get<double>(), p99.front());
}

TEST(Confidence, SeedsOfATraceReplayEachReplayAReplicate) {
  const std::string trace = (testing::traces_dir() / "azure-llm-2023/conv.csv.gz").string();
  const auto r = cli(
      {"run", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--trace", trace, "--num-requests", "400", "--seeds", "3"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("block-bootstrap replicate"));
  EXPECT_THAT(r.out, HasSubstr("block-bootstrap replicate of conv.csv.gz"));
  EXPECT_THAT(r.out, Not(HasSubstr("gave the same figures")));
  // One seed other than 0 on a trace replayed as recorded changes nothing, and says so.
  const auto one = cli(
      {"run", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--trace", trace, "--num-requests", "50", "--seed", "2"});
  EXPECT_THAT(one.err, HasSubstr("--seed 2: changes nothing in a trace replayed as recorded"));
}

TEST(Confidence, CompareSeedsPairsPoliciesOnTheSameRequests) {
  const auto dir = testing::scratch_dir("cmp");
  const auto r = cli({"compare",
                      "--policies",
                      "vllm,sarathi",
                      "--engine",
                      "vllm",
                      "--model",
                      "llama-3-8b",
                      "--gpu",
                      "h100-sxm",
                      "--arrival",
                      "poisson:6",
                      "--num-requests",
                      "150",
                      "--prompt-len",
                      "uniform:100:3000",
                      "--output-len",
                      "uniform:10:300",
                      "--seeds",
                      "4",
                      "--no-plots",
                      "--out",
                      dir.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("against vllm, paired by seed"));
  // Common random numbers: per seed, both policies were sent the very same requests.
  for (int s = 0; s < 4; ++s) {
    auto requests = [&](int run) {
      std::ifstream in(dir / "runs" / fmt::format("{:04d}_{}_s{}", run, run % 2 ? "sarathi" : "vllm", s) /
                       "requests.csv");
      std::string header, line;
      std::getline(in, header);
      std::vector<std::string> sent;  // id, arrival, prompt, output: the first four columns
      while (std::getline(in, line)) {
        size_t cut = 0;
        for (int k = 0; k < 4; ++k) cut = line.find(',', cut + 1);
        sent.push_back(line.substr(0, cut));
      }
      return sent;
    };
    const auto a = requests(2 * s), b = requests(2 * s + 1);
    ASSERT_EQ(a.size(), 150u);
    EXPECT_EQ(a, b) << "seed " << s;
  }
  const std::string csv = testing::read_text_file(dir / "results.csv");
  const std::string header = csv.substr(0, csv.find('\n'));
  for (const char* column :
       {"latency.ttft_s.p99.ci_lo", "latency.ttft_s.p99.ci_hi", "latency.ttft_s.p99.diff", "latency.ttft_s.p99.diff_lo",
        "latency.ttft_s.p99.diff_hi", "latency.ttft_s.p99.diff_p", "throughput.output_tokens_per_s.ci_lo"}) {
    EXPECT_THAT(header, HasSubstr(column));
  }
  const std::string report = testing::read_text_file(dir / "report.md");
  EXPECT_THAT(report, HasSubstr("## Differences against `vllm`"));
  EXPECT_THAT(report, HasSubstr("paired t-test"));
  // Chunked prefills cut the decode stalls a long prompt causes: sarathi's TPOT p99 is lower,
  // and by far more than the seed-to-seed noise.
  EXPECT_THAT(report, HasSubstr("| sarathi | TPOT p99 (ms) |"));
  const size_t row = report.find("| sarathi | TPOT p99 (ms) |");
  EXPECT_THAT(report.substr(row, report.find('\n', row) - row), HasSubstr("**lower (better)**"));
}

TEST(Confidence, ExperimentSeedsOnATraceNoLongerGiveIdenticalRows) {
  const auto dir = testing::scratch_dir("trace-seeds");
  const std::string trace = (testing::traces_dir() / "azure-llm-2023/conv.csv.gz").string();
  const auto r = cli({"compare", "--policies", "vllm", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--trace", trace,
                      "--num-requests", "300", "--seeds", "3", "--no-plots", "--out", dir.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::set<double> p99;
  for (int s = 0; s < 3; ++s) {
    const auto summary = ordered_json::parse(
        testing::read_text_file(dir / "runs" / fmt::format("{:04d}_vllm_s{}", s, s) / "summary.json"));
    EXPECT_EQ(summary["config"]["resample"], "block-bootstrap");
    p99.insert(summary["latency"]["e2e_s"]["p99"].get<double>());
  }
  EXPECT_EQ(p99.size(), 3u);
}

TEST(Confidence, BadSeedOptionsAreRefusedByName) {
  EXPECT_THAT(testing::cli_error_of({"run", "--num-requests", "5", "--seeds", "0"}), HasSubstr("--seeds 0"));
  EXPECT_THAT(testing::cli_error_of({"run", "--num-requests", "5", "--resample", "block-bootstrap"}),
              HasSubstr("--resample block-bootstrap: resamples a trace's requests"));
  const std::string trace = (testing::traces_dir() / "azure-llm-2023/conv.csv.gz").string();
  EXPECT_THAT(testing::cli_error_of({"run", "--trace", trace, "--resample", "block:3"}), HasSubstr("--resample"));
  EXPECT_THAT(testing::cli_error_of({"run", "--trace", trace, "--resample", "block-bootstrap:0"}),
              HasSubstr("B must be"));
  EXPECT_THAT(testing::cli_error_of({"run", "--trace", trace, "--resample", "block-bootstrap", "--streaming"}),
              HasSubstr("--resample"));
}

}  // namespace
}  // namespace batchsim
