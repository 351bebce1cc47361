// batchsim — the discrete-event core's queue of timed events.
//
// Events are ordered by (time, insertion sequence), so equal-time events run in a fixed order
// and the same inputs give byte-identical outputs (ns-3's Scheduler contract).
#pragma once

#include <cstdint>
#include <queue>
#include <vector>

#include "hwmodel/base/time.h"

namespace batchsim {

// kArrival: a request reaches the client (or a closed-loop client sends one); kIterationDone:
// a replica's iteration (or fast-forwarded run) ends; kWakeUp: a replica's policy asked to
// schedule again; kTransferDone: a disaggregated request's KV landed at its decode replica.
enum class EventKind : uint8_t { kArrival, kIterationDone, kWakeUp, kTransferDone };

struct Event {
  SimTime time;
  uint64_t seq = 0;
  EventKind kind = EventKind::kArrival;
  int64_t payload = 0;  // request id for arrivals and transfers, replica index otherwise
};

// A binary heap keyed by (time, seq): O(log n) push and pop; equal times pop in push order.
class EventQueue {
 public:
  void push(SimTime time, EventKind kind, int64_t payload = 0);
  Event pop();
  SimTime next_time() const { return heap_.top().time; }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }

 private:
  struct Later {
    bool operator()(const Event& a, const Event& b) const { return a.time != b.time ? a.time > b.time : a.seq > b.seq; }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  uint64_t next_seq_ = 0;
};

}  // namespace batchsim
