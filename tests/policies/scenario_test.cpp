// Iteration-exact scenario tables: which requests run in iterations i..j, with how many tokens.
// Every iteration of the rig's GPU costs 10 ms, whatever the batch; requests are named A, B, ...
// in id order.
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "policies/continuous/continuous_policy.h"
#include "policies/static/static_policy.h"
#include "policy_test_rig.h"
#include "test_support.h"

namespace batchsim::testing {
namespace {

constexpr RequestId A = 0, B = 1, C = 2, D = 3, E = 4, F = 5;

double ms(SimTime t) { return static_cast<double>(t.ns()) / 1e6; }

// The continuous-batching write-up (Anyscale, "How continuous batching enables 23x throughput
// in LLM inference", 2023; issue 2 item 6): A, B, C, D need 5, 50, 10, 100 output tokens on 4
// slots, E and F wait. Each prompt is 4 tokens; the prefill produces the first output token.
Workload write_up_workload() {
  return make_workload({{0, 4, 5}, {0, 4, 50}, {0, 4, 10}, {0, 4, 100}, {0, 4, 20}, {0, 4, 30}});
}

TEST(WriteUpScenario, StaticHoldsTheBatchUntilItsLongestSequenceEnds) {
  const CostModel cm = rig_cost_model();
  const RecordedRun run = run_preset("hf-static", write_up_workload(), cm, {{"batch_size", "4"}});
  // D's 100 tokens take iterations 0..99 (prefill + 99 decodes); E and F wait for all of them.
  expect_states(run, {
                         {0, 0, {{A, 4}, {B, 4}, {C, 4}, {D, 4}}},
                         {1, 4, {{A, 1}, {B, 1}, {C, 1}, {D, 1}}},
                         {5, 9, {{B, 1}, {C, 1}, {D, 1}}},
                         {10, 49, {{B, 1}, {D, 1}}},
                         {50, 99, {{D, 1}}},
                         {100, 100, {{E, 4}, {F, 4}}},
                         {101, 119, {{E, 1}, {F, 1}}},
                         {120, 129, {{F, 1}}},
                     });
  EXPECT_EQ(run.steps.size(), 130u);
  // HF pipeline: finished rows keep computing padding tokens; their slots are bubbles.
  EXPECT_EQ(run.steps[5].shape.num_decodes, 4);
  EXPECT_EQ(run.steps[5].bubble_slots, 1);
  EXPECT_EQ(run.steps[50].shape.num_decodes, 4);
  EXPECT_EQ(run.steps[50].bubble_slots, 3);
  const auto& recs = run.result.requests;
  EXPECT_DOUBLE_EQ(ms(recs[D].finished), 1000.0);
  EXPECT_DOUBLE_EQ(ms(recs[E].first_scheduled), 1000.0);
  // Bubbles: 1*5 + 2*40 + 3*50 slots of A, C, B after they end, then 1*10 of E.
  const double bubbles = 5 + 80 + 150 + 10;
  const double useful = 4 * 5 + 3 * 5 + 2 * 40 + 50 + 2 * 20 + 10;
  EXPECT_NEAR(run.result.summary.bubble_fraction, bubbles / (bubbles + useful), 1e-12);
}

TEST(WriteUpScenario, FasterTransformerStyleStopsComputingFinishedRowsButKeepsTheirSlots) {
  const CostModel cm = rig_cost_model();
  const RecordedRun run = run_preset("ft-static", write_up_workload(), cm, {{"batch_size", "4"}});
  expect_states(run, {{5, 9, {{B, 1}, {C, 1}, {D, 1}}}, {50, 99, {{D, 1}}}, {100, 100, {{E, 4}, {F, 4}}}});
  EXPECT_EQ(run.steps[50].shape.num_decodes, 1);  // no compute for finished rows
  EXPECT_EQ(run.steps[50].bubble_slots, 3);       // but their slots stay idle
}

TEST(WriteUpScenario, ContinuousAdmitsEWhenAEndsAndFWhenCEnds) {
  const CostModel cm = rig_cost_model();
  const RecordedRun run = run_preset("continuous", write_up_workload(), cm, {{"max_num_seqs", "4"}});
  expect_states(run, {
                         {0, 0, {{A, 4}, {B, 4}, {C, 4}, {D, 4}}},
                         {1, 4, {{A, 1}, {B, 1}, {C, 1}, {D, 1}}},
                         {5, 5, {{B, 1}, {C, 1}, {D, 1}, {E, 4}}},  // A ended in iteration 4: E takes its slot
                         {6, 9, {{B, 1}, {C, 1}, {D, 1}, {E, 1}}},
                         {10, 10, {{B, 1}, {D, 1}, {E, 1}, {F, 4}}},  // C ended in iteration 9: F takes its slot
                         {11, 24, {{B, 1}, {D, 1}, {E, 1}, {F, 1}}},
                         {25, 39, {{B, 1}, {D, 1}, {F, 1}}},
                         {40, 49, {{B, 1}, {D, 1}}},
                         {50, 99, {{D, 1}}},
                     });
  EXPECT_EQ(run.steps.size(), 100u);
  EXPECT_EQ(run.result.summary.bubble_fraction, 0.0);
  EXPECT_DOUBLE_EQ(ms(run.result.requests[E].first_token), 60.0);
  EXPECT_DOUBLE_EQ(ms(run.result.requests[F].first_token), 110.0);
}

TEST(WriteUpScenario, ExclusivePrefillAdmitsInAPrefillOnlyIteration) {
  const CostModel cm = rig_cost_model();
  const RecordedRun run = run_preset("vllm-v0", write_up_workload(), cm, {{"max_num_seqs", "4"}});
  expect_states(run, {
                         {0, 0, {{A, 4}, {B, 4}, {C, 4}, {D, 4}}},
                         {1, 4, {{A, 1}, {B, 1}, {C, 1}, {D, 1}}},
                         {5, 5, {{E, 4}}},  // the decodes of B, C, D stall for E's prefill
                         {6, 10, {{B, 1}, {C, 1}, {D, 1}, {E, 1}}},
                         {11, 11, {{F, 4}}},
                         {12, 12, {{B, 1}, {D, 1}, {E, 1}, {F, 1}}},
                     });
}

// A long prompt L arrives (t = 25 ms, during iteration 2) while A and B decode.
Workload long_prompt_workload() { return make_workload({{0, 8, 20}, {0, 8, 20}, {0.025, 200, 3}}); }
constexpr RequestId L = 2;

TEST(LongPromptScenario, ExclusivePrefillStallsTheDecodesForAnIteration) {
  const CostModel cm = rig_cost_model();
  const RecordedRun run = run_preset("vllm-v0", long_prompt_workload(), cm);
  expect_states(run, {
                         {0, 0, {{A, 8}, {B, 8}}},
                         {1, 2, {{A, 1}, {B, 1}}},
                         {3, 3, {{L, 200}}},
                         {4, 5, {{A, 1}, {B, 1}, {L, 1}}},
                     });
  // A's gap between tokens spans the stalled iteration.
  EXPECT_DOUBLE_EQ(ms(run.result.requests[A].max_tbt), 20.0);
}

TEST(LongPromptScenario, MixedPrefillRunsTheWholePromptWithTheDecodes) {
  const CostModel cm = rig_cost_model();
  const RecordedRun run = run_preset("continuous", long_prompt_workload(), cm);
  expect_states(run, {{1, 2, {{A, 1}, {B, 1}}}, {3, 3, {{A, 1}, {B, 1}, {L, 200}}}});
  EXPECT_DOUBLE_EQ(ms(run.result.requests[A].max_tbt), 10.0);
}

TEST(LongPromptScenario, ChunkedPrefillNeverStallsTheDecodes) {
  const CostModel cm = rig_cost_model();
  const RecordedRun run = run_preset("sarathi", long_prompt_workload(), cm, {{"max_num_batched_tokens", "64"}});
  expect_states(run, {
                         {0, 0, {{A, 8}, {B, 8}}},
                         {1, 2, {{A, 1}, {B, 1}}},
                         {3, 5, {{A, 1}, {B, 1}, {L, 62}}},  // decodes first, the chunk gets the rest
                         {6, 6, {{A, 1}, {B, 1}, {L, 14}}},  // 3 * 62 + 14 = 200: L samples its first token
                         {7, 8, {{A, 1}, {B, 1}, {L, 1}}},
                     });
  // Each chunk attends to the KV of the earlier ones: the cost model sees its context offset.
  for (int it = 3; it <= 6; ++it) {
    ASSERT_EQ(run.steps[it].shape.prefills.size(), 1u);
    EXPECT_EQ(run.steps[it].shape.prefills[0].context_before, 62 * (it - 3));
    EXPECT_EQ(run.steps[it].item(L)->context_before, 62 * (it - 3));
    EXPECT_EQ(run.steps[it].shape.num_decodes, 2);
  }
  EXPECT_EQ(run.steps[5].shape.num_sampled, 2);  // a partial chunk does not sample
  EXPECT_EQ(run.steps[6].shape.num_sampled, 3);
  EXPECT_DOUBLE_EQ(ms(run.result.requests[A].max_tbt), 10.0);
  EXPECT_DOUBLE_EQ(ms(run.result.requests[L].first_token), 70.0);
}

TEST(LongPromptScenario, TheCostModelChargesAChunkForTheContextItAttendsTo) {
  // On a real model the same 62-token chunk costs more the more KV it attends to.
  const CostModel cm(resolve_model("opt-13b"), resolve_gpu("a100-40gb"));
  BatchShape first, last;
  first.add_prefill(62, 0);
  last.add_prefill(62, 4000);
  EXPECT_GT(cm.iteration(last).prefill_attention_s, cm.iteration(first).prefill_attention_s);
}

TEST(ChunkedPrefill, LongPrefillThresholdCapsOneRequestsChunk) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0, 100, 2}, {0, 100, 2}});
  // Bounded to one partial prefill at a time (vLLM v0's concurrent partial prefills; not a
  // preset's default): B waits until A's last chunk leaves room to start.
  const RecordedRun one = run_preset(
      "sarathi", w, cm,
      {{"max_num_batched_tokens", "256"}, {"long_prefill_token_threshold", "32"}, {"max_num_partial_prefills", "1"}});
  expect_states(one, {
                         {0, 2, {{A, 32}}},          // B would be cut too, while A's prefill is unfinished
                         {3, 3, {{A, 4}, {B, 32}}},  // A's last chunk completes its prefill: B may start
                         {4, 4, {{A, 1}, {B, 32}}},
                         {5, 5, {{B, 32}}},
                         {6, 6, {{B, 4}}},
                         {7, 7, {{B, 1}}},
                     });
  EXPECT_EQ(one.steps.size(), 8u);
  // Two partial prefills may advance together.
  const RecordedRun two = run_preset(
      "sarathi", w, cm,
      {{"max_num_batched_tokens", "256"}, {"long_prefill_token_threshold", "32"}, {"max_num_partial_prefills", "2"}});
  expect_states(two, {{0, 2, {{A, 32}, {B, 32}}}, {3, 3, {{A, 4}, {B, 4}}}, {4, 4, {{A, 1}, {B, 1}}}});
  // Unbounded, the default: the same here, where two chunks never fill the budget.
  const RecordedRun any =
      run_preset("sarathi", w, cm, {{"max_num_batched_tokens", "256"}, {"long_prefill_token_threshold", "32"}});
  expect_states(any, {{0, 2, {{A, 32}, {B, 32}}}, {3, 3, {{A, 4}, {B, 4}}}, {4, 4, {{A, 1}, {B, 1}}}});
}

// vLLM v1 caps each request's chunk at long_prefill_token_threshold in both loops of
// schedule() and never bounds the partial prefills (max_num_partial_prefills is not read by
// vllm/v1/core/sched/scheduler.py): the budget is filled by as many capped chunks as it
// holds. Translated from vLLM's tests/v1/core/test_scheduler.py
// test_schedule_concurrent_partial_requests (main 2026-05): three 800-token prompts, budget
// 1024, threshold 400.
TEST(ChunkedPrefill, SeveralPartialPrefillsFillTheBudgetWhenEachChunkIsCapped) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0, 800, 3}, {0, 800, 3}, {0, 800, 3}});
  const std::map<std::string, std::string> options = {{"max_num_batched_tokens", "1024"},
                                                      {"long_prefill_token_threshold", "400"}};
  const RecordedRun run = run_preset("vllm", w, cm, options);
  expect_states(run, {
                         {0, 0, {{A, 400}, {B, 400}, {C, 224}}},  // C gets 1024 - 400 - 400
                         {1, 1, {{A, 400}, {B, 400}, {C, 224}}},  // A and B complete their prompts
                         {2, 2, {{A, 1}, {B, 1}, {C, 352}}},      // 800 - 224 - 224
                         {3, 3, {{A, 1}, {B, 1}, {C, 1}}},
                         {4, 4, {{C, 1}}},
                     });
  EXPECT_EQ(run.steps.size(), 5u);
  // Bounded to one partial prefill (max_num_partial_prefills=1, which v1 refuses), 624 tokens
  // of the first step's budget stay idle and every prompt's first token comes later.
  auto bounded_options = options;
  bounded_options["max_num_partial_prefills"] = "1";
  const RecordedRun bounded = run_preset("vllm", w, cm, bounded_options);
  expect_states(bounded, {
                             {0, 0, {{A, 400}}},
                             {1, 1, {{A, 400}, {B, 400}}},
                             {2, 2, {{A, 1}, {B, 400}, {C, 400}}},
                             {3, 3, {{A, 1}, {B, 1}, {C, 400}}},
                             {4, 4, {{B, 1}, {C, 1}}},
                             {5, 5, {{C, 1}}},
                         });
  EXPECT_EQ(bounded.steps.size(), 6u);
}

// Full-prompt admission (admission=full_prompt, on in the vllm and sarathi presets). 10 blocks
// of 4 tokens, budget 8. A (prompt 8, output 20) grows from 2 to 7 blocks. B (prompt 32, 8
// blocks, one output token) arrives in iteration 1; C (prompt 4, output 2) in iteration 2.
Workload full_prompt_workload() { return make_workload({{0, 8, 20}, {0.015, 32, 1}, {0.025, 4, 2}}); }
// (Tables of the synchronous scheduler's steps, as vLLM's Scheduler tests drive it; the step of
// lag async scheduling adds is AsyncScheduling's.)
std::map<std::string, std::string> full_prompt_options(const char* admission) {
  return {
      {"block_size", "4"}, {"max_num_batched_tokens", "8"}, {"admission", admission}, {"async_scheduling", "false"}};
}
RigOptions ten_blocks_of_four() {
  RigOptions o;
  o.kv_capacity_tokens = 40;
  return o;
}

// vLLM v1 schedule(), WAITING loop (vllm/v1/core/sched/scheduler.py, main 2026-05):
// allocate_slots(full_sequence_must_fit=scheduler_reserve_full_isl) returns None unless the
// blocks of the whole prompt are free, and None breaks the loop. Sarathi-Serve's
// SarathiScheduler._schedule breaks on block_manager.can_allocate, which counts every prompt
// block. vLLM's tests have no scheduler test of the option; the KV manager's refusal is
// tests/v1/core/test_prefix_caching.py test_can_fit_full_sequence_full_attention_still_gates_oversized.
TEST(FullPromptAdmission, APromptWhoseKvIsNotFreeWaitsAndPreemptsNothing) {
  const CostModel cm = rig_cost_model(ten_blocks_of_four());
  for (const char* name : {"vllm", "sarathi"}) {
    SCOPED_TRACE(name);
    // From the presets, without the admission option.
    auto options = full_prompt_options("full_prompt");
    options.erase("admission");
    const RecordedRun run = run_preset(name, full_prompt_workload(), cm, options);
    expect_states(run, {
                           {0, 0, {{A, 8}}},
                           // B's first chunk (2 blocks) would fit in the 7 free blocks, its 8 never do while A
                           // runs: B waits. C (2 blocks) would fit too, but stays behind B: v1 breaks, it does
                           // not skip (FCFS, head-of-line).
                           {1, 19, {{A, 1}}},
                           {20, 23, {{B, 8}}},  // A has ended: B's 32 tokens in chunks of 8
                           {24, 24, {{C, 4}}},
                           {25, 25, {{C, 1}}},
                       });
    EXPECT_EQ(run.steps.size(), 26u);
    EXPECT_EQ(run.result.summary.preemptions, 0);
    EXPECT_EQ(run.steps[19].kv_allocated_tokens, 0);  // A used 7 blocks, then ended
    EXPECT_EQ(run.steps[18].kv_allocated_tokens, 28);
  }
}

// The old rule (admission=first_chunk; vLLM v1 before v0.19.0, or with
// --no-scheduler-reserve-full-isl): B is admitted for its first chunk, grows until A's next
// block leaves none, and is preempted and recomputed again and again until A ends; C waits
// behind it either way. The thrashing PR #37307 describes.
TEST(FullPromptAdmission, AdmittingTheFirstChunkPreemptsAndRecomputes) {
  const CostModel cm = rig_cost_model(ten_blocks_of_four());
  // Without prefix caching, so that every readmission recomputes B from scratch.
  auto options = full_prompt_options("first_chunk");
  options["prefix_caching"] = "false";
  const RecordedRun run = run_preset("vllm", full_prompt_workload(), cm, options);
  expect_states(run, {
                         {0, 0, {{A, 8}}},
                         {1, 1, {{A, 1}}},
                         {2, 4, {{A, 1}, {B, 7}}},  // 21 tokens of B: 6 blocks, A 3: 9 of 10
                         {5, 5, {{A, 1}}},          // A's 4th block leaves B none: B (the newest) is preempted
                         {6, 8, {{A, 1}, {B, 7}}},
                         {9, 9, {{A, 1}}},
                         {10, 11, {{A, 1}, {B, 7}}},
                         {12, 12, {{A, 1}}},
                         {13, 14, {{A, 1}, {B, 7}}},
                         {15, 15, {{A, 1}}},
                         {16, 16, {{A, 1}, {B, 7}}},
                         {17, 17, {{A, 1}}},
                         {18, 18, {{A, 1}, {B, 7}}},
                         {19, 19, {{A, 1}}},
                         {20, 23, {{B, 8}}},
                         {24, 24, {{C, 4}}},
                         {25, 25, {{C, 1}}},
                     });
  EXPECT_EQ(run.steps.size(), 26u);
  EXPECT_EQ(run.result.requests[B].preemptions, 6);
  EXPECT_EQ(run.result.summary.preemptions, 6);
  // B prefills 12 chunks of 7 tokens that are thrown away before its 32 that count.
  auto prefilled_by_b = [](const RecordedRun& r) {
    int64_t tokens = 0;
    for (const Step& s : r.steps) {
      if (const BatchItem* item = s.item(B)) tokens += item->new_tokens;
    }
    return tokens;
  };
  EXPECT_EQ(prefilled_by_b(run), 12 * 7 + 32);
  // With prefix caching (the preset's default) a readmitted B finds its full blocks that A's
  // growth has not taken yet, and throws less work away.
  const RecordedRun cached = run_preset("vllm", full_prompt_workload(), cm, full_prompt_options("first_chunk"));
  EXPECT_GT(cached.result.requests[B].cached_tokens, 0);
  EXPECT_LT(prefilled_by_b(cached), prefilled_by_b(run));
  // The versioned preset of 2025's V1 engine schedules exactly so without the option.
  options.erase("admission");
  const RecordedRun v2025 = run_preset("vllm-v1-2025", full_prompt_workload(), cm, options);
  ASSERT_EQ(v2025.steps.size(), run.steps.size());
  for (size_t i = 0; i < run.steps.size(); ++i) EXPECT_EQ(v2025.steps[i].items.size(), run.steps[i].items.size()) << i;
  EXPECT_EQ(v2025.result.summary.preemptions, 6);
}

// v1's check counts the prefix-cache hit as allocate_slots does: the blocks to allocate for
// the whole prompt, less the cached ones (plus any cached block at ref 0, which leaves the
// free pool when shared). 5 blocks of 16, budget 8: A (prompt 32, output 6) holds 3 blocks
// when B (prompt 48 starting with A's 32 tokens) arrives in iteration 4.
TEST(FullPromptAdmission, APrefixCacheHitCountsAgainstTheWholePrompt) {
  RigOptions o;
  o.kv_capacity_tokens = 80;
  const CostModel cm = rig_cost_model(o);
  const Workload w = make_workload({{0, 32, 6}, {0.045, 48, 2}});
  const PrefixBlockHashes hashes = prefix_hashes(16, {{1, 2}, {1, 2, 3}});
  const std::map<std::string, std::string> options = {{"max_num_batched_tokens", "8"}, {"async_scheduling", "false"}};
  // Cached: B needs one new block for its 48 tokens, 2 are free: admitted after its 32.
  const RecordedRun hit = run_preset("vllm", w, cm, options, &hashes);
  expect_states(hit, {{0, 3, {{A, 8}}},
                      {4, 4, {{A, 1}}},
                      {5, 6, {{A, 1}, {B, 7}}},
                      {7, 7, {{A, 1}, {B, 2}}},
                      {8, 8, {{A, 1}, {B, 1}}}});
  EXPECT_EQ(hit.steps[5].item(B)->context_before, 32);
  // Without caching the whole prompt needs 3 blocks: B waits for A to end, although its first
  // chunk (1 block) would fit.
  auto off_options = options;
  off_options["prefix_caching"] = "false";
  const RecordedRun off = run_preset("vllm", w, cm, off_options, &hashes);
  expect_states(off, {{0, 3, {{A, 8}}}, {4, 8, {{A, 1}}}, {9, 14, {{B, 8}}}, {15, 15, {{B, 1}}}});
}

TEST(ChunkedPrefill, NewRequestsFillTheBudgetLeftByTheDecodes) {
  const CostModel cm = rig_cost_model();
  // A decodes; B and C arrive later with 40-token prompts; budget 48. (The synchronous
  // scheduler's steps: async scheduling would take B and C a step later, AsyncScheduling.*.)
  const Workload w = make_workload({{0, 4, 10}, {0.015, 40, 3}, {0.015, 40, 3}});
  const RecordedRun run = run_preset(
      "vllm", w, cm, {{"max_num_batched_tokens", "48"}, {"max_num_seqs", "4"}, {"async_scheduling", "false"}});
  expect_states(run, {
                         {0, 0, {{A, 4}}},
                         {1, 1, {{A, 1}}},
                         // t = 20 ms: A's decode, B's whole prompt (40), C cut to the remaining 7.
                         {2, 2, {{A, 1}, {B, 40}, {C, 7}}},
                         {3, 3, {{A, 1}, {B, 1}, {C, 33}}},
                     });
}

// KV exhaustion: 10 blocks of 4 tokens; A and B (prompt 8, output 20) each grow to 7 blocks.
// Both fit up to 20 tokens (5 blocks each); when A needs its 6th block in iteration 13 the
// newest running request, B, is preempted; it comes back when A has finished.
Workload kv_pressure_workload() { return make_workload({{0, 8, 20}, {0, 8, 20}}); }
RigOptions kv_pressure_rig() {
  RigOptions o;
  o.kv_capacity_tokens = 40;
  return o;
}

void expect_preempted_and_readmitted(const RecordedRun& run, int32_t b_readmit_tokens) {
  expect_states(run, {
                         {0, 0, {{A, 8}, {B, 8}}},
                         {1, 12, {{A, 1}, {B, 1}}},
                         {13, 19, {{A, 1}}},  // B preempted; it does not fit again until A ends
                         {20, 20, {{B, b_readmit_tokens}}},
                         {21, 26, {{B, 1}}},
                     });
  EXPECT_EQ(run.steps.size(), 27u);
  EXPECT_EQ(run.result.requests[A].preemptions, 0);
  EXPECT_EQ(run.result.requests[B].preemptions, 1);
  EXPECT_EQ(run.result.summary.preemptions, 1);
  EXPECT_EQ(run.result.summary.requests_completed, 2);
  EXPECT_EQ(run.result.summary.output_tokens, 40);
}

// TGI's router (router/src/infer.rs): A and B decode; C arrives during iteration 1. One waiting
// request is fewer than floor(2 running x 1.2) = 2, so C waits until the 5th step after the
// last prefill (waiting_tokens 1, 2, ... reaches max_waiting_tokens), then is prefilled alone.
TEST(TgiWaitRule, ANewRequestWaitsForMaxWaitingTokensUnlessEnoughFitAtOnce) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0, 4, 30}, {0, 4, 30}, {0.015, 4, 5}});
  const RecordedRun held = run_preset("tgi-router", w, cm, {{"max_waiting_tokens", "5"}});
  expect_states(
      held, {{0, 0, {{A, 4}, {B, 4}}}, {1, 4, {{A, 1}, {B, 1}}}, {5, 5, {{C, 4}}}, {6, 9, {{A, 1}, {B, 1}, {C, 1}}}});
  EXPECT_DOUBLE_EQ(ms(held.result.requests[C].first_scheduled), 50.0);
  // The same on paged KV: the rule is independent of the KV manager.
  expect_states(run_preset("vllm-v0", w, cm, {{"max_waiting_tokens", "5"}}),
                {{1, 4, {{A, 1}, {B, 1}}}, {5, 5, {{C, 4}}}});
  // With waiting_served_ratio 0.5, one waiting request is enough: C is prefilled at once.
  const RecordedRun eager =
      run_preset("tgi-router", w, cm, {{"max_waiting_tokens", "5"}, {"waiting_served_ratio", "0.5"}});
  expect_states(eager, {{1, 1, {{A, 1}, {B, 1}}}, {2, 2, {{C, 4}}}});
  // Off (max_waiting_tokens 0): admitted as soon as it is there, as vLLM does.
  expect_states(run_preset("tgi-router", w, cm, {{"max_waiting_tokens", "0"}}), {{2, 2, {{C, 4}}}});
}

// "Enough fit at once" is a dry run of admission: two waiting requests count only if the KV
// reservation left holds both, else the rule waits its full max_waiting_tokens steps.
TEST(TgiWaitRule, OnlyRequestsThatFitCountAsEnough) {
  RigOptions o;
  o.kv_capacity_tokens = 80;
  const CostModel cm = rig_cost_model(o);
  // A reserves 4 + 30 - 1 = 33 tokens; C and D reserve 33 each: 47 left holds one of them.
  const Workload w = make_workload({{0, 4, 30}, {0.005, 4, 30}, {0.005, 4, 30}});
  const RecordedRun run = run_preset("tgi-router", w, cm, {{"max_waiting_tokens", "4"}, {"waiting_served_ratio", "1"}});
  // floor(1 x 1) = 1 request is enough and one fits: B is admitted at once, C never fits.
  expect_states(run, {{0, 0, {{A, 4}}}, {1, 1, {{B, 4}}}, {2, 29, {{A, 1}, {B, 1}}}});
  const RecordedRun strict =
      run_preset("tgi-router", w, cm, {{"max_waiting_tokens", "4"}, {"waiting_served_ratio", "2"}});
  // 2 needed, 1 fits: B waits for the 4th step after A's prefill.
  expect_states(strict, {{0, 0, {{A, 4}}}, {1, 3, {{A, 1}}}, {4, 4, {{B, 4}}}});
}

TEST(Preemption, RecomputeFreesTheNewestAndReprefillsPromptPlusGenerated) {
  const CostModel cm = rig_cost_model(kv_pressure_rig());
  for (const char* name : {"continuous", "vllm-v0", "vllm"}) {
    SCOPED_TRACE(name);
    const RecordedRun run = run_preset(name, kv_pressure_workload(), cm, {{"block_size", "4"}});
    // B had 13 tokens when preempted: it prefills 8 + 13 = 21 tokens again from scratch; with
    // prefix caching (on in the vllm preset) its 3 full blocks are still in the free queue,
    // not yet taken, and it finds them (vLLM v1 get_computed_blocks): 9 tokens after 12.
    const bool cached = std::string(name) == "vllm";
    expect_preempted_and_readmitted(run, cached ? 9 : 21);
    EXPECT_EQ(run.steps[20].item(B)->context_before, cached ? 12 : 0);
    EXPECT_EQ(run.result.requests[B].cached_tokens, cached ? 12 : 0);
    EXPECT_EQ(run.steps[12].kv_allocated_tokens, 40);  // every block in use before preempting
    EXPECT_EQ(run.steps[13].kv_allocated_tokens, 24);  // B's 5 blocks freed, A grew by one
  }
}

TEST(Preemption, SwapMovesTheVictimsKvOverPcieBothWays) {
  const CostModel cm = rig_cost_model(kv_pressure_rig());
  const RecordedRun run =
      run_preset("continuous", kv_pressure_workload(), cm, {{"block_size", "4"}, {"preemption", "swap"}});
  // B keeps its 20 computed tokens on the host and resumes with a decode after them.
  expect_preempted_and_readmitted(run, 1);
  EXPECT_EQ(run.steps[20].item(B)->context_before, 20);
  // 20 tokens * 256 bytes at 256 kB/s = 20 ms, out in iteration 13 and back in iteration 20.
  EXPECT_DOUBLE_EQ(ms(run.steps[13].duration), 30.0);
  EXPECT_DOUBLE_EQ(ms(run.steps[20].duration), 30.0);
  EXPECT_DOUBLE_EQ(ms(run.steps[14].duration), 10.0);
}

TEST(Preemption, SwapInComesBeforeNewRequests) {
  const CostModel cm = rig_cost_model(kv_pressure_rig());
  // C (small) arrives while B is swapped out: vLLM v0 admits no prefill while `swapped` is
  // non-empty, so C waits for B to be swapped back in even though C would fit earlier.
  const Workload w = make_workload({{0, 8, 20}, {0, 8, 20}, {0.15, 2, 2}});
  const RecordedRun run = run_preset("continuous", w, cm, {{"block_size", "4"}, {"preemption", "swap"}});
  expect_states(run, {{13, 19, {{A, 1}}}, {20, 20, {{B, 1}, {C, 2}}}});
}

TEST(Preemption, ReservedKvNeverPreempts) {
  const CostModel cm = rig_cost_model(kv_pressure_rig());
  // Each request reserves 8 + 20 - 1 = 27 tokens up front: B waits until A ends.
  const RecordedRun run = run_preset("continuous", kv_pressure_workload(), cm, {{"kv", "reserve"}});
  expect_states(run, {{0, 0, {{A, 8}}}, {1, 19, {{A, 1}}}, {20, 20, {{B, 8}}}, {21, 39, {{B, 1}}}});
  EXPECT_EQ(run.result.summary.preemptions, 0);
  EXPECT_EQ(run.steps[0].kv_allocated_tokens, 27);
  EXPECT_EQ(run.steps[0].kv_used_tokens, 8);
}

TEST(KvUtilisation, FractionsAreOfTheWholeKvMemoryNotOfTheBlocksCarvedFromIt) {
  RigOptions o;
  o.kv_capacity_tokens = 40;  // 2 blocks of 16 (32 tokens); 8 tokens of memory hold no block
  const CostModel cm = rig_cost_model(o);
  // 20 + 13 - 1 = 32 tokens: both blocks, full, in the last iteration.
  const RecordedRun run = run_preset("continuous", make_workload({{0, 20, 13}}), cm, {{"block_size", "16"}});
  EXPECT_EQ(run.result.kv_capacity_tokens, 40);  // what summary.json reports as kv.capacity_tokens
  // Over the reported capacity, as README "Outputs" defines them and the KV plot draws them.
  EXPECT_DOUBLE_EQ(run.result.summary.kv_allocated_fraction_peak, 32.0 / 40.0);
  EXPECT_DOUBLE_EQ(run.result.summary.kv_used_fraction_peak, 32.0 / 40.0);
  // Iterations of 10 ms: the prefill holds 20 tokens in 2 blocks, then decodes grow by one.
  double used_area = 0;
  for (int tokens = 20; tokens <= 32; ++tokens) used_area += tokens;
  EXPECT_NEAR(run.result.summary.kv_used_fraction_mean, used_area / 13 / 40.0, 1e-12);
  EXPECT_NEAR(run.result.summary.kv_allocated_fraction_mean, 32.0 / 40.0, 1e-12);
}

TEST(ReservedKv, OrcaReservesMaxModelLenSoFewerRequestsRunAtOnce) {
  RigOptions o;
  o.kv_capacity_tokens = 200;
  o.max_context_tokens = 64;
  const CostModel cm = rig_cost_model(o);
  const Workload w = make_workload({{0, 4, 4}, {0, 4, 4}, {0, 4, 4}, {0, 4, 4}, {0, 4, 4}});
  // 200 / 64 = 3 reservations of max_model_len at a time.
  const RecordedRun orca = run_preset("orca", w, cm);
  expect_states(orca, {{0, 0, {{0, 4}, {1, 4}, {2, 4}}}, {1, 3, {{0, 1}, {1, 1}, {2, 1}}}, {4, 4, {{3, 4}, {4, 4}}}});
  EXPECT_EQ(orca.steps[0].kv_allocated_tokens, 3 * 64);
  // Paged KV holds only what is written: all five run at once.
  const RecordedRun paged = run_preset("continuous", w, cm);
  expect_states(paged, {{0, 0, {{0, 4}, {1, 4}, {2, 4}, {3, 4}, {4, 4}}}});
}

TEST(Admission, MaxNumSeqsBoundsTheRunningSet) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0, 4, 3}, {0, 4, 3}, {0, 4, 3}});
  const RecordedRun run = run_preset("continuous", w, cm, {{"max_num_seqs", "2"}});
  expect_states(run, {{0, 0, {{A, 4}, {B, 4}}}, {1, 2, {{A, 1}, {B, 1}}}, {3, 3, {{C, 4}}}});
}

TEST(Admission, FcfsHeadOfLineASmallRequestNeverOvertakes) {
  RigOptions o;
  o.kv_capacity_tokens = 40;  // 10 blocks of 4
  const CostModel cm = rig_cost_model(o);
  // A holds 5 blocks; B needs 6 and waits; C needs 1 and would fit, but stays behind B.
  const Workload w = make_workload({{0, 20, 3}, {0, 24, 2}, {0, 4, 2}});
  for (const char* name : {"continuous", "vllm-v0", "vllm"}) {
    SCOPED_TRACE(name);
    const RecordedRun run = run_preset(name, w, cm, {{"block_size", "4"}});
    expect_states(run, {{0, 0, {{A, 20}}}, {1, 2, {{A, 1}}}, {3, 3, {{B, 24}, {C, 4}}}});
  }
}

TEST(Admission, WatermarkKeepsBlocksFreeAtAdmissionButNotForGrowth) {
  RigOptions o;
  o.kv_capacity_tokens = 40;  // 10 blocks of 4
  const CostModel cm = rig_cost_model(o);
  // watermark 0.2 keeps 2 blocks free at admission. A (8 tokens, 2 blocks) and B (20 tokens,
  // 5 blocks) are admitted (10 - 7 = 3 >= 2); C (8 tokens) would leave 1 < 2: it waits,
  // although 3 blocks are free.
  const Workload w = make_workload({{0, 8, 3}, {0, 20, 3}, {0, 8, 3}});
  const RecordedRun run = run_preset("vllm-v0", w, cm, {{"block_size", "4"}, {"watermark", "0.2"}});
  expect_states(run, {{0, 0, {{A, 8}, {B, 20}}}, {1, 2, {{A, 1}, {B, 1}}}, {3, 3, {{C, 8}}}});
  // A request whose whole footprint leaves less than the watermark even in an empty cache is
  // rejected on arrival, not looped on. (v0's NEVER looks at the prompt only — 8 blocks here,
  // 10 - 8 >= 2 — but after a recompute preemption the 9-block re-prefill could never pass
  // the watermark again; see ContinuousPolicy::on_arrival.)
  const Workload big = make_workload({{0, 30, 6}});  // 35 tokens: 9 blocks, 10 - 9 < 2
  const RecordedRun r = run_preset("vllm-v0", big, cm, {{"block_size", "4"}, {"watermark", "0.2"}});
  EXPECT_EQ(r.result.summary.requests_rejected, 1);
  EXPECT_TRUE(r.steps.empty());
}

TEST(Rejection, ARequestThatCanNeverFitIsRejectedNotLoopedOn) {
  RigOptions o;
  o.kv_capacity_tokens = 40;
  o.max_context_tokens = 64;
  const CostModel cm = rig_cost_model(o);
  // X needs 30 + 20 - 1 = 49 KV tokens, more than the whole cache; Y exceeds the context.
  const Workload w = make_workload({{0, 8, 4}, {0, 30, 20}, {0, 60, 10}, {0, 8, 4}});
  for (const PolicyInfo& info : registered_policies()) {
    SCOPED_TRACE(info.name);
    const RecordedRun run = run_preset(info.name, w, cm);
    const auto& recs = run.result.requests;
    EXPECT_EQ(recs[1].state, RequestState::kRejected);
    EXPECT_NE(recs[1].reject_reason.find("KV"), std::string::npos) << recs[1].reject_reason;
    EXPECT_EQ(recs[2].state, RequestState::kRejected);
    EXPECT_NE(recs[2].reject_reason.find("64"), std::string::npos) << recs[2].reject_reason;
    if (info.name == "orca") {
      // Orca reserves max_model_len (64) per request, more than the 40-token cache: nothing
      // can ever be admitted, and every request says so.
      EXPECT_EQ(run.result.summary.requests_rejected, 4);
      EXPECT_NE(recs[0].reject_reason.find("KV"), std::string::npos) << recs[0].reject_reason;
      EXPECT_TRUE(run.steps.empty());
    } else {
      EXPECT_EQ(run.result.summary.requests_completed, 2);
      EXPECT_EQ(run.result.summary.requests_rejected, 2);
    }
  }
}

TEST(Rejection, KvMemorySmallerThanOneBlockIsAUserErrorThatSaysSo) {
  RigOptions o;
  o.kv_capacity_tokens = 10;
  const CostModel cm = rig_cost_model(o);
  const Workload w = make_workload({{0, 2, 2}});
  const std::string msg = user_error_of([&] { run_preset("continuous", w, cm); });
  EXPECT_NE(msg.find("holds 10 tokens, less than one block of block_size=16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(--gpu-memory-utilization"), std::string::npos) << msg;  // the rule that sized it
  // A block that fits is fine.
  EXPECT_EQ(run_preset("continuous", w, cm, {{"block_size", "8"}}).result.summary.requests_completed, 1);
}

TEST(Rejection, APromptLongerThanTheBudgetIsRejectedUnlessChunked) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0, 20, 2}, {0, 4, 2}});
  const RecordedRun plain = run_preset("continuous", w, cm, {{"max_num_batched_tokens", "16"}});
  EXPECT_EQ(plain.result.requests[A].state, RequestState::kRejected);
  EXPECT_NE(plain.result.requests[A].reject_reason.find("max_num_batched_tokens"), std::string::npos);
  EXPECT_EQ(plain.result.requests[B].state, RequestState::kFinished);
  const RecordedRun chunked = run_preset("sarathi", w, cm, {{"max_num_batched_tokens", "16"}});
  expect_states(chunked, {{0, 0, {{A, 16}}}, {1, 1, {{A, 4}, {B, 4}}}, {2, 2, {{A, 1}, {B, 1}}}});
}

TEST(Preemption, ARecomputedPrefillLongerThanTheBudgetIsChunkedNotDroppedOrOverBudget) {
  // Budget 20 without chunking: prompts of 8 pass, but B, preempted after 17 output tokens,
  // must prefill 25 tokens again. vLLM v0 would drop it (prompt_limit); we cut that one
  // re-prefill at the budget. 12 blocks of 4: both fit up to 24 tokens each.
  RigOptions o;
  o.kv_capacity_tokens = 48;
  const CostModel cm = rig_cost_model(o);
  const Workload w = make_workload({{0, 8, 30}, {0, 8, 30}});
  const RecordedRun run = run_preset("continuous", w, cm, {{"block_size", "4"}, {"max_num_batched_tokens", "20"}});
  // At iteration 17 A needs a 7th block: B (17 tokens generated) is preempted.
  expect_states(run, {{0, 0, {{A, 8}, {B, 8}}},
                      {1, 16, {{A, 1}, {B, 1}}},
                      {17, 29, {{A, 1}}},
                      {30, 30, {{B, 20}}},  // B's 8 + 17 = 25 tokens, cut at the budget
                      {31, 31, {{B, 5}}},
                      {32, 43, {{B, 1}}}});
  EXPECT_EQ(run.steps.size(), 44u);
  for (const Step& s : run.steps) EXPECT_LE(s.shape.total_tokens(), 20);
  EXPECT_EQ(run.result.summary.requests_completed, 2);
}

TEST(StaticBatching, TimeoutStartsAPartialBatch) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0, 4, 3}, {0.010, 4, 3}, {1.0, 4, 3}, {1.0, 4, 3}, {1.0, 4, 3}, {1.0, 4, 3}});
  const RecordedRun timed = run_preset("hf-static", w, cm, {{"batch_size", "4"}, {"batch_timeout_s", "0.05"}});
  expect_states(timed, {{0, 0, {{A, 4}, {B, 4}}}, {3, 3, {{C, 4}, {D, 4}, {E, 4}, {F, 4}}}});
  EXPECT_DOUBLE_EQ(ms(timed.steps[0].start), 50.0);  // A waited batch_timeout_s
  EXPECT_DOUBLE_EQ(ms(timed.steps[3].start), 1000.0);
  // Without a timeout the server waits for a full batch.
  const RecordedRun full = run_preset("hf-static", w, cm, {{"batch_size", "4"}});
  expect_states(full, {{0, 0, {{A, 4}, {B, 4}, {C, 4}, {D, 4}}}, {3, 3, {{E, 4}, {F, 4}}}});
  EXPECT_DOUBLE_EQ(ms(full.steps[0].start), 1000.0);
}

TEST(StaticBatching, PaddingAndARectangularReservation) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0, 4, 2}, {0, 10, 5}});
  const RecordedRun hf = run_preset("hf-static", w, cm, {{"batch_size", "2"}});
  ASSERT_EQ(hf.steps[0].shape.prefills.size(), 2u);
  EXPECT_EQ(hf.steps[0].shape.prefills[0].new_tokens, 10);  // padded to the longest prompt
  EXPECT_EQ(hf.steps[0].shape.prefills[1].new_tokens, 10);
  EXPECT_EQ(hf.steps[0].items[0].new_tokens, 4);  // but only 4 real tokens
  EXPECT_EQ(hf.steps[0].kv_allocated_tokens, 2 * (10 + 5));
  EXPECT_EQ(hf.steps[0].kv_used_tokens, 14);
  // A (padded to 10) decodes its 2nd token attending over 10 positions, as B does.
  EXPECT_EQ(hf.steps[1].shape.decode_context_sum, 2 * 11);
  const RecordedRun ft = run_preset("ft-static", w, cm, {{"batch_size", "2"}});
  EXPECT_EQ(ft.steps[0].shape.prefills[0].new_tokens, 4);
  EXPECT_EQ(ft.steps[0].shape.prefills[1].new_tokens, 10);
  EXPECT_EQ(ft.steps[0].kv_allocated_tokens, 2 * (10 + 5));  // the cache is still [2, 15]
  EXPECT_EQ(ft.steps[1].shape.decode_context_sum, 5 + 11);
}

TEST(StaticBatching, TheBatchIsCutToWhatTheKvReservationAllows) {
  RigOptions o;
  o.kv_capacity_tokens = 40;
  const CostModel cm = rig_cost_model(o);
  // 16 tokens per row: 2 rows fit in 40, not 3 (also without padding: the cache is rectangular).
  const Workload w = make_workload({{0, 8, 8}, {0, 8, 8}, {0, 4, 8}, {0, 4, 8}});
  for (const char* name : {"hf-static", "ft-static"}) {
    SCOPED_TRACE(name);
    const RecordedRun run = run_preset(name, w, cm, {{"batch_size", "4"}});
    expect_states(run, {{0, 0, {{A, 8}, {B, 8}}}, {8, 8, {{C, 4}, {D, 4}}}});
    EXPECT_EQ(run.result.summary.requests_completed, 4);
  }
}

}  // namespace
}  // namespace batchsim::testing

namespace batchsim::testing {
namespace {

// TensorRT-LLM's capacity scheduler tests (cpp/tests/unit_tests/batch_manager/
// capacitySchedulerTest.cpp, main 2026-05), translated: a KV cache of 100 tokens in blocks of
// 10, requests of prompt 10 and max_new_tokens 80 (their output here). ExpectedState{itBegin,
// itEnd, ...} there is [itBegin, itEnd); expect_states here is inclusive.
RigOptions trtllm_rig() {
  RigOptions o;
  o.kv_capacity_tokens = 100;
  return o;
}

const std::map<std::string, std::string> kTrtMaxUtil = {
    {"capacity_scheduler", "max_utilization"}, {"block_size", "10"}, {"max_num_seqs", "2"}};

// SimpleDoesntFitGuaranteedCompletion: each request reserves ceil((10 + 80) / 10) = 9 of the
// 10 blocks to completion, so the second starts only when the first is done: 160 iterations.
TEST(TrtllmCapacityScheduler, GuaranteedNoEvictRunsOneRequestToCompletionAtATime) {
  const CostModel cm = rig_cost_model(trtllm_rig());
  const Workload w = make_workload({{0, 10, 80}, {0, 10, 80}});
  const RecordedRun run = run_preset("trtllm", w, cm, {{"block_size", "10"}, {"max_num_seqs", "2"}});
  expect_states(run, {{0, 0, {{A, 10}}}, {1, 79, {{A, 1}}}, {80, 80, {{B, 10}}}, {81, 159, {{B, 1}}}});
  EXPECT_EQ(run.steps.size(), 160u);
  EXPECT_EQ(run.result.summary.preemptions, 0);
  // The reservation is counted in whole blocks, the last output token included (90 = 9 x 10),
  // where prompt + max_tokens - 1 tokens (TGI) would be 89.
  EXPECT_EQ(run.steps[0].kv_allocated_tokens, 90);
}

// SimpleDoesntFitMaxUtilization: both run until iteration 41, where each would need a 6th
// block; the last started (B) is paused, its KV freed; A ends at iteration 79 and B is
// recomputed from its prompt and 41 generated tokens (51), 119 iterations in all.
TEST(TrtllmCapacityScheduler, MaxUtilizationPausesTheLastStartedWhenBlocksRunOut) {
  const CostModel cm = rig_cost_model(trtllm_rig());
  const Workload w = make_workload({{0, 10, 80}, {0, 10, 80}});
  const RecordedRun run = run_preset("trtllm", w, cm, kTrtMaxUtil);
  expect_states(run, {{0, 0, {{A, 10}, {B, 10}}},
                      {1, 40, {{A, 1}, {B, 1}}},
                      {41, 79, {{A, 1}}},
                      {80, 80, {{B, 51}}},
                      {81, 118, {{B, 1}}}});
  EXPECT_EQ(run.steps.size(), 119u);
  EXPECT_EQ(run.result.requests[B].preemptions, 1);
  EXPECT_EQ(run.result.requests[A].preemptions, 0);
}

// SimpleDoesntFitAddingNewRequestsMaxUtilization: four requests may run; C and D join at
// iteration 10. At 21 all four would need a block and only A and B keep theirs (D, then C, are
// paused); at 41 B is paused too. At 80 A is done: B (51 tokens) and C (21) restart, D (21)
// does not fit; at 90 C is paused again; at 119 B ends and C and D run; at 139 D is paused;
// C ends at 177 and D runs alone to the end, 227 iterations in all.
TEST(TrtllmCapacityScheduler, MaxUtilizationWithRequestsAddedWhileRunning) {
  const CostModel cm = rig_cost_model(trtllm_rig());
  // C and D arrive during iteration 9, so they are scheduled at iteration 10 (itCount 10).
  const Workload w = make_workload({{0, 10, 80}, {0, 10, 80}, {0.095, 10, 80}, {0.095, 10, 80}});
  auto options = kTrtMaxUtil;
  options["max_num_seqs"] = "4";
  const RecordedRun run = run_preset("trtllm", w, cm, options);
  expect_states(run, {{1, 9, {{A, 1}, {B, 1}}},
                      {10, 10, {{A, 1}, {B, 1}, {C, 10}, {D, 10}}},
                      {11, 20, {{A, 1}, {B, 1}, {C, 1}, {D, 1}}},
                      {21, 40, {{A, 1}, {B, 1}}},
                      {41, 79, {{A, 1}}},
                      {80, 80, {{B, 51}, {C, 21}}},
                      {81, 89, {{B, 1}, {C, 1}}},
                      {90, 118, {{B, 1}}},
                      {119, 119, {{C, 31}, {D, 21}}},
                      {120, 138, {{C, 1}, {D, 1}}},
                      {139, 177, {{C, 1}}},
                      {178, 178, {{D, 41}}},
                      {179, 226, {{D, 1}}}});
  EXPECT_EQ(run.steps.size(), 227u);
  EXPECT_EQ(run.result.requests[C].preemptions, 2);
  EXPECT_EQ(run.result.requests[D].preemptions, 2);
}

// TensorRT-LLM's micro-batch scheduler with context chunking (microBatchScheduler.cpp):
// generation requests take their tokens first, then each context the rest of its prompt or,
// cut by max_num_tokens, a multiple of the chunk unit (tokens_per_block, here 10).
TEST(TrtllmMicroBatchScheduler, DecodesFirstAndChunksInWholeBlocks) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0, 60, 3}, {0, 4, 5}});
  const std::map<std::string, std::string> chunked = {
      {"enable_chunked_context", "true"}, {"block_size", "10"}, {"max_num_batched_tokens", "24"}};
  // Iteration 0: A's 24 tokens are cut to 20 (two blocks), B's whole prompt takes 4 of the 4
  // left. Then B decodes first and A gets 23 -> 20, then its last 20 in full.
  expect_states(
      run_preset("trtllm", w, cm, chunked),
      {{0, 0, {{A, 20}, {B, 4}}}, {1, 1, {{A, 20}, {B, 1}}}, {2, 2, {{A, 20}, {B, 1}}}, {3, 4, {{A, 1}, {B, 1}}}});
  // vLLM v1's order (the chunked-prefill base): running requests in admission order, chunks
  // cut anywhere: A takes the whole budget and B's decode waits behind A's prefill.
  const RecordedRun vllm = run_preset("chunked-prefill", w, cm, {{"max_num_batched_tokens", "24"}});
  expect_states(vllm, {{0, 0, {{A, 24}}}, {1, 1, {{A, 24}}}, {2, 2, {{A, 12}, {B, 4}}}});
}

// The capacity policy decides the KV manager, so kv and reserve_to are refused beside it.
TEST(TrtllmCapacityScheduler, KvOptionsBesideACapacityPolicyAreRefusedByName) {
  const std::string msg = user_error_of([] { policy("trtllm", {{"kv", "paged"}}); });
  EXPECT_NE(msg.find("kv=paged"), std::string::npos) << msg;
  EXPECT_NE(msg.find("capacity_scheduler"), std::string::npos) << msg;
  const std::string bad = user_error_of([] { policy("trtllm", {{"capacity_scheduler", "fcfs"}}); });
  EXPECT_NE(bad.find("capacity_scheduler"), std::string::npos) << bad;
  EXPECT_NE(bad.find("max_utilization"), std::string::npos) << bad;
}

// TGI 1.x router/src/infer.rs batching_task: the outer loop prefills a batch when nothing runs;
// each pass of the inner loop may prefill a new batch and always ends with a decode of all. So
// two prefills may follow each other (the outer one, then an inner one), never three, and a
// request arriving during an inner prefill waits for the decode after it.
TEST(TgiRouterLoop, APrefillIntoTheRunningBatchIsAlwaysFollowedByADecode) {
  const CostModel cm = rig_cost_model();
  // waiting_served_ratio 0.5: one waiting request is enough while one or two run.
  const std::map<std::string, std::string> eager = {{"waiting_served_ratio", "0.5"}};
  const Workload w = make_workload({{0, 4, 30}, {0.005, 4, 30}, {0.015, 4, 30}});
  const RecordedRun run = run_preset("tgi-router", w, cm, eager);
  expect_states(run, {{0, 0, {{A, 4}}},          // outer prefill
                      {1, 1, {{B, 4}}},          // inner prefill at once
                      {2, 2, {{A, 1}, {B, 1}}},  // the decode that ends the pass: C waits
                      {3, 3, {{C, 4}}},
                      {4, 4, {{A, 1}, {B, 1}, {C, 1}}}});
  // Before issue 13 batchsim prefilled C right after B, with no decode between.
  auto old = eager;
  old["decode_after_admission"] = "false";
  expect_states(run_preset("tgi-router", w, cm, old), {{1, 1, {{B, 4}}}, {2, 2, {{C, 4}}}});
}

// TGI v3 backends/v3/src/backend.rs: on a model that supports chunking new requests join the
// running batch's forward (prefill(new_batch, cached_batch)) within max_batch_prefill_tokens
// less its current tokens, the last one cut; the wait rule is ignored; and the forward after
// such a prefill is a decode of the batch (which runs its unfinished chunk) that admits nobody.
TEST(TgiV3, NewRequestsPrefillWithTheRunningDecodesAndADecodeFollows) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0, 4, 10}, {0.005, 40, 5}, {0.015, 3, 2}});
  const RecordedRun run = run_preset("tgi", w, cm, {{"max_num_batched_tokens", "24"}});
  expect_states(run, {{0, 0, {{A, 4}}},
                      {1, 1, {{A, 1}, {B, 23}}},  // B cut to the 24 - 1 left
                      {2, 2, {{A, 1}, {B, 17}}},  // the decode: B's chunk, C held out
                      {3, 3, {{A, 1}, {B, 1}, {C, 3}}},
                      {4, 4, {{A, 1}, {B, 1}, {C, 1}}}});
  // Without the decode after admission C would have joined iteration 2.
  expect_states(run_preset("tgi", w, cm, {{"max_num_batched_tokens", "24"}, {"decode_after_admission", "false"}}),
                {{2, 2, {{A, 1}, {B, 17}, {C, 3}}}});
  // KV is reserved for prompt + max_new_tokens - 1 at admission, as v3's queue allocates it.
  EXPECT_EQ(run.steps[0].kv_allocated_tokens, 4 + 10 - 1);
}

// vLLM's async scheduling (--async-scheduling, default since 0.14, on in the vllm preset): the
// engine core schedules step N+1 while step N runs, so a request that arrives during an
// iteration is first scheduled one step later than under the synchronous scheduler. A (4 + 30
// tokens) runs from t = 0; B arrives at 15 ms, during the second 10 ms iteration.
TEST(AsyncScheduling, ARequestArrivingDuringAnIterationWaitsOneMoreStep) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0, 4, 30}, {0.015, 4, 5}});
  const std::map<std::string, std::string> synchronous = {{"async_scheduling", "false"}};
  const RecordedRun sync = run_preset("vllm", w, cm, synchronous);
  expect_states(sync, {{0, 0, {{A, 4}}}, {1, 1, {{A, 1}}}, {2, 2, {{A, 1}, {B, 4}}}});
  EXPECT_DOUBLE_EQ(ms(sync.result.requests[B].first_scheduled), 20.0);
  const RecordedRun async = run_preset("vllm", w, cm);
  // The step at 20 ms was chosen at 10 ms, before B came: B joins the one after.
  expect_states(async, {{0, 0, {{A, 4}}}, {1, 2, {{A, 1}}}, {3, 3, {{A, 1}, {B, 4}}}, {4, 6, {{A, 1}, {B, 1}}}});
  EXPECT_DOUBLE_EQ(ms(async.result.requests[B].first_scheduled), 30.0);
  // Nothing else moves: A's tokens come at the same times.
  EXPECT_EQ(async.result.requests[A].finished, sync.result.requests[A].finished);
  // An arrival at the very instant an iteration ends came after that step was scheduled too.
  const Workload at_the_end = make_workload({{0, 4, 30}, {0.020, 4, 5}});
  EXPECT_DOUBLE_EQ(ms(run_preset("vllm", at_the_end, cm).result.requests[B].first_scheduled), 30.0);
  EXPECT_DOUBLE_EQ(ms(run_preset("vllm", at_the_end, cm, synchronous).result.requests[B].first_scheduled), 20.0);
}

// Where nothing was scheduled ahead, the engine takes a new request at once: after an idle
// spell, and when every running request ended with the iteration that just finished (vLLM's
// async scheduler schedules no extra step for a request that reaches max_tokens).
TEST(AsyncScheduling, AnIdleEngineOrOneWithNothingScheduledAheadTakesARequestAtOnce) {
  const CostModel cm = rig_cost_model();
  // Idle from 10 ms: B arrives at 25 ms and is scheduled then.
  const RecordedRun idle = run_preset("vllm", make_workload({{0, 4, 1}, {0.025, 4, 5}}), cm);
  EXPECT_DOUBLE_EQ(ms(idle.result.requests[B].first_scheduled), 25.0);
  // A ends with the iteration from 10 to 20 ms; B, arrived at 15 ms, runs at 20 ms.
  const RecordedRun drained = run_preset("vllm", make_workload({{0, 4, 2}, {0.015, 4, 5}}), cm);
  expect_states(drained, {{0, 0, {{A, 4}}}, {1, 1, {{A, 1}}}, {2, 2, {{B, 4}}}});
  EXPECT_DOUBLE_EQ(ms(drained.result.requests[B].first_scheduled), 20.0);
}

}  // namespace
}  // namespace batchsim::testing
