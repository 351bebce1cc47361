// batchsim — arrivals that an engine scheduling one step ahead has not seen yet.
//
// vLLM's async scheduling (vllm/v1/engine/core.py step_with_batch_queue, on by default since
// v0.14) and SGLang's overlap scheduler (python/sglang/srt/managers/scheduler.py
// event_loop_overlap, on by default since v0.4) choose step N+1 while the GPU runs step N. A
// schedule() right after an iteration therefore builds the batch the engine chose when that
// iteration started, from the requests that had reached it by then: those the previous
// schedule() call saw. A request that arrived while the iteration ran joins one step later.
// Counting arrivals, not comparing times, keeps a request that arrives at the very instant an
// iteration ends (a closed-loop client's next request, sent as its last one finishes) on the
// right side: it came after that schedule() call. After an idle spell the engine schedules at
// once with every request it has.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>

#include "hwmodel/base/time.h"
#include "sim/batch.h"
#include "sim/workload/request.h"

namespace batchsim {

class ScheduleAheadIntake {
 public:
  void on_arrival(RequestId id) { pending_.emplace_back(id, arrivals_++); }
  // The replica's iteration (or fast-forwarded run) ended at `now`: a schedule() at this instant
  // follows it back to back.
  void on_iteration_end(SimTime now) { last_iteration_end_ = now; }
  bool empty() const { return pending_.empty(); }

  // A policy's schedule() at `now` for an engine that schedules ahead: `take` moves a request
  // into the policy's waiting queue, `build` builds `batch` from what the policy holds. When the
  // requests this step may see give an empty batch while others are held, nothing was scheduled
  // ahead (every running request ended with the iteration that just finished): the engine takes
  // its whole input queue and builds again, after `undo` resets what the empty build counted.
  // Returns whether requests are still held back (then this step is no repeat of the last).
  template <class Take, class Build, class Undo>
  bool schedule(SimTime now, Batch& batch, Take take, Build build, Undo undo) {
    take_seen(now, take);
    build();
    if (batch.empty() && !empty()) {
      undo();
      take_all(take);
      build();
    }
    return !empty();
  }

 private:
  // At the start of schedule() at `now`: hands `take` the requests this step may see, in arrival
  // order (all of them unless the replica ran an iteration that ended now).
  template <class Take>
  void take_seen(SimTime now, Take&& take) {
    const int64_t seen_before = seen_;
    seen_ = arrivals_;
    take_first(last_iteration_end_ == now ? seen_before : arrivals_, take);
  }
  // Hands `take` every request still pending: nothing was scheduled ahead (every running request
  // ended with the iteration that just finished), so the engine takes its input queue now.
  template <class Take>
  void take_all(Take&& take) {
    take_first(arrivals_, take);
  }
  template <class Take>
  void take_first(int64_t count, Take& take) {
    while (!pending_.empty() && pending_.front().second < count) {
      take(pending_.front().first);
      pending_.pop_front();
    }
  }

  std::deque<std::pair<RequestId, int64_t>> pending_;  // each with its arrival's number
  int64_t arrivals_ = 0;                               // arrivals so far
  int64_t seen_ = 0;                                   // arrivals the last schedule() call saw
  SimTime last_iteration_end_ = SimTime::max();
};

}  // namespace batchsim
