// batchsim — the lazy decode set of a replica (issue 17): running decodes that advance in
// lockstep, one token each in every iteration the set steps, without being touched one by one.
//
// Why. At most iterations of a continuous batcher most of the batch is the same running
// decodes as the iteration before, each computing one token: its KV grows by one token, its
// progress by one token, its inter-token gap is the iteration's. Doing that per sequence and
// per iteration was most of a run's time (README, "Speed"), also in the iterations that carry
// a prefill or follow one, which fast-forward cannot skip. Here a member joins once and leaves
// once, and what happens in between is arithmetic on the set's step count:
//   - its progress (computed and generated tokens, last token, largest gap) is what it was at
//     its join plus the steps since (materialized when it leaves);
//   - its KV tokens likewise; the KV blocks the set takes at a step (paged KV) are the members
//     whose tokens are then a multiple of the block size, a histogram of (tokens - join step)
//     modulo the block size answers that in O(1) (a reservation takes none: a member joins only
//     if its reservation holds it to its last token);
//   - the batch's decode context sum and max follow from the members' (tokens - join step);
//   - it finishes at a step known at its join (a heap by that step);
//   - its gaps: the first the step after its join closes is its own (from its last token
//     before), every later one is the step's, common to all members that stepped before.
// So an iteration costs O(1) plus its joins, leaves and KV block boundaries: per event, not per
// sequence-step.
//
// Who does what. The policy (ContinuousPolicy, the only one that uses it so far; under DP
// attention each rank's scheduler has a cohort of its own, PolicyEnv::rank_cohorts) decides
// membership: its running requests' leading plain decodes (one token after all they know but
// the last is in the KV cache), joined while it schedules, and lists the members in
// Batch::cohort instead of as items; it takes the KV growth of a step through grow() and its
// own cache. The simulation advances the members' progress at each step's end (step_ended),
// records the gaps, takes the members that finish (pop_finished) and materializes members
// that leave. Everything the rest of the simulation and the policy read of a member's progress
// is stale while it is a member, so a member must leave (leave()) before anything but this
// class reads it: at its finish, when it is preempted (a step whose KV growth does not fit
// preempts from the back, as the per-request path would), or when the policy dissolves the set
// (a token budget that does not reach every member).
// Results are those of the per-request path to the byte: the tests that run every policy with
// fast-forward on and off (the set is used only with fast-forward on) compare them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "hwmodel/base/time.h"
#include "sim/policy.h"
#include "sim/workload/request.h"

namespace batchsim {

// The suffix maxima of a run of gaps, for DecodeCohort::steps_ended: (index in the run, gap),
// indices rising and gaps strictly falling, each entry's gap larger than every later one's (so
// the first is the run's largest gap, at its last occurrence).
void repeat_gap_maxima(std::span<const SimTime> gaps, std::vector<std::pair<int64_t, SimTime>>& out);

class DecodeCohort {
 public:
  // The simulation's part: over `progress` (the replica's table, indexed by request id; it
  // must outlive the set), for request ids below its size; empty and unused until enabled.
  void attach(std::vector<RequestProgress>* progress) { progress_ = progress; }
  // The policy's part, at its attach: KV blocks hold `block_size` tokens.
  void enable(int32_t block_size);
  bool enabled() const { return enabled_; }

  int64_t size() const { return size_; }
  bool member(RequestId id) const { return join_seq_[static_cast<size_t>(id)] >= 0; }
  // Steps taken (KV grown) so far.
  int64_t steps() const { return steps_; }

  // --- while the policy schedules (no step in flight) ---
  // Request `id`, a plain decode whose progress is exact and whose KV holds its computed
  // tokens, joins; it finishes after output_tokens - generated more steps.
  void join(RequestId id, int32_t output_tokens);
  // KV blocks the next step takes: members whose tokens are a multiple of the block size.
  int64_t blocks_next_step() const { return histogram_[static_cast<size_t>(next_block_key_)]; }
  // Whether member `id` is one of them.
  bool needs_block_next_step(RequestId id) const { return mod_block(key_[static_cast<size_t>(id)] + steps_) == 0; }
  // The next step's decode contexts (each member attends to its computed tokens + 1): their
  // sum and their largest.
  int64_t next_context_sum() const { return key_sum_ + size_ * (steps_ + 1); }
  int64_t next_context_max();
  // The next step is taken (its KV grown); its end comes through step_ended.
  void grow() {
    ++steps_;
    next_block_key_ = next_block_key_ == 0 ? block_size_ - 1 : next_block_key_ - 1;
  }
  // Member `id` leaves: its progress is made exact (every step taken must have ended).
  void leave(RequestId id);

  // --- at an iteration's end (the simulation) ---
  // Steps grown but not ended yet.
  int64_t steps_in_flight() const { return steps_ - ended_; }
  // Output tokens still to come for the member closest to its end, counting the steps in
  // flight (fast-forward stops before it finishes); INT64_MAX when empty.
  int64_t min_remaining();
  // Members that joined since the last step ended, in join order: their first gap is theirs.
  std::span<const RequestId> joiners() const { return joiners_; }
  // The step in flight ended at `end`. Call joiners_ended first for the first step of an
  // iteration. Returns the step's common gap (to every member that stepped before).
  SimTime step_ended(SimTime end);
  // A fast-forwarded run's `count` further steps ended back to back, the last at `end`:
  // `run_maxima` are their gaps' suffix maxima, as repeat_gap_maxima() gives them. The same
  // as step_ended for each, in O(run_maxima) instead of O(count): a DP replica's ranks share
  // one run, whose maxima the simulation finds once.
  void steps_ended(SimTime end, int64_t count, std::span<const std::pair<int64_t, SimTime>> run_maxima);
  // For each joiner: its first gap (end - its last token) goes to its largest gap and is
  // returned through `gap(id, g)`; the joiners list is cleared.
  template <typename F>
  void joiners_ended(SimTime end, F&& gap) {
    RequestProgress* progress = progress_->data();
    for (const RequestId id : joiners_) {
      RequestProgress& p = progress[id];
      const SimTime g = end - p.last_token;
      if (g > p.max_tbt) p.max_tbt = g;
      gap(id, g);
    }
    joiners_.clear();
  }
  // Members that continue from the step before (not joiners) of the step in flight.
  int64_t continuing() const { return size_ - static_cast<int64_t>(joiners_.size()); }
  // The members that finished with the steps ended so far, in join order, each left (its
  // progress exact) before `f(id)` sees it.
  template <typename F>
  void pop_finished(F&& f) {
    while (!finish_heap_.empty()) {
      const Entry top = finish_heap_.front();
      if (!live(top)) {
        pop_finish();
        continue;
      }
      if (top.key > ended_) break;
      if (top.key < ended_) throw_finished_late(top.id);
      pop_finish();
      leave(top.id);
      f(top.id);
    }
  }

 private:
  struct Entry {
    int64_t key = 0;  // finish heap: the step after which it finished; context heap: its key
    int64_t seq = 0;  // its join's sequence number
    RequestId id = 0;
  };
  bool live(const Entry& e) const { return join_seq_[static_cast<size_t>(e.id)] == e.seq; }
  int64_t mod_block(int64_t v) const {
    const int64_t m = v % block_size_;
    return m < 0 ? m + block_size_ : m;
  }
  void pop_finish();
  // Drops the entries of members that left, when they outnumber the members.
  void compact();
  [[noreturn]] static void throw_finished_late(RequestId id);
  // The largest gap of the steps after `first` (an epoch index) up to the last ended.
  SimTime max_gap_after(int64_t first) const;

  std::vector<RequestProgress>* progress_ = nullptr;
  bool enabled_ = false;
  int32_t block_size_ = 1;
  int64_t size_ = 0;
  int64_t steps_ = 0;  // steps grown
  // mod_block(-steps_): the histogram's entry of the members that take a block at the next
  // step, kept as steps_ grows (a division per step was a DP replica's hottest instruction).
  int64_t next_block_key_ = 0;
  int64_t ended_ = 0;  // steps ended
  int64_t next_seq_ = 0;
  SimTime last_end_;  // the end of step ended_
  // Per request id: its join's sequence number (-1: not a member), the step count at its join,
  // and its key: KV tokens at its join minus that step count.
  std::vector<int64_t> join_seq_, join_step_, key_;
  int64_t key_sum_ = 0;
  std::vector<int64_t> histogram_;  // members by key modulo the block size
  std::vector<RequestId> joiners_;
  std::vector<Entry> finish_heap_;   // smallest step first, then join order
  std::vector<Entry> context_heap_;  // largest key first
  // Suffix maxima of the steps' gaps: (step, gap), steps increasing, gaps strictly decreasing,
  // so that the largest gap after any step is the first entry past it. Entries no member can
  // ask for (at or before its first step) are dropped now and then (prune_gaps).
  std::vector<std::pair<int64_t, SimTime>> gap_maxima_;
  size_t gap_maxima_pruned_ = 0;  // its size after the last pruning
  size_t heaps_compacted_ = 0;    // the heaps' larger size after the last compaction
  // The joins in order (their sequence numbers rise with their steps), from the oldest that may
  // still be a member: the oldest member's join step bounds what gap_maxima_ must keep.
  std::vector<Entry> joins_;
  size_t joins_head_ = 0;
  void prune_gaps();
};

}  // namespace batchsim
