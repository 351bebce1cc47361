#include "sim/disaggregation.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "hwmodel/base/error.h"

namespace batchsim {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// The decode router's random stream (Rng::for_stream): clear of the workload's (0-3) and the
// prefill router's (16), so that neither router shifts the other's draws.
constexpr uint32_t kDecodeRouterStream = 17;

// The decode replicas' own KV memory: their pool's, from memory or num_gpu_blocks.
Policy::KvSizing pool_kv_sizing(const DisaggregatedPools::KvSizer& size_kv, const Policy& policy, const CostModel& cm,
                                int64_t num_gpu_blocks) {
  const Policy::KvSizing kv = size_kv(policy, cm);
  if (kv.tokens < 1 && num_gpu_blocks <= 0) {
    const ModelSpec& m = cm.model();
    throw UserError(
        fmt::format("decode pool: model '{}' ({:.1f} GiB of weights, {:.1f} GiB per GPU at --decode-tp {}) leaves "
                    "no room for a KV cache on '{}' ({:.0f} GiB at {}): use a larger --decode-tp or --decode-gpu",
                    m.name, static_cast<double>(m.weight_bytes()) / kGiB,
                    static_cast<double>(m.weight_bytes()) / kGiB / cm.tensor_parallel(), cm.tensor_parallel(),
                    cm.gpu().name, static_cast<double>(cm.gpu().memory_bytes) / kGiB, kv.rule));
  }
  return kv;
}

}  // namespace

void DisaggregatedPools::set_up(const DisaggregationOptions& options, const Cluster& cluster,
                                const CostModel& cost_model, int64_t num_gpu_blocks, const KvSizer& size_kv,
                                uint64_t router_seed) {
  options_ = options;
  cluster_ = cluster;
  const DisaggregationOptions& d = options_;
  std::vector<Replica>& replicas = *cluster_.replicas;
  const auto total = static_cast<int32_t>(replicas.size());
  if (d.prefill_replicas < 1 || d.prefill_replicas >= total) {
    throw std::logic_error(fmt::format("disaggregation needs a prefill and a decode pool: {} prefill of {} replicas",
                                       d.prefill_replicas, total));
  }
  if (!(d.link.gbps > 0)) throw std::logic_error("a KV link needs a bandwidth > 0");
  const CostModel& decode_cm = d.decode_cost_model != nullptr ? *d.decode_cost_model : cost_model;
  if (decode_cm.model().kv_bytes_per_token() != cost_model.model().kv_bytes_per_token() ||
      decode_cm.model().num_layers != cost_model.model().num_layers) {
    // One model's KV moves between the pools; a different layout would need a conversion no
    // engine does in transit.
    throw UserError(fmt::format("decode pool: model '{}' has another KV layout than the prefill pool's '{}'",
                                decode_cm.model().name, cost_model.model().name));
  }
  const int64_t decode_blocks = d.decode_num_gpu_blocks >= 0 ? d.decode_num_gpu_blocks : num_gpu_blocks;
  // The last replica is a decode one (the prefill pool comes first).
  const Policy::KvSizing decode_kv = pool_kv_sizing(size_kv, *replicas.back().policy, decode_cm, decode_blocks);
  for (Replica& r : replicas) {
    const bool prefill = r.index < d.prefill_replicas;
    r.role = prefill ? PoolRole::kPrefill : PoolRole::kDecode;
    if (!prefill) {
      r.cost_model = &decode_cm;
      r.kv_capacity_tokens = decode_kv.tokens;
      r.kv_sizing_rule = decode_kv.rule;
      r.num_gpu_blocks = decode_blocks;
    }
    const std::string why = r.policy->unsupported_role_reason(r.role);
    if (!why.empty()) throw UserError(fmt::format("{} pool: {}", pool_role_name(r.role), why));
  }
  // The prefill pool's requests end at their first token (vLLM's disaggregated proxy sends the
  // prefill instance max_tokens=1: tests/v1/kv_connector/nixl_integration/toy_proxy_server.py).
  const Workload& requests = *cluster_.requests;
  prefill_view_ = requests;
  for (Request& r : prefill_view_) {
    r.output_tokens = 1;
    r.max_tokens = 1;
  }
  cluster_.handoffs->assign(requests.size(), HandoffRecord{});
  schedules_at_handoff_.assign(requests.size(), 0);
  links_ = KvLinkSchedule(replicas.size());
  transfers_in_flight_.clear();
  decode_router_ = RequestRouter(d.decode_router, Rng::for_stream(router_seed, kDecodeRouterStream));
}

void DisaggregatedPools::hand_off(Replica& from, RequestId id, SimTime now) {
  std::vector<Replica>& replicas = *cluster_.replicas;
  const auto first = static_cast<size_t>(options_.prefill_replicas);
  Replica& to = replicas[first + static_cast<size_t>(decode_router_.pick(
                                     id, std::span<const Replica>(replicas).subspan(first), cluster_.prefix_blocks))];
  HandoffRecord& h = (*cluster_.handoffs)[id];
  h.prefill_replica = from.index;
  h.decode_replica = to.index;
  h.handoff = now;
  RequestProgress& p = (*cluster_.progress)[id];
  p.replica = to.index;
  p.state = RequestState::kWaiting;
  ++to.routed;
  ++to.outstanding;
  schedules_at_handoff_[id] = to.schedules;
  to.policy->on_arrival(id, now);  // may reject it (Simulation::reject then frees the prefill KV)
  to.wake_now(*cluster_.events, now);
}

void DisaggregatedPools::start_kv_transfer(Replica& to, RequestId id, int64_t tokens, SimTime now) {
  HandoffRecord& h = (*cluster_.handoffs)[id];
  if (h.decode_replica != to.index || h.kv_allocated != SimTime::max() || tokens < 0 ||
      tokens > (*cluster_.requests)[id].prompt_tokens) {
    throw std::logic_error(
        fmt::format("replica {} started a transfer of {} tokens for request {} "
                    "(handed to {}, allocated before: {})",
                    to.index, tokens, id, h.decode_replica, h.kv_allocated != SimTime::max()));
  }
  h.kv_allocated = now;
  const Replica& from = (*cluster_.replicas)[static_cast<size_t>(h.prefill_replica)];
  const DisaggregationOptions& d = options_;
  // Each GPU sends its shard over its own NIC; the pool with fewer GPUs has fewer NICs.
  const int parallel = std::min(from.cost_model->tensor_parallel(), to.cost_model->tensor_parallel());
  double bytes = static_cast<double>(tokens) * static_cast<double>(from.cost_model->model().kv_bytes_per_token());
  // Admitted at the decode replica's first schedule() after the hand-off: it had room (no
  // backpressure); the wait for its running iteration to end is its step cadence.
  const bool had_room = to.schedules == schedules_at_handoff_[id] + 1;
  if (d.mode == KvTransferMode::kLayerwise && had_room) {
    // Streamed while the prefill ran, from its first iteration on (sim/kv_transfer.h).
    const double overlap_s = (h.handoff - (*cluster_.progress)[id].first_scheduled).seconds();
    bytes =
        layerwise_exposed_bytes(bytes, from.cost_model->model().num_layers, d.link.bytes_per_s() * parallel, overlap_s);
  }
  const SimTime duration = SimTime::from_seconds(kv_transfer_seconds(d.link, bytes, parallel));
  const KvLinkSchedule::Slot slot =
      links_.reserve(static_cast<size_t>(from.index), static_cast<size_t>(to.index), now, duration);
  h.transfer_start = slot.start;
  h.transfer_end = slot.end;
  h.transfer_bytes = static_cast<int64_t>(bytes);
  transfers_in_flight_.insert(slot.end);
  cluster_.events->push(slot.end, EventKind::kTransferDone, id);
}

void DisaggregatedPools::finish_kv_transfer(RequestId id, SimTime now) {
  const HandoffRecord& h = (*cluster_.handoffs)[id];
  std::vector<Replica>& replicas = *cluster_.replicas;
  transfers_in_flight_.erase(transfers_in_flight_.find(h.transfer_end));
  // The prefill replica frees the KV once the decode side has it (vLLM: the decode worker's
  // notification to the prefill worker, after which its delayed blocks are freed), and may
  // admit again; the decode replica may schedule the request.
  Replica& from = replicas[static_cast<size_t>(h.prefill_replica)];
  from.policy->release_held_kv(id);
  from.wake_now(*cluster_.events, now);
  Replica& to = replicas[static_cast<size_t>(h.decode_replica)];
  // Its KV is in the decode replica's cache: it runs there from now on, and may be preempted
  // before its first decode step as any running request.
  (*cluster_.progress)[id].state = RequestState::kRunning;
  cluster_.latency->kv_landed(id, h.decode_replica);
  to.policy->on_kv_received(id, now);
  to.wake_now(*cluster_.events, now);
}

SimTime DisaggregatedPools::next_event(const Replica& r) const {
  SimTime next = transfers_in_flight_.empty() ? SimTime::max() : *transfers_in_flight_.begin();
  // A hand-off happens only at a prefill replica's iteration end. That iteration may not be
  // running yet: an idle prefill replica whose KV is all held starts one when a transfer lands,
  // and that transfer may start only at another decode replica's next schedule(). So any other
  // replica's iteration end, or a wake-up due, can lead to work (or a router's read of this
  // replica's state) here before the run would end; the run stops at the first of them.
  for (const Replica& q : *cluster_.replicas) {
    if (&q == &r) continue;
    next = std::min(next, q.done_at);
    if (q.wake_pending) next = std::min(next, q.wake_time);
  }
  return next;
}

void DisaggregatedPools::summarize(Summary& s, const std::vector<RequestRecord>& requests) const {
  const std::vector<Replica>& replicas = *cluster_.replicas;
  const auto prefill = options_.prefill_replicas;
  for (const PoolRole role : {PoolRole::kPrefill, PoolRole::kDecode}) {
    PoolSummary pool;
    pool.role = std::string(pool_role_name(role));
    pool.first_replica = role == PoolRole::kPrefill ? 0 : prefill;
    pool.replicas = role == PoolRole::kPrefill ? prefill : static_cast<int32_t>(replicas.size()) - prefill;
    double busy_s = 0, kv_area = 0;
    for (int32_t i = pool.first_replica; i < pool.first_replica + pool.replicas; ++i) {
      const Replica& r = replicas[static_cast<size_t>(i)];
      pool.requests += r.routed;
      pool.iterations += r.iterations;
      pool.preemptions += r.preemptions;
      busy_s += r.busy_s;
      kv_area += r.kv_alloc_area;
      pool.kv_allocated_fraction_peak = std::max(pool.kv_allocated_fraction_peak, r.kv_alloc_peak);
      pool.kv_capacity_tokens = r.kv_capacity_tokens;
      pool.kv_capacity_rule = r.kv_sizing_rule;
    }
    if (s.makespan_s > 0) pool.busy_fraction = busy_s / pool.replicas / s.makespan_s;
    if (busy_s > 0) pool.kv_allocated_fraction_mean = kv_area / busy_s;
    s.pools.push_back(pool);
  }
  KvTransferSummary& t = s.kv_transfer;
  WeightedSamples wait, queue, duration, gap, ttft_at_decode;
  const std::vector<HandoffRecord>& handoffs = *cluster_.handoffs;
  for (size_t id = 0; id < handoffs.size(); ++id) {
    const HandoffRecord& h = handoffs[id];
    if (!h.transferred()) continue;
    ++t.transfers;
    t.bytes += static_cast<double>(h.transfer_bytes);
    wait.add(h.wait_s());
    queue.add(h.queue_s());
    duration.add(h.transfer_s());
    const RequestRecord& rec = requests[id];
    if (h.decode_first_token != SimTime::max()) {
      gap.add((h.decode_first_token - rec.first_token).seconds());
      ttft_at_decode.add((h.decode_first_token - rec.arrival).seconds());
    }
  }
  t.wait_s = Distribution::of(wait);
  t.queue_s = Distribution::of(queue);
  t.transfer_s = Distribution::of(duration);
  t.handoff_gap_s = Distribution::of(gap);
  t.ttft_at_decode_s = Distribution::of(ttft_at_decode);
}

}  // namespace batchsim
