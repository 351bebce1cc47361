// The worked example of policies/README.md (policies/example_sjf_policy.{h,cpp}): its own
// iteration table — shortest prompt admitted first, the newest running request preempted when a
// decode finds no block — and a check that every code block the guide quotes is still, word for
// word, in the file it names, so that the guide and the code cannot drift apart. The suites that
// check every registered policy (randomized_test, fast_forward_test, cluster_test, the
// rejection scenarios) run it too, by its registry entry.
#include <fstream>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "policies/example_sjf/example_sjf_policy.h"
#include "policy_test_rig.h"
#include "test_support.h"

namespace batchsim::testing {
namespace {

// The guide's iteration table, on the rig (10 ms iterations, KV in 16-token blocks).
TEST(ExampleSjf, AdmitsTheShortestPromptFirstAndPreemptsTheNewestWhenOutOfBlocks) {
  RigOptions o;
  o.kv_capacity_tokens = 6 * 16;
  const CostModel cm = rig_cost_model(o);
  // A runs first (alone at t=0); B (40 tokens) and C (20) arrive while it runs; one slot is
  // left, and C, the shorter prompt, takes it although B came first.
  const Workload w = make_workload({{0, 30, 4}, {0.005, 40, 3}, {0.006, 20, 3}});
  constexpr RequestId kA = 0, kB = 1, kC = 2;
  const RecordedRun run = run_preset("example-sjf", w, cm, {{"max_num_seqs", "2"}});
  expect_states(run, {{0, 0, {{kA, 30}}},
                      {1, 1, {{kA, 1}, {kC, 20}}},  // one free slot: the shorter prompt
                      {2, 2, {{kA, 1}, {kC, 1}}},
                      {3, 3, {{kA, 1}, {kC, 1}}}});  // both finish
  EXPECT_LT(run.result.requests[kC].first_scheduled, run.result.requests[kB].first_scheduled);
  EXPECT_EQ(run.result.summary.requests_completed, 3);

  // 4 blocks: request 0 (30 prompt tokens) holds 2, request 1 (20) the other 2; when 0's decode
  // writes its 33rd token it needs a third block, none is free, and the newest running request,
  // 1, is preempted by recompute (and nobody is admitted in that step).
  RigOptions tight;
  tight.kv_capacity_tokens = 4 * 16;
  const Workload pressure = make_workload({{0, 30, 20}, {0.005, 20, 5}});
  const RecordedRun p = run_preset("example-sjf", pressure, rig_cost_model(tight));
  expect_states(p, {{0, 0, {{0, 30}}}, {1, 1, {{0, 1}, {1, 20}}}, {2, 2, {{0, 1}, {1, 1}}}, {3, 3, {{0, 1}}}});
  EXPECT_EQ(p.result.requests[1].preemptions, 1);
  EXPECT_EQ(p.result.requests[0].preemptions, 0);
  EXPECT_EQ(p.result.summary.requests_completed, 2);
}

// Where neither's extra rules bind — the continuous base's token budget (8 slots x 400 tokens
// stay under its 4096) and its choice of victim (no KV pressure) — the example and the base's
// own shortest-prompt-first order (scheduling_policy=sjf sjf_by=prompt) are the same scheduler:
// two implementations that must agree request for request.
TEST(ExampleSjf, AgreesWithTheContinuousBasesShortestPromptFirst) {
  const CostModel cm(resolve_model("llama-2-7b"), resolve_gpu("a100-80gb"), 1);
  const BuiltWorkload w = spec_workload("poisson:30", "uniform:16:400", "capexp:100:400", 400, 4);
  SimulationOptions options;
  options.gpu_memory_utilization = 0.9;
  auto example = policy("example-sjf", {{"max_num_seqs", "8"}});
  auto base = policy("continuous", {{"scheduling_policy", "sjf"}, {"sjf_by", "prompt"}, {"max_num_seqs", "8"}});
  const SimulationResult a = Simulation(w.requests, *example, cm, options).run();
  const SimulationResult b = Simulation(w.requests, *base, cm, options).run();
  expect_same_requests(a, b);
  EXPECT_EQ(a.summary.preemptions, 0);
  // The order mattered: arrival order gives other results.
  auto fcfs = policy("continuous", {{"max_num_seqs", "8"}});
  const SimulationResult c = Simulation(w.requests, *fcfs, cm, options).run();
  EXPECT_NE(a.summary.ttft_s.p99, c.summary.ttft_s.p99);
}

TEST(ExampleSjf, ItsOptionsGoThroughTheRegistry) {
  const auto p = policy("example-sjf", {{"max_num_seqs", "3"}});
  EXPECT_EQ(dynamic_cast<const ExampleSjfPolicy&>(*p).config().max_num_seqs, 3);
  EXPECT_NE(user_error_of([] {
              policy("example-sjf", {{"max_num_seqs", "0"}});
            }).find("max_num_seqs=0"),
            std::string::npos);
  EXPECT_NE(user_error_of([] {
              policy("example-sjf", {{"block_size", "8"}});
            }).find("no option 'block_size'"),
            std::string::npos);
}

// Each ```cpp block of policies/README.md right after a line `<!-- quote: PATH -->` must appear
// verbatim in PATH; every cpp block must be such a quote, and the guide must quote the example.
TEST(PolicyGuide, EveryCodeBlockItQuotesIsInTheFileItNames) {
  const std::filesystem::path guide = source_dir() / "policies" / "README.md";
  std::ifstream in(guide);
  ASSERT_TRUE(in) << guide;
  const std::regex quote_marker(R"(^<!--\s*quote:\s*(\S+)\s*-->\s*$)");
  std::string line, quoted_path;
  std::string block;
  bool in_cpp = false;
  int line_no = 0, quotes_of_example = 0, blocks = 0;
  while (std::getline(in, line)) {
    ++line_no;
    std::smatch m;
    if (!in_cpp && std::regex_match(line, m, quote_marker)) {
      quoted_path = m[1];
      continue;
    }
    if (!in_cpp && line.rfind("```cpp", 0) == 0) {
      ASSERT_FALSE(quoted_path.empty()) << guide.string() << ":" << line_no
                                        << ": a cpp block that quotes no file (put <!-- quote: PATH --> before it)";
      in_cpp = true;
      block.clear();
      continue;
    }
    if (in_cpp && line.rfind("```", 0) == 0) {
      ++blocks;
      const std::string source = read_text_file(source_dir() / quoted_path);
      ASSERT_FALSE(source.empty()) << guide.string() << ":" << line_no << ": cannot read " << quoted_path;
      EXPECT_NE(source.find(block), std::string::npos)
          << guide.string() << ":" << line_no << ": the block ending here is no longer in " << quoted_path
          << " word for word; copy it again from the file:\n"
          << block;
      if (quoted_path.find("example_sjf_policy") != std::string::npos) ++quotes_of_example;
      in_cpp = false;
      quoted_path.clear();
      continue;
    }
    if (in_cpp) {
      block += line + "\n";
    } else if (!line.empty()) {
      quoted_path.clear();  // a marker applies to the block right after it
    }
  }
  EXPECT_FALSE(in_cpp) << "an unclosed cpp block";
  EXPECT_GE(quotes_of_example, 4) << "the guide walks through the example's parts";
  EXPECT_GE(blocks, quotes_of_example);
}

}  // namespace
}  // namespace batchsim::testing
