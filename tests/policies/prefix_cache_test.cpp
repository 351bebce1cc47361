// Prefix caching in the continuous policies (vLLM v1 automatic prefix caching): what a hit does
// to a request's prefill, that it never covers the whole prompt, that a request readmitted
// after a recompute preemption hits its own prefix (with the workload's hashes or without),
// that caching off changes nothing, and that the Mooncake conversation trace, whose requests
// share prefixes, gets a real hit rate and a lower TTFT.
#include <gtest/gtest.h>

#include "policies/continuous/continuous_policy.h"
#include "policy_test_rig.h"
#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim::testing {
namespace {

// The first item of request `id` scheduled at or after iteration `from`, or null.
const BatchItem* first_item(const RecordedRun& run, RequestId id, size_t from = 0) {
  for (size_t i = from; i < run.steps.size(); ++i) {
    if (const BatchItem* item = run.steps[i].item(id)) return item;
  }
  return nullptr;
}

// Request 1 starts like request 0 for 4 hash blocks (64 tokens) and arrives after request 0
// has finished, so it finds those blocks cached and evictable.
Workload two_requests(double second_arrival_s) { return make_workload({{0, 100, 3}, {second_arrival_s, 100, 3}}); }
const PrefixBlockHashes kTwoPrefixes = prefix_hashes(16, {{1, 2, 3, 4, 5, 6, 7}, {1, 2, 3, 4, 8, 9, 10}});

TEST(PrefixCaching, ALaterRequestPrefillsOnlyWhatIsNotCached) {
  const CostModel cm = rig_cost_model();
  // vllm (chunked prefill, caching on by its preset) and continuous (whole prefills) with caching on.
  for (const auto& [name, options] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"vllm", {}}, {"continuous", {{"prefix_caching", "true"}}}}) {
    SCOPED_TRACE(name);
    const RecordedRun run = run_preset(name, two_requests(0.05), cm, options, &kTwoPrefixes);
    const BatchItem* second = first_item(run, 1);
    ASSERT_NE(second, nullptr);
    EXPECT_EQ(second->context_before, 64);  // its chunk attends to the cached prefix
    EXPECT_EQ(second->new_tokens, 36);
    EXPECT_EQ(run.result.requests[1].cached_tokens, 64);
    EXPECT_EQ(run.result.requests[0].cached_tokens, 0);
    EXPECT_EQ(run.result.summary.prefill_cached_tokens, 64);
    EXPECT_EQ(run.result.summary.prefill_admitted_tokens, 200);
    EXPECT_DOUBLE_EQ(run.result.summary.prefix_hit_rate, 0.32);
    EXPECT_EQ(run.result.requests[1].state, RequestState::kFinished);
  }
  // The same workload without caching prefills every prompt whole.
  const RecordedRun off = run_preset("vllm", two_requests(0.05), cm, {{"prefix_caching", "false"}}, &kTwoPrefixes);
  EXPECT_EQ(first_item(off, 1)->context_before, 0);
  EXPECT_EQ(first_item(off, 1)->new_tokens, 100);
  EXPECT_EQ(off.result.summary.prefill_cached_tokens, 0);
  EXPECT_EQ(off.result.summary.prefix_hit_rate, 0.0);
}

TEST(PrefixCaching, ARequestAdmittedLaterInTheSameStepHitsBlocksJustAllocated) {
  // vLLM v1 caches full blocks in allocate_slots: the second admission of a step finds them.
  const RecordedRun run = run_preset("vllm", two_requests(0.0), rig_cost_model(), {}, &kTwoPrefixes);
  ASSERT_EQ(run.steps[0].items.size(), 2u);
  EXPECT_EQ(run.steps[0].item(1)->context_before, 64);
  EXPECT_EQ(run.steps[0].shape.total_tokens(), 100 + 36);
}

TEST(PrefixCaching, AHitNeverCoversTheWholePrompt) {
  // Identical 64-token prompts: the last block is computed again so the model can sample.
  const PrefixBlockHashes same = prefix_hashes(16, {{1, 2, 3, 4}, {1, 2, 3, 4}});
  const RecordedRun run = run_preset("vllm", make_workload({{0, 64, 2}, {0.05, 64, 2}}), rig_cost_model(), {}, &same);
  const BatchItem* second = first_item(run, 1);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->context_before, 48);
  EXPECT_EQ(second->new_tokens, 16);
}

TEST(PrefixCaching, ARequestReadmittedAfterRecomputeHitsItsOwnPrefix) {
  // 4 blocks of 16 tokens. Both 20-token prompts are admitted (2 blocks each); when request 0
  // needs a third block, request 1 (the newest) is preempted with 32 tokens: both its blocks
  // are full and cached, and freed tail first, so request 0 takes (evicts) its output block
  // and ends within 3 blocks. Readmitted, request 1 starts after its cached 16 tokens.
  RigOptions rig;
  rig.kv_capacity_tokens = 64;
  const CostModel cm = rig_cost_model(rig);
  const Workload w = make_workload({{0, 20, 28}, {0, 20, 30}});
  const PrefixBlockHashes hashes = prefix_hashes(16, {{1, 2}, {3, 4}});
  for (const bool caching : {true, false}) {
    SCOPED_TRACE(caching ? "caching" : "no caching");
    const RecordedRun run = run_preset("vllm", w, cm, {{"prefix_caching", caching ? "true" : "false"}}, &hashes);
    ASSERT_EQ(run.result.requests[1].preemptions, 1);
    // The readmission: the first step of request 1 after a step without it.
    size_t gap = 0;
    while (gap < run.steps.size() && run.steps[gap].item(1) != nullptr) ++gap;
    const BatchItem* readmitted = first_item(run, 1, gap);
    ASSERT_NE(readmitted, nullptr);
    EXPECT_EQ(readmitted->context_before, caching ? 16 : 0);
    EXPECT_EQ(run.result.requests[1].cached_tokens, caching ? 16 : 0);
    EXPECT_EQ(run.result.requests[1].state, RequestState::kFinished);
  }
}

TEST(PrefixCaching, ARecomputedRequestReusesItsPromptAndGeneratedBlocks) {
  // vLLM v1 caches every full block, output included, and a recompute preemption re-prefills
  // prompt + output, looking its block hashes up again. 5 blocks of 16 tokens, 16-token
  // prompts. Iteration 0 prefills both; 1-16 decode both to 32 tokens (2 full blocks each,
  // one free block); at 17 request 0 takes the free block and request 1 (the newest) is
  // preempted: its blocks, prompt and output, go to the free queue tail first. Request 1
  // knows 33 tokens; its 32 cached ones need no new block but leave the free pool when shared,
  // with one new block 3 > 2 free, so it waits until request 0 (20 tokens out) ends at 19.
  // Readmitted at 20, it prefills 1 token after 32 cached (33 without its output blocks cached).
  RigOptions rig;
  rig.kv_capacity_tokens = 80;
  const CostModel cm = rig_cost_model(rig);
  const Workload w = make_workload({{0, 16, 20}, {0, 16, 30}});
  const PrefixBlockHashes hashes = prefix_hashes(16, {{1}, {2}});
  const RecordedRun run = run_preset("vllm", w, cm, {}, &hashes);
  expect_states(run, {{0, 0, {{0, 16}, {1, 16}}},
                      {1, 16, {{0, 1}, {1, 1}}},
                      {17, 19, {{0, 1}}},
                      {20, 20, {{1, 1}}},
                      {21, 32, {{1, 1}}}});
  EXPECT_EQ(run.steps.size(), 33u);
  EXPECT_EQ(run.steps[20].item(1)->context_before, 32);
  EXPECT_EQ(run.result.requests[1].preemptions, 1);
  EXPECT_EQ(run.result.requests[1].cached_tokens, 32);
  EXPECT_EQ(run.result.requests[1].state, RequestState::kFinished);
}

void expect_same_results(const SimulationResult& a, const SimulationResult& b, bool cached = false) {
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].state, b.requests[i].state) << i;
    EXPECT_EQ(a.requests[i].first_token, b.requests[i].first_token) << i;
    EXPECT_EQ(a.requests[i].finished, b.requests[i].finished) << i;
    EXPECT_EQ(a.requests[i].max_tbt, b.requests[i].max_tbt) << i;
    EXPECT_EQ(a.requests[i].preemptions, b.requests[i].preemptions) << i;
    EXPECT_EQ(a.requests[i].cached_tokens, b.requests[i].cached_tokens) << i;
    if (!cached) {
      EXPECT_EQ(a.requests[i].cached_tokens, 0) << i;
    }
  }
  EXPECT_EQ(a.summary.iterations, b.summary.iterations);
  EXPECT_EQ(a.summary.kv_allocated_fraction_mean, b.summary.kv_allocated_fraction_mean);
  EXPECT_EQ(a.summary.ttft_s.mean, b.summary.ttft_s.mean);
  EXPECT_EQ(a.summary.prefill_admitted_tokens, b.summary.prefill_admitted_tokens);
  EXPECT_EQ(a.summary.prefill_cached_tokens, b.summary.prefill_cached_tokens);
}

// One hash per 16 prompt tokens, each request's its own: no block is shared, but every block
// goes through the per-block prefix cache.
PrefixBlockHashes unique_hashes(const Workload& requests) {
  PrefixBlockHashes h;
  h.block_tokens = 16;
  h.offsets.push_back(0);
  for (const Request& r : requests) {
    for (int64_t k = 0; k <= r.prompt_tokens / 16; ++k) h.hashes.push_back(1'000'003ULL * (r.id + 1) + k);
    h.offsets.push_back(static_cast<int64_t>(h.hashes.size()));
  }
  return h;
}

TEST(PrefixCaching, OffTheResultsAreThoseOfNoCachingAndWithoutHashesPreemptedRequestsFindTheirOwnBlocks) {
  const BuiltWorkload built = spec_workload("poisson:30", "uniform:50:600", "capexp:100:400", 300, 3, "groups:256:3");
  const CostModel cm(resolve_model("llama-2-7b"), resolve_gpu("a100-40gb"), 1);
  auto run = [&](const std::string& caching, const PrefixBlockHashes* hashes, bool fast_forward = true) {
    auto p = policy("vllm", {{"prefix_caching", caching}});
    SimulationOptions options;
    options.gpu_memory_utilization = 0.45;  // tight: preemptions happen
    options.prefix_blocks = hashes;
    options.fast_forward = fast_forward;
    return Simulation(built.requests, *p, cm, options).run();
  };
  const SimulationResult plain = run("false", nullptr);
  EXPECT_GT(plain.summary.preemptions, 0);
  expect_same_results(plain, run("false", &built.prefix_blocks));  // hashes, caching off
  // Caching on without hashes: a preempted request recomputes only its evicted blocks, as the
  // per-block cache has it when every request's hashes are its own (and the same with every
  // step scheduled, the decode cohort and its counted queue off).
  const SimulationResult own = run("true", nullptr);
  EXPECT_GT(own.summary.prefill_cached_tokens, 0);
  EXPECT_LT(own.summary.prefill_admitted_tokens - own.summary.prefill_cached_tokens,
            plain.summary.prefill_admitted_tokens);
  EXPECT_LE(own.summary.preemptions, plain.summary.preemptions);
  const PrefixBlockHashes unique = unique_hashes(built.requests);
  expect_same_results(own, run("true", &unique), /*cached=*/true);
  expect_same_results(own, run("true", nullptr, /*fast_forward=*/false), /*cached=*/true);
  // And with shared hashes, caching does something on this workload.
  EXPECT_GT(run("true", &built.prefix_blocks).summary.prefix_hit_rate, 0.2);
}

TEST(PrefixCaching, MooncakeConversationTraceHitsAndLowersTtft) {
  WorkloadSpec spec;
  spec.trace = testing::data_file(testing::traces_dir(), "mooncake-fast25/conversation.jsonl");
  spec.num_requests = 1500;
  const BuiltWorkload built = build_workload(spec);
  ASSERT_FALSE(built.prefix_blocks.empty());
  // Mistral-7B's 32k context serves most of the trace's long prompts.
  const CostModel cm(resolve_model("mistral-7b"), resolve_gpu("a100-80gb"), 1);
  auto run = [&](bool caching) {
    auto p = policy("vllm", {{"prefix_caching", caching ? "true" : "false"}});
    SimulationOptions options;
    options.prefix_blocks = &built.prefix_blocks;
    return Simulation(built.requests, *p, cm, options).run().summary;
  };
  const Summary on = run(true);
  const Summary off = run(false);
  EXPECT_EQ(on.requests_completed, off.requests_completed);
  EXPECT_EQ(on.requests_rejected, off.requests_rejected);  // prompts beyond the context
  EXPECT_GT(on.prefix_hit_rate, 0.0);
  EXPECT_GT(on.prefill_cached_tokens, 0);
  EXPECT_EQ(off.prefill_cached_tokens, 0);
  EXPECT_LT(on.ttft_s.mean, off.ttft_s.mean);
}

}  // namespace
}  // namespace batchsim::testing
