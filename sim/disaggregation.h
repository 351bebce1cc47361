// batchsim — prefill/decode disaggregation: a prefill pool and a decode pool of replicas, and
// the hand-off of each prefilled request's KV between them (the header comment of
// sim/simulation.h says what they model and after which systems; sim/kv_transfer.h the links).
// Kept apart so that the colocated event loop stays as it was: the Simulation calls into it
// only when the options enable it.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "hwmodel/cost_model.h"
#include "sim/event_queue.h"
#include "sim/kv_transfer.h"
#include "sim/latency_breakdown.h"
#include "sim/metrics.h"
#include "sim/policy.h"
#include "sim/replica.h"
#include "sim/router.h"
#include "sim/workload/request.h"

namespace batchsim {

// Prefill/decode disaggregation (see the header comment); off while prefill_replicas is 0.
struct DisaggregationOptions {
  int32_t prefill_replicas = 0;  // the first this many policies; the rest form the decode pool
  // The decode pool's GPU, TP degree and engine; null: the run's cost model (as the prefill
  // pool). Must outlive the run.
  const CostModel* decode_cost_model = nullptr;
  // The decode pool's KV blocks (SimulationOptions::num_gpu_blocks); -1: the run's.
  int64_t decode_num_gpu_blocks = -1;
  Router decode_router = Router::kRoundRobin;
  KvLink link = resolve_kv_link("ib");
  KvTransferMode mode = KvTransferMode::kPull;
  bool enabled() const { return prefill_replicas > 0; }
};

class DisaggregatedPools {
 public:
  // What the pools act on: the Simulation's, which outlive the run.
  struct Cluster {
    std::vector<Replica>* replicas = nullptr;
    std::vector<RequestProgress>* progress = nullptr;
    std::vector<HandoffRecord>* handoffs = nullptr;  // one per request, sized here
    LatencyAccounting* latency = nullptr;
    EventQueue* events = nullptr;
    const Workload* requests = nullptr;                // as sent
    const PrefixBlockHashes* prefix_blocks = nullptr;  // for the decode router
  };
  // A replica's KV tokens on a cost model, by its engine's rule or by memory, with the rule in words.
  using KvSizer = std::function<Policy::KvSizing(const Policy&, const CostModel&)>;

  // Roles, cost models and KV memory of the cluster's replicas (the first
  // options.prefill_replicas prefill, the rest decode; `cost_model` the prefill pool's,
  // `num_gpu_blocks` the run's), and the prefill pool's view of the requests.
  void set_up(const DisaggregationOptions& options, const Cluster& cluster, const CostModel& cost_model,
              int64_t num_gpu_blocks, const KvSizer& size_kv, uint64_t router_seed);
  // The requests as the prefill pool sees them: each ends at its first token.
  Workload& prefill_view() { return prefill_view_; }

  // After prefill replica `from` listed `id` finished at its first token, at `now`: to a decode replica.
  void hand_off(Replica& from, RequestId id, SimTime now);
  // Decode replica `to` allocated KV for `tokens` of remote request `id`: reserve the link.
  void start_kv_transfer(Replica& to, RequestId id, int64_t tokens, SimTime now);
  void finish_kv_transfer(RequestId id, SimTime now);  // its kTransferDone event
  // The earliest time at which another replica may hand replica `r` work or wake it: a prefill
  // replica's iteration end or due wake-up, a transfer's landing. Fast-forward stops there.
  SimTime next_event(const Replica& r) const;
  // Summary::pools and Summary::kv_transfer, from the replicas' sums and the hand-offs of `requests`.
  void summarize(Summary& s, const std::vector<RequestRecord>& requests) const;

 private:
  DisaggregationOptions options_;
  Cluster cluster_;
  Workload prefill_view_;
  std::vector<int64_t> schedules_at_handoff_;   // per request: its decode replica's schedules then
  KvLinkSchedule links_;                        // the NICs' reservations
  std::multiset<SimTime> transfers_in_flight_;  // their landing times
  RequestRouter decode_router_;
};

}  // namespace batchsim
