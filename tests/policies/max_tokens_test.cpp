// The client's max_tokens in the policies, and a KV cache sized by block count:
//  * reserving policies (kv=reserve reserve_to=output as TGI's router and TensorRT-LLM
//    GUARANTEED_NO_EVICT, static batching's max_new_tokens=0) reserve prompt + max_tokens, so
//    fewer requests run at once when max_tokens exceeds the output, and exactly as many as
//    before when it equals it; paged policies allocate what is written and do not change;
//  * a reservation is cut to the model's context, as TensorRT-LLM cuts maxNewTokens;
//  * --num-gpu-blocks N gives a paged policy N blocks of its block_size and a reserving one
//    N x 16 tokens, whatever the GPU's memory.
#include <gtest/gtest.h>

#include "policies/continuous/continuous_policy.h"
#include "policy_test_rig.h"
#include "test_support.h"

namespace batchsim::testing {
namespace {

// `n` requests at t = 0 of `prompt` + `output` tokens, each with the client limit `max_tokens`
// (0: none).
Workload limited(int n, int32_t prompt, int32_t output, int32_t max_tokens) {
  std::vector<RequestSpec> specs(static_cast<size_t>(n), RequestSpec{0, prompt, output});
  Workload w = make_workload(specs);
  for (Request& r : w) r.max_tokens = max_tokens;
  return w;
}

size_t admitted_at_once(const RecordedRun& run) { return run.steps.at(0).items.size(); }

int64_t output_tokens_of(const SimulationResult& result) {
  int64_t sum = 0;
  for (const RequestRecord& r : result.requests) sum += r.completed() ? r.output_tokens : 0;
  return sum;
}

const std::map<std::string, std::string> kReserveToOutput = {{"kv", "reserve"}, {"reserve_to", "output"}};

TEST(MaxTokensReservation, AReservationForMaxTokensAdmitsFewerRequests) {
  RigOptions o;
  o.kv_capacity_tokens = 1000;
  const CostModel cm = rig_cost_model(o);
  // 50 + 50 - 1 = 99 tokens each: ten fit in 1000.
  const RecordedRun exact = run_preset("continuous", limited(10, 50, 50, 0), cm, kReserveToOutput);
  EXPECT_EQ(admitted_at_once(exact), 10u);
  EXPECT_EQ(exact.steps[0].kv_allocated_tokens, 10 * 99);
  // max_tokens 150: 50 + 150 - 1 = 199 reserved each, so five at once; the outputs still end at 50.
  const RecordedRun wide = run_preset("continuous", limited(10, 50, 50, 150), cm, kReserveToOutput);
  EXPECT_EQ(admitted_at_once(wide), 5u);
  EXPECT_EQ(wide.steps[0].kv_allocated_tokens, 5 * 199);
  EXPECT_EQ(wide.result.summary.requests_completed, 10);
  EXPECT_EQ(output_tokens_of(wide.result), 10 * 50);
  EXPECT_GT(wide.result.summary.makespan_s, exact.result.summary.makespan_s);
  // TGI's router preset reserves the same way.
  const RecordedRun tgi = run_preset("tgi-router", limited(10, 50, 50, 150), cm);
  EXPECT_EQ(admitted_at_once(tgi), 5u);
}

TEST(MaxTokensReservation, AMaxTokensEqualToTheOutputChangesNothing) {
  RigOptions o;
  o.kv_capacity_tokens = 700;
  const CostModel cm = rig_cost_model(o);
  Workload none = make_workload(
      {{0, 40, 30}, {0.01, 90, 12}, {0.02, 10, 80}, {0.05, 60, 44}, {0.05, 25, 25}, {0.3, 70, 9}, {0.31, 33, 61}});
  Workload equal = none;
  for (Request& r : equal) r.max_tokens = r.output_tokens;
  for (const auto& [policy, options] :
       std::vector<std::pair<std::string, std::map<std::string, std::string>>>{{"tgi-router", {}},
                                                                               {"continuous", kReserveToOutput},
                                                                               {"hf-static", {{"batch_size", "4"}}},
                                                                               {"ft-static", {}},
                                                                               {"vllm", {}},
                                                                               {"orca", {}}}) {
    const RecordedRun a = run_preset(policy, none, cm, options);
    const RecordedRun b = run_preset(policy, equal, cm, options);
    expect_same_requests(a.result, b.result);
    expect_same_summary(a.result.summary, b.result.summary);
  }
}

TEST(MaxTokensReservation, PagedPoliciesAllocateWhatIsWrittenAndIgnoreMaxTokens) {
  RigOptions o;
  o.kv_capacity_tokens = 1000;
  const CostModel cm = rig_cost_model(o);
  for (const char* policy : {"continuous", "vllm", "vllm-v0"}) {
    const RecordedRun a = run_preset(policy, limited(10, 50, 50, 0), cm);
    const RecordedRun b = run_preset(policy, limited(10, 50, 50, 2000), cm);
    expect_same_requests(a.result, b.result);
    expect_same_summary(a.result.summary, b.result.summary);
    // Reserving 50 + 2000 tokens would never fit in 1000; holding what is written, all do.
    EXPECT_EQ(b.result.summary.requests_rejected, 0) << policy;
  }
}

TEST(MaxTokensReservation, StaticBatchingReservesTheBatchsLongestMaxTokens) {
  RigOptions o;
  o.kv_capacity_tokens = 1000;
  const CostModel cm = rig_cost_model(o);
  // Rows of 50 + 50: ten fit in a rectangle of 1000.
  const RecordedRun exact = run_preset("hf-static", limited(10, 50, 50, 0), cm, {{"batch_size", "10"}});
  EXPECT_EQ(admitted_at_once(exact), 10u);
  // One request allows 150 tokens: every row reserves 50 + 150, so the batch is cut to five.
  Workload w = limited(10, 50, 50, 0);
  w[3].max_tokens = 150;
  const RecordedRun wide = run_preset("hf-static", w, cm, {{"batch_size", "10"}});
  EXPECT_EQ(admitted_at_once(wide), 5u);
  EXPECT_EQ(wide.steps[0].kv_allocated_tokens, 5 * 200);
  // A max_new_tokens set for the server still decides alone (raised to a row's own output).
  const RecordedRun fixed = run_preset("hf-static", w, cm, {{"batch_size", "10"}, {"max_new_tokens", "50"}});
  EXPECT_EQ(admitted_at_once(fixed), 10u);
}

TEST(MaxTokensReservation, AReservationIsCutToTheModelsContext) {
  RigOptions o;
  o.kv_capacity_tokens = 400;
  o.max_context_tokens = 200;
  const CostModel cm = rig_cost_model(o);
  // prompt 50 + max_tokens 1000 would reserve 1049 > 400 and be rejected; cut to the context
  // it reserves 200 - 1 = 199, so two run at once and all three are served.
  const RecordedRun run = run_preset("continuous", limited(3, 50, 50, 1000), cm, kReserveToOutput);
  EXPECT_EQ(run.result.summary.requests_rejected, 0);
  EXPECT_EQ(admitted_at_once(run), 2u);
  EXPECT_EQ(run.steps[0].kv_allocated_tokens, 2 * 199);
  const RecordedRun batch = run_preset("hf-static", limited(3, 50, 50, 1000), cm, {{"batch_size", "3"}});
  EXPECT_EQ(batch.result.summary.requests_rejected, 0);
  EXPECT_EQ(admitted_at_once(batch), 2u);  // rows of 50 + 150
  // A request whose real output exceeds the context is still rejected, as before.
  const RecordedRun too_long = run_preset("continuous", limited(1, 50, 160, 1000), cm, kReserveToOutput);
  EXPECT_EQ(too_long.result.summary.requests_rejected, 1);
}

// Client limits change what is reserved, never the exactness of decode fast-forward, open or
// closed loop (--max-concurrency), with or without EOS.
TEST(MaxTokensReservation, FastForwardStaysExactWithLimitsOpenAndClosedLoop) {
  RigOptions o;
  o.kv_capacity_tokens = 3000;
  o.max_context_tokens = 1024;
  const CostModel cm = rig_cost_model(o);
  for (const bool ignore_eos : {false, true}) {
    WorkloadSpec spec;
    spec.arrival = "poisson:40";
    spec.prompt_len = "uniform:8:200";
    spec.output_len = "capexp:60:300";
    spec.max_tokens = "uniform:20:400";
    spec.ignore_eos = ignore_eos;
    spec.num_requests = 120;
    spec.seed = 3;
    const Workload w = build_workload(spec).requests;
    for (const int64_t concurrency : {int64_t{0}, int64_t{8}}) {
      for (const auto& [name, options] :
           std::vector<std::pair<std::string, std::map<std::string, std::string>>>{{"tgi-router", {}},
                                                                                   {"continuous", kReserveToOutput},
                                                                                   {"hf-static", {{"batch_size", "6"}}},
                                                                                   {"orca", {}},
                                                                                   {"vllm", {}}}) {
        SimulationResult runs[2];
        for (const bool ff : {false, true}) {
          std::unique_ptr<Policy> p = policy(name, options);
          SimulationOptions so = rig_simulation_options();
          so.fast_forward = ff;
          so.max_concurrency = concurrency;
          runs[ff] = Simulation(w, *p, cm, so).run();
        }
        SCOPED_TRACE(fmt::format("{} ignore_eos={} max_concurrency={}", name, ignore_eos, concurrency));
        EXPECT_EQ(runs[1].summary.requests_completed + runs[1].summary.requests_rejected, 120);
        expect_same_requests(runs[0], runs[1]);
        expect_same_summary(runs[0].summary, runs[1].summary);
      }
    }
  }
}

// ---- --num-gpu-blocks ---------------------------------------------------------------------------

SimulationResult run_with_blocks(const std::string& name, std::map<std::string, std::string> options, const Workload& w,
                                 const CostModel& cm, int64_t blocks, int replicas = 1,
                                 int64_t* policy_capacity = nullptr) {
  std::vector<std::unique_ptr<Policy>> owned;
  std::vector<Policy*> policies;
  for (int i = 0; i < replicas; ++i) {
    owned.push_back(policy(name, options));
    policies.push_back(owned.back().get());
  }
  SimulationOptions so = rig_simulation_options();
  so.num_gpu_blocks = blocks;
  SimulationResult result = Simulation(w, policies, cm, so).run();
  if (policy_capacity != nullptr) {
    *policy_capacity = owned.front()->kv_cache().capacity_tokens();
    for (const auto& p : owned) EXPECT_EQ(p->kv_cache().capacity_tokens(), *policy_capacity);
  }
  return result;
}

// gpt-oss's window layers in each engine's pool (CostModel::WindowKv): vLLM's paged pool counts
// tokens of the full layers (twice as many) and gives each request its window's 9 pages;
// SGLang's SWA pool 36 / 32.4 as many; a reserving cache (TGI) every layer. Each against the
// same model with its window layers made full.
TEST(NumGpuBlocks, WindowLayersFollowEachEnginesPool) {
  const ModelSpec oss = resolve_model("gpt-oss-120b");
  ModelSpec all_full = oss;
  all_full.sliding_window_layers = 0;
  all_full.sliding_window = 0;
  const CostModel hybrid(oss, resolve_gpu("h100-sxm"), 2), plain(all_full, resolve_gpu("h100-sxm"), 2);
  const std::map<std::string, double> ratios = {{"vllm", 2.0}, {"sglang", 36.0 / 32.4}, {"tgi", 1.0}};
  for (const auto& [name, ratio] : ratios) {
    SCOPED_TRACE(name);
    const auto p = policy(name, {});
    const auto a = p->kv_sizing(hybrid, 0.9), b = p->kv_sizing(plain, 0.9);
    ASSERT_TRUE(a && b);
    EXPECT_NEAR(static_cast<double>(a->tokens) / static_cast<double>(b->tokens), ratio, 1e-4);
  }
  // The pages a vLLM request holds beside its tokens': 12 requests of 150 tokens (10 blocks)
  // and 100 blocks run 5 at a time (19 blocks each), not 10; the 6th waits for the first 5.
  const Workload w = make_workload(std::vector<RequestSpec>(12, RequestSpec{0, 150, 4}));
  std::vector<std::unique_ptr<Policy>> owned;
  owned.push_back(policy("vllm", {{"prefix_caching", "false"}}));
  SimulationOptions so = rig_simulation_options();
  so.num_gpu_blocks = 100;
  const SimulationResult with_window = Simulation(w, *owned.back(), hybrid, so).run();
  const auto& kv = dynamic_cast<const PagedKvCache&>(owned.back()->kv_cache());
  EXPECT_EQ(kv.side_blocks(), 9);
  EXPECT_NEAR(with_window.summary.kv_allocated_fraction_peak, 5 * 19 / 100.0, 1e-9);
  owned.push_back(policy("vllm", {{"prefix_caching", "false"}}));
  const SimulationResult without = Simulation(w, *owned.back(), plain, so).run();
  EXPECT_NEAR(without.summary.kv_allocated_fraction_peak, 10 * 10 / 100.0, 1e-9);
}

TEST(NumGpuBlocks, APagedCacheHasExactlyThatManyBlocksOfItsBlockSize) {
  const CostModel cm = rig_cost_model();  // 100,000 tokens of memory, which the count replaces
  const Workload w = limited(4, 30, 10, 0);
  int64_t capacity = 0;
  EXPECT_EQ(run_with_blocks("continuous", {}, w, cm, 37, 1, &capacity).kv_capacity_tokens, 37 * 16);
  EXPECT_EQ(capacity, 37 * 16);
  EXPECT_EQ(run_with_blocks("vllm", {{"block_size", "32"}}, w, cm, 37, 1, &capacity).kv_capacity_tokens, 37 * 32);
  EXPECT_EQ(capacity, 37 * 32);
  // Each replica of a cluster gets the count.
  EXPECT_EQ(run_with_blocks("vllm", {}, w, cm, 37, 3, &capacity).kv_capacity_tokens, 37 * 16);
  // Also more than the memory holds: the count replaces the estimate (vLLM's override too).
  EXPECT_EQ(run_with_blocks("continuous", {}, w, cm, 100'000, 1, &capacity).kv_capacity_tokens, 1'600'000);
  // Without a count the capacity is the memory's, as before.
  EXPECT_EQ(run_with_blocks("continuous", {}, w, cm, 0).kv_capacity_tokens, 100'000);
}

TEST(NumGpuBlocks, AReservingPolicyGetsThatManyBlocksOf16Tokens) {
  const CostModel cm = rig_cost_model();
  const Workload w = limited(4, 30, 10, 0);
  int64_t capacity = 0;
  for (const auto& [name, options] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"continuous", kReserveToOutput}, {"orca", {}}, {"tgi-router", {}}, {"hf-static", {}}}) {
    EXPECT_EQ(run_with_blocks(name, options, w, cm, 37, 1, &capacity).kv_capacity_tokens, 37 * 16) << name;
    EXPECT_EQ(capacity, 37 * 16) << name;
  }
}

TEST(NumGpuBlocks, TheCountDecidesWhatFitsAndWhatRunsAtOnce) {
  const CostModel cm = rig_cost_model();
  // 8 blocks = 128 tokens: a request of 100 + 40 - 1 = 139 tokens never fits.
  const SimulationResult one = run_with_blocks("continuous", {}, limited(1, 100, 40, 0), cm, 8);
  ASSERT_EQ(one.summary.requests_rejected, 1);
  EXPECT_EQ(one.requests[0].reject_reason, "needs more KV than the whole cache holds (128 tokens): 139 tokens");
  // Reserving 30 + 10 - 1 = 39 tokens each, 8 x 16 = 128 tokens hold three at once.
  std::unique_ptr<Policy> p = policy("continuous", kReserveToOutput);
  SimulationOptions so = rig_simulation_options();
  so.num_gpu_blocks = 8;
  size_t first_batch = 0;
  so.on_iteration = [&](const Batch& b, const IterationRecord& rec, const Policy&) {
    if (rec.index == 0) first_batch = b.items.size();
  };
  Simulation(limited(6, 30, 10, 0), *p, cm, so).run();
  EXPECT_EQ(first_batch, 3u);
}

}  // namespace
}  // namespace batchsim::testing
