// Attention data parallelism (policies/dp_attention/): requests routed to ranks by vLLM's rule,
// each rank scheduling its own batch, and a step lasting as long as its slowest rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "policies/dp_attention/dp_attention_policy.h"
#include "policy_test_rig.h"

namespace batchsim {
namespace {

using testing::make_workload;
using testing::RequestSpec;

// The rig's instant GPU with a tiny mixture of experts over two DP ranks and EP 2: a step costs
// the engine's 10 ms plus 1 ms per sequence of the slowest rank.
CostModel dp_cost_model() {
  ModelSpec model = testing::tiny_model();
  model.num_experts = 4;
  model.experts_per_token = 2;
  HardwareProfile gpu;
  gpu.name = "instant";
  gpu.source = "test";
  gpu.peak_flops = 1e30;
  gpu.hbm_bytes_per_s = 1e30;
  gpu.interconnect_bytes_per_s = 1e30;
  gpu.memory_bytes = int64_t{1} << 34;
  EngineProfile engine;
  engine.cpu.per_iteration_s = 0.010;
  engine.cpu.per_sequence_s = 0.001;
  return CostModel(model, gpu, ParallelLayout{1, 2, 2}, engine);
}

std::unique_ptr<DpAttentionPolicy> two_ranks(const std::string& name = "vllm") {
  std::vector<std::unique_ptr<Policy>> ranks;
  ranks.push_back(testing::policy(name));
  ranks.push_back(testing::policy(name));
  return std::make_unique<DpAttentionPolicy>(std::move(ranks));
}

struct DpStep {
  SimTime duration;
  std::vector<int64_t> rank_sequences;  // per rank, in the step
};

std::vector<DpStep> run(DpAttentionPolicy& policy, const Workload& w, const CostModel& cm,
                        SimulationResult* result = nullptr) {
  std::vector<DpStep> steps;
  SimulationOptions options = testing::rig_simulation_options();
  options.on_iteration = [&](const Batch& b, const IterationRecord& rec, const Policy&) {
    DpStep s;
    s.duration = rec.duration;
    for (const BatchShape& r : b.rank_shapes) {
      s.rank_sequences.push_back(static_cast<int64_t>(r.prefills.size()) + r.num_decodes);
    }
    steps.push_back(s);
  };
  Simulation sim(w, policy, cm, options);
  SimulationResult r = sim.run();
  if (result != nullptr) *result = std::move(r);
  return steps;
}

// Three requests at once: the first to rank 0 (all scores 0, lowest rank first), the second to
// rank 1 (rank 0 now has one waiting: 4), the third to rank 0 (both 4). The first step runs
// rank 0's two prefills beside rank 1's one and lasts rank 0's 10 + 2 x 1 ms.
TEST(DpAttention, RoutesByVllmsRuleAndStepsAsTheSlowestRank) {
  const CostModel cm = dp_cost_model();
  auto policy = two_ranks();
  const Workload w = make_workload({{0, 8, 3}, {0, 8, 3}, {0, 8, 3}});
  SimulationResult result;
  const std::vector<DpStep> steps = run(*policy, w, cm, &result);
  EXPECT_EQ(policy->rank_of(0), 0);
  EXPECT_EQ(policy->rank_of(1), 1);
  EXPECT_EQ(policy->rank_of(2), 0);
  ASSERT_FALSE(steps.empty());
  ASSERT_EQ(steps.front().rank_sequences, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(steps.front().duration, SimTime::from_seconds(0.012));
  // Every step lasts as long as its busiest rank.
  for (const DpStep& s : steps) {
    const int64_t most = *std::max_element(s.rank_sequences.begin(), s.rank_sequences.end());
    EXPECT_EQ(s.duration, SimTime::from_seconds(0.010 + 0.001 * static_cast<double>(most)));
  }
  // Every request finishes exactly once, with all its tokens.
  ASSERT_EQ(result.requests.size(), 3u);
  for (const RequestRecord& r : result.requests) {
    EXPECT_EQ(r.state, RequestState::kFinished);
    EXPECT_EQ(r.generated_tokens, 3);
  }
}

// A rank with nothing to do still steps with the others (its dummy batch) while any has work,
// and the replica is idle only when every rank is.
TEST(DpAttention, AnIdleRankWaitsInLockstepAndTheReplicaIdlesLast) {
  const CostModel cm = dp_cost_model();
  auto policy = two_ranks();
  // A short request on rank 0, a long one on rank 1.
  const Workload w = make_workload({{0, 4, 2}, {0, 4, 6}});
  const std::vector<DpStep> steps = run(*policy, w, cm);
  ASSERT_EQ(steps.size(), 6u);  // the long request's prefill and five decodes
  EXPECT_EQ(steps[0].rank_sequences, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(steps[2].rank_sequences, (std::vector<int64_t>{0, 1}));  // rank 0 idle, still stepping
  EXPECT_TRUE(policy->idle());
  EXPECT_EQ(policy->kv_cache().allocated_tokens(), 0);
}

// Each rank has a KV cache of its own: the replica's capacity is the ranks' sum.
TEST(DpAttention, EachRankHasItsOwnKvCache) {
  const CostModel cm = dp_cost_model();
  auto policy = two_ranks();
  const Workload w = make_workload({{0, 4, 2}});
  SimulationResult result;
  run(*policy, w, cm, &result);
  const int64_t rank0 = policy->rank_policy(0).kv_cache().capacity_tokens();
  EXPECT_GT(rank0, 0);
  const int64_t both = rank0 + policy->rank_policy(1).kv_cache().capacity_tokens();
  EXPECT_EQ(policy->kv_cache().capacity_tokens(), both);
  // The replica's KV memory, which summary.json reports and the KV fractions divide by, is
  // both ranks' (each cache carves whole blocks from its rank's memory: less than a block each
  // is left over), not one rank's.
  EXPECT_GE(result.kv_capacity_tokens, both);
  EXPECT_LT(result.kv_capacity_tokens, both + 2 * 16);
  EXPECT_THAT(result.kv_capacity_rule, ::testing::HasSubstr("2 DP ranks of"));
}

}  // namespace
}  // namespace batchsim
