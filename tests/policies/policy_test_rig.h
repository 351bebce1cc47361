// Helpers for the policy tests: a tiny model on an "instant" GPU whose iterations take a fixed,
// round time (so scenario tables read in iterations and times are easy to check), a KV
// capacity set exactly in tokens, a run that records every iteration's batch, and
// TensorRT-LLM-style expected-state tables (batch_manager/*Test.cpp: ExpectedState{itBegin,
// itEnd, activeIds, ...}).
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "hwmodel/base/error.h"
#include "hwmodel/cost_model.h"
#include "policies/registry.h"
#include "sim/simulation.h"
#include "sim/workload/workload.h"

namespace batchsim::testing {

// One transformer layer, one head of 64: 2 * 64 * 2 = 256 KV bytes per token.
inline ModelSpec tiny_model(int max_context_tokens = 4096) {
  ModelSpec m;
  m.name = "tiny";
  m.num_layers = 1;
  m.hidden_size = 64;
  m.num_heads = 1;
  m.num_kv_heads = 1;
  m.head_dim = 64;
  m.ffn_size = 128;
  m.gated_mlp = false;
  m.vocab_size = 128;
  m.max_context_tokens = max_context_tokens;
  return m;
}

struct RigOptions {
  int64_t kv_capacity_tokens = 100000;
  int max_context_tokens = 4096;
  double iteration_s = 0.010;       // every iteration costs exactly this
  double per_sequence_s = 0;        // plus this per sequence in the batch
  double pcie_bytes_per_s = 256e3;  // 1 ms per swapped token of the tiny model
  int num_layers = 1;               // KV bytes per token: 256 per layer
};

// A GPU so fast that FLOPs and bytes cost nothing: an iteration costs its fixed overhead only.
// Its memory is sized so that kv_capacity_tokens(1.0) is exactly the requested capacity.
inline CostModel rig_cost_model(const RigOptions& o = {}) {
  HardwareProfile gpu;
  gpu.name = "instant";
  gpu.source = "test";
  gpu.peak_flops = 1e30;
  gpu.hbm_bytes_per_s = 1e30;
  gpu.interconnect_bytes_per_s = 1e30;
  gpu.pcie_bytes_per_s = o.pcie_bytes_per_s;
  ModelSpec model = tiny_model(o.max_context_tokens);
  model.num_layers = o.num_layers;
  gpu.memory_bytes = 0;
  CostModel probe(model, gpu);
  const double fixed =
      static_cast<double>(model.weight_bytes()) + probe.activation_reserve_bytes(CostModel::kDefaultActivationTokens);
  gpu.memory_bytes = static_cast<int64_t>(std::ceil(fixed)) + o.kv_capacity_tokens * model.kv_bytes_per_token();
  // The fixed cost per iteration and per sequence is an engine's CPU time.
  EngineProfile engine;
  engine.cpu.per_iteration_s = o.iteration_s;
  engine.cpu.per_sequence_s = o.per_sequence_s;
  CostModel cm(model, gpu, 1, engine);
  // Nudge away any rounding so the capacity is exact.
  while (cm.kv_capacity_tokens(1.0) < o.kv_capacity_tokens) {
    gpu.memory_bytes += 1;
    cm = CostModel(model, gpu, 1, engine);
  }
  EXPECT_EQ(cm.kv_capacity_tokens(1.0), o.kv_capacity_tokens);
  return cm;
}

struct RequestSpec {
  double arrival_s = 0;
  int32_t prompt_tokens = 1;
  int32_t output_tokens = 1;
  int32_t priority = 0;  // Request::priority: smaller first under scheduling_policy=priority
};

inline Workload make_workload(const std::vector<RequestSpec>& specs) {
  Workload w;
  for (const RequestSpec& s : specs) {
    Request r;
    r.id = static_cast<RequestId>(w.size());
    r.arrival = SimTime::from_seconds(s.arrival_s);
    r.prompt_tokens = s.prompt_tokens;
    r.output_tokens = s.output_tokens;
    r.priority = s.priority;
    w.push_back(r);
  }
  return w;
}

// What one iteration did, as the tests look at it.
struct Step {
  std::vector<BatchItem> items;  // in the policy's order
  BatchShape shape;
  SimTime start, duration, extra_time;
  int64_t bubble_slots = 0;
  int64_t kv_allocated_tokens = 0, kv_used_tokens = 0;  // after the iteration

  // (id, new_tokens) sorted by id.
  std::vector<std::pair<RequestId, int32_t>> active() const {
    std::vector<std::pair<RequestId, int32_t>> a;
    for (const BatchItem& i : items) a.emplace_back(i.id, i.new_tokens);
    std::sort(a.begin(), a.end());
    return a;
  }
  const BatchItem* item(RequestId id) const {
    for (const BatchItem& i : items) {
      if (i.id == id) return &i;
    }
    return nullptr;
  }
};

struct RecordedRun {
  SimulationResult result;
  std::vector<Step> steps;
};

// The simulation options of a run on rig_cost_model's GPU, whose memory is sized so that
// gpu_memory_utilization 1.0 gives the requested KV capacity: every policy's KV by that rule,
// not by an engine's own (SGLang's mem_fraction_static would not fit the made-up GPU).
inline SimulationOptions rig_simulation_options() {
  SimulationOptions options;
  options.gpu_memory_utilization = 1.0;
  options.engine_kv_rules = false;
  return options;
}

// `num_gpu_blocks` > 0 sizes the KV cache by blocks (a real GPU's cost model, whose memory
// would hold far more than the rig's 40 tokens); 0 takes it from the cost model's memory.
inline RecordedRun run_recorded(Policy& policy, const Workload& workload, const CostModel& cm,
                                const PrefixBlockHashes* prefix_blocks = nullptr, int64_t num_gpu_blocks = 0) {
  RecordedRun run;
  SimulationOptions options = rig_simulation_options();
  options.prefix_blocks = prefix_blocks;
  options.num_gpu_blocks = num_gpu_blocks;
  options.on_iteration = [&run](const Batch& b, const IterationRecord& rec, const Policy& p) {
    Step s;
    s.items = b.items;
    s.shape = b.shape;
    s.start = rec.start;
    s.duration = rec.duration;
    s.extra_time = b.extra_time;
    s.bubble_slots = b.bubble_slots;
    s.kv_allocated_tokens = p.kv_cache().allocated_tokens();
    s.kv_used_tokens = p.kv_cache().used_tokens();
    run.steps.push_back(std::move(s));
  };
  Simulation sim(workload, policy, cm, options);
  run.result = sim.run();
  return run;
}

inline std::unique_ptr<Policy> policy(const std::string& name, std::map<std::string, std::string> options = {}) {
  return make_policy(name, PolicyOptions(std::move(options)));
}

// A policy by name with the options that override its preset, for the suites that sweep many
// configurations.
struct PolicyVariant {
  std::string policy;
  std::map<std::string, std::string> options;
};

// Every registered policy with its shipped options.
inline std::vector<PolicyVariant> registered_variants() {
  std::vector<PolicyVariant> v;
  for (const PolicyInfo& info : registered_policies()) v.push_back({info.name, {}});
  return v;
}

inline RecordedRun run_preset(const std::string& name, const Workload& workload, const CostModel& cm,
                              std::map<std::string, std::string> options = {},
                              const PrefixBlockHashes* prefix_blocks = nullptr) {
  auto p = policy(name, std::move(options));
  return run_recorded(*p, workload, cm, prefix_blocks);
}

// Prompt-block hashes, one list per request (one hash per `block_tokens` prompt tokens).
inline PrefixBlockHashes prefix_hashes(int32_t block_tokens, const std::vector<std::vector<uint64_t>>& per_request) {
  PrefixBlockHashes h;
  h.block_tokens = block_tokens;
  h.offsets.push_back(0);
  for (const auto& ids : per_request) {
    h.hashes.insert(h.hashes.end(), ids.begin(), ids.end());
    h.offsets.push_back(static_cast<int64_t>(h.hashes.size()));
  }
  return h;
}

// Iterations it_begin..it_end (inclusive) each run exactly `active`: (request, new tokens).
struct ExpectedState {
  int64_t it_begin = 0;
  int64_t it_end = 0;
  std::vector<std::pair<RequestId, int32_t>> active;
};

inline std::string describe(const std::vector<std::pair<RequestId, int32_t>>& active) {
  std::string s = "{";
  for (const auto& [id, n] : active) s += fmt::format(" {}:{}", id, n);
  return s + " }";
}

inline void expect_states(const RecordedRun& run, const std::vector<ExpectedState>& states) {
  for (const ExpectedState& e : states) {
    auto want = e.active;
    std::sort(want.begin(), want.end());
    for (int64_t it = e.it_begin; it <= e.it_end; ++it) {
      ASSERT_LT(it, static_cast<int64_t>(run.steps.size()))
          << "the run ended after " << run.steps.size() << " iterations";
      EXPECT_EQ(describe(run.steps[it].active()), describe(want)) << "iteration " << it;
    }
  }
}

// A synthetic workload's spec from its spec strings (prefix: "" or a --prefix spec).
inline WorkloadSpec synthetic_spec(const std::string& arrival, const std::string& prompt, const std::string& output,
                                   int64_t num_requests, uint64_t seed, const std::string& prefix = "",
                                   const std::string& priority = "") {
  WorkloadSpec spec;
  spec.priority = priority;
  spec.arrival = arrival;
  spec.prompt_len = prompt;
  spec.output_len = output;
  spec.num_requests = num_requests;
  spec.seed = seed;
  spec.prefix = prefix;
  return spec;
}

// The workload synthetic_spec describes.
inline BuiltWorkload spec_workload(const std::string& arrival, const std::string& prompt, const std::string& output,
                                   int64_t num_requests, uint64_t seed, const std::string& prefix = "",
                                   const std::string& priority = "") {
  return build_workload(synthetic_spec(arrival, prompt, output, num_requests, seed, prefix, priority));
}

// Two runs that must agree request by request (fast-forward on/off, one replica vs the plain
// run, ...): the same fate, timestamps, preemptions, cached tokens and rejection reason.
inline void expect_same_requests(const SimulationResult& a, const SimulationResult& b) {
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const RequestRecord &x = a.requests[i], &y = b.requests[i];
    ASSERT_EQ(x.state, y.state) << i;
    EXPECT_EQ(x.first_scheduled, y.first_scheduled) << i;
    EXPECT_EQ(x.first_token, y.first_token) << i;
    EXPECT_EQ(x.finished, y.finished) << i;
    EXPECT_EQ(x.max_tbt, y.max_tbt) << i;
    EXPECT_EQ(x.preemptions, y.preemptions) << i;
    EXPECT_EQ(x.cached_tokens, y.cached_tokens) << i;
    EXPECT_EQ(x.reject_reason, y.reject_reason) << i;
    EXPECT_EQ(x.breakdown, y.breakdown) << i;
  }
}

inline void expect_same_distribution(const Distribution& a, const Distribution& b, const char* what) {
  EXPECT_EQ(a.count, b.count) << what;
  EXPECT_EQ(a.mean, b.mean) << what;
  EXPECT_EQ(a.p50, b.p50) << what;
  EXPECT_EQ(a.p90, b.p90) << what;
  EXPECT_EQ(a.p99, b.p99) << what;
  EXPECT_EQ(a.max, b.max) << what;
}

// ... and iteration by iteration (both runs recorded their iterations).
inline void expect_same_iterations(const SimulationResult& x, const SimulationResult& y) {
  ASSERT_EQ(x.iterations.size(), y.iterations.size());
  for (size_t i = 0; i < x.iterations.size(); ++i) {
    const IterationRecord &a = x.iterations[i], &b = y.iterations[i];
    ASSERT_EQ(a.start, b.start) << i;
    ASSERT_EQ(a.replica, b.replica) << i;
    EXPECT_EQ(a.index, b.index) << i;
    EXPECT_EQ(a.duration, b.duration) << i;
    EXPECT_EQ(a.num_decodes, b.num_decodes) << i;
    EXPECT_EQ(a.num_prefills, b.num_prefills) << i;
    EXPECT_EQ(a.bubble_slots, b.bubble_slots) << i;
    EXPECT_EQ(a.kv_used_tokens, b.kv_used_tokens) << i;
    EXPECT_EQ(a.kv_allocated_tokens, b.kv_allocated_tokens) << i;
    EXPECT_EQ(a.cost.total_s, b.cost.total_s) << i;
    EXPECT_EQ(a.waiting, b.waiting) << i;
    // The requests it ran, when both recorded them (offsets may differ: a fast-forwarded run
    // stores one list for its repeats).
    if (x.iteration_items.empty() || y.iteration_items.empty()) continue;
    ASSERT_EQ(a.num_requests, b.num_requests) << i;
    for (int64_t k = 0; k < a.num_requests; ++k) {
      const IterationItem& p = x.iteration_items.at(static_cast<size_t>(a.first_item + k));
      const IterationItem& q = y.iteration_items.at(static_cast<size_t>(b.first_item + k));
      EXPECT_EQ(p.request, q.request) << i;
      EXPECT_EQ(p.new_tokens, q.new_tokens) << i;
      EXPECT_EQ(p.prefill, q.prefill) << i;
    }
  }
}

// ... in what a timeline draws: every request's phase changes and the replicas' idle samples.
inline void expect_same_timeline(const SimulationResult& x, const SimulationResult& y) {
  ASSERT_EQ(x.request_phases.size(), y.request_phases.size());
  for (size_t i = 0; i < x.request_phases.size(); ++i) {
    const RequestPhaseChange &a = x.request_phases[i], &b = y.request_phases[i];
    ASSERT_EQ(a.request, b.request) << i;
    EXPECT_EQ(a.at, b.at) << "request " << a.request;
    EXPECT_EQ(a.phase, b.phase) << "request " << a.request;
  }
  ASSERT_EQ(x.idle_samples.size(), y.idle_samples.size());
  for (size_t i = 0; i < x.idle_samples.size(); ++i) {
    const IdleSample &a = x.idle_samples[i], &b = y.idle_samples[i];
    EXPECT_EQ(a.replica, b.replica) << i;
    EXPECT_EQ(a.at, b.at) << i;
    EXPECT_EQ(a.kv_used_tokens, b.kv_used_tokens) << i;
    EXPECT_EQ(a.kv_allocated_tokens, b.kv_allocated_tokens) << i;
    EXPECT_EQ(a.waiting, b.waiting) << i;
  }
}

// ... and in every summary figure.
inline void expect_same_summary(const Summary& a, const Summary& b) {
  expect_same_distribution(a.e2e_s, b.e2e_s, "e2e");
  expect_same_distribution(a.ttft_s, b.ttft_s, "ttft");
  expect_same_distribution(a.tpot_s, b.tpot_s, "tpot");
  expect_same_distribution(a.tbt_s, b.tbt_s, "tbt");
  EXPECT_EQ(a.iterations, b.iterations);
  EXPECT_EQ(a.preemptions, b.preemptions);
  EXPECT_EQ(a.bubble_fraction, b.bubble_fraction);
  EXPECT_EQ(a.kv_used_fraction_mean, b.kv_used_fraction_mean);
  EXPECT_EQ(a.kv_allocated_fraction_mean, b.kv_allocated_fraction_mean);
  EXPECT_EQ(a.kv_used_fraction_peak, b.kv_used_fraction_peak);
  EXPECT_EQ(a.kv_allocated_fraction_peak, b.kv_allocated_fraction_peak);
  EXPECT_EQ(a.busy_fraction, b.busy_fraction);
  EXPECT_EQ(a.output_tokens_per_s, b.output_tokens_per_s);
  EXPECT_EQ(a.prefill_cached_tokens, b.prefill_cached_tokens);
  EXPECT_EQ(a.prefix_hit_rate, b.prefix_hit_rate);
  EXPECT_EQ(a.latency_breakdown.p99_requests, b.latency_breakdown.p99_requests);
  for (LatencyPart part : kLatencyParts) {
    const LatencyPartSummary &x = a.latency_breakdown[part], &y = b.latency_breakdown[part];
    EXPECT_EQ(x.mean_s, y.mean_s) << latency_part_name(part);
    EXPECT_EQ(x.p99_s, y.p99_s) << latency_part_name(part);
    EXPECT_EQ(x.share, y.share) << latency_part_name(part);
    EXPECT_EQ(x.share_of_p99, y.share_of_p99) << latency_part_name(part);
  }
}

// The latency breakdown's invariants (sim/latency_breakdown.h) on every completed request: no
// part is negative; the parts sum to e2e to the nanosecond; queueing is the time to the first
// iteration; a request that never joined another pool has no kv_transfer; one that was never
// preempted has no preemption unless swaps lengthened its iterations; a request of one output
// token has no decode step.
inline void expect_consistent_breakdowns(const SimulationResult& result, bool swaps = false, bool pooled = false) {
  for (const RequestRecord& r : result.requests) {
    if (!r.completed()) continue;
    const LatencyBreakdown& b = r.breakdown;
    for (LatencyPart part : kLatencyParts) {
      ASSERT_GE(b[part], 0) << "request " << r.id << " " << latency_part_name(part);
    }
    ASSERT_EQ(b.total_ns(), (r.finished - r.arrival).ns()) << "request " << r.id;
    ASSERT_EQ(b[LatencyPart::kQueueing], (r.first_scheduled - r.arrival).ns()) << "request " << r.id;
    if (!pooled) {
      ASSERT_EQ(b[LatencyPart::kKvTransfer], 0) << "request " << r.id;
    }
    if (r.preemptions == 0 && !swaps) {
      ASSERT_EQ(b[LatencyPart::kPreemption], 0) << "request " << r.id;
    }
    if (r.output_tokens == 1) {
      ASSERT_EQ(b[LatencyPart::kDecode], 0) << "request " << r.id;
    }
  }
}

}  // namespace batchsim::testing
