// Disaggregated prefill and decode pools: the parts of Simulation that only a run with
// SimulationOptions::disaggregation uses (the header comment of sim/simulation.h says what they
// model; sim/kv_transfer.h the links). Kept apart so that the colocated event loop stays as it
// was; every function here is called only when pooled().
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "hwmodel/base/error.h"
#include "sim/simulation.h"

namespace batchsim {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// The decode router's random stream (Rng::for_stream): clear of the workload's (0-3) and the
// prefill router's (16), so that neither router shifts the other's draws.
constexpr uint32_t kDecodeRouterStream = 17;
}  // namespace

Policy::KvSizing Simulation::size_kv(const Policy& policy, const CostModel& cm) const {
  if (options_.engine_kv_rules) {
    if (std::optional<Policy::KvSizing> own = policy.kv_sizing(cm, options_.gpu_memory_utilization)) return *own;
  }
  return Policy::after_profile_run(cm, options_.gpu_memory_utilization, CostModel::kDefaultActivationTokens,
                                   CostModel::kSamplerRows);
}

Policy::KvSizing Simulation::pool_kv_sizing(const Policy& policy, const CostModel& cm, int64_t num_gpu_blocks) const {
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

void Simulation::set_up_pools() {
  const DisaggregationOptions& d = options_.disaggregation;
  const auto total = static_cast<int32_t>(replicas_.size());
  if (d.prefill_replicas < 1 || d.prefill_replicas >= total) {
    throw std::logic_error(fmt::format("disaggregation needs a prefill and a decode pool: {} prefill of {} replicas",
                                       d.prefill_replicas, total));
  }
  if (!(d.link.gbps > 0)) throw std::logic_error("a KV link needs a bandwidth > 0");
  const CostModel& decode_cm = d.decode_cost_model != nullptr ? *d.decode_cost_model : cost_model_;
  if (decode_cm.model().kv_bytes_per_token() != cost_model_.model().kv_bytes_per_token() ||
      decode_cm.model().num_layers != cost_model_.model().num_layers) {
    // One model's KV moves between the pools; a different layout would need a conversion no
    // engine does in transit.
    throw UserError(fmt::format("decode pool: model '{}' has another KV layout than the prefill pool's '{}'",
                                decode_cm.model().name, cost_model_.model().name));
  }
  const int64_t decode_blocks = d.decode_num_gpu_blocks >= 0 ? d.decode_num_gpu_blocks : options_.num_gpu_blocks;
  // The last replica is a decode one (the prefill pool comes first).
  const Policy::KvSizing decode_kv = pool_kv_sizing(*replicas_.back().policy, decode_cm, decode_blocks);
  for (Replica& r : replicas_) {
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
  prefill_view_ = *requests_;
  for (Request& r : prefill_view_) {
    r.output_tokens = 1;
    r.max_tokens = 1;
  }
  result_.handoffs.assign(requests_->size(), HandoffRecord{});
  schedules_at_handoff_.assign(requests_->size(), 0);
  links_ = KvLinkSchedule(replicas_.size());
  transfers_in_flight_.clear();
  handing_off_.clear();
  decode_router_ = RequestRouter(d.decode_router, Rng::for_stream(options_.router_seed, kDecodeRouterStream));
}

void Simulation::hand_off(Replica& from, RequestId id) {
  const DisaggregationOptions& d = options_.disaggregation;
  const auto first = static_cast<size_t>(d.prefill_replicas);
  Replica& to = replicas_[first + static_cast<size_t>(decode_router_.pick(
                                      id, std::span<const Replica>(replicas_).subspan(first), prefix_blocks_))];
  HandoffRecord& h = result_.handoffs[id];
  h.prefill_replica = from.index;
  h.decode_replica = to.index;
  h.handoff = now_;
  RequestProgress& p = progress_[id];
  p.replica = to.index;
  p.state = RequestState::kWaiting;
  ++to.routed;
  ++to.outstanding;
  schedules_at_handoff_[id] = to.schedules;
  to.policy->on_arrival(id, now_);  // may reject it (reject() then frees the prefill KV)
  to.wake_now(events_, now_);
}

void Simulation::start_kv_transfer(Replica& to, RequestId id, int64_t tokens) {
  HandoffRecord& h = result_.handoffs[id];
  if (h.decode_replica != to.index || h.kv_allocated != SimTime::max() || tokens < 0 ||
      tokens > (*requests_)[id].prompt_tokens) {
    throw std::logic_error(
        fmt::format("replica {} started a transfer of {} tokens for request {} "
                    "(handed to {}, allocated before: {})",
                    to.index, tokens, id, h.decode_replica, h.kv_allocated != SimTime::max()));
  }
  h.kv_allocated = now_;
  const Replica& from = replicas_[static_cast<size_t>(h.prefill_replica)];
  const DisaggregationOptions& d = options_.disaggregation;
  // Each GPU sends its shard over its own NIC; the pool with fewer GPUs has fewer NICs.
  const int parallel = std::min(from.cost_model->tensor_parallel(), to.cost_model->tensor_parallel());
  double bytes = static_cast<double>(tokens) * static_cast<double>(from.cost_model->model().kv_bytes_per_token());
  // Admitted at the decode replica's first schedule() after the hand-off: it had room (no
  // backpressure); the wait for its running iteration to end is its step cadence.
  const bool had_room = to.schedules == schedules_at_handoff_[id] + 1;
  if (d.mode == KvTransferMode::kLayerwise && had_room) {
    // Streamed while the prefill ran, from its first iteration on (sim/kv_transfer.h).
    const double overlap_s = (h.handoff - progress_[id].first_scheduled).seconds();
    bytes =
        layerwise_exposed_bytes(bytes, from.cost_model->model().num_layers, d.link.bytes_per_s() * parallel, overlap_s);
  }
  const SimTime duration = SimTime::from_seconds(kv_transfer_seconds(d.link, bytes, parallel));
  const KvLinkSchedule::Slot slot =
      links_.reserve(static_cast<size_t>(from.index), static_cast<size_t>(to.index), now_, duration);
  h.transfer_start = slot.start;
  h.transfer_end = slot.end;
  h.transfer_bytes = static_cast<int64_t>(bytes);
  transfers_in_flight_.insert(slot.end);
  events_.push(slot.end, EventKind::kTransferDone, id);
}

void Simulation::finish_kv_transfer(RequestId id) {
  const HandoffRecord& h = result_.handoffs[id];
  transfers_in_flight_.erase(transfers_in_flight_.find(h.transfer_end));
  // The prefill replica frees the KV once the decode side has it (vLLM: the decode worker's
  // notification to the prefill worker, after which its delayed blocks are freed), and may
  // admit again; the decode replica may schedule the request.
  Replica& from = replicas_[static_cast<size_t>(h.prefill_replica)];
  from.policy->release_held_kv(id);
  from.wake_now(events_, now_);
  Replica& to = replicas_[static_cast<size_t>(h.decode_replica)];
  // Its KV is in the decode replica's cache: it runs there from now on, and may be preempted
  // before its first decode step as any running request.
  progress_[id].state = RequestState::kRunning;
  latency_.kv_landed(id, h.decode_replica);
  to.policy->on_kv_received(id, now_);
  to.wake_now(events_, now_);
}

SimTime Simulation::next_pool_event(const Replica& r) const {
  SimTime next = transfers_in_flight_.empty() ? SimTime::max() : *transfers_in_flight_.begin();
  // A hand-off happens only at a prefill replica's iteration end. That iteration may not be
  // running yet: an idle prefill replica whose KV is all held starts one when a transfer lands,
  // and that transfer may start only at another decode replica's next schedule(). So any other
  // replica's iteration end, or a wake-up due, can lead to work (or a router's read of this
  // replica's state) here before the run would end; the run stops at the first of them.
  for (const Replica& q : replicas_) {
    if (&q == &r) continue;
    next = std::min(next, q.done_at);
    if (q.wake_pending) next = std::min(next, q.wake_time);
  }
  return next;
}

void Simulation::summarize_pools() {
  Summary& s = result_.summary;
  const auto prefill = options_.disaggregation.prefill_replicas;
  for (const PoolRole role : {PoolRole::kPrefill, PoolRole::kDecode}) {
    PoolSummary pool;
    pool.role = std::string(pool_role_name(role));
    pool.first_replica = role == PoolRole::kPrefill ? 0 : prefill;
    pool.replicas = role == PoolRole::kPrefill ? prefill : static_cast<int32_t>(replicas_.size()) - prefill;
    double busy_s = 0, kv_area = 0;
    for (int32_t i = pool.first_replica; i < pool.first_replica + pool.replicas; ++i) {
      const Replica& r = replicas_[static_cast<size_t>(i)];
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
  for (size_t id = 0; id < result_.handoffs.size(); ++id) {
    const HandoffRecord& h = result_.handoffs[id];
    if (!h.transferred()) continue;
    ++t.transfers;
    t.bytes += static_cast<double>(h.transfer_bytes);
    wait.add(h.wait_s());
    queue.add(h.queue_s());
    duration.add(h.transfer_s());
    const RequestRecord& rec = result_.requests[id];
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
