// `batchsim plan --disaggregated` and DistServe's per-GPU goodput (issue 15's follow-up): the
// split search returns the cheapest P:D split that a brute-force sweep of every split finds,
// and the one a hand reasoning expects (a TTFT bound on long prompts buys prefill replicas; a
// TBT bound on a decode pool short of KV buys decode replicas); per-GPU goodput is the highest
// speedup that a scan of speedups finds attaining the share, and falls as the share rises; bad
// input is refused by name.
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "experiments/cli.h"
#include "experiments/output.h"
#include "experiments/plan.h"
#include "experiments/runner.h"
#include "hwmodel/error.h"
#include "test_support.h"

namespace batchsim {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

int run_cli(const std::vector<std::string>& args, std::string* text = nullptr) {
  std::ostringstream out, err;
  const int rc = cli_main(args, out, err);
  if (text != nullptr) *text = out.str() + err.str();
  return rc;
}

std::string error_of(const std::vector<std::string>& args) {
  return testing::user_error_of([&] { run_cli(args); });
}

// A generic CSV trace: `n` requests every `gap_s` seconds from 0, prompts and outputs cycling
// around the given lengths so that requests differ.
fs::path trace_file(const fs::path& dir, const std::string& name, int n, double gap_s, int prompt, int output) {
  fs::create_directories(dir);
  std::ofstream out(dir / name);
  out << "arrival_s,prompt_tokens,output_tokens\n";
  for (int i = 0; i < n; ++i) out << gap_s * i << "," << prompt + 37 * (i % 5) << "," << output + (i % 3) << "\n";
  return dir / name;
}

// The brute force: every split up to `max_n` in each pool, judged as the plan judges one.
struct Split {
  int p = 0, d = 0;
  bool operator==(const Split&) const = default;
};
std::vector<Split> cheapest_feasible_splits(const RunConfig& base, const SloBounds& slo, int max_n) {
  const BuiltWorkload workload = build_workload(base.workload);
  std::vector<Split> best;
  int best_gpus = std::numeric_limits<int>::max();
  for (int p = 1; p <= max_n; ++p) {
    for (int d = 1; d <= max_n; ++d) {
      RunConfig c = base;
      c.prefill_replicas = p;
      c.decode_replicas = d;
      if (!meets_slo(summary_to_json(run_simulation(c, &workload)), slo)) continue;
      if (p + d < best_gpus) best.clear();
      if (p + d <= best_gpus) {
        best_gpus = p + d;
        best.push_back({p, d});
      }
    }
  }
  return best;
}

nlohmann::json plan_json(const fs::path& dir) {
  return nlohmann::json::parse(testing::read_text_file(dir / "plan.json"));
}

const nlohmann::json& row_of(const nlohmann::json& plan, const std::string& deployment) {
  for (const auto& r : plan["rows"]) {
    if (r["deployment"] == deployment) return r;
  }
  throw std::runtime_error("no " + deployment + " row");
}

TEST(FindCheapestSplit, AgreesWithEveryCostAndHeadroomOfABruteForce) {
  // Monotone predicates: each pool needs a minimum, and together they need enough capacity.
  struct Case {
    int need_p, need_d, need_total;
    double cost_p, cost_d;
  };
  for (const Case& k : {Case{3, 1, 5, 1, 1}, Case{1, 4, 6, 1, 1}, Case{2, 2, 7, 2, 1}, Case{1, 1, 9, 1, 3.5},
                        Case{5, 5, 0, 1, 1}, Case{1, 1, 2, 1, 1}}) {
    const int max_n = 8;
    auto meets = [&](int p, int d) { return p >= k.need_p && d >= k.need_d && p + 2 * d >= k.need_total; };
    // More headroom with more replicas, and more for decode ones, so that ties are broken.
    auto headroom = [&](int p, int d) { return p + 1.5 * d; };
    int probes = 0;
    const SplitSearch s = find_cheapest_split(max_n, k.cost_p, k.cost_d, [&](int p, int d) {
      ++probes;
      return SplitProbe{meets(p, d), headroom(p, d)};
    });
    Split expected;
    double best_cost = INFINITY, best_headroom = -INFINITY;
    for (int p = 1; p <= max_n; ++p) {
      for (int d = 1; d <= max_n; ++d) {
        if (!meets(p, d)) continue;
        const double c = p * k.cost_p + d * k.cost_d;
        if (c < best_cost || (c == best_cost && headroom(p, d) > best_headroom)) {
          best_cost = c;
          best_headroom = headroom(p, d);
          expected = {p, d};
        }
      }
    }
    EXPECT_EQ((Split{s.prefill, s.decode}), expected) << k.need_p << " " << k.need_d << " " << k.need_total;
    EXPECT_EQ(s.probes, probes) << "each split is probed once";
    EXPECT_LT(probes, max_n * max_n / 2) << "fewer probes than the brute force";
  }
  // Nothing meets: no split, and the search stops after the full pools fail.
  int probes = 0;
  const SplitSearch none = find_cheapest_split(8, 1, 1, [&](int, int) {
    ++probes;
    return SplitProbe{false, 0};
  });
  EXPECT_EQ(none.prefill, 0);
  EXPECT_EQ(none.decode, 0);
  EXPECT_LE(probes, 4);  // (1, 8), (2, 8), (4, 8), (8, 8)
}

// Long prompts, two-token outputs, arriving faster than one A100 prefills them: a TTFT bound is
// the prefill pool's to meet, so the cheapest split adds prefill replicas and keeps one decode
// replica; and it is the cheapest the brute force finds.
TEST(PlanDisaggregated, TtftBoundOnLongPromptsBuysPrefillReplicas) {
  const fs::path dir = testing::scratch_dir("plan_disagg_prompt_heavy");
  const fs::path trace = trace_file(dir, "prompts.csv", 160, 0.1, 3000, 2);
  std::string text;
  ASSERT_EQ(run_cli({"plan", "--gpu", "a100-80gb", "--trace", trace.string(), "--policy", "vllm", "--disaggregated",
                     "--slo", "ttft_p99=600ms", "--max-replicas", "4", "--jobs", "1", "--out", (dir / "plan").string(),
                     "--no-plots"},
                    &text),
            0)
      << text;
  const auto plan = plan_json(dir / "plan");
  const auto& split = row_of(plan, "disaggregated");
  ASSERT_EQ(split["status"], "ok") << text;
  const int p = split["prefill_replicas"].get<int>(), d = split["decode_replicas"].get<int>();
  EXPECT_GE(p, 2) << text;  // one prefill replica cannot keep up: 3000-token prompts at 10 req/s
  EXPECT_EQ(d, 1) << text;
  EXPECT_EQ(split["total_gpus"].get<int>(), p + d);
  RunConfig base = default_run_config();
  base.workload.trace = trace;
  base.workload.num_requests = 0;
  base.policy = "vllm";
  const auto best = cheapest_feasible_splits(base, parse_slo("ttft_p99=600ms"), 4);
  EXPECT_THAT(best, ::testing::Contains(Split{p, d})) << text;
  // The colocated answer sits beside it, in the same table and file.
  EXPECT_EQ(row_of(plan, "colocated")["status"], "ok");
  EXPECT_THAT(text, HasSubstr("prefill/decode"));
  EXPECT_THAT(text, HasSubstr(fmt::format("{}P+{}D", p, d)));
}

// Short prompts, long outputs, and decode replicas whose KV holds a score of requests: at 20
// req/s of two-second decodes about 40 are decoding at once, so one or two decode replicas
// preempt (a recompute stalls the other decodes) and a TBT bound buys decode replicas, while the
// 100-token prompts need no more than one prefill replica.
TEST(PlanDisaggregated, TbtBoundOnAShortDecodePoolBuysDecodeReplicas) {
  const fs::path dir = testing::scratch_dir("plan_disagg_decode_heavy");
  const fs::path trace = trace_file(dir, "outputs.csv", 120, 0.05, 100, 200);
  std::string text;
  // 400 blocks of 16 tokens: about twenty 300-token requests per decode replica.
  ASSERT_EQ(run_cli({"plan", "--gpu", "a100-80gb", "--trace", trace.string(), "--policy", "vllm", "--disaggregated",
                     "--decode-num-gpu-blocks", "400", "--slo", "tbt_p99=20ms", "--max-replicas", "6", "--jobs", "1",
                     "--out", (dir / "plan").string(), "--no-plots"},
                    &text),
            0)
      << text;
  const auto plan = plan_json(dir / "plan");
  const auto& split = row_of(plan, "disaggregated");
  ASSERT_EQ(split["status"], "ok") << text;
  const int p = split["prefill_replicas"].get<int>(), d = split["decode_replicas"].get<int>();
  EXPECT_EQ(p, 1) << text;
  EXPECT_GE(d, 2) << text;
  RunConfig base = default_run_config();
  base.workload.trace = trace;
  base.workload.num_requests = 0;
  base.policy = "vllm";
  base.decode.num_gpu_blocks = 400;
  const auto best = cheapest_feasible_splits(base, parse_slo("tbt_p99=20ms"), 6);
  EXPECT_THAT(best, ::testing::Contains(Split{p, d})) << text;
}

// The attainment of `base` (goodput thresholds set) with its trace replayed `speedup` times
// faster, as `batchsim run --trace-speedup` replays it.
double attainment_at(RunConfig base, double speedup) {
  base.workload.trace_speedup = speedup;
  const auto summary = summary_to_json(run_simulation(base));
  return summary["goodput"]["fraction"].get<double>();
}

// DistServe's per-GPU goodput (OSDI'24 section 2.2) against a scan of speedups: every scanned
// speedup at or below the bracket's low end attains the share, every one at or above its high
// end does not; the rate is the replay's at the speedup found, over the answer's GPUs; and a
// higher share never yields a higher goodput.
TEST(PlanGoodput, IsTheHighestSpeedupAScanFindsAttainingTheShare) {
  const fs::path dir = testing::scratch_dir("plan_goodput");
  const fs::path trace = trace_file(dir, "mixed.csv", 150, 0.1, 600, 40);
  std::map<int, nlohmann::json> rows;  // by attainment percent
  for (int pct : {50, 90, 99}) {
    std::string text;
    const fs::path out = dir / fmt::format("plan{}", pct);
    ASSERT_EQ(run_cli({"plan", "--gpu", "a100-80gb", "--trace", trace.string(), "--policy", "vllm", "--goodput",
                       "ttft:500", "tpot:30", "--attainment", std::to_string(pct), "--max-replicas", "4", "--jobs", "1",
                       "--out", out.string(), "--no-plots"},
                      &text),
              0)
        << text;
    const auto plan = plan_json(out);
    ASSERT_EQ(plan["rows"].size(), 1u);
    rows[pct] = plan["rows"][0];
    ASSERT_EQ(rows[pct]["status"], "ok") << text;
    EXPECT_GE(rows[pct]["attainment"].get<double>(), pct / 100.0) << "the answer attains the share at the replay";
    EXPECT_THAT(text, HasSubstr(fmt::format("goodput/GPU ({}%)", pct)));
  }
  const auto& row = rows[90];
  const auto& g = row["goodput"];
  ASSERT_EQ(g["status"], "ok") << g.dump();
  RunConfig base = default_run_config();
  base.workload.trace = trace;
  base.workload.num_requests = 0;
  base.policy = "vllm";
  base.replicas = row["replicas"].get<int>();
  base.goodput = parse_goodput({"ttft:500", "tpot:30"});
  const double low = g["bracket_low_speedup"].get<double>(), high = g["bracket_high_speedup"].get<double>();
  EXPECT_DOUBLE_EQ(g["speedup"].get<double>(), low);
  EXPECT_LE(high / low, 1.02 + 1e-9);
  double previous = 1;
  for (double s : {0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0}) {
    const double a = attainment_at(base, s);
    EXPECT_LE(a, previous + 1e-12) << "attainment falls as the rate rises, at x" << s;
    previous = a;
    if (s <= low) EXPECT_GE(a, 0.9) << "x" << s;
    if (s >= high) EXPECT_LT(a, 0.9) << "x" << s;
  }
  // The rate at the speedup found, per GPU: the trace's mean rate (149 gaps of 0.1 s) times it.
  const double mean_rate = 149 / (149 * 0.1);
  EXPECT_NEAR(g["rate_rps"].get<double>(), mean_rate * low, 1e-6 * mean_rate * low);
  EXPECT_DOUBLE_EQ(g["per_gpu_rps"].get<double>(), g["rate_rps"].get<double>() / row["total_gpus"].get<int>());
  // Asking more of the requests never raises the goodput of the same deployment.
  if (rows[50]["replicas"] == rows[90]["replicas"]) {
    EXPECT_GE(rows[50]["goodput"]["speedup"].get<double>(), low);
  }
  if (rows[99]["replicas"] == rows[90]["replicas"]) {
    EXPECT_LE(rows[99]["goodput"]["speedup"].get<double>(), high);
  }
}

// Both deployments get DistServe's figure, per GPU, in the same table.
TEST(PlanGoodput, IsReportedForColocatedAndDisaggregatedRows) {
  const fs::path dir = testing::scratch_dir("plan_goodput_both");
  const fs::path trace = trace_file(dir, "mixed.csv", 100, 0.1, 600, 40);
  std::string text;
  ASSERT_EQ(run_cli({"plan", "--gpu", "a100-80gb", "--trace", trace.string(), "--policy", "vllm", "--disaggregated",
                     "--goodput", "ttft:500", "tpot:30", "--max-replicas", "3", "--jobs", "2", "--out",
                     (dir / "plan").string(), "--no-plots"},
                    &text),
            0)
      << text;
  const auto plan = plan_json(dir / "plan");
  ASSERT_EQ(plan["rows"].size(), 2u);
  for (const auto& r : plan["rows"]) {
    ASSERT_EQ(r["status"], "ok") << text;
    ASSERT_TRUE(r["goodput"].is_object()) << r.dump();
    EXPECT_GT(r["goodput"]["per_gpu_rps"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(r["goodput"]["per_gpu_rps"].get<double>(),
                     r["goodput"]["rate_rps"].get<double>() / r["total_gpus"].get<int>());
  }
  EXPECT_EQ(plan["goodput"]["attainment"], 0.9);
  EXPECT_THAT(testing::read_text_file(dir / "plan" / "report.md"), HasSubstr("OSDI'24"));
}

TEST(PlanDisaggregated, BadInputIsRefusedByName) {
  const std::vector<std::string> ok = {"plan", "--num-requests", "20", "--arrival", "poisson:5", "--gpu", "a100-80gb"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = ok;
    a.insert(a.end(), extra.begin(), extra.end());
    return error_of(a);
  };
  EXPECT_THAT(with({"--slo", "ttft_p99=2", "--disaggregated", "--prefill-tp", "0"}), HasSubstr("--prefill-tp 0"));
  EXPECT_THAT(with({"--slo", "ttft_p99=2", "--disaggregated", "--decode-tp", "two"}), HasSubstr("--decode-tp"));
  EXPECT_THAT(with({"--slo", "ttft_p99=2", "--disaggregated", "--decode-gpu", "tpu-v9"}), HasSubstr("--decode-gpu tpu-v9"));
  EXPECT_THAT(with({"--slo", "ttft_p99=2", "--prefill-gpu", "h100-sxm"}), HasSubstr("add --disaggregated"));
  EXPECT_THAT(with({"--slo", "ttft_p99=2", "--decode-policy", "sarathi"}), HasSubstr("add --disaggregated"));
  EXPECT_THAT(with({"--slo", "ttft_p99=2", "--disaggregated", "--decode-policy", "hf-static"}),
              HasSubstr("--decode-policy hf-static"));
  EXPECT_THAT(with({"--slo", "ttft_p99=2", "--disaggregated", "--prefill-engine", "warp-drive"}),
              HasSubstr("--prefill-engine warp-drive"));
  EXPECT_THAT(with({"--slo", "ttft_p99=2", "--disaggregated", "--price", "h100-sxm=3"}), HasSubstr("--price h100-sxm=3"));
  EXPECT_THAT(with({"--goodput", "ttft:500", "--attainment", "0"}), HasSubstr("--attainment 0"));
  EXPECT_THAT(with({"--goodput", "ttft:500", "--attainment", "150"}), HasSubstr("--attainment 150"));
  EXPECT_THAT(with({}), HasSubstr("--goodput ttft:MS tpot:MS"));  // neither --slo nor --goodput
  EXPECT_THAT(with({"--slo", "ttft_p99=2", "--disaggregated", "--prefill-replicas", "2"}), HasSubstr("prefill-replicas"));
}

}  // namespace
}  // namespace batchsim
