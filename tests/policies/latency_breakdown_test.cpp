// The latency breakdown of real policies' runs (sim/latency_breakdown.h; the sum over every
// completed request is checked for every registered policy by randomized_test, fast_forward_test
// and disaggregation_test). Here, scenarios whose parts can be told in advance:
//   - a long prompt that joins running decodes stretches their iteration by exactly what the
//     cost model charges beyond the decodes alone, and that is their stall (mixed iterations);
//     with vLLM v0's prefill-only iterations the decodes are left out, and the whole iteration
//     is their stall;
//   - chunked prefill (sarathi, vllm with a small budget) shrinks that stall, for this scenario
//     and over a Poisson workload of long prompts;
//   - a preempted request's preemption part is its wait to be readmitted plus its recompute,
//     by hand from the iteration table (and swap time for the whole batch under swap).
#include <gtest/gtest.h>

#include "policy_test_rig.h"

namespace batchsim::testing {
namespace {

constexpr RequestId A = 0, B = 1, L = 2;

int64_t ns_of(double seconds) { return SimTime::from_seconds(seconds).ns(); }

// Llama-2-7B on an A100-80GB under vLLM's engine (so iterations carry CPU overhead too).
CostModel real_cost_model() {
  return CostModel(resolve_model("llama-2-7b"), resolve_gpu("a100-80gb"), 1, resolve_engine("vllm"));
}

// An iteration's compute: its duration less its swap time and the engine's overhead.
int64_t compute_ns(const Step& s, const CostModel& cm) {
  return s.duration.ns() - s.extra_time.ns() - ns_of(cm.iteration(s.shape).overhead_s);
}

// What the iteration's decodes alone would have computed (no prefill chunks beside them).
int64_t decodes_alone_ns(const Step& s, const CostModel& cm) {
  BatchShape decodes;
  decodes.num_decodes = s.shape.num_decodes;
  decodes.decode_context_sum = s.shape.decode_context_sum;
  decodes.decode_context_max = s.shape.decode_context_max;
  decodes.num_sampled = s.shape.num_decodes;
  const IterationCost c = cm.iteration(decodes);
  return ns_of(c.total_s - c.overhead_s);
}

bool decodes_in(const Step& s, RequestId id) {
  const BatchItem* item = s.item(id);
  return item != nullptr && item->new_tokens == 1 && item->context_before > 0;
}

// A and B (prompt 64) decode; L's 2000-token prompt arrives at 30 ms.
Workload long_prompt_joins() { return make_workload({{0, 64, 40}, {0, 64, 40}, {0.030, 2000, 2}}); }

TEST(LatencyBreakdownScenario, ALongPromptMixedIntoRunningDecodesIsTheirStall) {
  const CostModel cm = real_cost_model();
  for (const char* policy : {"continuous", "orca"}) {  // mixed iterations, paged or reserved KV
    SCOPED_TRACE(policy);
    const RecordedRun run = run_preset(policy, long_prompt_joins(), cm);
    int64_t stall = 0, decode = 0, mixed = 0, mixed_compute = 0, l_prefill = 0;
    for (const Step& s : run.steps) {
      if (s.item(L) != nullptr && s.item(L)->new_tokens > 1) l_prefill += compute_ns(s, cm);
      if (!decodes_in(s, A)) continue;
      if (s.shape.prefills.empty()) {
        decode += compute_ns(s, cm);
      } else {
        ++mixed;
        mixed_compute += compute_ns(s, cm);
        decode += decodes_alone_ns(s, cm);
        stall += compute_ns(s, cm) - decodes_alone_ns(s, cm);
      }
    }
    ASSERT_EQ(mixed, 1) << "L's whole prompt runs in one iteration beside A and B";
    const LatencyBreakdown& a = run.result.requests[A].breakdown;
    // To the ns, but for the rounding of a sum of the same kernels in another order.
    EXPECT_NEAR(a[LatencyPart::kStall], stall, 1);
    EXPECT_NEAR(a[LatencyPart::kDecode], decode, 1);
    EXPECT_EQ(run.result.requests[B].breakdown[LatencyPart::kStall], a[LatencyPart::kStall]);
    // The prompt's work is most of that iteration: the stretch is more than half of it.
    EXPECT_GT(2 * stall, mixed_compute);
    // L's own prefill is the whole iteration's compute; it waited for nobody.
    EXPECT_EQ(run.result.requests[L].breakdown[LatencyPart::kPrefill], l_prefill);
    EXPECT_EQ(run.result.requests[L].breakdown[LatencyPart::kStall], 0);
  }
}

TEST(LatencyBreakdownScenario, APrefillOnlyIterationLeavesTheDecodesOutForAllOfIt) {
  const CostModel cm = real_cost_model();
  const RecordedRun run = run_preset("vllm-v0", long_prompt_joins(), cm);
  int64_t left_out = 0, decode = 0, overhead = 0;
  for (const Step& s : run.steps) {
    if (s.start >= run.result.requests[A].finished) break;
    if (decodes_in(s, A) || s.item(A) != nullptr) {
      if (decodes_in(s, A)) decode += compute_ns(s, cm);
      overhead += ns_of(cm.iteration(s.shape).overhead_s);
    } else {
      ASSERT_NE(s.item(L), nullptr);  // the only iteration without A is L's prefill
      left_out += s.duration.ns();
    }
  }
  const LatencyBreakdown& a = run.result.requests[A].breakdown;
  EXPECT_GT(left_out, 0);
  EXPECT_EQ(a[LatencyPart::kStall], left_out);
  EXPECT_EQ(a[LatencyPart::kDecode], decode);
  EXPECT_EQ(a[LatencyPart::kOverhead], overhead);
}

int64_t stall_of_a(const std::string& policy, std::map<std::string, std::string> options = {}) {
  const CostModel cm = real_cost_model();
  return run_preset(policy, long_prompt_joins(), cm, std::move(options))
      .result.requests[A]
      .breakdown[LatencyPart::kStall];
}

TEST(LatencyBreakdownScenario, ChunkedPrefillShrinksTheStall) {
  // The same 2000 prompt tokens, cut into chunks that ride along with the decodes: each chunk
  // shares the decodes' weight reads, so A waits less in all than for the whole prompt at once.
  const int64_t exclusive = stall_of_a("vllm-v0"), mixed = stall_of_a("continuous");
  const int64_t sarathi = stall_of_a("sarathi"), small_budget = stall_of_a("vllm", {{"max_num_batched_tokens", "256"}});
  EXPECT_LT(sarathi, exclusive);
  EXPECT_LT(sarathi, mixed);
  EXPECT_LT(small_budget, exclusive);
  EXPECT_LT(small_budget, mixed);

  // Over a Poisson stream of long prompts, the mean stall per request too.
  const BuiltWorkload w = spec_workload("poisson:4", "uniform:500:3000", "uniform:32:256", 120, 3);
  const CostModel cm = real_cost_model();
  auto mean_stall = [&](const std::string& policy, std::map<std::string, std::string> options) {
    auto p = make_policy(policy, PolicyOptions(std::move(options)));
    SimulationOptions o;
    const SimulationResult r = Simulation(w.requests, *p, cm, o).run();
    return r.summary.latency_breakdown[LatencyPart::kStall].mean_s;
  };
  const double v0 = mean_stall("vllm-v0", {}), orca_like = mean_stall("continuous", {});
  EXPECT_LT(mean_stall("sarathi", {}), v0);
  EXPECT_LT(mean_stall("sarathi", {}), orca_like);
  EXPECT_LT(mean_stall("vllm", {{"max_num_batched_tokens", "256"}}), v0);
}

// The KV-pressure scenario of scenario_test (10 blocks of 4 tokens; A and B, prompt 8, output
// 20; every iteration 10 ms of engine overhead): B is preempted by the schedule() that starts
// iteration 13 (t = 130 ms), waits while A runs alone through iteration 19, and is readmitted
// at iteration 20 (t = 200 ms) to recompute its 21 tokens, 9 of them with vllm's prefix caching
// (no compute on the rig's GPU, so the times are the same).
TEST(LatencyBreakdownScenario, APreemptedRequestsPreemptionIsItsWaitPlusItsRecompute) {
  RigOptions o;
  o.kv_capacity_tokens = 40;
  const CostModel cm = rig_cost_model(o);
  const Workload w = make_workload({{0, 8, 20}, {0, 8, 20}});
  for (const char* policy : {"continuous", "vllm-v0", "vllm"}) {
    SCOPED_TRACE(policy);
    const RecordedRun run = run_preset(policy, w, cm, {{"block_size", "4"}});
    ASSERT_EQ(run.steps[13].item(B), nullptr);
    // vllm's prefix caching finds B's 3 full blocks again (Preemption scenario tests).
    ASSERT_EQ(run.steps[20].item(B)->new_tokens, std::string(policy) == "vllm" ? 9 : 21);
    const LatencyBreakdown& b = run.result.requests[B].breakdown;
    EXPECT_EQ(b[LatencyPart::kPreemption], ns_of(0.200 - 0.130));
    EXPECT_EQ(b[LatencyPart::kOverhead], ns_of(0.130 + 0.070));  // iterations 0-12 and 20-26
    EXPECT_EQ(b.total_ns(), ns_of(0.270));
    EXPECT_EQ(run.result.requests[A].breakdown[LatencyPart::kPreemption], 0);
  }
  // Swap: 20 ms of transfer each way (iterations 13 and 20 last 30 ms), which every request in
  // those iterations loses; B waits from 130 ms to iteration 20's start at 220 ms.
  const RecordedRun swap = run_preset("continuous", w, cm, {{"block_size", "4"}, {"preemption", "swap"}});
  EXPECT_EQ(swap.result.requests[B].breakdown[LatencyPart::kPreemption], ns_of(0.090 + 0.020));
  EXPECT_EQ(swap.result.requests[A].breakdown[LatencyPart::kPreemption], ns_of(0.020));
}

// The same on a real GPU, where the recompute costs compute: B's preemption part is its wait
// plus the re-prefill iteration's compute, and its own prefill is its first iteration's.
TEST(LatencyBreakdownScenario, ARecomputeIsPreemptionNotPrefill) {
  const CostModel cm = real_cost_model();
  const Workload w = make_workload({{0, 8, 20}, {0, 8, 20}});
  for (const char* policy : {"continuous", "vllm-v0"}) {
    SCOPED_TRACE(policy);
    auto p = make_policy(policy, PolicyOptions(std::map<std::string, std::string>{{"block_size", "4"}}));
    // 10 blocks: the rig's 40 tokens, so the same iteration table as the rig's runs.
    const RecordedRun run = run_recorded(*p, w, cm, nullptr, 10);
    const SimulationResult& r = run.result;
    const std::vector<Step>& steps = run.steps;
    ASSERT_GE(steps.size(), 21u);
    ASSERT_EQ(steps[13].item(B), nullptr);
    ASSERT_EQ(steps[20].item(B)->new_tokens, 21);
    const LatencyBreakdown& b = r.requests[B].breakdown;
    EXPECT_EQ(b[LatencyPart::kPreemption], (steps[20].start - steps[13].start).ns() + compute_ns(steps[20], cm));
    EXPECT_EQ(b[LatencyPart::kPrefill], compute_ns(steps[0], cm));
    EXPECT_EQ(b.total_ns(), (r.requests[B].finished - r.requests[B].arrival).ns());
  }
}

}  // namespace
}  // namespace batchsim::testing
