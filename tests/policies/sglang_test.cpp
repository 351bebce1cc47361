// The sglang preset (policies/sglang/sglang_policy.h), iteration by iteration on the rig's 10 ms GPU.
// Each table is derived from SGLang's rules as the comments work them out (schedule_policy.py
// PrefillAdder, scheduler.py get_next_batch_to_run / update_running_batch, schedule_batch.py
// retract_decode): the numbers are the rules' arithmetic, not a recorded run.
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "policies/sglang/sglang_policy.h"
#include "policy_test_rig.h"
#include "test_support.h"

namespace batchsim::testing {
namespace {

constexpr RequestId A = 0, B = 1, C = 2, D = 3;

struct RatioRun {
  RecordedRun run;
  std::vector<double> ratio;  // new_token_ratio after each iteration's schedule()
};

// The tables follow the rules step by step as SGLang's scheduler applies them, without the
// overlap scheduler's step of lag for new requests (SglangOverlap below) unless a test asks.
RatioRun run_sglang(const Workload& w, int64_t kv_tokens, std::map<std::string, std::string> options,
                    const PrefixBlockHashes* hashes = nullptr) {
  options.try_emplace("disable_overlap_schedule", "true");
  RigOptions o;
  o.kv_capacity_tokens = kv_tokens;
  const CostModel cm = rig_cost_model(o);
  auto p = policy("sglang", std::move(options));
  RatioRun out;
  SimulationOptions options_ = rig_simulation_options();
  options_.prefix_blocks = hashes;
  options_.on_iteration = [&out](const Batch& b, const IterationRecord&, const Policy& policy) {
    Step s;
    s.items = b.items;
    s.shape = b.shape;
    out.run.steps.push_back(std::move(s));
    out.ratio.push_back(dynamic_cast<const SglangPolicy&>(policy).new_token_ratio());
  };
  Simulation sim(w, *p, cm, options_);
  out.run.result = sim.run();
  return out;
}

// A (prompt 100, output 200) runs; B (400 + 400) arrives during A's prefill. At iteration 1
// the adder sees 900 free tokens less A's expected output, (200 - 1) x new_token_ratio, and B
// needs 400 + 400 + 1 page = 801 tokens: admitted only if 801 < 900 - 199 r, i.e. r < 0.4975.
Workload ratio_workload() { return make_workload({{0, 100, 200}, {0.005, 400, 400}}); }

TEST(SglangScenario, AdmissionIsLimitedByNewTokenRatio) {
  // Default 0.7: B is refused (NO_TOKEN), which marks the running batch full; it is admitted
  // only once A has finished (end of iteration 199) and the next update_running_batch has seen
  // the batch shrink: no decode is left, so the scheduler loops at once into a prefill.
  const RatioRun fresh = run_sglang(ratio_workload(), 1000, {{"chunked_prefill_size", "512"}});
  expect_states(fresh.run, {
                               {0, 0, {{A, 100}}},
                               {1, 199, {{A, 1}}},
                               {200, 200, {{B, 400}}},
                               {201, 599, {{B, 1}}},
                           });
  EXPECT_EQ(fresh.run.steps.size(), 600u);
  // 0.3 < 0.4975: B is admitted at iteration 1, in a prefill-only batch (A's decode waits), and
  // the two never need more than 299 + 599 tokens of KV together, so nothing is retracted.
  const RatioRun low =
      run_sglang(ratio_workload(), 1000, {{"chunked_prefill_size", "512"}, {"init_new_token_ratio", "0.3"}});
  expect_states(low.run, {
                             {0, 0, {{A, 100}}},
                             {1, 1, {{B, 400}}},
                             {2, 200, {{A, 1}, {B, 1}}},
                             {201, 400, {{B, 1}}},
                         });
  EXPECT_EQ(low.run.steps.size(), 401u);
  EXPECT_EQ(low.run.result.summary.preemptions, 0);
}

TEST(SglangScenario, NewTokenRatioDecaysPerDecodeStepAndADecayedRatioAdmits) {
  // init 0.7, floor 0.7 x 0.5 = 0.35, decay (0.7 - 0.35) / 35 = 0.01 per decode step.
  // A (100 + 200) and C (10 + 50) start together; B (300 + 450 = 751 + 1) arrives during their
  // prefill. Iteration 1: 890 free - (199 + 49) x 0.7 = 716.4 <= 751: refused, batch full.
  // C finishes at iteration 49; iteration 50 decodes A and clears the mark; iteration 51 tries
  // again with the ratio at its floor: 850 free - (200 - 51) x 0.35 = 797.85 > 751: admitted.
  const Workload w = make_workload({{0, 100, 200}, {0, 10, 50}, {0.005, 300, 450}});
  constexpr RequestId A = 0, C = 1, B = 2;  // in arrival order
  const RatioRun r = run_sglang(
      w, 1000,
      {{"chunked_prefill_size", "512"}, {"min_new_token_ratio_factor", "0.5"}, {"new_token_ratio_decay_steps", "35"}});
  expect_states(r.run, {
                           {0, 0, {{A, 100}, {C, 10}}},
                           {1, 49, {{A, 1}, {C, 1}}},
                           {50, 50, {{A, 1}}},
                           {51, 51, {{B, 300}}},
                           {52, 200, {{A, 1}, {B, 1}}},
                           {201, 500, {{B, 1}}},
                       });
  ASSERT_EQ(r.ratio.size(), 501u);
  EXPECT_NEAR(r.ratio[0], 0.70, 1e-9);  // a prefill does not decay it
  for (int i = 1; i <= 50; ++i) {
    EXPECT_NEAR(r.ratio[i], std::max(0.70 - 0.01 * i, 0.35), 1e-9) << "iteration " << i;
  }
  EXPECT_NEAR(r.ratio[51], 0.35, 1e-9);
  EXPECT_NEAR(r.ratio[400], 0.35, 1e-9);
}

// An optimistic new_token_ratio that admits what later runs out of KV: 0.2, decaying by 0.01 a
// decode step to a floor of 0.1.
const std::map<std::string, std::string> kOptimistic = {{"chunked_prefill_size", "512"},
                                                        {"init_new_token_ratio", "0.2"},
                                                        {"min_new_token_ratio_factor", "0.5"},
                                                        {"new_token_ratio_decay_steps", "10"}};

TEST(SglangScenario, RetractionTakesTheFewestGeneratedAndResetsTheRatio) {
  // 600 tokens of KV; init ratio 0.2 (decay 0.01, floor 0.1) lets B (100 + 300) in at
  // iteration 2 beside A (100 + 300): 499 free - (300 - 2) x 0.19 = 442.4 > 401. Both then
  // grow by a token a step: before the 200th joint decode (iteration 202) 1 token is free for
  // 2. retract_decode sorts by generated tokens: A has 201, B 200, so B is retracted (back of
  // the waiting queue, KV freed, to prefill its 100 + 200 tokens again), and new_token_ratio
  // becomes (201 + 20 x 1) / 300 for the one request left.
  const Workload w = make_workload({{0, 100, 300}, {0.015, 100, 300}});
  const RatioRun r = run_sglang(w, 600, kOptimistic);
  // At iteration 203 B would need 300 + 100 + 1 tokens, more than 299 free - 98 x 0.7367:
  // it waits for A to finish (iteration 300), then prefills prompt + generated at once.
  expect_states(r.run, {
                           {0, 0, {{A, 100}}},
                           {1, 1, {{A, 1}}},
                           {2, 2, {{B, 100}}},
                           {3, 201, {{A, 1}, {B, 1}}},
                           {202, 300, {{A, 1}}},
                           {301, 301, {{B, 300}}},
                           {302, 400, {{B, 1}}},
                       });
  EXPECT_EQ(r.run.steps.size(), 401u);
  EXPECT_EQ(r.run.result.requests[B].preemptions, 1);
  EXPECT_EQ(r.run.result.requests[A].preemptions, 0);
  ASSERT_GT(r.ratio.size(), 203u);
  EXPECT_NEAR(r.ratio[201], 0.1, 1e-9);             // decayed to its floor
  EXPECT_NEAR(r.ratio[202], 221.0 / 300.0, 1e-12);  // reset by the retraction, not decayed
  EXPECT_NEAR(r.ratio[203], 221.0 / 300.0 - 0.01, 1e-12);
}

TEST(SglangScenario, RetractionTakesTheLongestPromptAmongEqualOutputs) {
  // 700 tokens, the same optimistic ratio. A (200 + 300) prefills at iteration 0, B (100 + 300)
  // at iteration 1 (500 free - 299 x 0.2 = 440.2 > 401) while A's decode waits, so both have
  // generated 1 token when they start decoding together. At iteration 202 (the 201st joint
  // decode) no token is free: both have 201 tokens, and the tie goes against the longer
  // prompt, A, although it was admitted first. It is readmitted with its 200 + 201 tokens once
  // B has finished (iteration 300).
  const Workload w = make_workload({{0, 200, 300}, {0.005, 100, 300}});
  const RatioRun r = run_sglang(w, 700, kOptimistic);
  expect_states(r.run, {
                           {0, 0, {{A, 200}}},
                           {1, 1, {{B, 100}}},
                           {2, 201, {{A, 1}, {B, 1}}},
                           {202, 300, {{B, 1}}},
                           {301, 301, {{A, 401}}},
                           {302, 399, {{A, 1}}},
                       });
  EXPECT_EQ(r.run.steps.size(), 400u);
  EXPECT_EQ(r.run.result.requests[A].preemptions, 1);
  EXPECT_EQ(r.run.result.requests[B].preemptions, 0);
  EXPECT_NEAR(r.ratio[202], 221.0 / 300.0, 1e-12);
}

TEST(SglangScenario, ChunkedPrefillCutsAtTheChunkSizeAndStallsTheDecodes) {
  // chunked_prefill_size 64. C decodes; A (200 tokens) arrives and is cut into 64 + 64 + 64 +
  // 8: prefill batches run alone (SGLang's prefill-first loop, enable_mixed_chunk off), so C
  // waits through all four. B arrives with A; the chunk budget is spent until A's last chunk,
  // which leaves 56 tokens for B's 10.
  const Workload w = make_workload({{0, 10, 10}, {0.005, 200, 5}, {0.005, 10, 3}});
  // Requests: 0 = C here, 1 = A, 2 = B by id.
  constexpr RequestId kC = 0, kA = 1, kB = 2;
  const RatioRun r = run_sglang(w, 100000, {{"chunked_prefill_size", "64"}});
  expect_states(r.run, {
                           {0, 0, {{kC, 10}}},
                           {1, 3, {{kA, 64}}},
                           {4, 4, {{kA, 8}, {kB, 10}}},
                           {5, 6, {{kA, 1}, {kB, 1}, {kC, 1}}},
                           {7, 8, {{kA, 1}, {kC, 1}}},
                           {9, 13, {{kC, 1}}},
                       });
  EXPECT_EQ(r.run.steps.size(), 14u);
  // Each chunk attends to the KV of the chunks before it.
  EXPECT_EQ(r.run.steps[3].items[0].context_before, 128);
}

TEST(SglangScenario, MixedChunksCarryTheDecodesAndTakeTheirTokensFromTheChunk) {
  // The same requests with --enable-mixed-chunk (aiconfigurator's deployments set it): every
  // prefill batch formed while C runs also decodes C, and C's token comes out of the chunk
  // budget first (mixed_with_decode_tokens), so A is cut into 63 + 63 + 63 + 11 and B, 10
  // tokens, fits beside A's last chunk. C is never stalled: its 10 tokens end at step 9, not 13.
  const Workload w = make_workload({{0, 10, 10}, {0.005, 200, 5}, {0.005, 10, 3}});
  constexpr RequestId kC = 0, kA = 1, kB = 2;
  const RatioRun r = run_sglang(w, 100000, {{"chunked_prefill_size", "64"}, {"enable_mixed_chunk", "true"}});
  expect_states(r.run, {
                           {0, 0, {{kC, 10}}},
                           {1, 3, {{kA, 63}, {kC, 1}}},
                           {4, 4, {{kA, 11}, {kB, 10}, {kC, 1}}},
                           {5, 6, {{kA, 1}, {kB, 1}, {kC, 1}}},
                           {7, 8, {{kA, 1}, {kC, 1}}},
                           {9, 9, {{kC, 1}}},
                       });
  EXPECT_EQ(r.run.steps.size(), 10u);
  // A mixed step is a prefill batch: it neither decays the ratio nor counts as decode-only.
  EXPECT_EQ(r.ratio[1], r.ratio[0]);
  EXPECT_EQ(r.run.steps[2].shape.num_decodes, 1);
}

// A's prompt is cached when B, C, D arrive together (in that order) with 0, 32 and 63 of their
// 64 tokens cached (D repeats A's prompt: all but the last token, which is recomputed to
// sample). One request runs at a time (max_running_requests 1), so the order of service is
// the queue's order.
struct PrefixCase {
  Workload w = make_workload({{0, 64, 2}, {0.05, 64, 2}, {0.05, 64, 2}, {0.05, 64, 2}});
  PrefixBlockHashes hashes = prefix_hashes(16, {{1, 2, 3, 4}, {10, 11, 12, 13}, {1, 2, 30, 31}, {1, 2, 3, 4}});
};

TEST(SglangScenario, FcfsServesTheWaitingQueueInArrivalOrder) {
  const PrefixCase c;
  const RatioRun r = run_sglang(c.w, 100000, {{"max_running_requests", "1"}}, &c.hashes);
  expect_states(r.run, {
                           {0, 0, {{A, 64}}},
                           {1, 1, {{A, 1}}},
                           {2, 2, {{B, 64}}},
                           {3, 3, {{B, 1}}},
                           {4, 4, {{C, 32}}},
                           {5, 5, {{C, 1}}},
                           {6, 6, {{D, 1}}},
                           {7, 7, {{D, 1}}},
                       });
  EXPECT_EQ(r.run.steps.size(), 8u);
  EXPECT_EQ(r.run.result.requests[D].cached_tokens, 63);
}

TEST(SglangScenario, LpmServesTheLongestCachedPrefixFirst) {
  // SchedulePolicy._sort_by_longest_prefix: D (63 cached), C (32), B (0). B and C have short
  // hits (<= 32) but share no 32 tokens with a request ahead of them, so neither is
  // deprioritized.
  const PrefixCase c;
  const RatioRun r = run_sglang(c.w, 100000, {{"max_running_requests", "1"}, {"schedule_policy", "lpm"}}, &c.hashes);
  expect_states(r.run, {
                           {0, 0, {{A, 64}}},
                           {1, 1, {{A, 1}}},
                           {2, 2, {{D, 1}}},
                           {3, 3, {{D, 1}}},
                           {4, 4, {{C, 32}}},
                           {5, 5, {{C, 1}}},
                           {6, 6, {{B, 64}}},
                           {7, 7, {{B, 1}}},
                       });
  EXPECT_EQ(r.run.steps.size(), 8u);
}

TEST(SglangScenario, LpmDeprioritizesARequestThatSharesAnUncachedPrefixWithOneAhead) {
  // Nothing of B, C, D, E is cached; B, C, D share their first 48 tokens (3 blocks), E shares
  // nothing. Two may run at once. lpm matches in queue order: B enters the queue's own tree,
  // C and D find 48 >= 32 of B's tokens there and go to the back, so E is admitted beside B;
  // C and D then find B's prefix cached and prefill 16 tokens each.
  const Workload w = make_workload({{0, 16, 2}, {0.05, 64, 2}, {0.05, 64, 2}, {0.05, 64, 2}, {0.05, 64, 2}});
  const PrefixBlockHashes hashes =
      prefix_hashes(16, {{99}, {5, 6, 7, 8}, {5, 6, 7, 20}, {5, 6, 7, 21}, {40, 41, 42, 43}});
  constexpr RequestId kE = 4;
  const RatioRun lpm = run_sglang(w, 100000, {{"max_running_requests", "2"}, {"schedule_policy", "lpm"}}, &hashes);
  expect_states(lpm.run, {
                             {2, 2, {{B, 64}, {kE, 64}}},
                             {3, 3, {{B, 1}, {kE, 1}}},
                             {4, 4, {{C, 16}, {D, 16}}},
                             {5, 5, {{C, 1}, {D, 1}}},
                         });
  EXPECT_EQ(lpm.run.steps.size(), 6u);
  // fcfs takes C beside B. Unlike SGLang, whose radix tree holds B's prefix only once B's
  // prefill is done, the block cache shares blocks within the step that computes them (vLLM
  // v1's rule, sim/kv_cache.h), so C already hits 48 tokens of B here.
  const RatioRun fcfs = run_sglang(w, 100000, {{"max_running_requests", "2"}}, &hashes);
  expect_states(fcfs.run, {
                              {2, 2, {{B, 64}, {C, 16}}},
                              {3, 3, {{B, 1}, {C, 1}}},
                              {4, 4, {{D, 16}, {kE, 64}}},
                              {5, 5, {{D, 1}, {kE, 1}}},
                          });
}

TEST(SglangRegistry, DefaultsFollowTheEngine) {
  // server_args.py _handle_gpu_memory_settings, by total device memory.
  const int64_t gib = int64_t{1} << 30;
  EXPECT_EQ(sglang_chunked_prefill_size(24 * gib), 2048);
  EXPECT_EQ(sglang_chunked_prefill_size(40 * gib), 4096);
  EXPECT_EQ(sglang_chunked_prefill_size(80 * gib), 8192);    // H100
  EXPECT_EQ(sglang_chunked_prefill_size(141 * gib), 8192);   // H200
  EXPECT_EQ(sglang_chunked_prefill_size(180 * gib), 16384);  // B200
  // _resolve_max_num_reqs: clamp(tokens / context x 512, 2048, 4096), at most tokens / 2.
  EXPECT_EQ(sglang_max_running_requests(1'000'000, 8192), 4096);
  EXPECT_EQ(sglang_max_running_requests(100'000, 8192), 4096);  // 6250 requests' room, clamped
  EXPECT_EQ(sglang_max_running_requests(10'000, 8192), 2048);   // 625, raised to 2048
  EXPECT_EQ(sglang_max_running_requests(1000, 4096), 500);
  EXPECT_EQ(policy_engine("sglang"), "sglang");
  EXPECT_EQ(policy_base("sglang"), "sglang");
}

TEST(SglangRegistry, BadOptionsNameTheOption) {
  const std::string bad_order = user_error_of([] { policy("sglang", {{"schedule_policy", "lifo"}}); });
  EXPECT_NE(bad_order.find("schedule_policy"), std::string::npos) << bad_order;
  const std::string bad_ratio = user_error_of([] { policy("sglang", {{"init_new_token_ratio", "1.5"}}); });
  EXPECT_NE(bad_ratio.find("init_new_token_ratio"), std::string::npos) << bad_ratio;
  const std::string unknown = user_error_of([] { policy("sglang", {{"max_num_seqs", "4"}}); });
  EXPECT_NE(unknown.find("max_num_seqs"), std::string::npos) << unknown;
}

// SGLang's overlap scheduler (event_loop_overlap, its default since 0.4) chooses the next batch
// while the GPU runs the current one: B, arriving at 15 ms during A's second decode step, is
// prefilled at 30 ms instead of 20 ms. An idle scheduler takes a request at once.
TEST(SglangOverlap, ARequestArrivingDuringABatchWaitsOneMoreStep) {
  const Workload w = make_workload({{0, 4, 30}, {0.015, 4, 5}});
  const RatioRun sync = run_sglang(w, 1000, {});
  const RatioRun overlap = run_sglang(w, 1000, {{"disable_overlap_schedule", "false"}});
  EXPECT_EQ(sync.run.result.requests[B].first_scheduled, SimTime::from_seconds(0.020));
  EXPECT_EQ(overlap.run.result.requests[B].first_scheduled, SimTime::from_seconds(0.030));
  expect_states(overlap.run, {{0, 0, {{A, 4}}}, {1, 2, {{A, 1}}}, {3, 3, {{B, 4}}}});
  const RatioRun idle =
      run_sglang(make_workload({{0, 4, 1}, {0.025, 4, 5}}), 1000, {{"disable_overlap_schedule", "false"}});
  EXPECT_EQ(idle.run.result.requests[B].first_scheduled, SimTime::from_seconds(0.025));
}

// SGLang's mem_fraction_static when not given (server_args.py _handle_gpu_memory_settings), by
// hand from its rule: gpu_mem in MiB, reserved = 512 + 1.5 x max(chunk, 2048) + 2 x
// cuda_graph_max_bs + TP/8 GiB, at least 10 GiB above 60 GiB; rounded to 3 decimals.
TEST(SglangMemory, MemFractionStaticFollowsSglangsRule) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  const int64_t h100 = 81'559 * kMiB;  // an H100 SXM 80 GB, as nvidia-smi reports it
  // TP 1: cuda_graph_max_bs 256: 512 + 12,288 + 512 + 128 = 13,440 MiB; 68,119 / 81,559.
  EXPECT_DOUBLE_EQ(sglang_mem_fraction_static(h100, 1, 8192), 0.835);
  // TP 8: cuda_graph_max_bs 512: 512 + 12,288 + 1,024 + 1,024 = 14,848 MiB; 66,711 / 81,559.
  EXPECT_DOUBLE_EQ(sglang_mem_fraction_static(h100, 8, 8192), 0.818);
  // A 40 GiB A100: chunk 4096, cuda_graph_max_bs 32: 512 + 6,144 + 64 + 128 = 6,848, no 10 GiB
  // floor below 60 GiB; 34,112 / 40,960.
  EXPECT_DOUBLE_EQ(sglang_mem_fraction_static(40'960 * kMiB, 1, 4096), 0.833);
  // A small chunk still reserves for 2048 tokens, and the 10 GiB floor holds on an H100:
  // 512 + 3,072 + 512 + 128 = 4,224 < 10,240; 71,319 / 81,559.
  EXPECT_DOUBLE_EQ(sglang_mem_fraction_static(h100, 1, 256), 0.874);
  // The rule before v0.5.3 (sglang #7054): (9.5 + TP/2) GiB below 90 GiB, (12 + TP/2) below 160.
  EXPECT_DOUBLE_EQ(sglang_mem_fraction_static_2025(h100, 1), 0.874);            // 71,319 / 81,559
  EXPECT_DOUBLE_EQ(sglang_mem_fraction_static_2025(h100, 8), 0.831);            // 67,735 / 81,559
  EXPECT_DOUBLE_EQ(sglang_mem_fraction_static_2025(143'771 * kMiB, 1), 0.911);  // 131,483 / 143,771
  EXPECT_DOUBLE_EQ(sglang_mem_fraction_static(0, 1, 8192), 0.88);               // no known device
  // A given cuda_graph_max_bs enters the reserve instead: 512 on the A100 adds 2 x 480 MiB,
  // 7,808 MiB; 33,152 / 40,960.
  EXPECT_DOUBLE_EQ(sglang_mem_fraction_static(40'960 * kMiB, 1, 4096, 512), 0.809);
}

// cuda_graph_max_bs when not given, by the same chain (TP < 4 / >= 4).
TEST(SglangMemory, CudaGraphMaxBsFollowsSglangsRule) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  EXPECT_EQ(sglang_cuda_graph_max_bs(16 * kGiB, 1), 8);
  EXPECT_EQ(sglang_cuda_graph_max_bs(24 * kGiB, 1), 24);
  EXPECT_EQ(sglang_cuda_graph_max_bs(24 * kGiB, 4), 80);
  EXPECT_EQ(sglang_cuda_graph_max_bs(40 * kGiB, 1), 32);
  EXPECT_EQ(sglang_cuda_graph_max_bs(40 * kGiB, 8), 160);
  EXPECT_EQ(sglang_cuda_graph_max_bs(80 * kGiB, 2), 256);
  EXPECT_EQ(sglang_cuda_graph_max_bs(80 * kGiB, 4), 512);
  EXPECT_EQ(sglang_cuda_graph_max_bs(192 * kGiB, 1), 512);
  EXPECT_EQ(sglang_cuda_graph_max_bs(0, 1), 160);  // no known device
}

}  // namespace
}  // namespace batchsim::testing
