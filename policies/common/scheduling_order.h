// batchsim — the order in which a scheduler serves waiting requests and picks preemption
// victims: first come first served, by the client's priority, or shortest job first.
//
//   fcfs      arrival order (vLLM's default `--scheduling-policy fcfs`, FCFSRequestQueue in
//             vllm/v1/core/sched/request_queue.py): new requests join the back of the waiting
//             queue, a preempted one goes back to its head, the victim is the newest running.
//   priority  vLLM's `--scheduling-policy priority` (PriorityRequestQueue, the same file; commit
//             28be48f of 2026-05): requests are ranked by (priority, arrival time), the smaller
//             first (vllm/v1/request.py Request.__lt__, whose last tie-break is the request id:
//             ours is the dense id, i.e. trace or arrival order); waiting requests are taken in
//             rank order and a preempted one rejoins at its rank ("there is no concept of
//             prepending" in a priority queue). When a running request cannot grow, the victim
//             is the lowest-ranked running request, max(running, key=(priority, arrival_time))
//             in vllm/v1/core/sched/scheduler.py schedule(), not the newest.
//   sjf       shortest job first, ranked as `priority` but by a job length instead of the
//             client's priority: `prompt` (known to a server when the request arrives) or
//             `output` (the true output length, which no server knows in advance: an ORACLE
//             baseline that shows how much ordering by job size could win, not an engine's
//             behaviour). A preempted request keeps its length (the whole job's, not what is
//             left). No engine we model ships it; it is the textbook baseline.
//
// Ties never depend on a container's order: a rank is (key, arrival, id), a total order.
//
// Invariant: RequestRanking::before is a strict weak ordering (lexicographic on the triple);
// WaitingQueue::front() is the first request admission may take.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <string_view>
#include <vector>

#include "sim/workload/request.h"

namespace batchsim {

enum class SchedulingPolicy : uint8_t { fcfs, priority, sjf };
// What `sjf` ranks by.
enum class JobLength : uint8_t { prompt, output };

std::string_view scheduling_policy_name(SchedulingPolicy policy);

// The rank of each request of a workload under a ranked policy (priority or sjf).
class RequestRanking {
 public:
  RequestRanking() = default;  // fcfs: ranks nothing
  RequestRanking(SchedulingPolicy policy, JobLength sjf_length, const Workload& requests);

  // priority or sjf; fcfs keeps arrival order in a plain queue instead.
  bool ranked() const { return requests_ != nullptr; }
  // Whether request `a` is served before request `b` (a ranks higher).
  // Keys are read from the requests as they are now, not taken at construction: a streaming
  // run fills a slot's request when it arrives (sim/simulation.h, "Streaming"), and its last
  // tie-break is Request::id, the global arrival order, which the slot's index is not.
  bool before(RequestId a, RequestId b) const {
    const Request& x = (*requests_)[a];
    const Request& y = (*requests_)[b];
    if (key(x) != key(y)) return key(x) < key(y);
    if (x.arrival != y.arrival) return x.arrival < y.arrival;
    return x.id < y.id;
  }

 private:
  int32_t key(const Request& r) const {
    return by_priority_ ? r.priority : by_prompt_ ? r.prompt_tokens : r.output_tokens;
  }
  const Workload* requests_ = nullptr;
  bool by_priority_ = false;  // else sjf, by prompt or by output length
  bool by_prompt_ = false;
};

// The waiting queue of a scheduler. Under fcfs a deque (arrivals at the back, preempted requests
// at the front, as vLLM's appendleft / prepend_request); under a ranked policy an ordered set,
// so that an arrival or a preempted request is placed by rank in O(log n) — a burst of 10^5
// arrivals would take O(n^2) in a sorted vector.
class WaitingQueue {
 public:
  WaitingQueue() = default;
  // `ranking` must outlive the queue; null or unranked: fcfs.
  explicit WaitingQueue(const RequestRanking* ranking);

  bool empty() const { return ranked() ? ranked_.empty() : fcfs_.empty(); }
  size_t size() const { return ranked() ? ranked_.size() : fcfs_.size(); }
  RequestId front() const { return ranked() ? *ranked_.begin() : fcfs_.front(); }
  void pop_front();
  // A new arrival.
  void add(RequestId id);
  // A request sent back by preemption (recompute): the head of a fcfs queue, its rank otherwise.
  void add_preempted(RequestId id);
  // Calls visit(id) in queue order while it returns true.
  template <typename Visit>
  void visit_in_order(Visit visit) const {
    if (ranked()) {
      for (const RequestId id : ranked_) {
        if (!visit(id)) return;
      }
    } else {
      for (const RequestId id : fcfs_) {
        if (!visit(id)) return;
      }
    }
  }

 private:
  struct ByRank {
    const RequestRanking* ranking;
    bool operator()(RequestId a, RequestId b) const { return ranking->before(a, b); }
  };
  bool ranked() const { return ranking_ != nullptr; }

  const RequestRanking* ranking_ = nullptr;  // null: fcfs
  std::deque<RequestId> fcfs_;
  std::set<RequestId, ByRank> ranked_{ByRank{nullptr}};
};

}  // namespace batchsim
