// Decode fast-forward (Policy::repeat_decode_step) must not change a single result: every
// registered policy, on workloads that arrive at once, steadily and in bursts, with KV memory
// tight enough to force preemptions, gives the same records, iteration log and summary with
// fast-forward on and off — compared exactly, not within a tolerance, every request's latency
// breakdown and its summary included — and the same timeline (which requests each iteration
// ran, every request's phase changes, the idle samples). The decode cohort (sim/decode_cohort.h)
// is held to the same: where a policy keeps one, a third run with it gives the same again.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "policies/dp_attention/dp_attention_policy.h"
#include "policies/registry.h"
#include "policy_test_rig.h"
#include "sim/simulation.h"
#include "sim/workload/workload.h"
#include "test_support.h"

namespace batchsim {
namespace {

struct Case {
  const char* arrival;
  const char* prompt;
  const char* output;
  double memory_utilization;             // low values leave little KV: preemptions
  const char* prefix = "";               // --prefix: shared prompt prefixes, for prefix caching
  const char* priority = "uniform:0:3";  // --priority: read by the priority variants only
};

using testing::expect_same_iterations;
using testing::expect_same_requests;
using testing::expect_same_summary;
using testing::expect_same_timeline;
using testing::PolicyVariant;

// Every registered policy as shipped, plus options that change when a decode run may repeat:
// a static timeout (wake-ups in the event queue), swap (KV in flight), several partial
// prefills, a small budget and few sequences (requests left waiting while decodes repeat).
// Whether the variant's KV manager reserves (static batching, or kv=reserve by the preset or
// by the variant's options).
// The value of option `key` for variant `v`: its own, else its preset's, else `fallback`.
std::string option_of(const PolicyVariant& v, const std::string& key, const std::string& fallback) {
  if (v.options.count(key) != 0) return v.options.at(key);
  for (const PolicyInfo& info : registered_policies()) {
    if (info.name != v.policy) continue;
    for (const auto& [k, value] : info.preset) {
      if (k == key) return value;
    }
  }
  return fallback;
}

bool reserves_kv(const PolicyVariant& v) {
  if (v.policy.find("static") != std::string::npos) return true;
  // TensorRT-LLM's capacity policies choose the KV manager (trtllm: no-evict reserves).
  const std::string capacity = option_of(v, "capacity_scheduler", "none");
  if (capacity != "none") return capacity == "guaranteed_no_evict";
  return option_of(v, "kv", "paged") == "reserve";
}

std::vector<PolicyVariant> variants() {
  std::vector<PolicyVariant> v = testing::registered_variants();
  v.push_back({"hf-static", {{"batch_size", "16"}, {"batch_timeout_s", "0.2"}}});
  v.push_back({"ft-static", {{"batch_size", "5"}, {"batch_timeout_s", "0.05"}}});
  v.push_back({"vllm-v0", {{"preemption", "swap"}, {"max_num_seqs", "12"}}});
  v.push_back({"continuous", {{"preemption", "swap"}, {"max_num_batched_tokens", "1024"}}});
  v.push_back({"vllm",
               {{"max_num_batched_tokens", "256"},
                {"max_num_partial_prefills", "3"},
                {"long_prefill_token_threshold", "100"},
                {"preemption", "swap"}}});
  v.push_back({"continuous", {{"kv", "reserve"}, {"prefill", "exclusive"}, {"max_num_seqs", "8"}}});
  // Prefix caching (on in the vllm preset) in the mixed and exclusive schedulers too.
  v.push_back({"continuous", {{"prefix_caching", "true"}, {"max_num_seqs", "12"}}});
  v.push_back({"vllm-v0", {{"prefix_caching", "true"}}});
  // TGI's wait rule, whose hold on waiting requests expires after some decode steps, on paged
  // KV and in mixed iterations as well as in the tgi preset (shipped, above).
  v.push_back({"vllm-v0", {{"max_waiting_tokens", "5"}, {"max_num_seqs", "12"}}});
  v.push_back({"continuous", {{"max_waiting_tokens", "3"}, {"waiting_served_ratio", "0.5"}}});
  // SGLang: decode runs repeat while the running batch is marked full; new_token_ratio decays
  // on every one of them, repeated or not, and an optimistic ratio forces retractions.
  v.push_back({"sglang", {{"schedule_policy", "lpm"}, {"page_size", "16"}}});
  v.push_back({"sglang", {{"enable_mixed_chunk", "true"}, {"chunked_prefill_size", "256"}}});
  // SGLang's overlap scheduler's step of lag is on in the preset (the variants above); without it:
  v.push_back({"sglang", {{"disable_overlap_schedule", "true"}}});
  v.push_back(
      {"sglang",
       {{"disable_overlap_schedule", "true"}, {"enable_mixed_chunk", "true"}, {"chunked_prefill_size", "256"}}});
  v.push_back(
      {"sglang", {{"init_new_token_ratio", "0.1"}, {"chunked_prefill_size", "256"}, {"max_running_requests", "12"}}});
  // TensorRT-LLM's other capacity policy and chunked context; TGI's decode after admission on
  // paged KV, where preemption empties the batch it waits on.
  v.push_back({"trtllm", {{"capacity_scheduler", "max_utilization"}}});
  v.push_back({"trtllm", {{"enable_chunked_context", "true"}, {"max_num_batched_tokens", "512"}}});
  v.push_back({"trtllm",
               {{"capacity_scheduler", "max_utilization"},
                {"enable_chunked_context", "true"},
                {"max_num_batched_tokens", "256"},
                {"max_num_seqs", "12"}}});
  v.push_back({"tgi", {{"max_num_batched_tokens", "256"}}});
  v.push_back({"vllm-v0", {{"decode_after_admission", "true"}, {"max_waiting_tokens", "5"}}});
  // Priority and shortest-job-first orders: v1's victims by rank (refunded when already in
  // the batch), v0's preemption for a better-ranked waiting request, with prefix caching.
  v.push_back({"vllm", {{"scheduling_policy", "priority"}}});
  v.push_back({"vllm", {{"scheduling_policy", "sjf"}, {"max_num_batched_tokens", "256"}, {"preemption", "swap"}}});
  v.push_back({"vllm-v0", {{"scheduling_policy", "priority"}}});
  v.push_back({"vllm-v0", {{"scheduling_policy", "sjf"}, {"sjf_by", "prompt"}, {"max_num_seqs", "12"}}});
  v.push_back({"continuous", {{"scheduling_policy", "priority"}, {"prefix_caching", "true"}}});
  // Async scheduling (on in the vllm preset): requests that arrive during a run wait a step
  // more, so a run repeats only once none is held back; and the synchronous scheduler.
  v.push_back({"vllm", {{"max_num_batched_tokens", "256"}, {"max_num_seqs", "12"}}});
  v.push_back({"vllm", {{"async_scheduling", "false"}}});
  v.push_back({"continuous", {{"async_scheduling", "true"}, {"prefill", "exclusive"}}});
  return v;
}

// `items` false: the iterations' requests are not recorded, so that the decode cohort
// (sim/decode_cohort.h), which fast-forward's runs use where the policy keeps one, advances the
// leading decodes without listing them.
// `max_concurrency` > 0: closed loop, of sessions where the workload has them.
// `offload`: KV offload tiers' tokens (host, disk; 0: none).
SimulationResult run(const PolicyVariant& variant, const BuiltWorkload& w, double utilization, bool fast_forward,
                     bool items = true, int64_t max_concurrency = 0, std::pair<int64_t, int64_t> offload = {}) {
  const CostModel cm(resolve_model("llama-2-7b"), resolve_gpu("a100-40gb"), 1);
  auto policy = make_policy(variant.policy, PolicyOptions(variant.options));
  SimulationOptions options;
  options.gpu_memory_utilization = utilization;
  options.engine_kv_rules = false;  // every policy's KV squeezed by the same utilization
  options.record_iterations = true;
  // What a timeline draws, for every request: the iterations' requests and the phase changes.
  options.record_iteration_items = items;
  options.record_phases_of_first_requests = static_cast<int64_t>(w.requests.size());
  options.fast_forward = fast_forward;
  options.prefix_blocks = &w.prefix_blocks;
  options.sessions = &w.sessions;
  options.max_concurrency = max_concurrency;
  options.kv_offload_cpu_tokens = offload.first;
  options.kv_offload_disk_tokens = offload.second;
  return Simulation(w.requests, *policy, cm, options).run();
}

TEST(FastForward, ResultsAreIdenticalWithAndWithoutIt) {
  const Case cases[] = {
      {"offline", "uniform:16:600", "capexp:100:400", 0.9},
      {"poisson:6", "lognormal:300:0.7", "uniform:1:300", 0.9},
      {"gamma:20:3", "uniform:100:900", "capexp:200:800", 0.41},  // little KV room
      // Shared prefixes: hits, and with little KV room decode growth that evicts them.
      {"poisson:10", "uniform:16:600", "capexp:100:400", 0.9, "groups:500:3"},
      {"gamma:20:3", "uniform:100:900", "capexp:200:800", 0.41, "groups:700:6"},
  };
  int64_t repeated_somewhere = 0, cached_somewhere = 0, cohort_somewhere = 0, cohort_preempting = 0;
  for (const Case& c : cases) {
    const BuiltWorkload w = testing::spec_workload(c.arrival, c.prompt, c.output, 150, 5, c.prefix, c.priority);
    for (const PolicyVariant& v : variants()) {
      SCOPED_TRACE(v.policy + " (" + std::to_string(v.options.size()) + " options) on " + c.arrival);
      const SimulationResult slow = run(v, w, c.memory_utilization, false);
      const SimulationResult fast = run(v, w, c.memory_utilization, true);
      expect_same_requests(slow, fast);  // latency breakdowns included
      const bool swaps = option_of(v, "preemption", "recompute") == "swap";
      testing::expect_consistent_breakdowns(slow, swaps);
      testing::expect_consistent_breakdowns(fast, swaps);
      expect_same_iterations(slow, fast);
      expect_same_timeline(slow, fast);
      const Summary& a = slow.summary;
      expect_same_summary(a, fast.summary);
      cached_somewhere += a.prefill_cached_tokens;
      // Reserved KV never preempts: a reservation holds the whole footprint from admission.
      const bool reserves = reserves_kv(v);
      if (c.memory_utilization < 0.5 && !reserves) {
        EXPECT_GT(a.preemptions + a.requests_rejected, 0) << "the tight case should preempt";
      }
      EXPECT_EQ(slow.fast_forwarded_iterations, 0);
      repeated_somewhere += fast.fast_forwarded_iterations;
      // The decode cohort: the same results again, with the phases and idle samples of a
      // timeline; never with recorded items or fast-forward off.
      const SimulationResult cohort = run(v, w, c.memory_utilization, true, /*items=*/false);
      expect_same_requests(slow, cohort);
      expect_same_iterations(slow, cohort);
      expect_same_timeline(slow, cohort);
      expect_same_summary(a, cohort.summary);
      EXPECT_EQ(slow.cohort_iterations, 0);
      EXPECT_EQ(fast.cohort_iterations, 0);
      cohort_somewhere += cohort.cohort_iterations;
      if (cohort.cohort_iterations > 0) cohort_preempting += a.preemptions;
    }
  }
  EXPECT_GT(repeated_somewhere, 1000);  // the fast path really ran
  EXPECT_GT(cached_somewhere, 0);       // and prefix caching with it
  EXPECT_GT(cohort_somewhere, 1000);    // the decode cohort ran
  EXPECT_GT(cohort_preempting, 0);      // also where KV ran out
}

// KV offload's tiers (issue 46): loads from the host and the disk tier stretch the step that
// admits, and fast-forward and the decode cohort must give the same results with them on.
TEST(FastForward, OffloadTiersGiveIdenticalResults) {
  const Case cases[] = {
      {"poisson:10", "uniform:16:600", "capexp:100:400", 0.9, "groups:500:3"},
      {"gamma:20:3", "uniform:100:900", "capexp:200:800", 0.41, "groups:700:6"},
  };
  const std::pair<int64_t, int64_t> tiers[] = {{3000, 0}, {1500, 40000}};
  int64_t host_hits = 0, disk_hits = 0;
  for (const Case& c : cases) {
    const BuiltWorkload w = testing::spec_workload(c.arrival, c.prompt, c.output, 150, 5, c.prefix, c.priority);
    for (const auto& offload : tiers) {
      for (const PolicyVariant& v :
           {PolicyVariant{"vllm", {}}, PolicyVariant{"vllm", {{"max_num_batched_tokens", "256"}}},
            PolicyVariant{"vllm-v1-2025", {}}}) {
        SCOPED_TRACE(v.policy + " on " + c.arrival + " with tiers " + std::to_string(offload.first) + "/" +
                     std::to_string(offload.second));
        const SimulationResult slow = run(v, w, c.memory_utilization, false, true, 0, offload);
        const SimulationResult fast = run(v, w, c.memory_utilization, true, true, 0, offload);
        const SimulationResult cohort = run(v, w, c.memory_utilization, true, false, 0, offload);
        for (const SimulationResult* other : {&fast, &cohort}) {
          expect_same_requests(slow, *other);
          expect_same_iterations(slow, *other);
          expect_same_summary(slow.summary, other->summary);
          ASSERT_TRUE(other->kv_offload.has_value());
          EXPECT_EQ(other->kv_offload->hit_tokens, slow.kv_offload->hit_tokens);
          EXPECT_EQ(other->kv_offload_disk.has_value(), offload.second > 0);
          if (offload.second > 0) {
            EXPECT_EQ(other->kv_offload_disk->hit_tokens, slow.kv_offload_disk->hit_tokens);
          }
        }
        host_hits += slow.kv_offload->hit_tokens;
        if (slow.kv_offload_disk) disk_hits += slow.kv_offload_disk->hit_tokens;
      }
    }
  }
  EXPECT_GT(host_hits, 0);  // the tiers served blocks
  EXPECT_GT(disk_hits, 0);
}

// A trace of `conversations` conversations of 1-4 turns in Mooncake's JSONL: each turn's prompt is
// the conversation so far (its hash_ids begin with every full block of the turn before), recorded
// 0.2-2 s after that turn; the conversations start 0-0.5 s apart.
std::string conversation_trace(int conversations, uint64_t seed) {
  Rng rng = Rng::for_stream(seed, 0);
  struct Row {
    int64_t ms, input, output;
    std::vector<uint64_t> hashes;
  };
  std::vector<Row> rows;
  uint64_t next_hash = 1;  // 0: the system prompt's block
  int64_t start_ms = 0;
  for (int c = 0; c < conversations; ++c) {
    start_ms += static_cast<int64_t>(sample_below(rng, 500));
    int64_t ms = start_ms, input = 600 + static_cast<int64_t>(sample_below(rng, 600));
    std::vector<uint64_t> hashes = {0};
    const auto turns = 1 + static_cast<int>(sample_below(rng, 4));
    for (int t = 0; t < turns; ++t) {
      if (t > 0) {
        ms += 200 + static_cast<int64_t>(sample_below(rng, 1800));
        hashes.resize(static_cast<size_t>(rows.back().input / 512));  // the full blocks
        input += 300 + static_cast<int64_t>(sample_below(rng, 400));
      }
      while (static_cast<int64_t>(hashes.size()) * 512 < input) hashes.push_back(next_hash++);
      rows.push_back({ms, input, 1 + static_cast<int64_t>(sample_below(rng, 300)), hashes});
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ms < b.ms; });
  std::string text;
  for (const Row& r : rows) {
    text += "{\"timestamp\": " + std::to_string(r.ms) + ", \"input_length\": " + std::to_string(r.input) +
            ", \"output_length\": " + std::to_string(r.output) + ", \"hash_ids\": [";
    for (size_t k = 0; k < r.hashes.size(); ++k) text += (k > 0 ? ", " : "") + std::to_string(r.hashes[k]);
    text += "]}\n";
  }
  return text;
}

// Closed-loop sessions (SimulationOptions::max_concurrency with sessions): a held session is sent
// by another's end, a later turn by its predecessor's settle or at its recorded offset from its
// session's start. Every policy gives the same results with fast-forward on and off and with its
// decode cohort, on synthetic sessions and on sessions read from a trace.
TEST(FastForward, ClosedLoopSessionsGiveIdenticalResults) {
  WorkloadSpec synthetic = testing::synthetic_spec("poisson:8", "uniform:20:400", "capexp:100:400", 40, 9);
  synthetic.session_turns = "uniform:1:5";
  synthetic.think_time = "exponential:0.5";
  WorkloadSpec traced;
  traced.trace =
      testing::write_text_file(testing::scratch_dir("trace"), "conversations.jsonl", conversation_trace(60, 3));
  traced.trace_sessions = true;
  const BuiltWorkload workloads[] = {build_workload(synthetic), build_workload(traced)};
  int64_t repeated = 0, cohort_iterations = 0, linked = 0;
  for (const BuiltWorkload& w : workloads) {
    for (const RequestId before : w.sessions.predecessor) linked += before >= 0;
    for (const double utilization : {0.9, 0.41}) {
      for (const PolicyVariant& v : variants()) {
        SCOPED_TRACE(v.policy + " (" + std::to_string(v.options.size()) + " options), " +
                     std::to_string(w.requests.size()) + " turns at utilization " + std::to_string(utilization));
        const SimulationResult slow = run(v, w, utilization, false, true, 5);
        const SimulationResult fast = run(v, w, utilization, true, true, 5);
        const SimulationResult cohort = run(v, w, utilization, true, false, 5);
        for (const SimulationResult* other : {&fast, &cohort}) {
          expect_same_requests(slow, *other);
          expect_same_iterations(slow, *other);
          expect_same_timeline(slow, *other);
          expect_same_summary(slow.summary, other->summary);
        }
        repeated += fast.fast_forwarded_iterations;
        cohort_iterations += cohort.cohort_iterations;
      }
    }
  }
  EXPECT_GT(linked, 80);  // the trace's conversations were linked
  EXPECT_GT(repeated, 1000);
  EXPECT_GT(cohort_iterations, 1000);
}

// DP attention (policies/dp_attention/): the ranks' lockstep step repeats only when every rank
// vouches for its part, and a rank that vouched before a later one refused carries its run one
// step past the replica's; at a full step's boundary a rank that nothing reached or left
// repeats its own batch. The same results with fast-forward on and off, and with each rank's
// decode cohort (the iterations' requests not recorded), for each kind of rank scheduler, on two
// and three ranks of an MoE model with KV tight enough to preempt.
TEST(FastForward, DpAttentionRanksGiveIdenticalResults) {
  const Case cases[] = {
      {"offline", "uniform:16:600", "capexp:100:400", 0.9},
      {"poisson:12", "lognormal:300:0.7", "uniform:1:300", 0.9},
      {"gamma:20:3", "uniform:100:900", "capexp:200:800", 0.41},
      {"poisson:10", "uniform:16:600", "capexp:100:400", 0.9, "groups:500:3"},
  };
  const std::vector<PolicyVariant> kinds = {
      {"vllm", {}},
      {"vllm", {{"async_scheduling", "false"}, {"max_num_seqs", "12"}}},
      {"vllm-v0", {{"prefix_caching", "true"}}},
      {"vllm-v0", {{"max_waiting_tokens", "5"}, {"max_num_seqs", "12"}}},
      {"sglang", {}},
      {"trtllm", {}},
      {"tgi", {}},
  };
  int64_t repeated = 0, preempted = 0, cohort_iterations = 0, boundary_repeats = 0;
  for (const int dp : {2, 3}) {
    // qwen3-30b-a3b's 128 experts over EP 2 (or, with DP 3, MoE-TP 3 with EP 1); KV per rank.
    const ParallelLayout layout{1, dp, dp == 2 ? 2 : 1};
    const CostModel cm(resolve_model("qwen3-30b-a3b"), resolve_gpu("h100-sxm"), layout);
    for (const Case& c : cases) {
      const BuiltWorkload w = testing::spec_workload(c.arrival, c.prompt, c.output, 150, 5, c.prefix, c.priority);
      for (const PolicyVariant& v : kinds) {
        SCOPED_TRACE(v.policy + " (" + std::to_string(v.options.size()) + " options), DP " + std::to_string(dp) +
                     " on " + c.arrival);
        const auto run_dp = [&](bool fast_forward, bool items = true, int64_t* boundary_repeats = nullptr) {
          std::vector<std::unique_ptr<Policy>> ranks;
          for (int r = 0; r < dp; ++r) ranks.push_back(make_policy(v.policy, PolicyOptions(v.options)));
          DpAttentionPolicy policy(std::move(ranks));
          // (The policy lives in this call: its count is read before it ends.)
          struct Count {
            const DpAttentionPolicy& policy;
            int64_t* out;
            ~Count() {
              if (out != nullptr) *out += policy.boundary_repeats();
            }
          } count{policy, boundary_repeats};
          SimulationOptions options;
          options.gpu_memory_utilization = c.memory_utilization;
          options.engine_kv_rules = false;
          options.record_iterations = true;
          options.record_iteration_items = items;
          options.record_phases_of_first_requests = static_cast<int64_t>(w.requests.size());
          options.fast_forward = fast_forward;
          options.prefix_blocks = &w.prefix_blocks;
          return Simulation(w.requests, policy, cm, options).run();
        };
        const SimulationResult slow = run_dp(false);
        const SimulationResult fast = run_dp(true);
        expect_same_requests(slow, fast);
        expect_same_iterations(slow, fast);
        expect_same_timeline(slow, fast);
        expect_same_summary(slow.summary, fast.summary);
        EXPECT_EQ(slow.fast_forwarded_iterations, 0);
        EXPECT_EQ(fast.cohort_iterations, 0);
        repeated += fast.fast_forwarded_iterations;
        preempted += slow.summary.preemptions;
        const SimulationResult cohorts = run_dp(true, /*items=*/false, &boundary_repeats);
        expect_same_requests(slow, cohorts);
        expect_same_iterations(slow, cohorts);
        expect_same_timeline(slow, cohorts);
        expect_same_summary(slow.summary, cohorts.summary);
        cohort_iterations += cohorts.cohort_iterations;
      }
    }
  }
  EXPECT_GT(repeated, 1000);           // the lockstep step really repeated
  EXPECT_GT(preempted, 0);             // also where KV ran out
  EXPECT_GT(cohort_iterations, 1000);  // the ranks' cohorts ran
  // Unchanged ranks took their own repeat at full steps' boundaries (with cohorts only).
  EXPECT_GT(boundary_repeats, 1000);
}

}  // namespace
}  // namespace batchsim
