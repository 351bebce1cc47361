// Request priorities and scheduling_policy=fcfs|priority|sjf (policies/common/scheduling_order.h).
//
// The priority cases are vLLM's own (tests/v1/core/test_scheduler.py, the test_priority_scheduling_*
// cases, at local-inference-lab/vllm commit 28be48f), restated as iteration tables on the test rig:
// vLLM adds requests and calls schedule() by hand; here they arrive at the times that put them in
// the same queues, and a 10 ms iteration stands for one schedule() + model step. vLLM adds its
// requests with arrival_time values out of the order it adds them; here ids follow arrival, so an
// arrival-time tie-break is tested by requests that arrive one after another while the server is
// busy. vLLM v0's forced preemption (vllm/core/scheduler.py _schedule_priority_preemption at
// commit 5f5271f, the last before V0's removal) has no test of its own in vLLM; its case below
// follows the code.
#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

#include "policies/continuous/continuous_policy.h"
#include "policy_test_rig.h"
#include "test_support.h"

namespace batchsim::testing {
namespace {

// Requests in the order they were first scheduled: by step, then by their place in the batch
// (which is admission order within a step).
std::vector<RequestId> admission_order(const RecordedRun& run) {
  std::vector<RequestId> order;
  for (const Step& step : run.steps) {
    for (const BatchItem& item : step.items) {
      if (std::find(order.begin(), order.end(), item.id) == order.end()) order.push_back(item.id);
    }
  }
  return order;
}

// The vllm preset (v1 scheduler) with vLLM's priority scheduler and the given limits, scheduling
// synchronously as vLLM's tests drive its Scheduler (add requests, then schedule()).
std::map<std::string, std::string> v1(const std::string& scheduling_policy, int64_t max_num_seqs,
                                      int64_t max_num_batched_tokens = 8192) {
  return {{"scheduling_policy", scheduling_policy},
          {"max_num_seqs", std::to_string(max_num_seqs)},
          {"max_num_batched_tokens", std::to_string(max_num_batched_tokens)},
          {"async_scheduling", "false"}};
}

// The ids of `priorities` sorted by priority (stable: equal priorities keep id order), which is
// the order vLLM's PriorityRequestQueue pops requests that arrived in id order.
std::vector<RequestId> by_priority(const std::vector<int32_t>& priorities) {
  std::vector<RequestId> ids(priorities.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](RequestId a, RequestId b) { return priorities[a] < priorities[b]; });
  return ids;
}

// The rig with a KV cache of `blocks` blocks of 16 tokens.
CostModel rig_with_blocks(int64_t blocks) {
  RigOptions o;
  o.kv_capacity_tokens = blocks * 16;
  return rig_cost_model(o);
}

Workload at_once(const std::vector<int32_t>& priorities, int32_t prompt_tokens, int32_t output_tokens) {
  std::vector<RequestSpec> specs;
  for (const int32_t p : priorities) specs.push_back({0, prompt_tokens, output_tokens, p});
  return make_workload(specs);
}

// test_priority_scheduling_basic_ordering: all fit in one step, scheduled in priority order
// (lower value first), not in the order they were added.
TEST(PriorityScheduling, BasicOrderingIsByPriority) {
  const CostModel cm = rig_cost_model();
  const std::vector<int32_t> priorities = {2, 0, 1};
  const Workload w = at_once(priorities, 10, 16);
  const RecordedRun run = run_preset("vllm", w, cm, v1("priority", 16));
  ASSERT_FALSE(run.steps.empty());
  ASSERT_EQ(run.steps[0].items.size(), 3u);
  std::vector<RequestId> first_step;
  for (const BatchItem& item : run.steps[0].items) first_step.push_back(item.id);
  EXPECT_EQ(first_step, by_priority(priorities));  // 1, 2, 0
  // fcfs, the default, ignores the priorities.
  EXPECT_EQ(admission_order(run_preset("vllm", w, cm, v1("fcfs", 16))), (std::vector<RequestId>{0, 1, 2}));
}

// test_priority_scheduling_mixed_priority_and_arrival, _arrival_time_tiebreaker and _fcfs_fallback:
// the order is (priority, arrival): a later, more urgent request goes first, and equal
// priorities keep arrival order. R0 runs while the others arrive, so that they all wait for the
// same step.
TEST(PriorityScheduling, WaitingRequestsAreTakenByPriorityThenArrival) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0, 10, 8, 0},        // R0: busy while the others arrive
                                    {0.001, 10, 8, 2},    // vLLM's req_0 (priority 2, arrival 1)
                                    {0.002, 10, 8, 1},    // req_2 (priority 1, arrival 2)
                                    {0.003, 10, 8, 1},    // req_1 (priority 1, arrival 3)
                                    {0.004, 10, 8, 0}});  // req_3 (priority 0, arrival 4)
  const RecordedRun run = run_preset("vllm", w, cm, v1("priority", 16));
  ASSERT_GE(run.steps.size(), 2u);
  EXPECT_EQ(run.steps[0].active(), (std::vector<std::pair<RequestId, int32_t>>{{0, 10}}));
  std::vector<RequestId> second_step;
  for (const BatchItem& item : run.steps[1].items) second_step.push_back(item.id);
  // R0's decode (running requests first), then vLLM's expected ["3", "2", "1", "0"].
  EXPECT_EQ(second_step, (std::vector<RequestId>{0, 4, 2, 3, 1}));
}

// test_priority_scheduling_preemption (5 usable blocks of 16): lo1 (priority 5) runs, hi1
// (priority 0) arrives and is admitted; when hi1 needs its third block none is free, and the
// victim is the lowest-priority running request lo1, although lo1 was scheduled earlier in the
// same step (it leaves the batch) and hi1 is the newest. fcfs preempts the newest, hi1.
TEST(PriorityScheduling, OutOfBlocksPreemptsTheLowestPriorityNotTheNewest) {
  const CostModel cm = rig_with_blocks(5);
  const Workload w = make_workload({{0, 32, 20, 5}, {0.005, 32, 20, 0}});
  constexpr RequestId kLo = 0, kHi = 1;
  const RecordedRun priority = run_preset("vllm", w, cm, v1("priority", 3, 200));
  expect_states(priority, {{0, 0, {{kLo, 32}}},
                           {1, 1, {{kLo, 1}, {kHi, 32}}},  // lo1's third block, hi1's two: 5 used
                           {2, 2, {{kHi, 1}}}});           // lo1 preempted, its decode refunded
  EXPECT_EQ(priority.result.requests[kLo].preemptions, 1);
  EXPECT_EQ(priority.result.requests[kHi].preemptions, 0);
  EXPECT_EQ(priority.steps[2].shape.num_decodes, 1);  // the shape lost lo1's decode with its item

  const RecordedRun fcfs = run_preset("vllm", w, cm, v1("fcfs", 3, 200));
  expect_states(fcfs, {{2, 2, {{kLo, 1}}}});
  EXPECT_EQ(fcfs.result.requests[kHi].preemptions, 1);
  EXPECT_EQ(fcfs.result.requests[kLo].preemptions, 0);
}

// test_priority_scheduling_no_preemption_when_space_available: a high-priority arrival joins
// two low-priority running requests when there is room; nothing is preempted (v1 has no
// preemption on arrival).
TEST(PriorityScheduling, NoPreemptionWhenThereIsRoom) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0, 30, 10, 5}, {0, 30, 10, 5}, {0.005, 30, 10, 0}});
  const RecordedRun run = run_preset("vllm", w, cm, v1("priority", 3, 200));
  expect_states(run, {{1, 1, {{0, 1}, {1, 1}, {2, 30}}}});
  EXPECT_EQ(run.result.summary.preemptions, 0);
}

// test_priority_scheduling_preemption_victim_selection, _waiting_queue_order and _heap_property:
// with one sequence slot, requests are served one at a time in priority order.
TEST(PriorityScheduling, OneSlotServesRequestsInPriorityOrder) {
  const CostModel cm = rig_cost_model();
  for (const std::vector<int32_t>& priorities :
       {std::vector<int32_t>{3, 2, 0}, {3, 1, 2, 0}, {5, 1, 8, 3, 2, 7, 4, 6}}) {
    const RecordedRun run = run_preset("vllm", at_once(priorities, 10, 2), cm, v1("priority", 1));
    EXPECT_EQ(admission_order(run), by_priority(priorities));
    for (const Step& step : run.steps) EXPECT_EQ(step.items.size(), 1u);
  }
}

// test_priority_scheduling_with_limited_slots: two slots take the two most urgent requests; the
// others wait in priority order and are admitted together when the slots free up.
TEST(PriorityScheduling, LimitedSlotsTakeTheMostUrgentFirst) {
  const CostModel cm = rig_cost_model();
  const Workload w = at_once({3, 1, 2, 0}, 10, 2);
  const RecordedRun run = run_preset("vllm", w, cm, v1("priority", 2, 1000));
  expect_states(run, {{0, 0, {{3, 10}, {1, 10}}}, {1, 1, {{3, 1}, {1, 1}}}, {2, 2, {{2, 10}, {0, 10}}}});
  EXPECT_EQ(admission_order(run), (std::vector<RequestId>{3, 1, 2, 0}));
}

// test_priority_scheduling_preemption_and_resumption_when_out_of_kv (4 usable blocks of 16):
// low (priority 1) runs; high (priority 0) is admitted and fills the cache; when high needs a
// third block, low is preempted; once high is done, low resumes by recomputing its 30 prompt
// tokens and the 2 it had generated.
TEST(PriorityScheduling, APreemptedLowPriorityRequestResumesWithItsTokens) {
  const CostModel cm = rig_with_blocks(4);
  const Workload w = make_workload({{0, 30, 10, 1}, {0.005, 32, 3, 0}});
  constexpr RequestId kLow = 0, kHigh = 1;
  const RecordedRun run = run_preset("vllm", w, cm, v1("priority", 2, 200));
  expect_states(run, {{0, 0, {{kLow, 30}}},
                      {1, 1, {{kLow, 1}, {kHigh, 32}}},  // 0 blocks free
                      {2, 3, {{kHigh, 1}}},              // low preempted; then no room for it
                      {4, 4, {{kLow, 16}}}});            // resumed: 30 prompt + 2 generated,
  // of which its first 4 blocks (16 tokens) were still cached: only 16 are recomputed.
  EXPECT_EQ(run.result.requests[kLow].cached_tokens, 16);
  EXPECT_EQ(run.result.requests[kLow].preemptions, 1);
  EXPECT_EQ(run.result.requests[kLow].state, RequestState::kFinished);
  EXPECT_LT(run.result.requests[kHigh].finished, run.result.requests[kLow].finished);
}

// vLLM v0 (the vllm-v0 preset) preempts for a waiting request: lo (priority 5) holds 4 of 5
// blocks; hi (priority 0) needs 2. v0's step without prefills runs _schedule_priority_preemption,
// which preempts lo because hi ranks above it and cannot be allocated, and hi is admitted at
// once. v1 (vllm) has no such rule: hi waits until lo is done. Under fcfs v0 does not either.
TEST(PriorityScheduling, VllmV0PreemptsARunningRequestForABetterRankedWaitingOne) {
  const CostModel cm = rig_with_blocks(5);
  // lo's footprint, 60 + 20 - 1 tokens, fits the 5 blocks, else it would be rejected on arrival.
  const Workload w = make_workload({{0, 60, 20, 5}, {0.005, 30, 3, 0}});
  constexpr RequestId kLo = 0, kHi = 1;
  const RecordedRun v0 = run_preset("vllm-v0", w, cm, {{"scheduling_policy", "priority"}});
  expect_states(v0, {{0, 0, {{kLo, 60}}}, {1, 1, {{kHi, 30}}}, {2, 3, {{kHi, 1}}}, {4, 4, {{kLo, 61}}}});
  EXPECT_EQ(v0.result.requests[kLo].preemptions, 1);
  EXPECT_EQ(v0.result.requests[kHi].first_token, SimTime::from_seconds(0.020));

  for (const auto& [name, options] : std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"vllm", {{"scheduling_policy", "priority"}}}, {"vllm-v0", {{"scheduling_policy", "fcfs"}}}}) {
    SCOPED_TRACE(name + " " + options.at("scheduling_policy"));
    const RecordedRun waits = run_preset(name, w, cm, options);
    EXPECT_EQ(waits.result.summary.preemptions, 0);
    EXPECT_GE(waits.result.requests[kHi].first_scheduled, waits.result.requests[kLo].finished);
  }
}

// Shortest job first takes the waiting requests by their output length (the oracle) or by
// their prompt length, and under KV pressure preempts the longest job, not the newest.
TEST(ShortestJobFirst, AdmitsByTheChosenLengthAndPreemptsTheLongestJob) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0, 100, 30}, {0, 300, 5}, {0, 50, 10}});
  auto order = [&](std::map<std::string, std::string> options) {
    options["max_num_seqs"] = "1";
    return admission_order(run_preset("vllm", w, cm, options));
  };
  EXPECT_EQ(order({{"scheduling_policy", "sjf"}}), (std::vector<RequestId>{1, 2, 0}));  // output 5, 10, 30
  EXPECT_EQ(order({{"scheduling_policy", "sjf"}, {"sjf_by", "prompt"}}), (std::vector<RequestId>{2, 0, 1}));
  EXPECT_EQ(order({}), (std::vector<RequestId>{0, 1, 2}));

  // As in OutOfBlocksPreemptsTheLowestPriorityNotTheNewest, with the long job first.
  const CostModel tight = rig_with_blocks(5);
  const Workload pressure = make_workload({{0, 32, 40}, {0.005, 32, 10}});
  const RecordedRun sjf = run_preset("vllm", pressure, tight, {{"scheduling_policy", "sjf"}, {"max_num_seqs", "3"}});
  EXPECT_EQ(sjf.result.requests[0].preemptions, 1);
  EXPECT_EQ(sjf.result.requests[1].preemptions, 0);
}

// On one server that takes one request at a time, serving the shortest job first minimises the
// mean completion time (the exchange argument); the oracle must beat arrival order on a burst
// whose arrival order is not already shortest first.
TEST(ShortestJobFirst, TheOracleLowersMeanLatencyOnASingleSlotBurst) {
  const CostModel cm = rig_cost_model();
  const BuiltWorkload w = spec_workload("offline", "fixed:64", "uniform:1:200", 40, 11);
  auto mean_e2e = [&](std::map<std::string, std::string> options) {
    options["max_num_seqs"] = "1";
    return run_preset("vllm", w.requests, cm, options).result.summary.e2e_s.mean;
  };
  const double fcfs = mean_e2e({});
  const double sjf = mean_e2e({{"scheduling_policy", "sjf"}});
  EXPECT_LT(sjf, 0.8 * fcfs);
  // With every prompt the same length, ordering by prompt is arrival order again.
  EXPECT_EQ(mean_e2e({{"scheduling_policy", "sjf"}, {"sjf_by", "prompt"}}), fcfs);
}

// The options go through the policy-option registry: listed, parsed, and refused where they mean
// nothing, with a message that names the option.
TEST(SchedulingPolicyOptions, AreParsedAndRefusedWhereTheyMeanNothing) {
  {
    auto p = policy("vllm", {{"scheduling_policy", "sjf"}, {"sjf_by", "prompt"}});
    const auto& c = dynamic_cast<const ContinuousPolicy&>(*p).config();
    EXPECT_EQ(c.scheduling_policy, SchedulingPolicy::sjf);
    EXPECT_EQ(c.sjf_by, JobLength::prompt);
    EXPECT_FALSE(c.preempt_for_waiting);
  }
  {
    auto p = policy("vllm-v0", {{"scheduling_policy", "priority"}});
    const auto& c = dynamic_cast<const ContinuousPolicy&>(*p).config();
    EXPECT_EQ(c.scheduling_policy, SchedulingPolicy::priority);
    EXPECT_TRUE(c.preempt_for_waiting);  // the preset follows v0
  }
  EXPECT_EQ(dynamic_cast<const ContinuousPolicy&>(*policy("vllm-v0")).config().scheduling_policy,
            SchedulingPolicy::fcfs);
  // A preset's v0 rule is dropped with mixed iterations, where v0 never ran it.
  EXPECT_FALSE(dynamic_cast<const ContinuousPolicy&>(
                   *policy("vllm-v0", {{"scheduling_policy", "priority"}, {"prefill", "mixed"}}))
                   .config()
                   .preempt_for_waiting);

  const auto error = [](const std::string& name, std::map<std::string, std::string> options) {
    return user_error_of([&] { policy(name, std::move(options)); });
  };
  EXPECT_NE(error("vllm", {{"scheduling_policy", "lifo"}})
                .find("scheduling_policy=lifo: expected one of fcfs, priority, sjf"),
            std::string::npos);
  EXPECT_NE(error("vllm", {{"sjf_by", "prompt"}}).find("sjf_by=prompt: only applies with scheduling_policy=sjf"),
            std::string::npos);
  EXPECT_NE(
      error("vllm-v0", {{"preempt_for_waiting", "true"}}).find("only applies with scheduling_policy=priority or sjf"),
      std::string::npos);
  EXPECT_NE(error("continuous", {{"scheduling_policy", "priority"}, {"preempt_for_waiting", "true"}})
                .find("only applies with prefill=exclusive"),
            std::string::npos);
  EXPECT_NE(error("vllm", {{"preempt_for_waiting", "false"}}).find("no option 'preempt_for_waiting'"),
            std::string::npos);
  EXPECT_NE(error("sglang", {{"scheduling_policy", "priority"}}).find("no option 'scheduling_policy'"),
            std::string::npos);
  EXPECT_NE(error("hf-static", {{"scheduling_policy", "priority"}}).find("no option 'scheduling_policy'"),
            std::string::npos);
  for (const char* base : {"continuous", "chunked-prefill"}) {
    const auto& docs = policy_option_docs(base);
    EXPECT_TRUE(std::any_of(docs.begin(), docs.end(), [](const PolicyOptionDoc& d) {
      return d.key == "scheduling_policy";
    })) << base;
  }
}

}  // namespace
}  // namespace batchsim::testing
