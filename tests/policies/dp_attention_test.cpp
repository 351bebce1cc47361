// Attention data parallelism (policies/dp_attention/): requests routed to ranks by vLLM's rule,
// each rank scheduling its own batch, and a step lasting as long as its slowest rank, in a
// colocated replica and in the pools of a disaggregated run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
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

// DP ranks in both pools of a disaggregated run (TensorRT-LLM's wide-EP prefill workers run
// attention DP; SGLang's DeepSeek P/D runs it in both): every request is prefilled on one rank
// of the prefill replica up to its first token, handed off, routed to one rank of the decode
// replica, decoded there to its last token after its KV landed; each pool's steps last as long
// as its slowest rank, and no rank keeps KV afterwards.
TEST(DpAttention, RanksServeThePrefillAndDecodePools) {
  const CostModel cm = dp_cost_model();
  std::vector<std::unique_ptr<DpAttentionPolicy>> pools;
  pools.push_back(two_ranks());
  pools.push_back(two_ranks());
  ASSERT_EQ(pools[0]->unsupported_role_reason(PoolRole::kPrefill), "");
  ASSERT_EQ(pools[1]->unsupported_role_reason(PoolRole::kDecode), "");
  std::vector<Policy*> replicas = {pools[0].get(), pools[1].get()};
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 8; ++i) specs.push_back({0.004 * i, 20 + 3 * i, 4 + i % 3});
  const Workload w = make_workload(specs);
  SimulationOptions options = testing::rig_simulation_options();
  options.disaggregation.prefill_replicas = 1;
  std::vector<std::vector<int32_t>> ranks_seen(w.size());  // per request: (pool, rank) as 2 x pool + rank
  int64_t steps = 0;
  options.on_iteration = [&](const Batch& b, const IterationRecord& rec, const Policy& policy) {
    ++steps;
    ASSERT_EQ(b.rank_shapes.size(), 2u);
    int64_t most = 0;
    for (const BatchShape& r : b.rank_shapes) {
      most = std::max(most, static_cast<int64_t>(r.prefills.size()) + r.num_decodes);
    }
    EXPECT_EQ(rec.duration, SimTime::from_seconds(0.010 + 0.001 * static_cast<double>(most)));
    const auto& dp = static_cast<const DpAttentionPolicy&>(policy);
    for (const BatchItem& item : b.items) {
      const int32_t where = 2 * rec.replica + dp.rank_of(item.id);
      auto& seen = ranks_seen[static_cast<size_t>(item.id)];
      if (seen.empty() || seen.back() != where) seen.push_back(where);
      if (rec.replica == 0) {
        EXPECT_LE(item.context_before + item.new_tokens, w[static_cast<size_t>(item.id)].prompt_tokens);
      } else {
        EXPECT_EQ(item.new_tokens, 1) << "the decode pool computed a prompt";
      }
    }
  };
  const SimulationResult r = Simulation(w, replicas, cm, options).run();
  EXPECT_GT(steps, 0);
  std::vector<int64_t> decoded_on_rank(2, 0);
  for (const RequestRecord& rec : r.requests) {
    SCOPED_TRACE(rec.id);
    ASSERT_EQ(rec.state, RequestState::kFinished);
    EXPECT_EQ(rec.generated_tokens, rec.output_tokens);
    const HandoffRecord& h = r.handoffs[static_cast<size_t>(rec.id)];
    ASSERT_TRUE(h.transferred());
    EXPECT_EQ(h.prefill_replica, 0);
    EXPECT_EQ(h.decode_replica, 1);
    EXPECT_GT(h.decode_first_token, h.transfer_end);
    // One rank of each pool, the prefill's first.
    const auto& seen = ranks_seen[static_cast<size_t>(rec.id)];
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_LT(seen[0], 2);
    EXPECT_GE(seen[1], 2);
    EXPECT_EQ(seen[1] - 2, pools[1]->rank_of(rec.id));
    ++decoded_on_rank[static_cast<size_t>(seen[1] - 2)];
  }
  // The decode pool's router spread the hand-offs over both ranks.
  EXPECT_GT(decoded_on_rank[0], 0);
  EXPECT_GT(decoded_on_rank[1], 0);
  for (const auto& pool : pools) {
    EXPECT_TRUE(pool->idle());
    for (int rank = 0; rank < pool->ranks(); ++rank) {
      EXPECT_EQ(pool->rank_policy(rank).kv_cache().allocated_tokens(), 0) << "KV left behind on a rank";
    }
  }
}

}  // namespace
}  // namespace batchsim
