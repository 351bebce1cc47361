#include "sim/clients.h"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "hwmodel/base/error.h"

namespace batchsim {

namespace {

// Session links fit a workload of `n` requests: one predecessor and one delay each, a
// predecessor earlier than its turn and followed by no other turn (a session is a chain).
void check_sessions(const SessionLinks& links, int64_t n, bool unsupported) {
  if (unsupported) {
    throw std::logic_error("sessions need a simulation that holds the workload, without a client connection pool");
  }
  if (static_cast<int64_t>(links.predecessor.size()) != n || static_cast<int64_t>(links.delay.size()) != n) {
    throw std::logic_error("session links do not match the workload");
  }
  std::vector<uint8_t> followed(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    const RequestId before = links.predecessor[static_cast<size_t>(i)];
    if (before < -1 || before >= i || (before >= 0 && followed[static_cast<size_t>(before)]++ != 0) ||
        links.delay[static_cast<size_t>(i)] < SimTime::zero()) {
      throw std::logic_error(fmt::format("session link of request {} is not a chain's next turn", i));
    }
  }
}

// `wait` after `now`, or a UserError naming the think time that would carry `what` `id` past
// the end of simulated time.
SimTime send_time(SimTime now, SimTime wait, const char* what, RequestId id) {
  if (wait.ns() > SimTime::max().ns() - now.ns()) {
    throw UserError(fmt::format("--think-time: {} {} would be sent beyond the simulated time range", what, id));
  }
  return now + wait;
}

}  // namespace

void ClientPool::reset(const Options& options, const Workload& workload, bool streaming,
                       const std::vector<RequestProgress>* progress, EventQueue* events) {
  const auto n = static_cast<int64_t>(workload.size());
  options_ = options;
  workload_ = &workload;
  progress_ = progress;
  events_ = events;
  mirror_ = nullptr;
  if (options_.max_concurrency < 0) throw std::logic_error("max_concurrency must be >= 0");
  if (options_.client_connections < 0 || (options_.client_connections > 0 && options_.max_concurrency == 0)) {
    throw std::logic_error("client_connections must be >= 0, and needs closed-loop clients");
  }
  think_times_ = options_.think_times != nullptr && !options_.think_times->empty() ? options_.think_times : nullptr;
  if (think_times_ != nullptr && (options_.max_concurrency == 0 || static_cast<int64_t>(think_times_->size()) != n)) {
    throw std::logic_error("think times need closed-loop clients and one time per request");
  }
  const bool closed_loop = options_.max_concurrency > 0;
  sessions_ = options_.sessions != nullptr && !options_.sessions->empty() ? options_.sessions : nullptr;
  if (sessions_ != nullptr) check_sessions(*sessions_, n, streaming || options_.client_connections > 0);
  // The requests as sent: their arrivals move to their sends.
  moves_sends_ = closed_loop || sessions_ != nullptr;
  sent_ = moves_sends_ ? workload : Workload{};
  in_flight_ = pending_sends_ = thinking_ = connections_ = pending_connections_ = 0;
  pending_send_times_ = {};
  held_.clear();
  awaiting_connection_.clear();
  released_.assign(moves_sends_ ? n : 0, 0);
  waiting_turn_.assign(sessions_ != nullptr ? n : 0, -1);
  // Closed-loop sessions: each turn's session (its first turn), and whether a turn ends one.
  session_first_.assign(sessions_ != nullptr && closed_loop ? n : 0, -1);
  ends_session_.assign(session_first_.size(), 1);
  for (size_t i = 0; i < session_first_.size(); ++i) {
    const RequestId before = sessions_->predecessor[i];
    session_first_[i] = before < 0 ? static_cast<RequestId>(i) : session_first_[static_cast<size_t>(before)];
    if (before >= 0) ends_session_[static_cast<size_t>(before)] = 0;
  }
  turns_waiting_ = 0;
}

void ClientPool::expose(PolicyEnv& env) const {
  env.clients_in_flight = &in_flight_;
  env.clients_thinking = &thinking_;
  env.turns_waiting = sessions_ != nullptr ? &turns_waiting_ : nullptr;
  // Closed-loop sessions bound sessions, not requests: a session's next turn may come while N
  // are open (turns_waiting counts what cannot).
  env.max_concurrency = sessions_ != nullptr ? 0 : options_.max_concurrency;
  env.client_connections_taken = &connections_;
  env.client_connections = options_.client_connections;
}

ClientPool::Delivery ClientPool::arrive(RequestId id, SimTime now) {
  if (sessions_ != nullptr) {
    if (released_[static_cast<size_t>(id)] == kTurnSend) {  // its predecessor settled and its delay passed
      released_[static_cast<size_t>(id)] = 0;
      --pending_sends_;
      pending_send_times_.pop();  // the earliest queued send: this one (sends are due in time order)
      return Delivery::kToServer;
    }
    if (const RequestId before = sessions_->predecessor[static_cast<size_t>(id)]; before >= 0) {
      const RequestState state = (*progress_)[before].state;
      if (state == RequestState::kFinished || state == RequestState::kRejected) {
        send_turn(id, now);
        return Delivery::kLater;
      }
      waiting_turn_[static_cast<size_t>(before)] = id;
      ++turns_waiting_;
      return Delivery::kHeld;
    }
  }
  if (options_.max_concurrency <= 0) return Delivery::kToServer;
  if (const uint8_t send = released_[static_cast<size_t>(id)]; send != 0) {  // a send queued by queue_send
    released_[static_cast<size_t>(id)] = 0;
    if (send == kConnected) {  // a connection came free for it (release)
      --pending_connections_;
      return Delivery::kToServer;
    }
    --pending_sends_;
    if (send == kThinkingSend) --thinking_;
    pending_send_times_.pop();  // the earliest queued send: this one (sends are due in time order)
    return connect(id);
  }
  if (in_flight_ >= options_.max_concurrency) {
    held_.push_back(id);
    if (sessions_ == nullptr) return Delivery::kLater;  // (no turn waits: nothing to wake for)
    ++turns_waiting_;                                   // a session's first turn, waiting for one to end
    return Delivery::kHeld;
  }
  // A free client takes it, and sends it at once, or once it has thought.
  if (think_time(id) > SimTime::zero()) {
    queue_send(id, now);
    return Delivery::kLater;
  }
  ++in_flight_;
  return connect(id);
}

ClientPool::Delivery ClientPool::connect(RequestId id) {
  if (options_.client_connections > 0 && connections_ >= options_.client_connections) {
    awaiting_connection_.push_back(id);
    return Delivery::kLater;
  }
  ++connections_;
  return Delivery::kToServer;
}

SimTime ClientPool::think_time(RequestId id) const {
  return think_times_ != nullptr ? (*think_times_)[static_cast<size_t>(id)] : SimTime::zero();
}

void ClientPool::sent_at(RequestId id, SimTime send) {
  sent_[static_cast<size_t>(id)].arrival = send;
  if (mirror_ != nullptr) (*mirror_)[static_cast<size_t>(id)].arrival = send;
  ++pending_sends_;
  pending_send_times_.push(send);
  events_->push(send, EventKind::kArrival, id);
}

void ClientPool::queue_send(RequestId id, SimTime now) {
  // The client sends it once it has thought, and measures its TTFT and e2e from then.
  const SimTime send = send_time(now, think_time(id), "request", id);
  released_[static_cast<size_t>(id)] = send > now ? kThinkingSend : kQueuedSend;
  if (send > now) ++thinking_;
  ++in_flight_;
  sent_at(id, send);
}

void ClientPool::send_turn(RequestId id, SimTime now) {
  SimTime send = send_time(now, sessions_->delay[static_cast<size_t>(id)], "session turn", id);
  if (!session_first_.empty()) {
    // Closed loop: not before its offset in the workload from its session's first turn, counted
    // from that turn's send (open loop, the workload's arrival, which has passed).
    const auto first = static_cast<size_t>(session_first_[static_cast<size_t>(id)]);
    send = std::max(
        send, sent_[first].arrival + ((*workload_)[static_cast<size_t>(id)].arrival - (*workload_)[first].arrival));
  }
  released_[static_cast<size_t>(id)] = kTurnSend;
  sent_at(id, send);
}

int64_t ClientPool::sessions_ended(std::span<const RequestId> settled) const {
  int64_t ended = 0;
  for (const RequestId id : settled) {
    ended += (*progress_)[id].state == RequestState::kFinished && ends_session_[static_cast<size_t>(id)] != 0;
  }
  return ended;
}

void ClientPool::turn_settled(RequestId id, SimTime now) {
  RequestId& next = waiting_turn_[static_cast<size_t>(id)];
  if (next < 0) return;
  --turns_waiting_;
  send_turn(std::exchange(next, -1), now);
}

void ClientPool::rejected(RequestId id, SimTime now) {
  // Closed-loop sessions: a client is freed when its session's last turn settles.
  release(session_first_.empty() ? 1 : ends_session_[static_cast<size_t>(id)], now);
  if (sessions_ != nullptr) turn_settled(id, now);
}

void ClientPool::finished(std::span<const RequestId> finished, int64_t settled, SimTime now) {
  release(session_first_.empty() ? settled : sessions_ended(finished), now);
  if (sessions_ == nullptr) return;
  for (const RequestId id : finished) {
    if ((*progress_)[id].state == RequestState::kFinished) turn_settled(id, now);
  }
}

void ClientPool::release(int64_t count, SimTime now) {
  if (options_.max_concurrency <= 0) return;
  in_flight_ -= count;
  connections_ -= count;
  // A freed connection goes to the request that has waited for one longest, as an event at
  // `now` like the sends below (its clock has run since its send).
  while (!awaiting_connection_.empty() && connections_ < options_.client_connections) {
    const RequestId id = awaiting_connection_.front();
    awaiting_connection_.pop_front();
    ++connections_;
    released_[static_cast<size_t>(id)] = kConnected;
    ++pending_connections_;
    events_->push(now, EventKind::kArrival, id);
  }
  // Sends are events at `now` (or later, after a think time), after what is being handled: a
  // policy that rejects on arrival settles inside the server's arrival, and a send from there
  // must not recurse into it.
  while (in_flight_ < options_.max_concurrency && !held_.empty()) {
    const RequestId id = held_.front();
    held_.pop_front();
    if (sessions_ != nullptr) --turns_waiting_;
    queue_send(id, now);
  }
}

}  // namespace batchsim
