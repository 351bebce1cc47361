// Every registered policy (and variants that switch on swap, small budgets, partial prefills,
// reserved KV, timeouts) on many seeded random workloads with a small KV cache, so that
// preemption, head-of-line waiting and rejection all happen. Invariants are asserted on every
// iteration through SimulationOptions::on_iteration (vLLM asserts its budget at the end of every
// schedule(); issue 3 item 6):
//   token budget respected; running <= max_num_seqs; partial prefills <= max_num_partial_prefills
//   (when bounded);
//   blocks in use (summed over requests) + free = total; each scheduled request's KV covers
//   exactly its computed tokens; every output token generated exactly once (and the records'
//   first-token and finish times and the number of TBT gaps agree with that count); every
//   request finishes once or is rejected with a reason; time never goes backwards; every
//   completed request's latency breakdown sums to its e2e (expect_consistent_breakdowns). The
//   workloads carry prompt-block hashes (three groups of requests share prefixes of different
//   lengths), so the policies with prefix caching on (the vllm preset, and variants) hit,
//   evict and share blocks; their caches' reference counts are rechecked every iteration.
#include <random>

#include <gtest/gtest.h>

#include "policies/continuous/continuous_policy.h"
#include "policies/sglang/sglang_policy.h"
#include "policies/static/static_policy.h"
#include "policy_test_rig.h"

namespace batchsim::testing {
namespace {

std::vector<PolicyVariant> variants() {
  std::vector<PolicyVariant> v = registered_variants();
  v.push_back({"continuous", {{"preemption", "swap"}, {"block_size", "8"}}});
  v.push_back({"continuous", {{"kv", "reserve"}, {"prefill", "exclusive"}}});
  v.push_back({"vllm-v0", {{"max_num_seqs", "6"}, {"preemption", "swap"}}});
  v.push_back({"vllm-v0", {{"watermark", "0.1"}, {"block_size", "8"}}});
  v.push_back({"continuous", {{"max_num_batched_tokens", "200"}, {"block_size", "4"}}});
  v.push_back(
      {"vllm",
       {{"max_num_batched_tokens", "64"}, {"long_prefill_token_threshold", "24"}, {"max_num_partial_prefills", "2"}}});
  v.push_back({"sarathi", {{"max_num_batched_tokens", "48"}, {"preemption", "swap"}}});
  // Swap with several chunked prefills in flight: a victim may leave mid-prefill.
  v.push_back({"vllm",
               {{"max_num_batched_tokens", "40"},
                {"max_num_partial_prefills", "3"},
                {"preemption", "swap"},
                {"block_size", "4"}}});
  v.push_back({"chunked-prefill", {{"kv", "reserve"}, {"max_num_batched_tokens", "96"}}});
  v.push_back({"hf-static", {{"batch_size", "4"}, {"batch_timeout_s", "0.05"}}});
  v.push_back({"ft-static", {{"batch_size", "3"}, {"max_new_tokens", "64"}}});
  // TGI's wait rule on paged KV, where preemption can empty the running set it waits on.
  v.push_back({"vllm-v0", {{"max_waiting_tokens", "4"}, {"block_size", "4"}}});
  v.push_back({"vllm", {{"max_waiting_tokens", "6"}, {"waiting_served_ratio", "2"}, {"max_num_batched_tokens", "64"}}});
  // Prefix caching with whole prefills, exclusive prefills, swap, small blocks and a watermark.
  v.push_back({"continuous", {{"prefix_caching", "true"}, {"block_size", "4"}}});
  v.push_back({"vllm-v0", {{"prefix_caching", "true"}, {"preemption", "swap"}, {"block_size", "8"}}});
  v.push_back({"vllm",
               {{"max_num_batched_tokens", "64"},
                {"max_num_partial_prefills", "2"},
                {"watermark", "0.05"},
                {"block_size", "8"}}});
  // SGLang: lpm order, pages of 8, small chunks, an optimistic ratio (retractions), few slots.
  v.push_back({"sglang", {{"schedule_policy", "lpm"}, {"chunked_prefill_size", "48"}}});
  v.push_back(
      {"sglang", {{"enable_mixed_chunk", "true"}, {"chunked_prefill_size", "40"}, {"max_prefill_tokens", "60"}}});
  v.push_back({"sglang", {{"page_size", "8"}, {"init_new_token_ratio", "0.05"}, {"chunked_prefill_size", "100"}}});
  v.push_back({"sglang",
               {{"max_running_requests", "3"},
                {"max_prefill_tokens", "40"},
                {"schedule_policy", "lpm"},
                {"prefix_caching", "false"}}});
  // TensorRT-LLM: both capacity policies, with and without chunked context (decodes first,
  // chunks in whole blocks), small blocks so that chunks are cut and rounded.
  v.push_back({"trtllm", {{"capacity_scheduler", "max_utilization"}, {"block_size", "8"}}});
  v.push_back({"trtllm", {{"enable_chunked_context", "true"}, {"max_num_batched_tokens", "48"}, {"block_size", "8"}}});
  v.push_back({"trtllm",
               {{"capacity_scheduler", "max_utilization"},
                {"enable_chunked_context", "true"},
                {"max_num_batched_tokens", "40"},
                {"block_size", "4"}}});
  v.push_back({"trtllm",
               {{"capacity_scheduler", "max_utilization"},
                {"enable_chunked_context", "true"},
                {"max_num_batched_tokens", "64"},
                {"block_size", "16"},
                {"max_num_seqs", "5"}}});
  // TGI v3 with a small prefill budget (chunks), and its decode-after-admission on paged KV.
  v.push_back({"tgi", {{"max_num_batched_tokens", "48"}}});
  v.push_back({"vllm", {{"decode_after_admission", "true"}, {"max_num_batched_tokens", "64"}}});
  v.push_back({"vllm-v0", {{"decode_after_admission", "true"}, {"block_size", "4"}}});
  // Priority and shortest-job-first orders (the workloads carry priorities 0-2): v1's victim
  // may be a request already in the batch (its tokens refunded), also mid-prefill and with
  // swap; v0 preempts for a better-ranked waiting request; TensorRT-LLM's decodes-first order
  // keeps its decodes; TGI's wait rule counts admissions in rank order.
  v.push_back(
      {"vllm",
       {{"scheduling_policy", "priority"}, {"max_num_batched_tokens", "64"}, {"max_num_partial_prefills", "2"}}});
  v.push_back({"vllm",
               {{"scheduling_policy", "priority"},
                {"preemption", "swap"},
                {"max_num_batched_tokens", "40"},
                {"block_size", "4"}}});
  v.push_back({"vllm-v0", {{"scheduling_policy", "priority"}}});
  v.push_back({"vllm-v0", {{"scheduling_policy", "priority"}, {"preemption", "swap"}, {"block_size", "8"}}});
  v.push_back({"vllm-v0", {{"scheduling_policy", "sjf"}, {"max_waiting_tokens", "4"}, {"block_size", "4"}}});
  v.push_back({"continuous", {{"scheduling_policy", "sjf"}, {"sjf_by", "prompt"}, {"prefix_caching", "true"}}});
  v.push_back({"trtllm",
               {{"capacity_scheduler", "max_utilization"},
                {"enable_chunked_context", "true"},
                {"scheduling_policy", "priority"},
                {"max_num_batched_tokens", "48"},
                {"block_size", "8"}}});
  v.push_back({"tgi", {{"scheduling_policy", "priority"}, {"max_num_batched_tokens", "48"}}});
  return v;
}

struct RandomWorkload {
  Workload requests;
  PrefixBlockHashes prefix_blocks;
};

RandomWorkload random_workload(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double mean_gap_s = 0.001 + 0.04 * unit(rng);
  std::vector<RequestSpec> specs;
  double t = 0;
  for (int i = 0; i < 40; ++i) {
    if (unit(rng) > 0.2) t += -mean_gap_s * std::log(1.0 - unit(rng));  // else: a burst
    RequestSpec s;
    s.arrival_s = t;
    s.prompt_tokens = 1 + static_cast<int32_t>(unit(rng) * 160);
    s.output_tokens = 1 + static_cast<int32_t>(unit(rng) * 120);
    if (unit(rng) < 0.05) s.prompt_tokens = 300 + static_cast<int32_t>(unit(rng) * 250);
    specs.push_back(s);
  }
  RandomWorkload w{make_workload(specs), {}};
  // Priorities 0-2 from a generator of their own (the requests stay those the seed gave before
  // priorities existed): only the priority and sjf variants read them.
  std::mt19937_64 priority_rng(seed * 104729 + 7);
  for (Request& r : w.requests) r.priority = static_cast<int32_t>(priority_rng() % 3);
  // One hash per 8 prompt tokens: a request of group g shares its first kShared[g] hashes
  // with the rest of its group, then has hashes of its own. Drawn from a generator of their
  // own, so the requests are those the seed gave before hashes existed.
  constexpr uint64_t kShared[] = {2, 6, 40};
  std::mt19937_64 group_rng(seed * 7919 + 1);
  w.prefix_blocks.block_tokens = 8;
  w.prefix_blocks.offsets.push_back(0);
  for (const Request& r : w.requests) {
    const uint64_t g = group_rng() % 3;
    for (uint64_t j = 0; j < static_cast<uint64_t>((r.prompt_tokens + 7) / 8); ++j) {
      w.prefix_blocks.hashes.push_back(j < kShared[g] ? g * 1000 + j : (static_cast<uint64_t>(r.id + 1) << 32) + j);
    }
    w.prefix_blocks.offsets.push_back(static_cast<int64_t>(w.prefix_blocks.hashes.size()));
  }
  return w;
}

struct Track {
  int64_t computed = 0;
  int32_t generated = 0;
  bool finished = false;
  bool scheduled = false;
  int32_t recomputes = 0;
  int64_t computed_most = 0;  // the most it ever had computed (before any preemption)
  int64_t cached = 0;         // tokens found cached at admissions this test saw
  // Ends of the iterations that sampled the first and the last output token, by this test's
  // own count: the simulation's records must agree.
  SimTime first_token = SimTime::max();
  SimTime finished_at = SimTime::max();
};

struct Totals {
  int64_t preemptions = 0, rejected = 0, iterations = 0, swapped_iterations = 0, cached = 0;
  int64_t output_hits = 0;  // admissions whose hit went past the prompt
};

void check_kv(const KvCacheManager& kv, RequestId n) {
  int64_t tokens = 0;
  const auto* paged = dynamic_cast<const PagedKvCache*>(&kv);
  const bool shares = paged != nullptr && paged->prefix_caching();
  if (shares) {
    // Shared blocks count once in the cache and once per holder in the requests: the cache
    // recounts references, free pools and the table from its per-request block lists.
    ASSERT_NO_THROW(paged->check_invariants());
    for (RequestId id = 0; id < n; ++id) tokens += paged->tokens_of(id);
    ASSERT_GE(tokens, kv.used_tokens());
  } else if (paged) {
    // Blocks in use (counted request by request, not the cache's own tally) + free = total.
    ASSERT_GE(paged->free_blocks(), 0);
    int64_t blocks = 0;
    for (RequestId id = 0; id < n; ++id) {
      blocks += paged->blocks_of(id);
      tokens += paged->tokens_of(id);
    }
    ASSERT_EQ(blocks + paged->free_blocks(), paged->num_blocks()) << "blocks lost or made up";
  } else {
    const auto& reserved = dynamic_cast<const ReservedKvCache&>(kv);
    int64_t reservations = 0;
    for (RequestId id = 0; id < n; ++id) {
      ASSERT_LE(reserved.tokens_of(id), reserved.reservation_of(id));
      reservations += reserved.reservation_of(id);
      tokens += reserved.tokens_of(id);
    }
    ASSERT_EQ(reservations, reserved.allocated_tokens());
  }
  if (!shares) {
    ASSERT_EQ(tokens, kv.used_tokens());
  }
  ASSERT_LE(kv.used_tokens(), kv.allocated_tokens());
  ASSERT_LE(kv.allocated_tokens(), kv.capacity_tokens());
}

void run_and_check(const PolicyVariant& variant, uint64_t seed, Totals& totals) {
  SCOPED_TRACE(fmt::format("policy {} seed {}", variant.policy, seed));
  RigOptions rig;
  rig.kv_capacity_tokens = 512;
  rig.max_context_tokens = 480;
  rig.iteration_s = 0.004;
  rig.per_sequence_s = 0.0005;
  const CostModel cm = rig_cost_model(rig);
  const RandomWorkload random = random_workload(seed);
  const Workload& w = random.requests;
  const auto n = static_cast<RequestId>(w.size());
  auto policy_ptr = policy(variant.policy, variant.options);
  const auto* continuous = dynamic_cast<const ContinuousPolicy*>(policy_ptr.get());
  const auto* fixed = dynamic_cast<const StaticPolicy*>(policy_ptr.get());
  const auto* sglang = dynamic_cast<const SglangPolicy*>(policy_ptr.get());
  // Any other registered policy (a new one, the guide's example) gets every check below that
  // holds for all policies; the three known kinds also get their own limits checked.

  std::vector<Track> track(n);
  SimTime last_end = SimTime::zero();
  SimulationOptions options = rig_simulation_options();
  options.prefix_blocks = &random.prefix_blocks;
  options.on_iteration = [&](const Batch& batch, const IterationRecord& rec, const Policy& p) {
    ++totals.iterations;
    if (batch.extra_time > SimTime::zero()) ++totals.swapped_iterations;
    // Time never goes backwards; nothing runs before it arrives.
    ASSERT_GE(rec.start, last_end);
    ASSERT_GT(rec.duration, SimTime::zero());
    last_end = rec.start + rec.duration;
    ASSERT_FALSE(batch.items.empty());
    int64_t tokens = 0;
    for (const BatchItem& item : batch.items) {
      ASSERT_LE(w[item.id].arrival, rec.start);
      tokens += item.new_tokens;
    }
    if (continuous != nullptr) {
      ASSERT_LE(tokens, continuous->token_budget());
      ASSERT_EQ(batch.shape.total_tokens(), tokens);  // no padding in continuous batching
      ASSERT_LE(static_cast<int64_t>(batch.items.size()), continuous->config().max_num_seqs);
      ASSERT_LE(static_cast<int64_t>(continuous->num_running()), continuous->config().max_num_seqs);
    } else if (sglang != nullptr) {
      // A prefill-only or a decode-only iteration; prefill within the chunk budget and
      // max_prefill_tokens (which the last request admitted may overrun); requests within
      // max_running_requests; new_token_ratio between its floor and 1.
      ASSERT_EQ(batch.shape.total_tokens(), tokens);
      if (!sglang->last_was_prefill()) {
        ASSERT_EQ(batch.shape.num_decodes, static_cast<int64_t>(batch.items.size()));
        ASSERT_EQ(tokens, static_cast<int64_t>(batch.items.size()));
      } else {
        // With mixed chunks the running requests' decodes follow the prefill items, their
        // tokens taken from both budgets first.
        ASSERT_LE(tokens, sglang->config().chunked_prefill_size);
        const size_t decodes = sglang->last_mixed_decodes();
        if (!sglang->config().mixed_chunk) {
          ASSERT_EQ(decodes, 0u);
        }
        ASSERT_LT(decodes, batch.items.size());
        for (size_t i = batch.items.size() - decodes; i < batch.items.size(); ++i) {
          ASSERT_EQ(batch.items[i].new_tokens, 1);
        }
        const int64_t last_prefill = batch.items[batch.items.size() - decodes - 1].new_tokens;
        // Each admission needs max_prefill_tokens left unspent (budget_state), so only the
        // last prefill item may overrun it.
        ASSERT_LT(tokens - static_cast<int64_t>(decodes) - last_prefill,
                  sglang->config().max_prefill_tokens - static_cast<int64_t>(decodes));
      }
      ASSERT_LE(static_cast<int64_t>(sglang->num_running()), sglang->config().max_running_requests);
      ASSERT_GE(sglang->new_token_ratio(), sglang->min_new_token_ratio() - 1e-12);
      ASSERT_LE(sglang->new_token_ratio(), 1.0);
    } else if (fixed != nullptr) {
      ASSERT_LE(static_cast<int64_t>(batch.items.size()), fixed->config().batch_size);
      ASSERT_GE(batch.shape.total_tokens(), tokens);  // padding and finished rows only add
    } else {
      ASSERT_GE(batch.shape.total_tokens(), tokens);  // a shape holds at least its items
    }
    // Every output token exactly once.
    int64_t partial_prefills = 0;  // items that end the step with their prefill unfinished
    for (const BatchItem& item : batch.items) {
      Track& t = track[item.id];
      ASSERT_FALSE(t.finished) << "request " << item.id << " scheduled after it finished";
      t.scheduled = true;
      const int64_t known = w[item.id].prompt_tokens + t.generated;
      if (item.context_before != t.computed) {
        // Only a recompute preemption moves a request back, to zero; and an admission with
        // prefix caching moves it to its cached prefix: whole blocks, short of what it knows.
        if (t.computed > 0) ++t.recomputes;
        if (item.context_before != 0) {
          const auto* paged = dynamic_cast<const PagedKvCache*>(&p.kv_cache());
          ASSERT_TRUE(paged != nullptr && paged->prefix_caching()) << "request " << item.id;
          ASSERT_LT(item.context_before, known) << "request " << item.id;
          ASSERT_EQ(item.context_before % paged->block_size(), 0) << "request " << item.id;
          // Past its prompt a hit holds the request's own output (vLLM v1 caches output
          // blocks; nobody else has them), so only what it computed before a preemption.
          if (item.context_before > w[item.id].prompt_tokens) {
            ASSERT_LE(item.context_before, t.computed_most) << "request " << item.id;
            ++totals.output_hits;
          }
          t.cached += item.context_before;
        }
        t.computed = item.context_before;
      }
      ASSERT_GE(item.new_tokens, 1);
      ASSERT_LE(t.computed + item.new_tokens, known);
      t.computed += item.new_tokens;
      t.computed_most = std::max(t.computed_most, t.computed);
      if (t.computed < known) ++partial_prefills;
      if (t.computed == known) {
        ++t.generated;
        if (t.generated == 1) t.first_token = rec.start + rec.duration;
        if (t.generated == w[item.id].output_tokens) {
          t.finished = true;
          t.finished_at = rec.start + rec.duration;
        }
      }
      // The KV of a request still running covers exactly what it has computed.
      if (!t.finished && fixed == nullptr) {
        ASSERT_TRUE(p.kv_cache().holds(item.id));
        ASSERT_EQ(p.kv_cache().tokens_of(item.id), t.computed);
      }
    }
    if (continuous != nullptr && continuous->config().max_num_partial_prefills > 0) {
      ASSERT_LE(partial_prefills, continuous->config().max_num_partial_prefills);
    }
    check_kv(p.kv_cache(), n);
  };
  Simulation sim(w, *policy_ptr, cm, options);
  const SimulationResult result = sim.run();
  if (::testing::Test::HasFatalFailure()) return;
  const auto swap = variant.options.find("preemption");
  expect_consistent_breakdowns(result, /*swaps=*/swap != variant.options.end() && swap->second == "swap");
  if (::testing::Test::HasFatalFailure()) return;

  int64_t completed = 0, rejected = 0, output_tokens = 0, recomputes = 0, gaps = 0;
  for (RequestId id = 0; id < n; ++id) {
    const RequestRecord& r = result.requests[id];
    const Track& t = track[id];
    recomputes += t.recomputes;
    if (r.state == RequestState::kFinished) {
      ++completed;
      output_tokens += r.output_tokens;
      EXPECT_TRUE(t.finished) << id;
      EXPECT_EQ(t.generated, r.output_tokens) << id;
      EXPECT_EQ(r.first_token, t.first_token) << id;
      EXPECT_EQ(r.finished, t.finished_at) << id;
      // A hit equal to what a recomputed request had computed looks like no jump here.
      EXPECT_GE(r.cached_tokens, t.cached) << id;
      gaps += r.output_tokens - 1;
    } else {
      ASSERT_EQ(r.state, RequestState::kRejected) << id;
      ++rejected;
      EXPECT_FALSE(r.reject_reason.empty()) << id;
      EXPECT_FALSE(t.scheduled) << "rejected request " << id << " had been scheduled";
    }
  }
  EXPECT_EQ(completed + rejected, n);
  EXPECT_EQ(result.summary.requests_completed, completed);
  EXPECT_EQ(result.summary.requests_rejected, rejected);
  EXPECT_EQ(result.summary.output_tokens, output_tokens);
  // Each output token after a request's first closes exactly one time-between-tokens gap: a
  // token counted twice or lost would change the number of gaps.
  EXPECT_EQ(result.tbt_s.count(), gaps);
  EXPECT_GE(result.summary.preemptions, recomputes);
  int64_t cached = 0;
  for (const RequestRecord& r : result.requests) cached += r.cached_tokens;
  EXPECT_EQ(result.summary.prefill_cached_tokens, cached);
  totals.cached += cached;
  if (fixed != nullptr) {
    EXPECT_EQ(result.summary.preemptions, 0);
  }
  EXPECT_LE(result.summary.kv_used_fraction_peak, result.summary.kv_allocated_fraction_peak + 1e-12);
  EXPECT_LE(result.summary.kv_allocated_fraction_peak, 1.0);
  // The policy's queues are empty and its KV cache is back to empty.
  EXPECT_TRUE(policy_ptr->idle());
  EXPECT_EQ(policy_ptr->kv_cache().allocated_tokens(), 0);
  totals.preemptions += result.summary.preemptions;
  totals.rejected += rejected;
}

TEST(RandomizedPolicies, InvariantsHoldOnEveryIterationOfEveryPolicy) {
  Totals totals;
  for (const PolicyVariant& v : variants()) {
    for (uint64_t seed = 1; seed <= 30; ++seed) {
      run_and_check(v, seed, totals);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  // The workloads are hard enough to exercise what the invariants guard.
  EXPECT_GT(totals.preemptions, 100);
  EXPECT_GT(totals.swapped_iterations, 10);
  EXPECT_GT(totals.rejected, 10);
  EXPECT_GT(totals.iterations, 10000);
  EXPECT_GT(totals.cached, 10000);
  EXPECT_GT(totals.output_hits, 10);
}

}  // namespace
}  // namespace batchsim::testing
