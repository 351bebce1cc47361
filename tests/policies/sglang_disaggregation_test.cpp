// The sglang policy in disaggregated pools (policies/sglang/sglang_policy.h, "Disaggregated
// pools"): SGLang's --disaggregation-mode prefill|decode on the rig's 10 ms GPU. The prefill pool
// runs prefill batches only and holds each request's KV until its transfer has landed, and takes
// requests in while one of its 2 x max_running_requests metadata buffers is free; the decode pool
// runs decodes only, never before a request's KV has landed, preallocates only what leaves
// num_reserved_decode_tokens free per request that will decode there, keeps its running batch
// within max_running_requests and its transfers within its request slots and metadata buffers,
// copies a retracted request's KV to the host and back instead of recomputing it, preallocating
// nothing meanwhile, and rejects a request its empty pool cannot preallocate; fast-forward
// changes nothing. The figures are the rules' arithmetic (DecodePreallocQueue.pop_preallocated's
// budget, worked out in the comments), not a recorded run.
#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "policies/registry.h"
#include "policies/sglang/sglang_policy.h"
#include "policy_test_rig.h"
#include "sim/simulation.h"
#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim::testing {
namespace {

// One prefill and one decode replica, each an SglangPolicy of its own configuration.
struct Pools {
  std::vector<std::unique_ptr<SglangPolicy>> owned;
  std::vector<Policy*> policies;
};

Pools make_pools(const SglangPolicyConfig& prefill, const SglangPolicyConfig& decode) {
  Pools pools;
  pools.owned.push_back(std::make_unique<SglangPolicy>(prefill, "sglang"));
  pools.owned.push_back(std::make_unique<SglangPolicy>(decode, "sglang"));
  for (const auto& p : pools.owned) pools.policies.push_back(p.get());
  return pools;
}

// What a replica's policy showed after one of its iterations (the hook runs after
// on_iteration_end, before the next schedule()).
struct Observation {
  int32_t replica = 0;
  SimTime start, end;
  std::vector<BatchItem> items;
  BatchShape shape;
  SimTime extra_time;
  int64_t kv_allocated_tokens = 0;
  size_t running = 0, waiting = 0, transferring = 0, preallocating = 0, retracted = 0, bootstrapping = 0;
  int64_t metadata_buffers = 0;
  // Prefill pool: every request prefilled there so far, and whether its KV is still held.
  std::vector<std::pair<RequestId, bool>> held;
};

struct ObservedRun {
  SimulationResult result;
  std::vector<Observation> steps;
};

// The simulation options of a P/D run on the rig: 1 prefill + 1 decode replica, the decode pool
// `decode_blocks` blocks of 16 tokens (0: the rig's 100,000 tokens), a link of `gbps` with 100 us
// latency.
SimulationOptions pool_options(int64_t decode_blocks, double gbps) {
  SimulationOptions o = rig_simulation_options();
  o.disaggregation.prefill_replicas = 1;
  if (decode_blocks > 0) o.disaggregation.decode_num_gpu_blocks = decode_blocks;
  o.disaggregation.link = resolve_kv_link("ib", gbps, 100);
  return o;
}

ObservedRun run_observed(const Workload& w, Pools& pools, const CostModel& cm, SimulationOptions o) {
  ObservedRun run;
  std::set<RequestId> prefilled;
  o.on_iteration = [&](const Batch& b, const IterationRecord& rec, const Policy& policy) {
    const auto& sglang = dynamic_cast<const SglangPolicy&>(policy);
    Observation s;
    s.replica = rec.replica;
    s.start = rec.start;
    s.end = rec.start + rec.duration;
    s.items = b.items;
    s.shape = b.shape;
    s.extra_time = b.extra_time;
    s.kv_allocated_tokens = policy.kv_cache().allocated_tokens();
    s.running = sglang.num_running();
    s.waiting = sglang.num_waiting();
    s.transferring = sglang.num_transferring();
    s.preallocating = sglang.num_preallocating();
    s.retracted = sglang.num_retracted();
    s.bootstrapping = sglang.num_bootstrapping();
    s.metadata_buffers = sglang.metadata_buffers_in_use();
    if (rec.replica == 0) {
      for (const BatchItem& item : b.items) {
        if (item.context_before + item.new_tokens == w[static_cast<size_t>(item.id)].prompt_tokens) {
          prefilled.insert(item.id);
        }
      }
      for (const RequestId id : prefilled) s.held.emplace_back(id, policy.holds_kv(id));
    }
    run.steps.push_back(std::move(s));
  };
  run.result = Simulation(w, pools.policies, cm, o).run();
  return run;
}

void expect_all_served(const SimulationResult& r, const Pools& pools) {
  EXPECT_EQ(r.summary.requests_rejected, 0);
  EXPECT_EQ(r.summary.requests_completed, static_cast<int64_t>(r.requests.size()));
  for (const RequestRecord& rec : r.requests) {
    EXPECT_TRUE(rec.completed()) << rec.id;
    EXPECT_EQ(rec.generated_tokens, rec.output_tokens) << rec.id;
  }
  for (Policy* p : pools.policies) {
    EXPECT_TRUE(p->idle());
    EXPECT_EQ(p->kv_cache().allocated_tokens(), 0) << "KV left behind";
  }
}

SglangPolicyConfig with_overlap(bool overlap) {
  SglangPolicyConfig c;
  c.overlap_schedule = overlap;
  return c;
}

// Thirty requests in a stream, over a slow link (a 100-token prompt takes 10 ms to move), with
// and without the overlap scheduler: every request is served; the prefill pool computes prompts
// only, and after each of its iterations its KV is exactly the prompts of the requests prefilled
// and not yet landed on the decode side; the decode pool computes one token per request per
// iteration, never for a request before its KV has landed.
TEST(SglangDisaggregation, ThePrefillPoolPrefillsAndHoldsTheDecodePoolDecodesAfterTheLanding) {
  const CostModel cm = rig_cost_model();
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 30; ++i) specs.push_back({0.003 * i, 50 + 37 * (i % 10), 1 + (i * 7) % 40});
  const Workload w = make_workload(specs);
  for (const bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap" : "no overlap");
    Pools pools = make_pools(with_overlap(overlap), with_overlap(overlap));
    const ObservedRun run = run_observed(w, pools, cm, pool_options(0, 0.02));
    const SimulationResult& r = run.result;
    expect_all_served(r, pools);
    int64_t held = 0, released = 0;
    std::map<RequestId, SimTime> first_decode;
    for (const Observation& s : run.steps) {
      if (s.replica == 0) {
        EXPECT_EQ(s.shape.num_decodes, 0) << "a decode step on the prefill pool at " << s.start.seconds();
        for (const BatchItem& item : s.items) {
          EXPECT_LE(item.context_before + item.new_tokens, w[static_cast<size_t>(item.id)].prompt_tokens);
        }
        int64_t held_prompts = 0;
        for (const auto& [id, holds] : s.held) {
          // A one-token output ends on the prefill side, its KV freed at once.
          const SimTime landed = w[static_cast<size_t>(id)].output_tokens == 1
                                     ? s.start
                                     : r.handoffs[static_cast<size_t>(id)].transfer_end;
          if (landed == s.end) continue;  // the landing and the iteration end at one instant
          EXPECT_EQ(holds, s.end < landed) << "request " << id << " at " << s.end.seconds();
          if (holds) held_prompts += w[static_cast<size_t>(id)].prompt_tokens;
          held += holds;
          released += !holds;
        }
        EXPECT_EQ(s.kv_allocated_tokens, held_prompts) << "at " << s.end.seconds();
      } else {
        EXPECT_TRUE(s.shape.prefills.empty()) << "a prefill on the decode pool at " << s.start.seconds();
        for (const BatchItem& item : s.items) {
          EXPECT_EQ(item.new_tokens, 1);
          first_decode.try_emplace(item.id, s.start);
        }
      }
    }
    EXPECT_GT(held, 0);
    EXPECT_GT(released, 0);
    int64_t handed_off = 0;
    for (const RequestRecord& rec : r.requests) {
      const HandoffRecord& h = r.handoffs[static_cast<size_t>(rec.id)];
      if (rec.output_tokens == 1) {
        EXPECT_FALSE(h.transferred());
        continue;
      }
      ++handed_off;
      ASSERT_TRUE(first_decode.count(rec.id)) << rec.id;
      EXPECT_GE(first_decode.at(rec.id), h.transfer_end) << "request " << rec.id << " decoded before its KV landed";
      EXPECT_GT(h.transfer_end, h.transfer_start);
    }
    EXPECT_GT(handed_off, 25);
  }
}

// DecodePreallocQueue's reservation. The decode pool holds 2,000 tokens; A (100 + 200) decodes
// there when B (1,000 + 10) is handed over at about 60 ms. B's prompt fits the free KV (about
// 1,900 tokens), but pop_preallocated asks for prompt + R = 1,512 within the allocatable tokens:
// the free KV less max(R x 1 running request, A's 100 + 200 less its ~105 tokens) ~ 1,390. B
// waits until A has finished (its KV freed, nobody to reserve for: 2,000). With R = 0 the same
// budget is ~1,700 and B is preallocated at the decode replica's next step after its hand-off.
TEST(SglangDisaggregation, PreallocationLeavesTheReservedDecodeTokensFree) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0.0, 100, 200}, {0.05, 1000, 10}});
  constexpr RequestId A = 0, B = 1;
  for (const int64_t reserved : {int64_t{512}, int64_t{0}}) {
    SCOPED_TRACE(reserved);
    SglangPolicyConfig decode;
    decode.num_reserved_decode_tokens = reserved;
    Pools pools = make_pools(SglangPolicyConfig{}, decode);
    const ObservedRun run = run_observed(w, pools, cm, pool_options(125, 100));
    const SimulationResult& r = run.result;
    expect_all_served(r, pools);
    const HandoffRecord& b = r.handoffs[B];
    // Raw free KV was never the limit: until B's preallocation the decode pool held A's tokens
    // only, leaving room for B's prompt.
    for (const Observation& s : run.steps) {
      if (s.replica == 1 && s.end <= b.kv_allocated) {
        EXPECT_LE(s.kv_allocated_tokens, 300);
      }
    }
    if (reserved == 512) {
      EXPECT_GE(b.kv_allocated, r.requests[A].finished) << "B was preallocated while A's reservation held it back";
      EXPECT_GT(b.wait_s(), 1.5);
    } else {
      EXPECT_LE(b.kv_allocated, b.handoff + SimTime::from_seconds(0.010));
      EXPECT_LT(b.kv_allocated, r.requests[A].finished);
    }
  }
}

// max_running_requests 2 on the decode side: its request slots are 2 + pre_alloc_size (2 x 2, as
// it is at most 32) = 6 and its metadata buffers 4. Eight requests handed over at once: four are
// preallocated (the buffers), landed requests wait for the running batch, which never decodes
// more than two, and running + waiting + in transfer never exceed the six slots.
TEST(SglangDisaggregation, MaxRunningRequestsCapsTheDecodeBatchAndSlotsCapPreallocation) {
  const CostModel cm = rig_cost_model();
  std::vector<RequestSpec> specs(8, RequestSpec{0.0, 50, 20});
  const Workload w = make_workload(specs);
  SglangPolicyConfig decode;
  decode.max_running_requests = 2;
  Pools pools = make_pools(SglangPolicyConfig{}, decode);
  const ObservedRun run = run_observed(w, pools, cm, pool_options(0, 1));
  const SimulationResult& r = run.result;
  expect_all_served(r, pools);
  EXPECT_EQ(pools.owned[1]->decode_request_slots(), 6);
  size_t most_transferring = 0, most_slots = 0, most_waiting = 0;
  for (const Observation& s : run.steps) {
    if (s.replica != 1) continue;
    EXPECT_LE(s.items.size(), 2u);
    EXPECT_LE(s.running, 2u);
    most_transferring = std::max(most_transferring, s.transferring);
    most_waiting = std::max(most_waiting, s.waiting);
    most_slots = std::max(most_slots, s.running + s.waiting + s.transferring);
  }
  EXPECT_EQ(most_transferring, 4u);
  EXPECT_EQ(most_slots, 6u);
  EXPECT_GT(most_waiting, 0u) << "no landed request ever waited for the running batch";
  int64_t held_back = 0;
  for (const HandoffRecord& h : r.handoffs) held_back += h.kv_allocated > h.handoff;
  EXPECT_GE(held_back, 4);
}

// The prefill side's metadata buffers: max_running_requests 2 gives 4, and a prefill batch takes
// at most 2 requests. Ten requests at once over a slow link (each 100-token prompt moves in
// 41 ms, one at a time on the prefill replica's NIC): four are prefilled, in two batches, and the
// others wait in the bootstrap queue, holding no KV, until a transfer lands and frees a buffer.
TEST(SglangDisaggregation, ThePrefillSideTakesRequestsInWhileAMetadataBufferIsFree) {
  const CostModel cm = rig_cost_model();
  std::vector<RequestSpec> specs(10, RequestSpec{0.0, 100, 5});
  const Workload w = make_workload(specs);
  SglangPolicyConfig prefill;
  prefill.max_running_requests = 2;
  Pools pools = make_pools(prefill, SglangPolicyConfig{});
  const ObservedRun run = run_observed(w, pools, cm, pool_options(0, 0.005));
  const SimulationResult& r = run.result;
  expect_all_served(r, pools);
  bool bootstrapping = false;
  for (const Observation& s : run.steps) {
    if (s.replica != 0) continue;
    EXPECT_LE(s.items.size(), 2u);
    EXPECT_LE(s.metadata_buffers, 4);
    int64_t holding = 0;
    for (const auto& entry : s.held) holding += entry.second;
    EXPECT_LE(holding, 4);
    bootstrapping |= s.bootstrapping > 0;
  }
  EXPECT_TRUE(bootstrapping);
  SimTime first_landing = SimTime::max();
  for (const HandoffRecord& h : r.handoffs) first_landing = std::min(first_landing, h.transfer_end);
  int64_t waited_for_a_buffer = 0;
  for (const RequestRecord& rec : r.requests) waited_for_a_buffer += rec.first_scheduled >= first_landing;
  EXPECT_EQ(waited_for_a_buffer, 6);
}

// Retraction on the decode side. A and B (10 + 2,000 each) are both preallocated in a pool of
// 2,608 tokens (B with 2,598 - 512 = 2,086 >= 2,010 allocatable while A is in transfer). B's KV
// lands second (one NIC, one transfer at a time), during A's first decode step, and the overlap
// scheduler takes it a step later: B decodes from A's third step on. At A's 1,296th step the two
// hold 1,305 + 1,303 tokens, the whole pool: retract_decode takes B, which has generated fewer,
// copies its 1,303 tokens of KV to the host (1 ns a token here) and frees them; A finishes, and B
// is resumed (1,303 + 512 fit) and copied back: nothing is recomputed. C (10 + 5), handed over at
// 14.01 s while B is out, would fit the budget (A's need, 2,010 less the 1,411 tokens it knows,
// is 599; 1,198 free tokens less 599 leave 599 >= 10 + 512), but process_decode_queue
// preallocates nothing while a request is retracted.
TEST(SglangDisaggregation, ARetractedDecodeRequestIsCopiedToTheHostAndBack) {
  RigOptions rig;
  rig.pcie_bytes_per_s = 256e9;  // 256 bytes a token: 1 ns
  const CostModel cm = rig_cost_model(rig);
  const Workload w = make_workload({{0.0, 10, 2000}, {0.0, 10, 2000}, {14.0, 10, 5}});
  constexpr RequestId A = 0, B = 1, C = 2;
  Pools pools = make_pools(SglangPolicyConfig{}, SglangPolicyConfig{});
  const ObservedRun run = run_observed(w, pools, cm, pool_options(163, 100));
  const SimulationResult& r = run.result;
  expect_all_served(r, pools);
  EXPECT_EQ(r.requests[A].preemptions, 0);
  EXPECT_EQ(r.requests[B].preemptions, 1);
  EXPECT_EQ(r.summary.pools[1].preemptions, 1);
  std::vector<SimTime> copies;
  SimTime retracted_at = SimTime::max(), resumed_at = SimTime::max();
  size_t retracted_before = 0;
  for (const Observation& s : run.steps) {
    if (s.replica != 1) continue;
    for (const BatchItem& item : s.items) EXPECT_EQ(item.new_tokens, 1) << "the decode pool recomputed";
    if (s.extra_time > SimTime::zero()) copies.push_back(s.extra_time);
    if (retracted_before == 0 && s.retracted > 0) retracted_at = s.start;
    if (retracted_before > 0 && s.retracted == 0) resumed_at = s.start;
    // A step that starts and ends with B out of the pool preallocates nothing.
    if (retracted_before > 0 && s.retracted > 0) {
      EXPECT_NE(r.handoffs[C].kv_allocated, s.start);
    }
    retracted_before = s.retracted;
  }
  ASSERT_EQ(copies.size(), 2u);  // out, then back
  EXPECT_EQ(copies[0], copies[1]);
  EXPECT_EQ(copies[0], SimTime::from_ns(1303));  // 1 ns a token
  ASSERT_LT(retracted_at, SimTime::from_seconds(14.0));
  ASSERT_NE(resumed_at, SimTime::max());
  EXPECT_GE(resumed_at, r.requests[A].finished);
  EXPECT_LT(r.handoffs[C].handoff, resumed_at);
  EXPECT_GE(r.handoffs[C].kv_allocated, resumed_at) << "C was preallocated while B was retracted";
}

// pop_preallocated's second test counts what retracting the running requests would free. R is
// 16 and the decode pool 1,792 tokens. A (10 + 1,000) decodes alone when B (10 + 1,000) is
// handed over at about 0.5 s: B's prompt + min(max_new_tokens, 4096) less A's tokens, 1,010 -
// (10 + g) after A's g-th token, must be within the free KV less A's need, (1,792 - 9 - g) -
// (1,010 - 10 - g) = 783: B is preallocated at A's 217th token, by A's growth alone, long
// before A finishes. No event falls in between, so a fast-forwarded decode run must stop there
// (repeat_decode_step's test of the prealloc queue): the runs with and without it agree.
TEST(SglangDisaggregation, TheRunningRequestsTokensCountTowardsAWaitingRequestsBudget) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0.0, 10, 1000}, {0.49, 10, 1000}});
  constexpr RequestId A = 0, B = 1;
  SglangPolicyConfig decode;
  decode.num_reserved_decode_tokens = 16;
  SimulationResult runs[2];
  for (const bool ff : {false, true}) {
    Pools pools = make_pools(SglangPolicyConfig{}, decode);
    SimulationOptions o = pool_options(112, 100);
    o.record_iterations = true;
    o.fast_forward = ff;
    runs[ff] = Simulation(w, pools.policies, cm, o).run();
    expect_all_served(runs[ff], pools);
  }
  const SimulationResult& r = runs[0];
  // The step after A's 217th token: its first came from the prefill side, its second at
  // decode_first_token, each other one a decode step of 10 ms later.
  const HandoffRecord& a = r.handoffs[A];
  EXPECT_EQ(r.handoffs[B].kv_allocated, a.decode_first_token + SimTime::from_seconds(0.010 * 215));
  EXPECT_GT(r.handoffs[B].handoff, a.decode_first_token + SimTime::from_seconds(0.3));
  EXPECT_GT(runs[1].fast_forwarded_iterations, 0);
  expect_same_requests(runs[0], runs[1]);
  expect_same_iterations(runs[0], runs[1]);
  EXPECT_EQ(runs[0].handoffs[B].kv_allocated, runs[1].handoffs[B].kv_allocated);
}

// A request that an empty decode pool could not preallocate (prompt + R beyond it) is rejected
// there with the shared reason, and the prefill replica frees the KV it held for it.
TEST(SglangDisaggregation, ADecodePoolTooSmallToPreallocateARequestRejectsIt) {
  const CostModel cm = rig_cost_model();
  const Workload w = make_workload({{0.0, 100, 10}, {0.0, 1200, 10}, {0.1, 200, 10}});
  Pools pools = make_pools(SglangPolicyConfig{}, SglangPolicyConfig{});
  const ObservedRun run = run_observed(w, pools, cm, pool_options(100, 100));  // 1,600 tokens
  const SimulationResult& r = run.result;
  EXPECT_EQ(r.requests[1].state, RequestState::kRejected);
  EXPECT_NE(r.requests[1].reject_reason.find("needs more KV than the whole cache holds (1600 tokens): 1712 tokens"),
            std::string::npos)
      << r.requests[1].reject_reason;
  EXPECT_TRUE(r.requests[0].completed());
  EXPECT_TRUE(r.requests[2].completed());
  for (Policy* p : pools.policies) EXPECT_EQ(p->kv_cache().allocated_tokens(), 0);
}

// Fast-forward (Policy::repeat_decode_step) changes nothing in the pools: streams of requests
// with long outputs into a small decode pool (preallocation held back by the reservation, by
// request slots and buffers, retractions and resumptions), with and without the overlap
// scheduler, with a small reservation and pages of 16. The runs must also have fast-forwarded
// and retracted, or the comparison would prove little.
TEST(SglangDisaggregation, FastForwardChangesNothing) {
  const CostModel cm = rig_cost_model();
  const BuiltWorkload w = spec_workload("poisson:40", "uniform:16:400", "capexp:300:1500", 100, 9);
  struct Variant {
    const char* what;
    SglangPolicyConfig config;
    int64_t decode_blocks;
  };
  std::vector<Variant> variants;
  variants.push_back({"defaults", {}, 400});
  SglangPolicyConfig few;
  few.max_running_requests = 5;
  few.overlap_schedule = false;
  variants.push_back({"max_running_requests 5, no overlap", few, 400});
  SglangPolicyConfig small_reserve;
  small_reserve.num_reserved_decode_tokens = 32;
  small_reserve.page_size = 16;
  variants.push_back({"R 32, pages of 16", small_reserve, 300});
  int64_t forwarded = 0, retracted = 0;
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.what);
    SimulationResult runs[2];
    for (const bool ff : {false, true}) {
      Pools pools = make_pools(v.config, v.config);
      SimulationOptions o = pool_options(v.decode_blocks, 1);
      o.record_iterations = true;
      o.fast_forward = ff;
      runs[ff] = Simulation(w.requests, pools.policies, cm, o).run();
      expect_all_served(runs[ff], pools);
    }
    expect_same_requests(runs[0], runs[1]);
    expect_same_iterations(runs[0], runs[1]);
    expect_same_summary(runs[0].summary, runs[1].summary);
    for (size_t i = 0; i < runs[0].handoffs.size(); ++i) {
      EXPECT_EQ(runs[0].handoffs[i].kv_allocated, runs[1].handoffs[i].kv_allocated) << i;
      EXPECT_EQ(runs[0].handoffs[i].transfer_end, runs[1].handoffs[i].transfer_end) << i;
      EXPECT_EQ(runs[0].handoffs[i].decode_first_token, runs[1].handoffs[i].decode_first_token) << i;
    }
    forwarded += runs[1].fast_forwarded_iterations;
    retracted += runs[1].summary.pools[1].preemptions;
  }
  EXPECT_GT(forwarded, 0);
  EXPECT_GT(retracted, 0);
}

// The reservation is SGLang's --num-reserved-decode-tokens, a policy option of the preset,
// range-checked by name.
TEST(SglangDisaggregation, TheReservationIsAPolicyOption) {
  auto reserved = [](std::map<std::string, std::string> options) {
    const auto policy = make_policy("sglang", PolicyOptions(std::move(options)));
    return static_cast<const SglangPolicy&>(*policy).config().num_reserved_decode_tokens;
  };
  EXPECT_EQ(reserved({}), 512);
  EXPECT_EQ(reserved({{"num_reserved_decode_tokens", "64"}}), 64);
  EXPECT_EQ(reserved({{"num_reserved_decode_tokens", "0"}}), 0);
  const std::string why = user_error_of([&] { reserved({{"num_reserved_decode_tokens", "-1"}}); });
  EXPECT_NE(why.find("num_reserved_decode_tokens"), std::string::npos) << why;
}

}  // namespace
}  // namespace batchsim::testing
