// batchsim — the clients in front of the server: closed-loop clients with think times and a
// connection pool, and multi-turn sessions (SimulationOptions::max_concurrency, think_times,
// client_connections, sessions say what each models and after which benchmark).
//
// An arrival reaches the clients first (a workload row at its time, or an event this pool
// queued: a send after a think time, a connection come free, a session's next turn), and the
// pool says whether it goes on to the server now. Settles come back (finished, rejected), and
// free clients and connections, or send a session's next turn, as events at or after the
// settle. The pool owns the requests as sent (their arrivals moved to their sends), from which
// TTFT and e2e are measured.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <queue>
#include <span>
#include <vector>

#include "sim/event_queue.h"
#include "sim/policy.h"
#include "sim/workload/request.h"

namespace batchsim {

class ClientPool {
 public:
  struct Options {
    int64_t max_concurrency = 0;                        // SimulationOptions::max_concurrency
    const std::vector<SimTime>* think_times = nullptr;  // SimulationOptions::think_times
    const SessionLinks* sessions = nullptr;             // SimulationOptions::sessions
    int64_t client_connections = 0;                     // SimulationOptions::client_connections
  };
  // What became of an arrival at the clients.
  enum class Delivery : uint8_t {
    kToServer,  // sent and connected: it reaches the server now
    kLater,     // an event of this pool will bring it back (a send, a connection)
    kHeld,      // waits at the client for a settle (a session's turn, a session slot, a client)
  };

  // Starts a run over `workload` (empty while streaming, whose options must be all off):
  // checks the options against it (std::logic_error), and keeps `progress` (the requests'
  // states) and `events` (where sends are queued), which must outlive the run.
  void reset(const Options& options, const Workload& workload, bool streaming,
             const std::vector<RequestProgress>* progress, EventQueue* events);
  // Whether sends move arrivals: then sent() holds the requests as sent.
  bool moves_sends() const { return moves_sends_; }
  const Workload& sent() const { return sent_; }
  // Another copy of the requests whose arrivals follow the sends (the prefill pool's view).
  void mirror_sends_into(Workload* view) { mirror_ = view; }
  // Points `env`'s client counters at this pool's.
  void expose(PolicyEnv& env) const;

  // Request `id` reaches the clients at `now`: a workload arrival, or an event this pool queued.
  Delivery arrive(RequestId id, SimTime now);
  // Request `id` was rejected (it had reached the server) at `now`.
  void rejected(RequestId id, SimTime now);
  // At `now`, `finished` left a replica, of which `settled` for good (the others were handed
  // to a decode pool).
  void finished(std::span<const RequestId> finished, int64_t settled, SimTime now);

  // Every client has a request at the server (none is thinking); never with sessions.
  bool saturated() const {
    return options_.max_concurrency > 0 && sessions_ == nullptr && in_flight_ - thinking_ >= options_.max_concurrency;
  }
  // No request can reach the server before a settle: every client busy, every connection
  // taken, or every request not yet arrived (of `total`, `arrived` have) a turn waiting.
  bool blocked(int64_t arrived, int64_t total) const {
    return saturated() || (options_.client_connections > 0 && connections_ >= options_.client_connections) ||
           (sessions_ != nullptr && arrived + turns_waiting_ == total);
  }
  // The next arrival the pool's queued events bring: `now` for a connection given at this
  // instant, the earliest queued send, SimTime::max() for none.
  SimTime next_send(SimTime now) const {
    if (pending_connections_ > 0) return now;
    return pending_sends_ > 0 ? pending_send_times_.top() : SimTime::max();
  }
  bool sends_pending() const { return pending_sends_ > 0; }
  // Requests wait at the clients for a settle on some replica (a client, a connection, a turn).
  bool waits_for_settles() const {
    return saturated() || !held_.empty() || !awaiting_connection_.empty() || turns_waiting_ > 0;
  }

 private:
  // Request `id`, sent, takes a connection and reaches the server, or waits for one.
  Delivery connect(RequestId id);
  SimTime think_time(RequestId id) const;  // 0 without think times
  // A client takes request `id` and sends it after its think time (an event even when that is 0).
  void queue_send(RequestId id, SimTime now);
  // Sessions: turn `id` is sent its delay from `now` (an event even when that is 0).
  void send_turn(RequestId id, SimTime now);
  void sent_at(RequestId id, SimTime send);
  // Sessions: request `id` settled; the turn waiting on it, if any, is sent.
  void turn_settled(RequestId id, SimTime now);
  // Closed-loop sessions: how many of the requests `settled` end their session.
  int64_t sessions_ended(std::span<const RequestId> settled) const;
  // `count` requests settled: the clients send as many of the requests they hold.
  void release(int64_t count, SimTime now);

  Options options_;
  const Workload* workload_ = nullptr;
  const std::vector<RequestProgress>* progress_ = nullptr;
  EventQueue* events_ = nullptr;
  bool moves_sends_ = false;
  Workload sent_;  // the requests as sent, when moves_sends_
  Workload* mirror_ = nullptr;
  const SessionLinks* sessions_ = nullptr;             // options_.sessions, null when empty
  const std::vector<SimTime>* think_times_ = nullptr;  // options_.think_times, null when empty
  int64_t in_flight_ = 0;                              // closed loop: clients taken (sent or thinking), not settled
  std::deque<RequestId> held_;                         // closed loop: arrived at the client, not yet sent
  // Closed loop: the pending arrival event is a send (kQueuedSend), after a think time
  // (kThinkingSend), or a sent request given a connection (kConnected); 0 otherwise.
  // Sessions: a turn's send after its predecessor settled and its delay passed (kTurnSend).
  std::vector<uint8_t> released_;
  static constexpr uint8_t kQueuedSend = 1, kThinkingSend = 2, kConnected = 3, kTurnSend = 4;
  std::vector<RequestId> waiting_turn_;  // sessions: per request, the turn waiting on its end (-1: none)
  // Sessions: turns at the client waiting on their predecessor, and closed loop, first turns
  // held while N sessions are open: none of them arrives before a settle.
  int64_t turns_waiting_ = 0;
  std::vector<RequestId> session_first_;       // closed-loop sessions: each turn's first turn (empty: open loop)
  std::vector<uint8_t> ends_session_;          // closed-loop sessions: 1 where no turn follows
  int64_t connections_ = 0;                    // closed loop: requests at the server, not settled
  std::deque<RequestId> awaiting_connection_;  // closed loop: sent, waiting for a connection
  int64_t pending_connections_ = 0;            // closed loop: kConnected events queued (all at one instant)
  int64_t pending_sends_ = 0;                  // closed loop and sessions: send events queued
  int64_t thinking_ = 0;                       // closed loop: of those, the ones after a think time > 0
  // The times of the queued sends, earliest on top: fast-forward stops at the next one.
  std::priority_queue<SimTime, std::vector<SimTime>, std::greater<>> pending_send_times_;
};

}  // namespace batchsim
