// "Why was this request slow, and what would have helped?" (experiments/run/latency_diagnosis.h):
// the rules, each on inputs built to trip it (the figures it prints come from the inputs), the
// policy traits the remedies depend on, and a run end to end: requests.csv's breakdown columns
// sum to e2e_s digit for digit, summary.json's latency_breakdown has every part and the
// diagnosis `batchsim run` prints, and the Chrome trace's request slices carry the breakdown.
#include "experiments/run/latency_diagnosis.h"

#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "experiments/cli/cli.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::run_cli;

using ::testing::HasSubstr;
using ::testing::Not;

DiagnosisInputs tail_spent(std::initializer_list<std::pair<LatencyPart, double>> shares) {
  DiagnosisInputs in;
  in.completed = 100;
  for (const auto& [part, share] : shares) in.share_of_p99[static_cast<size_t>(part)] = share;
  return in;
}

TEST(LatencyDiagnosis, NamesTheLargestLostTimePartWithItsShareAndRemedy) {
  DiagnosisInputs in =
      tail_spent({{LatencyPart::kQueueing, 0.62}, {LatencyPart::kDecode, 0.30}, {LatencyPart::kOverhead, 0.08}});
  in.kv_allocated_fraction_peak = 0.97;
  const std::string line = latency_diagnosis(in);
  EXPECT_THAT(line, HasSubstr("p99 requests spent 62% queued"));
  EXPECT_THAT(line, HasSubstr("KV memory full: peak 97% allocated"));
  EXPECT_THAT(line, HasSubstr("a larger KV cache"));
  EXPECT_THAT(line, Not(HasSubstr("overhead")));  // 8% is below the notable share
  // With KV to spare the batch limits held them instead.
  in.kv_allocated_fraction_peak = 0.4;
  EXPECT_THAT(latency_diagnosis(in), HasSubstr("KV memory not full: peak 40% allocated"));
  EXPECT_THAT(latency_diagnosis(in), HasSubstr("max_num_seqs"));
  // Static batching queues for another reason.
  in.policy.static_batching = true;
  EXPECT_THAT(latency_diagnosis(in), HasSubstr("continuous batching"));
}

// An offline benchmark sends every request at t = 0: its tail queues behind the burst, which a
// larger KV cache would not change, whatever the memory's peak (issue 45: it was told to get one).
TEST(LatencyDiagnosis, ABurstAtTimeZeroQueuesWhateverTheMemory) {
  DiagnosisInputs in = tail_spent({{LatencyPart::kQueueing, 0.80}, {LatencyPart::kDecode, 0.20}});
  in.kv_allocated_fraction_peak = 0.97;
  in.sent_at_once = true;
  const std::string line = latency_diagnosis(in);
  EXPECT_THAT(line, HasSubstr("80% queued behind the burst"));
  EXPECT_THAT(line, HasSubstr("only more throughput shortens it"));
  EXPECT_THAT(line, Not(HasSubstr("a larger KV cache")));
  EXPECT_TRUE(sends_all_at_once("offline", 0));
  EXPECT_FALSE(sends_all_at_once("offline", 64));  // closed-loop clients send as answers come
  EXPECT_FALSE(sends_all_at_once("poisson:4", 0));
  // End to end: 1000 requests at t = 0 on a small GPU.
  const auto dir = testing::scratch_dir("diagnosis-burst");
  std::string text;
  ASSERT_EQ(run_cli({"run", "--policy", "vllm", "--arrival", "offline", "--num-requests", "1000", "--out",
                     (dir / "out").string()},
                    &text),
            0);
  EXPECT_THAT(text, HasSubstr("queued behind the burst"));
}

TEST(LatencyDiagnosis, TwoNotablePartsLargestFirstAndNoMore) {
  const DiagnosisInputs in = tail_spent({{LatencyPart::kPreemption, 0.25},
                                         {LatencyPart::kStall, 0.41},
                                         {LatencyPart::kOverhead, 0.21},
                                         {LatencyPart::kDecode, 0.13}});
  const std::string line = latency_diagnosis(in);
  const auto stall = line.find("41% stalled"), preempt = line.find("25% preempted");
  ASSERT_NE(stall, std::string::npos) << line;
  ASSERT_NE(preempt, std::string::npos) << line;
  EXPECT_LT(stall, preempt);
  EXPECT_THAT(line, HasSubstr("chunked prefill (sarathi / vllm)"));
  EXPECT_THAT(line, HasSubstr("scheduling_policy"));
  EXPECT_THAT(line, Not(HasSubstr("21%")));  // a third notable part is left out: kMostNamedParts
}

TEST(LatencyDiagnosis, TheNotableShareIsInclusive) {
  EXPECT_THAT(latency_diagnosis(tail_spent({{LatencyPart::kOverhead, kNotableShare}, {LatencyPart::kDecode, 0.8}})),
              HasSubstr("overhead"));
  EXPECT_THAT(
      latency_diagnosis(tail_spent({{LatencyPart::kOverhead, kNotableShare - 0.001}, {LatencyPart::kDecode, 0.8}})),
      Not(HasSubstr("CPU and launch overhead")));
}

TEST(LatencyDiagnosis, WithoutLostTimeTheRequestsAreLong) {
  const std::string line = latency_diagnosis(
      tail_spent({{LatencyPart::kPrefill, 0.3}, {LatencyPart::kDecode, 0.55}, {LatencyPart::kStall, 0.15}}));
  EXPECT_THAT(line, HasSubstr("85% on their own work (prefill 30%, decode 55%)"));
  EXPECT_THAT(line, HasSubstr("faster GPU"));
  DiagnosisInputs none;
  EXPECT_THAT(latency_diagnosis(none), HasSubstr("no request completed"));
}

TEST(LatencyDiagnosis, TheStallsRemedyDependsOnHowThePolicyPrefills) {
  DiagnosisInputs in = tail_spent({{LatencyPart::kStall, 0.5}, {LatencyPart::kDecode, 0.5}});
  in.policy = policy_traits("vllm-v0", {});
  EXPECT_THAT(latency_diagnosis(in), HasSubstr("chunked prefill (sarathi / vllm) would help"));
  in.policy = policy_traits("sarathi", {});
  EXPECT_THAT(latency_diagnosis(in), HasSubstr("a smaller chunk budget (max_num_batched_tokens)"));
  in.policy = policy_traits("sglang", {});
  EXPECT_THAT(latency_diagnosis(in), HasSubstr("enable_mixed_chunk=true"));
  EXPECT_THAT(latency_diagnosis(in), HasSubstr("chunked_prefill_size"));
  in.policy = policy_traits("sglang", {{"enable_mixed_chunk", "true"}});
  EXPECT_THAT(latency_diagnosis(in), HasSubstr("a smaller chunk budget (chunked_prefill_size)"));
}

TEST(LatencyDiagnosis, PolicyTraitsFollowThePresetAndTheOptionsOverIt) {
  EXPECT_TRUE(policy_traits("hf-static", {}).static_batching);
  EXPECT_FALSE(policy_traits("vllm", {}).static_batching);
  EXPECT_TRUE(policy_traits("vllm", {}).chunked_prefill);
  EXPECT_TRUE(policy_traits("tgi", {}).chunked_prefill);
  EXPECT_FALSE(policy_traits("orca", {}).chunked_prefill);
  EXPECT_FALSE(policy_traits("trtllm", {}).chunked_prefill);
  EXPECT_TRUE(policy_traits("trtllm", {{"enable_chunked_context", "true"}}).chunked_prefill);
  EXPECT_TRUE(policy_traits("sglang", {}).prefill_batches_pause_decodes);
  EXPECT_FALSE(policy_traits("no-such-policy", {}).chunked_prefill);
}

// "12.345678901" (requests.csv prints seconds to the ns) as integer ns.
int64_t ns_of_cell(const std::string& cell) {
  const auto dot = cell.find('.');
  return std::stoll(cell.substr(0, dot)) * 1000000000 + std::stoll(cell.substr(dot + 1));
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> cells;
  std::stringstream in(line);
  for (std::string cell; std::getline(in, cell, sep);) cells.push_back(cell);
  if (!line.empty() && line.back() == sep) cells.emplace_back();
  return cells;
}

TEST(LatencyBreakdownOutputs, CsvSummaryTerminalAndTraceAgree) {
  const auto dir = testing::scratch_dir("latency_breakdown_outputs");
  std::string text;
  // Long prompts joining running decodes under vLLM v0's prefill-only iterations: stalls.
  ASSERT_EQ(run_cli({"run", "--policy", "vllm-v0", "--arrival", "poisson:4", "--num-requests", "120", "--prompt-len",
                     "uniform:100:3000", "--output-len", "fixed:128", "--out", (dir / "out").string(), "--chrome-trace",
                     (dir / "trace.json").string()},
                    &text),
            0);
  const auto summary = nlohmann::json::parse(testing::read_text_file(dir / "out" / "summary.json"));
  const auto& lb = summary["latency_breakdown"];
  double shares = 0, p99_shares = 0, means = 0;
  for (LatencyPart part : kLatencyParts) {
    const auto& p = lb[std::string(latency_part_name(part))];
    for (const char* key : {"mean", "p99", "share", "share_of_p99_requests"}) ASSERT_TRUE(p.contains(key)) << key;
    shares += p["share"].get<double>();
    p99_shares += p["share_of_p99_requests"].get<double>();
    means += p["mean"].get<double>();
  }
  EXPECT_NEAR(shares, 1.0, 1e-9);
  EXPECT_NEAR(p99_shares, 1.0, 1e-9);
  EXPECT_NEAR(means, summary["latency"]["e2e_s"]["mean"].get<double>(), 1e-9);
  EXPECT_EQ(lb["kv_transfer"]["share"].get<double>(), 0.0);
  EXPECT_GE(lb["p99_requests"].get<int64_t>(), 1);
  // The diagnosis: the run's stall is its tail's largest lost-time part, and the terminal says
  // what summary.json says.
  const std::string diagnosis = lb["diagnosis"].get<std::string>();
  EXPECT_THAT(diagnosis, HasSubstr("stalled behind other requests' prefills"));
  EXPECT_THAT(text, HasSubstr("diagnosis: " + diagnosis + "\n"));
  EXPECT_THAT(text, HasSubstr("latency breakdown of the p99 requests"));

  // requests.csv: one column per part; for every finished request they add up to e2e_s exactly.
  std::ifstream csv(dir / "out" / "requests.csv");
  std::string line;
  std::getline(csv, line);
  const auto header = split(line, ',');
  std::map<std::string, size_t> column;
  for (size_t i = 0; i < header.size(); ++i) column[header[i]] = i;
  for (LatencyPart part : kLatencyParts) {
    ASSERT_EQ(column.count("breakdown_" + std::string(latency_part_name(part)) + "_s"), 1u) << latency_part_name(part);
  }
  int64_t rows = 0, stalled = 0;
  while (std::getline(csv, line)) {
    const auto cells = split(line, ',');
    ASSERT_EQ(cells.size(), header.size()) << line;
    if (cells[column["state"]] != "finished") continue;
    ++rows;
    int64_t sum = 0;
    for (LatencyPart part : kLatencyParts)
      sum += ns_of_cell(cells[column["breakdown_" + std::string(latency_part_name(part)) + "_s"]]);
    EXPECT_EQ(sum, ns_of_cell(cells[column["e2e_s"]])) << line;
    EXPECT_EQ(cells[column["breakdown_queueing_s"]], cells[column["queueing_s"]]) << line;
    stalled += ns_of_cell(cells[column["breakdown_stall_s"]]) > 0;
  }
  EXPECT_EQ(rows, summary["requests"]["completed"].get<int64_t>());
  EXPECT_GT(stalled, rows / 2);

  // The Chrome trace: each finished request's slice has its breakdown in ms, summing to e2e_ms.
  const auto trace = nlohmann::json::parse(testing::read_text_file(dir / "trace.json"));
  int64_t slices = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (!e.contains("args") || !e["args"].contains("breakdown_ms")) continue;
    ++slices;
    double sum = 0;
    for (const auto& [part, value] : e["args"]["breakdown_ms"].items()) sum += value.get<double>();
    EXPECT_NEAR(sum, e["args"]["e2e_ms"].get<double>(), 1e-6) << e.dump();
  }
  EXPECT_GE(slices, rows);
}

}  // namespace
}  // namespace batchsim
