// batchsim — one iteration's work, as a policy hands it to the replica.
//
// A Batch lists, for each scheduled request, how many tokens it computes this iteration
// (a prefill chunk, or 1 for a decode; vLLM v1's unified "num_new_tokens = tokens -
// num_computed_tokens" rule). The replica applies the items; the cost model sees only `shape`,
// which the policy fills and which may contain more work than the items (padding of a static
// batch, rows of finished sequences that still compute) — that extra work is what static
// batching wastes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "hwmodel/base/time.h"
#include "hwmodel/cost_model.h"
#include "sim/workload/request.h"

namespace batchsim {

struct BatchItem {
  RequestId id = 0;
  int32_t new_tokens = 0;      // >= 1
  int64_t context_before = 0;  // tokens already computed (in the KV cache) before this step
  // Speculative decoding: draft tokens a decode verifies beyond its one known token (the GPU
  // computes new_tokens + drafts; the simulation keeps the accepted ones).
  int32_t drafts = 0;
};

struct Batch {
  std::vector<BatchItem> items;
  // The members of the replica's decode cohort (sim/decode_cohort.h), each decoding one token,
  // ahead of `items` in batch order and not listed there: the policy's leading decodes, whose
  // progress the replica advances without visiting them. In `shape` like any decode. Empty
  // unless the policy keeps a cohort; valid until the iteration has ended.
  std::span<const RequestId> cohort;
  // With attention data parallelism (policies/dp_attention/), the ranks' cohorts instead: rank
  // `rank`'s members come in batch order right before items[items_begin] (its own items, the
  // ranks in rank order). Added through add_rank_cohort.
  struct RankCohort {
    int32_t rank = 0;
    size_t items_begin = 0;
    std::span<const RequestId> members;
  };
  std::vector<RankCohort> rank_cohorts;
  BatchShape shape;  // what the cost model times
  // With attention data parallelism (policies/dp_attention/): each rank's shape, which the cost
  // model times as one lockstep step (CostModel::step); `shape` is then their sum. Empty
  // otherwise. Held by the policy, valid until the iteration has ended (as `cohort`).
  std::span<const BatchShape> rank_shapes;
  // With rank_shapes, one flag per rank (or none): the rank repeats its decodes of the step
  // before, one token further on, so the cost model advances that step's cost
  // (CostModel::step's `repeated`). Held by the policy, as rank_shapes.
  std::span<const uint8_t> rank_repeats;
  SimTime extra_time;        // added to the cost model's time (e.g. swap transfers)
  int64_t bubble_slots = 0;  // batch slots that compute nothing useful (static batching)
  // When the policy schedules nothing now but wants to be asked again at a later time
  // (a static batch timeout), it sets this.
  std::optional<SimTime> wake_at;

  void clear() {
    items.clear();
    cohort = {};
    rank_cohorts.clear();
    rank_cohort_members_ = 0;
    shape.clear();
    rank_shapes = {};
    rank_repeats = {};
    extra_time = SimTime::zero();
    bubble_slots = 0;
    wake_at.reset();
  }
  bool empty() const { return items.empty() && cohort.empty() && rank_cohort_members_ == 0; }
  // Requests in the batch: its items and its cohorts' members.
  size_t size() const { return items.size() + cohort.size() + rank_cohort_members_; }
  bool has_cohort() const { return !cohort.empty() || rank_cohort_members_ > 0; }
  // Rank `rank`'s cohort, ahead of the items added after it; an empty one is not kept.
  void add_rank_cohort(int32_t rank, std::span<const RequestId> members) {
    if (members.empty()) return;
    rank_cohorts.push_back({rank, items.size(), members});
    rank_cohort_members_ += members.size();
  }
  // Every non-empty cohort of the batch in batch order, as f(rank, items_begin, members): the
  // scheduler's own (rank 0, ahead of every item), then the ranks'.
  template <typename F>
  void for_each_cohort(F&& f) const {
    if (!cohort.empty()) f(int32_t{0}, size_t{0}, cohort);
    for (const RankCohort& c : rank_cohorts) f(c.rank, c.items_begin, c.members);
  }
  // Adds an item and its shape: a decode when it computes the last known token, else a
  // prefill chunk. Policies that pad or compute extra rows add to `shape` themselves.
  void add(RequestId id, int32_t new_tokens, int64_t context_before, bool is_decode, bool samples) {
    items.push_back({id, new_tokens, context_before});
    if (is_decode) {
      shape.add_decode(context_before);
    } else {
      shape.add_prefill(new_tokens, context_before);
    }
    if (samples) ++shape.num_sampled;
  }
  // A decode that verifies `drafts` draft tokens too: 1 + drafts query rows, each sampled.
  void add_speculative_decode(RequestId id, int64_t context_before, int32_t drafts) {
    items.push_back({id, 1, context_before, drafts});
    shape.add_decode(context_before);
    shape.decode_draft_tokens += drafts;
    shape.num_sampled += 1 + drafts;
  }

 private:
  size_t rank_cohort_members_ = 0;
};

}  // namespace batchsim
