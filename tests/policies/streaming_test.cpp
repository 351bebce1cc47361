// Streaming mode (sim/simulation.h, "Streaming") must give what the same run in memory gives:
// every registered policy (and the orders that rank requests: priority, shortest job first),
// on steady, bursty and tight-memory workloads, one replica and a cluster, with a slot pool far
// smaller than the workload so that every slot serves many requests — the same records (sorted
// by id: they settle in another order), the same counts, totals, throughput, KV and busy
// figures, means up to the order of a floating-point sum, and percentiles within the sketch's
// relative error of the exact nearest-rank ones.
#include <algorithm>
#include <array>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hwmodel/base/error.h"
#include "policies/registry.h"
#include "policy_test_rig.h"
#include "sim/simulation.h"
#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::PolicyVariant;

struct Case {
  const char* arrival;
  const char* prompt;
  const char* output;
  double memory_utilization;  // low values leave little KV: preemptions
  int replicas;
  const char* prefix = "";                    // a --prefix: prompt-block hashes, which the source hands on per slot
  Router router = Router::kLeastOutstanding;  // reads the replicas' state: routing must agree too
};

struct Runs {
  SimulationResult exact, streamed;
  int64_t slots = 0;
};

Runs run_both(const PolicyVariant& v, const BuiltWorkload& built, const Case& c) {
  const Workload& w = built.requests;
  const CostModel cm(resolve_model("llama-2-7b"), resolve_gpu("a100-40gb"), 1);
  const auto make = [&] {
    std::vector<std::unique_ptr<Policy>> owned;
    for (int i = 0; i < c.replicas; ++i) owned.push_back(make_policy(v.policy, PolicyOptions(v.options)));
    return owned;
  };
  const auto pointers = [](const std::vector<std::unique_ptr<Policy>>& owned) {
    std::vector<Policy*> p;
    for (const auto& o : owned) p.push_back(o.get());
    return p;
  };
  SimulationOptions options;
  options.gpu_memory_utilization = c.memory_utilization;
  options.router = c.router;
  Runs runs;
  {
    auto owned = make();
    options.prefix_blocks = &built.prefix_blocks;
    runs.exact = Simulation(w, pointers(owned), cm, options).run();
    options.prefix_blocks = nullptr;  // a streaming run's come from its source
  }
  // Few slots, doubled until the run's peak of requests in flight fits: each slot is reused.
  for (runs.slots = 8;; runs.slots *= 2) {
    auto owned = make();
    std::vector<RequestRecord> records;
    options.streaming.slots = runs.slots;
    options.streaming.on_settled = [&](const RequestRecord& r) { records.push_back(r); };
    WorkloadSource source(w, &built.prefix_blocks);
    try {
      runs.streamed = Simulation(source, pointers(owned), cm, options).run();
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("--streaming-slots"), std::string::npos) << e.what();
      continue;
    }
    EXPECT_TRUE(runs.streamed.requests.empty());  // nothing kept: they went to on_settled
    std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    runs.streamed.requests = std::move(records);
    return runs;
  }
}

void expect_within_sketch_error(const Distribution& exact, const Distribution& sketched, const char* what) {
  EXPECT_EQ(exact.count, sketched.count) << what;
  EXPECT_NEAR(exact.mean, sketched.mean, 1e-12 * std::abs(exact.mean)) << what;
  EXPECT_EQ(exact.max, sketched.max) << what;
  const double alpha = SketchedSamples::kRelativeAccuracy + 1e-9;
  EXPECT_LE(std::abs(exact.p50 - sketched.p50), alpha * exact.p50) << what;
  EXPECT_LE(std::abs(exact.p90 - sketched.p90), alpha * exact.p90) << what;
  EXPECT_LE(std::abs(exact.p99 - sketched.p99), alpha * exact.p99) << what;
}

void expect_same_but_percentiles(const Summary& a, const Summary& b) {
  EXPECT_EQ(a.requests_total, b.requests_total);
  EXPECT_EQ(a.requests_completed, b.requests_completed);
  EXPECT_EQ(a.requests_rejected, b.requests_rejected);
  EXPECT_EQ(a.prompt_tokens, b.prompt_tokens);
  EXPECT_EQ(a.output_tokens, b.output_tokens);
  EXPECT_EQ(a.makespan_s, b.makespan_s);
  EXPECT_EQ(a.output_tokens_per_s, b.output_tokens_per_s);
  EXPECT_EQ(a.total_tokens_per_s, b.total_tokens_per_s);
  EXPECT_EQ(a.requests_per_s, b.requests_per_s);
  EXPECT_EQ(a.iterations, b.iterations);
  EXPECT_EQ(a.preemptions, b.preemptions);
  EXPECT_EQ(a.bubble_fraction, b.bubble_fraction);
  EXPECT_EQ(a.busy_fraction, b.busy_fraction);
  EXPECT_EQ(a.kv_used_fraction_mean, b.kv_used_fraction_mean);
  EXPECT_EQ(a.kv_allocated_fraction_peak, b.kv_allocated_fraction_peak);
  EXPECT_EQ(a.prefill_admitted_tokens, b.prefill_admitted_tokens);
  EXPECT_EQ(a.prefill_cached_tokens, b.prefill_cached_tokens);
  ASSERT_EQ(a.replicas.size(), b.replicas.size());
  for (size_t i = 0; i < a.replicas.size(); ++i) {
    EXPECT_EQ(a.replicas[i].requests, b.replicas[i].requests) << "replica " << i;
    EXPECT_EQ(a.replicas[i].completed, b.replicas[i].completed) << "replica " << i;
  }
  expect_within_sketch_error(a.e2e_s, b.e2e_s, "e2e");
  expect_within_sketch_error(a.ttft_s, b.ttft_s, "ttft");
  expect_within_sketch_error(a.tpot_s, b.tpot_s, "tpot");
  expect_within_sketch_error(a.tbt_s, b.tbt_s, "tbt");
  expect_within_sketch_error(a.queueing_s, b.queueing_s, "queueing");
  expect_within_sketch_error(a.normalized_latency_s_per_token, b.normalized_latency_s_per_token, "normalized");
  ASSERT_EQ(a.priority_classes.size(), b.priority_classes.size());
  for (size_t i = 0; i < a.priority_classes.size(); ++i) {
    EXPECT_EQ(a.priority_classes[i].priority, b.priority_classes[i].priority);
    EXPECT_EQ(a.priority_classes[i].completed, b.priority_classes[i].completed);
    expect_within_sketch_error(a.priority_classes[i].e2e_s, b.priority_classes[i].e2e_s, "class e2e");
  }
  EXPECT_EQ(a.percentile_relative_error, 0.0);
  EXPECT_EQ(b.percentile_relative_error, SketchedSamples::kRelativeAccuracy);
  for (LatencyPart part : kLatencyParts) {
    const LatencyPartSummary &x = a.latency_breakdown[part], &y = b.latency_breakdown[part];
    EXPECT_EQ(x.mean_s, y.mean_s) << latency_part_name(part);  // sums of integer ns: exact
    EXPECT_EQ(x.share, y.share) << latency_part_name(part);
    // Rounded to the ns after the sketch: a relative error, plus half a ns.
    EXPECT_LE(std::abs(x.p99_s - y.p99_s), (SketchedSamples::kRelativeAccuracy + 1e-9) * x.p99_s + 1e-9)
        << latency_part_name(part);
  }
  EXPECT_EQ(b.latency_breakdown.p99_requests, 0);  // no records to pick them from
}

TEST(Streaming, EqualsTheExactRunButForPercentilesWithinTheirError) {
  const Case cases[] = {
      {"poisson:6", "lognormal:300:0.7", "uniform:1:300", 0.9, 1},
      {"gamma:20:3", "uniform:100:900", "capexp:200:800", 0.41, 1},  // bursts, little KV room
      {"poisson:15", "uniform:16:600", "capexp:100:400", 0.9, 3},
      {"offline", "uniform:16:600", "capexp:100:400", 0.9, 1},  // every slot at once
      // Shared prefixes under prefix caching (vllm, sglang's radix cache): a recycled slot's
      // next occupant must find the prefix blocks, never its predecessor's own blocks.
      {"poisson:8", "uniform:16:400", "capexp:50:300", 0.5, 1, "groups:256:3"},
      {"poisson:20", "uniform:16:400", "capexp:50:300", 0.9, 2, "groups:512:4", Router::kPrefix},
  };
  std::vector<PolicyVariant> variants = testing::registered_variants();
  variants.push_back({"hf-static", {{"batch_size", "16"}, {"batch_timeout_s", "0.2"}}});
  variants.push_back({"vllm", {{"scheduling_policy", "priority"}}});
  variants.push_back(
      {"vllm", {{"scheduling_policy", "sjf"}, {"max_num_batched_tokens", "256"}, {"preemption", "swap"}}});
  variants.push_back({"vllm-v0", {{"scheduling_policy", "sjf"}, {"sjf_by", "prompt"}, {"max_num_seqs", "12"}}});
  int64_t recycled_runs = 0;
  for (const Case& c : cases) {
    const BuiltWorkload w = testing::spec_workload(c.arrival, c.prompt, c.output, 200, 11, c.prefix, "uniform:0:3");
    for (const PolicyVariant& v : variants) {
      SCOPED_TRACE(v.policy + " (" + std::to_string(v.options.size()) + " options) on " + c.arrival + " x" +
                   std::to_string(c.replicas));
      Runs runs;
      try {
        runs = run_both(v, w, c);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        continue;
      }
      testing::expect_same_requests(runs.exact, runs.streamed);
      for (size_t i = 0; i < runs.exact.requests.size(); ++i) {
        const RequestRecord &x = runs.exact.requests[i], &y = runs.streamed.requests[i];
        ASSERT_EQ(x.id, y.id);
        EXPECT_EQ(x.arrival, y.arrival);
        EXPECT_EQ(x.prompt_tokens, y.prompt_tokens);
        EXPECT_EQ(x.output_tokens, y.output_tokens);
        EXPECT_EQ(x.priority, y.priority);
        EXPECT_EQ(x.replica, y.replica);
      }
      expect_same_but_percentiles(runs.exact.summary, runs.streamed.summary);
      // The prefix cases share prefixes that the vLLM preset's cache finds.
      if (*c.prefix != '\0' && v.policy == "vllm" && v.options.empty()) {
        EXPECT_GT(runs.exact.summary.prefill_cached_tokens, 0);
      }
      // Without hashes, where KV is short, the preempted requests find their own blocks again.
      if (&c == &cases[1] && v.policy == "vllm" && v.options.empty()) {
        EXPECT_GT(runs.exact.summary.preemptions, 0);
        EXPECT_GT(runs.exact.summary.prefill_cached_tokens, 0);
      }
      recycled_runs += runs.slots < static_cast<int64_t>(w.requests.size());
      // At the light load every slot serves several requests (static batching falls behind
      // at any rate: its queue, and so its requests in flight, grow with the run).
      if (&c == &cases[0] && v.policy.find("static") == std::string::npos) {
        EXPECT_LT(runs.slots, static_cast<int64_t>(w.requests.size()) / 2);
      }
    }
  }
  // Beyond the light load, bursts and clusters recycled slots too.
  EXPECT_GT(recycled_runs, static_cast<int64_t>(variants.size()) * 3 / 2);
}

TEST(Streaming, TooManyInFlightNamesTheOption) {
  const CostModel cm(resolve_model("llama-2-7b"), resolve_gpu("a100-40gb"), 1);
  const BuiltWorkload w = testing::spec_workload("offline", "fixed:100", "fixed:10", 50, 1);
  auto policy = make_policy("vllm", PolicyOptions());
  SimulationOptions options;
  options.streaming.slots = 10;  // 50 arrive at once
  WorkloadSource source(w.requests);
  Simulation sim(source, std::span<Policy* const>(std::array<Policy*, 1>{policy.get()}), cm, options);
  const std::string message = testing::user_error_of([&] { sim.run(); });
  EXPECT_NE(message.find("--streaming-slots"), std::string::npos) << message;
  EXPECT_NE(message.find("10 slots"), std::string::npos) << message;
}

}  // namespace
}  // namespace batchsim
