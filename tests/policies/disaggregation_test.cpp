// Disaggregated prefill and decode pools (SimulationOptions::disaggregation). What must hold:
// one request through 1 prefill + 1 decode replica takes exactly its prefill, its transfer and
// its decode iterations, for a pull and for a layer-wise transfer; over randomised runs of every
// policy that serves the roles, every router and every link, each request is prefilled on the
// prefill pool up to its first token and no further, decoded on the decode replica it was
// handed to, settles once, and leaves no KV behind on either side; runs repeat to the byte; a
// decode pool too small for the load makes transfers wait while the prefill pool holds the KV
// and stops admitting, and nothing is dropped; fast-forward changes nothing; policies that
// cannot serve a role are refused by name. Each request's latency breakdown sums to its e2e,
// and its kv_transfer part is the wait from the hand-off to its first decode iteration.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "policies/registry.h"
#include "policy_test_rig.h"
#include "sim/simulation.h"
#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::PolicyVariant;

struct Pools {
  std::vector<std::unique_ptr<Policy>> owned;
  std::vector<Policy*> policies;
};

Pools make_pools(const PolicyVariant& prefill, int p, const PolicyVariant& decode, int d) {
  Pools pools;
  for (int i = 0; i < p + d; ++i) {
    const PolicyVariant& v = i < p ? prefill : decode;
    pools.owned.push_back(make_policy(v.policy, PolicyOptions(v.options)));
    pools.policies.push_back(pools.owned.back().get());
  }
  return pools;
}

KvLink link_of(double gbps, double latency_us) { return resolve_kv_link("ib", gbps, latency_us); }

// One request, prompt 100, output 4, on the rig (every iteration 10 ms): the prefill iteration
// ends at 10 ms with the first token; the decode replica allocates the prompt's KV at once and
// pulls it: 100 tokens x 1024 bytes (4 layers) at 0.2048 Gb/s (25.6 MB/s) = 4 ms, plus 0.5 ms
// latency, landing at 14.5 ms; three decode iterations of 10 ms each give tokens 2-4 at 24.5,
// 34.5 and 44.5 ms. Layer-wise, the 10 ms prefill could have carried 256 kB, more than the
// 102.4 kB of KV, so only the last layer's quarter is exposed: 1 ms + 0.5 ms, landing at 11.5 ms.
TEST(Disaggregation, OneRequestIsPrefillPlusTransferPlusDecodeIterations) {
  testing::RigOptions rig;
  rig.num_layers = 4;
  const CostModel cm = testing::rig_cost_model(rig);
  ASSERT_EQ(cm.model().kv_bytes_per_token(), 1024);
  const Workload w = testing::make_workload({{0.0, 100, 4}});
  for (const KvTransferMode mode : {KvTransferMode::kPull, KvTransferMode::kLayerwise}) {
    SCOPED_TRACE(std::string(kv_transfer_mode_name(mode)));
    Pools pools = make_pools({"continuous", {}}, 1, {"continuous", {}}, 1);
    SimulationOptions o = testing::rig_simulation_options();
    o.record_iterations = true;
    o.disaggregation.prefill_replicas = 1;
    o.disaggregation.link = link_of(0.2048, 500);
    o.disaggregation.mode = mode;
    const SimulationResult r = Simulation(w, pools.policies, cm, o).run();
    const double transfer_s = mode == KvTransferMode::kPull ? 0.0045 : 0.0015;
    const RequestRecord& rec = r.requests[0];
    ASSERT_TRUE(rec.completed());
    EXPECT_EQ(rec.first_token, SimTime::from_seconds(0.010));  // TTFT: the prefill side's token
    EXPECT_EQ(rec.finished, SimTime::from_seconds(0.010 + transfer_s + 3 * 0.010));
    EXPECT_EQ(rec.max_tbt, SimTime::from_seconds(transfer_s + 0.010));  // the hand-off gap
    EXPECT_EQ(rec.replica, 1);
    const HandoffRecord& h = r.handoffs[0];
    EXPECT_EQ(h.prefill_replica, 0);
    EXPECT_EQ(h.decode_replica, 1);
    EXPECT_EQ(h.handoff, SimTime::from_seconds(0.010));
    EXPECT_EQ(h.kv_allocated, h.handoff);    // room at once: no backpressure
    EXPECT_EQ(h.transfer_start, h.handoff);  // an idle link: no queueing
    EXPECT_EQ(h.transfer_end, SimTime::from_seconds(0.010 + transfer_s));
    EXPECT_EQ(h.transfer_bytes, mode == KvTransferMode::kPull ? 102400 : 25600);
    EXPECT_EQ(h.decode_first_token, SimTime::from_seconds(0.020 + transfer_s));
    // Its latency breakdown: the rig's iterations are all engine overhead (one prefill, three
    // decodes: 40 ms), and from its hand-off to its first decode iteration, which starts as the
    // KV lands on the idle decode replica, it waited for the transfer.
    EXPECT_EQ(rec.breakdown[LatencyPart::kOverhead], SimTime::from_seconds(0.040).ns());
    EXPECT_EQ(rec.breakdown[LatencyPart::kKvTransfer], SimTime::from_seconds(transfer_s).ns());
    EXPECT_EQ(rec.breakdown.total_ns(), (rec.finished - rec.arrival).ns());
    // One prefill iteration on replica 0, three decode iterations on replica 1.
    ASSERT_EQ(r.iterations.size(), 4u);
    EXPECT_EQ(r.iterations[0].replica, 0);
    EXPECT_EQ(r.iterations[0].prefill_tokens, 100);
    for (size_t i = 1; i < 4; ++i) {
      EXPECT_EQ(r.iterations[i].replica, 1);
      EXPECT_EQ(r.iterations[i].num_decodes, 1);
      EXPECT_EQ(r.iterations[i].num_prefills, 0);
    }
    ASSERT_EQ(r.summary.pools.size(), 2u);
    EXPECT_EQ(r.summary.pools[0].iterations, 1);
    EXPECT_EQ(r.summary.pools[1].iterations, 3);
    EXPECT_EQ(r.summary.kv_transfer.transfers, 1);
    for (Policy* p : pools.policies) EXPECT_EQ(p->kv_cache().allocated_tokens(), 0) << "KV left behind";
  }
}

// A one-token output ends on the prefill side: nothing is handed off or moved.
TEST(Disaggregation, OneTokenOutputsFinishOnThePrefillSide) {
  const CostModel cm = testing::rig_cost_model();
  const Workload w = testing::make_workload({{0.0, 50, 1}, {0.0, 60, 3}});
  Pools pools = make_pools({"vllm", {}}, 1, {"vllm", {}}, 1);
  SimulationOptions o = testing::rig_simulation_options();
  o.disaggregation.prefill_replicas = 1;
  const SimulationResult r = Simulation(w, pools.policies, cm, o).run();
  EXPECT_TRUE(r.requests[0].completed());
  EXPECT_EQ(r.requests[0].replica, 0);
  EXPECT_EQ(r.handoffs[0].decode_replica, -1);
  EXPECT_FALSE(r.handoffs[0].transferred());
  EXPECT_TRUE(r.handoffs[1].transferred());
  EXPECT_EQ(r.summary.kv_transfer.transfers, 1);
  for (Policy* p : pools.policies) EXPECT_EQ(p->kv_cache().allocated_tokens(), 0);
}

// The policies that serve both roles: every continuous, chunked-prefill and sglang preset, and
// options that change admission and preemption (for sglang: few running requests, so that
// landed requests wait for the running batch and preallocation for request slots; pages; lpm
// with small chunks and mixed chunks on the prefill side; the scheduler without overlap).
std::vector<PolicyVariant> pool_variants() {
  std::vector<PolicyVariant> v;
  for (const PolicyInfo& info : registered_policies()) {
    if (info.base == "continuous" || info.base == "chunked-prefill" || info.base == "sglang") {
      v.push_back({info.name, {}});
    }
  }
  v.push_back({"vllm-v0", {{"preemption", "swap"}}});
  v.push_back({"vllm", {{"max_num_batched_tokens", "256"}, {"max_num_seqs", "6"}}});
  v.push_back({"continuous", {{"watermark", "0.05"}, {"prefill", "exclusive"}}});
  v.push_back({"sglang", {{"max_running_requests", "6"}, {"page_size", "16"}, {"disable_overlap_schedule", "true"}}});
  v.push_back(
      {"sglang", {{"schedule_policy", "lpm"}, {"chunked_prefill_size", "256"}, {"enable_mixed_chunk", "true"}}});
  return v;
}

struct Checked {
  SimulationResult result;
  int64_t prefill_pool_prompt_tokens = 0;  // prefill tokens computed on the prefill pool
};

// Runs the pools with every batch checked: a prefill replica computes only prefill chunks, and
// each request's first token there; a decode replica runs only requests handed to it.
Checked run_checked(const PolicyVariant& v, const BuiltWorkload& w, int p, int d, const SimulationOptions& base,
                    const CostModel& prefill_cm, const CostModel* decode_cm) {
  Pools pools = make_pools(v, p, v, d);
  SimulationOptions o = base;
  o.disaggregation.prefill_replicas = p;
  o.disaggregation.decode_cost_model = decode_cm;
  o.prefix_blocks = &w.prefix_blocks;
  Checked c;
  std::map<RequestId, int32_t> decoded_on;
  o.on_iteration = [&](const Batch& batch, const IterationRecord& rec, const Policy& policy) {
    ASSERT_EQ(&policy, pools.policies[static_cast<size_t>(rec.replica)]);
    for (const BatchItem& item : batch.items) {
      const Request& req = w.requests[static_cast<size_t>(item.id)];
      if (rec.replica < p) {
        ASSERT_LT(item.context_before + item.new_tokens, req.prompt_tokens + 1)
            << "request " << item.id << " computed past its prompt on the prefill pool";
        c.prefill_pool_prompt_tokens += item.new_tokens;
      } else {
        const auto [it, first] = decoded_on.try_emplace(item.id, rec.replica);
        EXPECT_EQ(it->second, rec.replica) << "request " << item.id << " moved between decode replicas";
        (void)first;
      }
    }
  };
  c.result = Simulation(w.requests, pools.policies, prefill_cm, o).run();
  for (Policy* policy : pools.policies) {
    EXPECT_TRUE(policy->idle());
    EXPECT_EQ(policy->kv_cache().allocated_tokens(), 0) << "KV left behind on " << policy->name();
  }
  for (const auto& [id, replica] : decoded_on) {
    EXPECT_EQ(c.result.handoffs[static_cast<size_t>(id)].decode_replica, replica) << id;
  }
  return c;
}

// Conservation: each request settles once; a completed one was prefilled on the prefill pool
// (its prompt, plus re-prefills after preemptions there), handed off iff its output is longer
// than one token, moved exactly once, decoded on its decode replica to its last token.
void expect_conserved(const Checked& c, const BuiltWorkload& w, int p, const std::string& what) {
  const SimulationResult& r = c.result;
  int64_t settled = 0, prompt_tokens = 0;
  for (const RequestRecord& rec : r.requests) {
    SCOPED_TRACE(what + ", request " + std::to_string(rec.id));
    ASSERT_TRUE(rec.state == RequestState::kFinished || rec.state == RequestState::kRejected);
    ++settled;
    const HandoffRecord& h = r.handoffs[static_cast<size_t>(rec.id)];
    if (rec.state == RequestState::kRejected) {
      EXPECT_FALSE(rec.reject_reason.empty());
      continue;
    }
    EXPECT_EQ(rec.generated_tokens, rec.output_tokens);
    if (rec.output_tokens == 1) {
      EXPECT_EQ(h.decode_replica, -1);
      EXPECT_LT(rec.replica, p);
    } else {
      ASSERT_TRUE(h.transferred());
      EXPECT_LT(h.prefill_replica, p);
      EXPECT_GE(h.decode_replica, p);
      EXPECT_EQ(rec.replica, h.decode_replica);
      EXPECT_EQ(h.handoff, rec.first_token);
      EXPECT_LE(h.handoff, h.kv_allocated);
      EXPECT_LE(h.kv_allocated, h.transfer_start);
      EXPECT_LT(h.transfer_end, rec.finished);
      EXPECT_GT(h.decode_first_token, h.transfer_end);
      // kv_transfer runs from the hand-off to its first iteration on the decode replica (or a
      // preemption there before it): at least until the KV landed, at most to its first token there.
      EXPECT_GE(rec.breakdown[LatencyPart::kKvTransfer], (h.transfer_end - h.handoff).ns());
      EXPECT_LT(rec.breakdown[LatencyPart::kKvTransfer], (h.decode_first_token - h.handoff).ns());
    }
    prompt_tokens += rec.prompt_tokens;
  }
  EXPECT_EQ(settled, static_cast<int64_t>(w.requests.size()));
  testing::expect_consistent_breakdowns(r, /*swaps=*/true, /*pooled=*/true);
  // Prefill work on the prefill pool: at least every served prompt once (prefix-cache hits
  // aside), and exactly that when the prefill pool preempted nobody.
  if (r.summary.pools[0].preemptions == 0 && r.summary.prefill_cached_tokens == 0) {
    int64_t all_prompts = 0;  // rejected ones too: the decode side refuses after the prefill
    for (const RequestRecord& rec : r.requests) {
      if (rec.state == RequestState::kFinished || rec.first_token != SimTime::max()) all_prompts += rec.prompt_tokens;
    }
    EXPECT_EQ(c.prefill_pool_prompt_tokens, all_prompts) << what;
  }
  EXPECT_GE(c.prefill_pool_prompt_tokens + r.summary.prefill_cached_tokens, prompt_tokens) << what;
  EXPECT_EQ(r.summary.pools[0].replicas + r.summary.pools[1].replicas, static_cast<int32_t>(r.summary.replicas.size()));
}

TEST(Disaggregation, ConservedAndDeterministicForEveryRouterLinkAndMode) {
  const CostModel a100(resolve_model("llama-2-7b"), resolve_gpu("a100-40gb"), 1);
  const CostModel h100_tp2(resolve_model("llama-2-7b"), resolve_gpu("h100-sxm"), 2);
  const BuiltWorkload bursty = testing::spec_workload("gamma:25:3", "uniform:16:1500", "capexp:60:400", 90, 11);
  const BuiltWorkload shared =
      testing::spec_workload("poisson:20", "uniform:16:600", "uniform:1:200", 90, 4, "groups:400:3");
  int64_t waited = 0, queued = 0;
  for (const PolicyVariant& v : pool_variants()) {
    for (const RouterInfo& router : routers()) {
      for (const KvLink& link : kv_links()) {
        for (const KvTransferMode mode : {KvTransferMode::kPull, KvTransferMode::kLayerwise}) {
          // Cycle the rest so that the product stays small: workload, pool sizes, the decode
          // pool's GPU (an H100 at TP 2 for heterogeneous pools), its memory.
          const size_t k = (&router - routers().data()) + (&link - kv_links().data());
          const BuiltWorkload& w = k % 2 == 0 ? bursty : shared;
          const int p = 1 + static_cast<int>(k % 2), d = 1 + static_cast<int>((k + 1) % 3);
          const CostModel* decode_cm = k % 3 == 0 ? &h100_tp2 : nullptr;
          const std::string what = fmt::format("{} ({} opts) router {} link {} {} {}P{}D", v.policy, v.options.size(),
                                               router.name, link.name, kv_transfer_mode_name(mode), p, d);
          SCOPED_TRACE(what);
          SimulationOptions o;
          o.gpu_memory_utilization = 0.42;  // little KV on the A100 side: preemptions, backpressure
          o.router = router.router;
          o.router_seed = 7;
          o.disaggregation.decode_router = routers()[(k + 1) % routers().size()].router;
          o.disaggregation.link = link;
          o.disaggregation.mode = mode;
          const Checked c = run_checked(v, w, p, d, o, a100, decode_cm);
          expect_conserved(c, w, p, what);
          const Checked again = run_checked(v, w, p, d, o, a100, decode_cm);
          testing::expect_same_requests(c.result, again.result);
          for (size_t i = 0; i < c.result.handoffs.size(); ++i) {
            EXPECT_EQ(c.result.handoffs[i].transfer_end, again.result.handoffs[i].transfer_end) << i;
            EXPECT_EQ(c.result.handoffs[i].decode_replica, again.result.handoffs[i].decode_replica) << i;
          }
          for (const HandoffRecord& h : c.result.handoffs) {
            if (!h.transferred()) continue;
            waited += h.kv_allocated > h.handoff;
            queued += h.transfer_start > h.kv_allocated;
          }
        }
      }
    }
  }
  // The sweep reached both kinds of waiting, so the checks above saw them.
  EXPECT_GT(waited, 0);
  EXPECT_GT(queued, 0);
}

// Backpressure: a decode pool whose KV holds a few requests at a time, behind a prefill pool
// that can take a burst. Transfers wait for decode memory while the prefill pool holds their KV;
// once the prefill pool's memory is held too, it stops admitting until a transfer lands; nothing
// is dropped.
TEST(Disaggregation, ASmallDecodePoolMakesTransfersWaitAndDropsNothing) {
  testing::RigOptions rig;
  rig.kv_capacity_tokens = 100000;
  const CostModel cm = testing::rig_cost_model(rig);
  std::vector<testing::RequestSpec> specs;
  for (int i = 0; i < 40; ++i) specs.push_back({0.001 * i, 400, 30});
  const Workload w = testing::make_workload(specs);
  for (const int64_t prefill_blocks : {int64_t{0}, int64_t{160}}) {  // 0: the rig's ample memory
    SCOPED_TRACE(prefill_blocks);
    Pools pools = make_pools({"vllm", {}}, 1, {"vllm", {}}, 1);
    SimulationOptions o = testing::rig_simulation_options();
    o.num_gpu_blocks = prefill_blocks;  // 160 blocks of 16: six prompts of 400
    o.disaggregation.prefill_replicas = 1;
    o.disaggregation.decode_num_gpu_blocks = 100;  // 1600 tokens: three requests at a time
    o.disaggregation.link = link_of(100, 10);
    const SimulationResult r = Simulation(w, pools.policies, cm, o).run();
    int64_t waited = 0;
    std::set<SimTime> landings;
    for (const HandoffRecord& h : r.handoffs) {
      ASSERT_TRUE(h.transferred());
      waited += h.kv_allocated > h.handoff;
      landings.insert(h.transfer_end);
    }
    EXPECT_GT(waited, 20) << "most transfers should wait for decode memory";
    EXPECT_GT(r.summary.kv_transfer.wait_s.p90, 0.1);
    EXPECT_EQ(r.summary.requests_completed, 40);
    EXPECT_EQ(r.summary.requests_rejected, 0);
    EXPECT_LE(r.summary.pools[1].kv_allocated_fraction_peak, 1.0);
    if (prefill_blocks == 0) {
      // Ample prefill memory: every prompt is prefilled without waiting for a landing, and the
      // prefill pool holds the waiting requests' KV meanwhile.
      EXPECT_GT(r.summary.pools[0].kv_allocated_fraction_peak * r.summary.pools[0].kv_capacity_tokens, 10 * 400);
    } else {
      // A full prefill pool admits the next prompt only when a transfer frees held KV: some
      // prefill starts at the very instant a transfer landed.
      int64_t started_at_landing = 0;
      for (const RequestRecord& rec : r.requests) started_at_landing += landings.count(rec.first_scheduled);
      EXPECT_GT(started_at_landing, 0);
      EXPECT_LE(r.summary.pools[0].kv_allocated_fraction_peak, 1.0);
    }
    for (Policy* p : pools.policies) EXPECT_EQ(p->kv_cache().allocated_tokens(), 0);
  }
}

// The link is shared: a burst of long prompts prefilled at once queues on the prefill replica's
// NIC, first come first served, each transfer starting when the one before it ended.
TEST(Disaggregation, TransfersFromOneReplicaQueueOnItsLink) {
  testing::RigOptions rig;
  rig.num_layers = 4;
  const CostModel cm = testing::rig_cost_model(rig);
  const Workload w = testing::make_workload({{0.0, 500, 5}, {0.0, 500, 5}, {0.0, 500, 5}});
  Pools pools = make_pools({"continuous", {}}, 1, {"continuous", {}}, 2);
  SimulationOptions o = testing::rig_simulation_options();
  o.disaggregation.prefill_replicas = 1;
  o.disaggregation.link = link_of(0.2048, 0);  // 500 x 1024 bytes: 20 ms each
  const SimulationResult r = Simulation(w, pools.policies, cm, o).run();
  std::vector<HandoffRecord> h(r.handoffs.begin(), r.handoffs.end());
  std::sort(h.begin(), h.end(), [](const auto& a, const auto& b) { return a.transfer_start < b.transfer_start; });
  ASSERT_EQ(h.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(h[i].handoff, SimTime::from_seconds(0.010));  // one prefill iteration for all three
    EXPECT_EQ(h[i].transfer_end - h[i].transfer_start, SimTime::from_seconds(0.020));
    if (i > 0) {
      EXPECT_EQ(h[i].transfer_start, h[i - 1].transfer_end);
    }
  }
  EXPECT_NEAR(r.summary.kv_transfer.queue_s.max, 0.040, 1e-9);
}

TEST(Disaggregation, FastForwardChangesNothing) {
  const CostModel a100(resolve_model("llama-2-7b"), resolve_gpu("a100-40gb"), 1);
  const BuiltWorkload w = testing::spec_workload("poisson:8", "uniform:16:900", "capexp:200:800", 120, 3);
  int64_t forwarded = 0;
  for (const PolicyVariant& v : pool_variants()) {
    SCOPED_TRACE(v.policy);
    for (const auto& [p, d] : {std::pair{1, 1}, std::pair{1, 3}, std::pair{2, 2}}) {
      SimulationResult runs[2];
      for (const bool ff : {false, true}) {
        Pools pools = make_pools(v, p, v, d);
        SimulationOptions o;
        o.gpu_memory_utilization = 0.45;
        o.record_iterations = true;
        o.fast_forward = ff;
        o.router = Router::kLeastOutstanding;
        o.disaggregation.prefill_replicas = p;
        o.disaggregation.decode_router = Router::kLeastKv;
        o.disaggregation.mode = p == 2 ? KvTransferMode::kLayerwise : KvTransferMode::kPull;
        runs[ff] = Simulation(w.requests, pools.policies, a100, o).run();
      }
      testing::expect_same_requests(runs[0], runs[1]);
      testing::expect_same_iterations(runs[0], runs[1]);
      testing::expect_same_summary(runs[0].summary, runs[1].summary);
      for (size_t i = 0; i < runs[0].handoffs.size(); ++i) {
        EXPECT_EQ(runs[0].handoffs[i].kv_allocated, runs[1].handoffs[i].kv_allocated) << i;
        EXPECT_EQ(runs[0].handoffs[i].transfer_end, runs[1].handoffs[i].transfer_end) << i;
        EXPECT_EQ(runs[0].handoffs[i].decode_first_token, runs[1].handoffs[i].decode_first_token) << i;
      }
      forwarded += runs[1].fast_forwarded_iterations;
    }
  }
  EXPECT_GT(forwarded, 0) << "fast-forward never ran in the pools: the test would prove nothing";
}

// A decode replica whose whole KV cache cannot hold a request rejects it with the reason a
// colocated replica gives; the prefill replica frees the KV it held for it.
TEST(Disaggregation, ADecodePoolTooSmallForARequestRejectsItWithAReason) {
  const CostModel cm = testing::rig_cost_model();
  const Workload w = testing::make_workload({{0.0, 100, 10}, {0.0, 3000, 10}, {0.1, 200, 10}});
  Pools pools = make_pools({"vllm", {}}, 1, {"vllm", {}}, 1);
  SimulationOptions o = testing::rig_simulation_options();
  o.disaggregation.prefill_replicas = 1;
  o.disaggregation.decode_num_gpu_blocks = 100;  // 1600 tokens
  const SimulationResult r = Simulation(w, pools.policies, cm, o).run();
  EXPECT_EQ(r.requests[1].state, RequestState::kRejected);
  EXPECT_NE(r.requests[1].reject_reason.find("needs more KV than the whole cache holds (1600 tokens)"),
            std::string::npos)
      << r.requests[1].reject_reason;
  EXPECT_TRUE(r.requests[0].completed());
  EXPECT_TRUE(r.requests[2].completed());
  for (Policy* p : pools.policies) EXPECT_EQ(p->kv_cache().allocated_tokens(), 0);
}

TEST(Disaggregation, PoliciesWithoutTheRolesAreRefusedByName) {
  const CostModel cm = testing::rig_cost_model();
  const Workload w = testing::make_workload({{0.0, 100, 4}});
  for (const char* name : {"hf-static", "ft-static", "static"}) {
    for (const bool decode_side : {false, true}) {
      SCOPED_TRACE(std::string(name) + (decode_side ? " decode" : " prefill"));
      Pools pools =
          decode_side ? make_pools({"vllm", {}}, 1, {name, {}}, 1) : make_pools({name, {}}, 1, {"vllm", {}}, 1);
      SimulationOptions o = testing::rig_simulation_options();
      o.disaggregation.prefill_replicas = 1;
      const std::string message = testing::user_error_of([&] { Simulation(w, pools.policies, cm, o).run(); });
      EXPECT_NE(message.find(decode_side ? "decode pool" : "prefill pool"), std::string::npos) << message;
      EXPECT_NE(message.find("static batching"), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace batchsim
