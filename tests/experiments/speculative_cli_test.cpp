// --spec-decode end to end (issue 46 item 1): what a verification step gains, where it stops
// paying, its figures in summary.json, and the runs it is refused for.
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::cli_error_of;
using ::testing::HasSubstr;

nlohmann::json run_summary(const std::string& name, std::vector<std::string> args) {
  return testing::run_summary("speculative-" + name, std::move(args));
}

// The setting: Llama-3.1-8B on an H100, 1,024-token prompts, 256-token answers.
std::vector<std::string> llama_8b(std::vector<std::string> load, const std::string& spec) {
  std::vector<std::string> a = {"--model", "llama-3.1-8b", "--gpu",      "h100-sxm",     "--policy",
                                "vllm",    "--prompt-len", "fixed:1024", "--output-len", "fixed:256"};
  a.insert(a.end(), load.begin(), load.end());
  if (!spec.empty()) a.insert(a.end(), {"--spec-decode", spec});
  return a;
}

double tpot_p50(const nlohmann::json& s) { return s["latency"]["tpot_s"]["p50"].get<double>(); }

// EAGLE with k = 3 at 0.8, 0.6, 0.4: TPOT p50 falls by >= 1.3x at 0.5 req/s, and by less at
// 256 closed-loop clients, where the verified drafts make every step longer for a full batch.
TEST(SpeculativeCli, EagleGainsAtLowLoadAndLessWhenTheGpuIsBusy) {
  const std::string eagle = "eagle:k=3:accept=0.8,0.6,0.4";
  const std::vector<std::string> light = {"--arrival", "poisson:0.5", "--num-requests", "200"};
  const std::vector<std::string> busy = {"--arrival", "offline", "--max-concurrency", "256", "--num-requests", "1500"};
  const double light_gain = tpot_p50(run_summary("light", llama_8b(light, ""))) /
                            tpot_p50(run_summary("light-eagle", llama_8b(light, eagle)));
  const double busy_gain =
      tpot_p50(run_summary("busy", llama_8b(busy, ""))) / tpot_p50(run_summary("busy-eagle", llama_8b(busy, eagle)));
  EXPECT_GE(light_gain, 1.3);
  EXPECT_LT(busy_gain, light_gain - 0.3);
}

// The accepted drafts follow the rates: a mean acceptance length of 1 + their sum (2.8 here),
// and what summary.json reports adds up.
TEST(SpeculativeCli, AcceptanceFollowsTheRatesAndIsReported) {
  const nlohmann::json s = run_summary(
      "rates", llama_8b({"--arrival", "poisson:2", "--num-requests", "300"}, "eagle:k=3:accept=0.8,0.6,0.4"));
  const nlohmann::json& d = s["speculative_decoding"];
  EXPECT_EQ(d["method"], "eagle");
  EXPECT_EQ(d["k"], 3);
  EXPECT_EQ(d["acceptance_source"], "given");
  const auto steps = d["verification_steps"].get<int64_t>();
  ASSERT_GT(steps, 10000);
  EXPECT_NEAR(d["mean_acceptance_length"].get<double>(), 2.8, 0.03);
  EXPECT_NEAR(d["acceptance_rate"].get<double>(), 0.6, 0.01);
  // Light load: the budget never cuts a draft; only a request's last steps draft fewer than k,
  // whose drafts would pass its max_tokens.
  EXPECT_LE(d["draft_tokens"].get<int64_t>(), 3 * steps);
  EXPECT_GT(d["draft_tokens"].get<int64_t>(), 3 * steps - 3 * 300);
  // Every output token was emitted once: by a verification step, or as a request's first token.
  const double emitted = d["tokens_per_step"].get<double>() * static_cast<double>(steps);
  EXPECT_NEAR(emitted + 300, 300 * 256, 0.5);
  EXPECT_EQ(s["tokens"]["output"].get<int64_t>(), 300 * 256);
}

// Every draft accepted: each step gains k + 1 tokens (the last ones capped at the output); none
// accepted: one token a step, and the drafter's passes make TPOT worse than not speculating.
TEST(SpeculativeCli, AllOrNothingAcceptance) {
  const std::vector<std::string> load = {"--arrival", "poisson:0.5", "--num-requests", "50"};
  const nlohmann::json all = run_summary("all", llama_8b(load, "eagle:k=3:accept=1"));
  EXPECT_DOUBLE_EQ(all["speculative_decoding"]["acceptance_rate"].get<double>(), 1.0);
  // 255 tokens after the first: 63 steps of 4 and one of 3.
  EXPECT_NEAR(all["speculative_decoding"]["tokens_per_step"].get<double>(), 255.0 / 64, 1e-9);
  const nlohmann::json none = run_summary("none", llama_8b(load, "eagle:k=3:accept=0"));
  EXPECT_DOUBLE_EQ(none["speculative_decoding"]["tokens_per_step"].get<double>(), 1.0);
  EXPECT_GT(tpot_p50(none), tpot_p50(run_summary("plain", llama_8b(load, ""))));
}

// The same seed draws the same acceptances: a rerun gives the same figures.
TEST(SpeculativeCli, RunsAreDeterministic) {
  const auto args = llama_8b({"--arrival", "poisson:4", "--num-requests", "120"}, "ngram:k=4:accept=0.6");
  const nlohmann::json a = run_summary("seed-a", args), b = run_summary("seed-b", args);
  EXPECT_EQ(a["latency"], b["latency"]);
  EXPECT_EQ(a["speculative_decoding"], b["speculative_decoding"]);
}

// MTP on DeepSeek-V3 with its shipped acceptance, under TP and under DP attention with EP, and
// a draft model; a small KV cache preempts and still finishes everything.
TEST(SpeculativeCli, MtpDraftModelsAndPreemption) {
  for (const std::vector<std::string>& layout :
       {std::vector<std::string>{"--tp", "8"}, std::vector<std::string>{"--tp", "1", "--dp", "8", "--ep", "8"}}) {
    std::vector<std::string> a = {"--model",        "deepseek-v3", "--gpu",         "h200",
                                  "--policy",       "vllm",        "--arrival",     "poisson:4",
                                  "--num-requests", "200",         "--spec-decode", "mtp:k=1:accept=deepseek-v3-mtp"};
    a.insert(a.end(), layout.begin(), layout.end());
    const nlohmann::json s = run_summary("mtp", a);
    EXPECT_EQ(s["requests"]["completed"].get<int64_t>(), 200) << layout.size();
    EXPECT_NEAR(s["speculative_decoding"]["mean_acceptance_length"].get<double>(), 1.875, 0.03);
  }
  const nlohmann::json draft = run_summary(
      "draft", {"--model", "llama-3.1-70b", "--tp", "4", "--gpu", "h100-sxm", "--policy", "vllm", "--arrival",
                "poisson:1", "--num-requests", "100", "--spec-decode", "draft:llama-3.1-8b:k=4:accept=0.7"});
  EXPECT_EQ(draft["speculative_decoding"]["draft_model"], "llama-3.1-8b");
  const nlohmann::json small =
      run_summary("small-kv", {"--policy", "vllm", "--num-gpu-blocks", "300", "--arrival", "poisson:20",
                               "--num-requests", "400", "--spec-decode", "eagle:k=3:accept=0.7"});
  EXPECT_GT(small["preemptions"].get<int64_t>(), 0);
  EXPECT_EQ(small["requests"]["completed"].get<int64_t>(), 400);
}

// Every scheduler that speculates serves every request its whole output, with paged and
// reserved KV (a draft never reaches past a reservation), under preemption too.
TEST(SpeculativeCli, EveryContinuousPolicyFinishesEveryToken) {
  for (const std::string policy :
       {"vllm", "vllm-v1-2025", "sarathi", "vllm-v0", "orca", "tgi", "tgi-router", "trtllm"}) {
    const std::vector<std::string> args = {
        "--policy",         policy,
        "--trace",          (testing::traces_dir() / "azure-llm-2023" / "conv.csv.gz").string(),
        "--num-requests",   "600",
        "--num-gpu-blocks", "600"};
    const nlohmann::json plain = run_summary("plain-" + policy, args);
    std::vector<std::string> spec = args;
    spec.insert(spec.end(), {"--spec-decode", "eagle3:k=4:accept=eagle3-llama3.1-8b-humaneval"});
    const nlohmann::json s = run_summary("all-" + policy, spec);
    EXPECT_EQ(s["requests"], plain["requests"]) << policy;
    EXPECT_EQ(s["tokens"], plain["tokens"]) << policy;
    EXPECT_GT(s["speculative_decoding"]["verification_steps"].get<int64_t>(), 0) << policy;
  }
}

// The terminal says what a speculative run's drafts bought, and compare's tables show it.
TEST(SpeculativeCli, TheTerminalAndTheReportShowTheAcceptance) {
  std::string text;
  ASSERT_EQ(testing::run_cli({"run", "--num-requests", "100", "--spec-decode", "eagle:k=3:accept=0.8,0.6,0.4"}, &text),
            0);
  EXPECT_THAT(text, HasSubstr("speculative decoding: eagle k=3, mean acceptance length 2.8"));
  const auto dir = testing::scratch_dir("speculative-compare");
  ASSERT_EQ(testing::run_cli({"compare", "--policies", "vllm,sarathi", "--num-requests", "200", "--spec-decode",
                              "ngram:k=2:accept=0.5", "--jobs", "1", "--out", dir.string()},
                             &text),
            0);
  EXPECT_THAT(text, HasSubstr("accept len"));
  std::ifstream in(dir / "report.md");
  const std::string report((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(report, HasSubstr("| accept len | tok/step |"));
  // Without speculation the columns stay away.
  ASSERT_EQ(testing::run_cli({"compare", "--policies", "vllm", "--num-requests", "50", "--jobs", "1", "--out",
                              (dir / "plain").string()},
                             &text),
            0);
  EXPECT_THAT(text, ::testing::Not(HasSubstr("accept len")));
}

TEST(SpeculativeCli, UnsupportedRunsAreRefusedByName) {
  EXPECT_THAT(
      cli_error_of({"run", "--policy", "sglang", "--num-requests", "5", "--spec-decode", "eagle:k=2:accept=0.5"}),
      HasSubstr("--spec-decode with --policy sglang"));
  EXPECT_THAT(
      cli_error_of({"run", "--policy", "static", "--num-requests", "5", "--spec-decode", "eagle:k=2:accept=0.5"}),
      HasSubstr("not supported yet"));
  EXPECT_THAT(cli_error_of({"run", "--prefill-replicas", "1", "--decode-replicas", "1", "--num-requests", "5",
                            "--spec-decode", "eagle:k=2:accept=0.5"}),
              HasSubstr("--prefill-replicas/--decode-replicas"));
  EXPECT_THAT(cli_error_of({"run", "--num-requests", "5", "--spec-decode", "eagle:k=2:accept=0.9,0.95"}),
              HasSubstr("must not increase"));
  EXPECT_THAT(cli_error_of({"run", "--num-requests", "5", "--spec-decode", "draft:no-such-model:k=2:accept=0.5"}),
              HasSubstr("no-such-model"));
}

}  // namespace
}  // namespace batchsim
