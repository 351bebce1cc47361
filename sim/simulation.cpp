#include "sim/simulation.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <stdexcept>
#include <fmt/format.h>

#include "hwmodel/base/error.h"

namespace batchsim {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Whether `item` is request `p`'s next decode step (one token after all `known` tokens but the
// last are in the KV cache), not a prefill chunk: how the replica counts prefills.
bool is_decode_step(const RequestProgress& p, const BatchItem& item, int64_t known) {
  return p.generated_tokens > 0 && item.context_before == known - 1 && item.new_tokens == 1;
}

[[noreturn]] void throw_bad_item(const BatchItem& item, const RequestProgress& p, int64_t known) {
  throw std::logic_error(fmt::format("policy scheduled request {} with {} new tokens after {} (computed {}, known {})",
                                     item.id, item.new_tokens, item.context_before, p.computed_tokens, known));
}

// A batch item computes at least one token, right after its request's computed ones, and never
// past the tokens it knows.
inline void check_item(const BatchItem& item, const RequestProgress& p, int64_t known) {
  if (item.new_tokens < 1 || item.context_before != p.computed_tokens || p.computed_tokens + item.new_tokens > known)
      [[unlikely]] {
    throw_bad_item(item, p, known);
  }
}

// The random router's stream of the run's seed (Rng::for_stream): well clear of the workload's
// streams (0-3 in sim/workload/workload.cpp), so routing draws never shift a workload sample.
constexpr uint32_t kRouterStream = 16;
// Speculative decoding's acceptance draws: a stream of their own (17 is the decode router's).
constexpr uint32_t kSpeculativeStream = 18;

}  // namespace

Simulation::Simulation(const Workload& workload, Policy& policy, const CostModel& cost_model, SimulationOptions options)
    : Simulation(workload, std::span<Policy* const>(std::array<Policy*, 1>{&policy}), cost_model, std::move(options)) {}

namespace {
const Workload kNoWorkload;  // a streaming run's workload_: its requests come from the source

// The invariants of request.h, which the simulation relies on: request `expected_id` of a
// workload, after one that arrived at `previous_arrival`.
void check_request(const Request& r, int64_t expected_id, SimTime previous_arrival) {
  if (r.id != expected_id) throw std::logic_error("workload ids must be 0..n-1 in order");
  if (r.arrival < previous_arrival) throw std::logic_error("workload must be sorted by arrival");
  if (r.prompt_tokens < 1 || r.output_tokens < 1) {
    throw std::logic_error(fmt::format("request {} has no prompt or no output tokens", expected_id));
  }
  if (r.max_tokens != 0 && r.max_tokens < r.output_tokens) {
    throw std::logic_error(fmt::format("request {} has more output tokens than its max_tokens", expected_id));
  }
}
}  // namespace

Simulation::Simulation(RequestSource& source, std::span<Policy* const> policies, const CostModel& cost_model,
                       SimulationOptions options)
    : Simulation(kNoWorkload, policies, cost_model, std::move(options)) {
  if (options_.streaming.slots < 1) throw std::logic_error("a streaming simulation needs streaming.slots > 0");
  source_ = &source;
}

Simulation::Simulation(const Workload& workload, std::span<Policy* const> policies, const CostModel& cost_model,
                       SimulationOptions options)
    : workload_(workload),
      policies_(policies.begin(), policies.end()),
      cost_model_(cost_model),
      options_(std::move(options)) {
  if (policies_.empty()) throw std::logic_error("a simulation needs at least one replica");
  // A speculative step emits a varying number of tokens per sequence: no step repeats another,
  // so neither fast-forward nor a decode cohort applies.
  const CostModel* decode_cost_model = options_.disaggregation.decode_cost_model;
  if (cost_model_.speculative().enabled() ||
      (decode_cost_model != nullptr && decode_cost_model->speculative().enabled())) {
    options_.fast_forward = false;
  }
  for (const Policy* p : policies_) {
    if (p == nullptr) throw std::logic_error("null policy");
    if (std::count(policies_.begin(), policies_.end(), p) > 1) {
      throw std::logic_error("each replica needs a policy instance of its own");
    }
  }
}

void Simulation::reset(int64_t n) {
  for (int64_t i = 0; i < n; ++i) check_request(workload_[i], i, i > 0 ? workload_[i - 1].arrival : SimTime::zero());
  if (streaming()) {
    const char* unsupported = options_.max_concurrency > 0 ? "closed-loop clients"
                              : pooled()                   ? "disaggregated pools"
                              : options_.prefix_blocks != nullptr && !options_.prefix_blocks->empty()
                                  ? "prompt-block hashes"
                              : options_.record_iterations                   ? "recorded iterations"
                              : options_.record_phases_of_first_requests > 0 ? "recorded phases"
                                                                             : nullptr;
    if (unsupported != nullptr) {
      throw std::logic_error(fmt::format("a streaming simulation does not support {}", unsupported));
    }
  }
  // Per-request tables: one entry per request, or per slot while streaming.
  const auto table = static_cast<size_t>(streaming() ? options_.streaming.slots : n);
  if (options_.prefix_blocks != nullptr && !options_.prefix_blocks->empty() && options_.prefix_blocks->size() != n) {
    throw std::logic_error("prefix block hashes do not match the workload");
  }
  if (options_.num_gpu_blocks < 0) throw std::logic_error("num_gpu_blocks must be >= 0");
  clients_.reset({options_.max_concurrency, options_.think_times, options_.sessions, options_.client_connections},
                 workload_, streaming(), &progress_, &events_);
  requests_ = streaming() ? &slots_ : clients_.moves_sends() ? &clients_.sent() : &workload_;
  total_requests_ = streaming() ? std::numeric_limits<int64_t>::max() : n;
  if (streaming()) reset_slots(table);
  prefix_blocks_ = streaming() ? &slot_prefix_blocks_ : options_.prefix_blocks;
  scheduled_ = 0;
  progress_.assign(table, RequestProgress{});
  admission_hit_.assign(table, 0);
  latency_.reset(table, policies_.size());
  scheduled_in_batch_.assign(table, -1);
  batches_ = 0;
  arrived_ = 0;
  router_ = RequestRouter(options_.router, Rng::for_stream(options_.router_seed, kRouterStream));
  speculative_rng_ = Rng::for_stream(options_.router_seed, kSpeculativeStream);
  result_ = SimulationResult{};
  result_.requests.resize(n);
}

void Simulation::reset_slots(size_t table) {
  slots_.assign(table, Request{});
  slot_reject_reason_.assign(table, std::string());
  // Popped from the back: slot 0 first, so that a run with few in flight stays in few slots.
  kv_held_slots_.clear();
  free_slots_.resize(table);
  for (size_t k = 0; k < table; ++k) free_slots_[k] = static_cast<RequestId>(table - 1 - k);
  figures_ = RequestFigures<SketchedSamples>{};
  read_ = 0;
  slot_prefix_blocks_ = PrefixBlockHashes{};
  if (const int32_t block_tokens = source_->prefix_block_tokens(); block_tokens > 0) {
    slot_prefix_blocks_.block_tokens = block_tokens;
    slot_prefix_blocks_.per_slot.assign(table, {});
  }
  next_request_ = source_->next();
}

void Simulation::set_up_replicas() {
  // Replicas are copies of one policy (pools size theirs in set_up_pools).
  const Policy::KvSizing kv = size_kv(*policies_.front(), cost_model_);
  result_.kv_capacity_tokens = kv.tokens;
  if (result_.kv_capacity_tokens < 1) {
    const ModelSpec& m = cost_model_.model();
    throw UserError(fmt::format(
        "model '{}' ({:.1f} GiB of weights, {:.1f} GiB per GPU at --tp {}) leaves no room for a "
        "KV cache on '{}' ({:.0f} GiB at {}): use a larger --tp or GPU",
        m.name, static_cast<double>(m.weight_bytes()) / kGiB,
        static_cast<double>(m.weight_bytes()) / kGiB / cost_model_.tensor_parallel(), cost_model_.tensor_parallel(),
        cost_model_.gpu().name, static_cast<double>(cost_model_.gpu().memory_bytes) / kGiB, kv.rule));
  }

  // Sized once and never again: each policy keeps a pointer to its replica's env.
  replicas_.clear();
  replicas_.resize(policies_.size());
  for (size_t i = 0; i < replicas_.size(); ++i) {
    Replica& r = replicas_[i];
    r.policy = policies_[i];
    r.index = static_cast<int32_t>(i);
    r.cost_model = &cost_model_;
    r.kv_capacity_tokens = result_.kv_capacity_tokens;
    r.kv_sizing_rule = kv.rule;
    r.num_gpu_blocks = options_.num_gpu_blocks;
    r.tbt_s.sketch = streaming();
  }
  if (pooled()) {
    pools_.set_up(
        options_.disaggregation,
        {&replicas_, &progress_, &result_.handoffs, &latency_, &events_, requests_, prefix_blocks_}, cost_model_,
        options_.num_gpu_blocks, [this](const Policy& policy, const CostModel& cm) { return size_kv(policy, cm); },
        options_.router_seed);
    handing_off_.clear();
    clients_.mirror_sends_into(&pools_.prefill_view());
  }
  for (Replica& r : replicas_) attach(r);
  result_.kv_capacity_tokens = replicas_.front().kv_capacity_tokens;
  result_.kv_capacity_rule = replicas_.front().kv_sizing_rule;
}

void Simulation::attach(Replica& r) {
  PolicyEnv& env = r.env;
  env.requests = r.role == PoolRole::kPrefill ? &pools_.prefill_view() : requests_;
  env.progress = &progress_;
  env.cost_model = r.cost_model;
  // The sizing is one attention rank's (each DP rank sizes its own cache, as each of vLLM's
  // DP engines does); the replica's memory is its ranks' together.
  const int ranks = r.policy->attention_ranks();
  env.kv_capacity_tokens = r.num_gpu_blocks > 0 ? r.num_gpu_blocks * kDefaultBlockSize : r.kv_capacity_tokens;
  if (r.num_gpu_blocks > 0) r.kv_sizing_rule = fmt::format("--num-gpu-blocks {}", r.num_gpu_blocks);
  if (ranks > 1) {
    r.kv_capacity_tokens *= ranks;
    r.kv_sizing_rule =
        fmt::format("{} DP ranks of {} tokens, each by {}", ranks, env.kv_capacity_tokens, r.kv_sizing_rule);
  }
  env.kv_sizing_rule = r.kv_sizing_rule;
  env.num_gpu_blocks = r.num_gpu_blocks;
  env.kv_offload_cpu_tokens = options_.kv_offload_cpu_tokens;
  env.kv_offload_disk_tokens = options_.kv_offload_disk_tokens;
  env.max_model_len = r.cost_model->model().max_context_tokens;
  env.role = r.role;
  if (r.role == PoolRole::kDecode) {
    env.start_kv_transfer = [this, &r](RequestId id, int64_t tokens) { pools_.start_kv_transfer(r, id, tokens, now_); };
  }
  env.reject = [this](RequestId id, std::string reason) { reject(id, std::move(reason)); };
  env.preempt = [this, &r](RequestId id, bool keeps_kv) {
    RequestProgress& p = progress_[id];
    if (p.state != RequestState::kRunning) {
      throw std::logic_error(fmt::format("policy preempted request {} that is not running", id));
    }
    if (r.in_cohort(id)) {
      throw std::logic_error(fmt::format("policy preempted request {} while it is in the decode cohort", id));
    }
    latency_.preempted(id, now_, p.computed_tokens, (*requests_)[id].prompt_tokens + int64_t{p.generated_tokens},
                       p.generated_tokens, keeps_kv);
    ++p.preemptions;
    ++r.preemptions;
    p.state = RequestState::kWaiting;
    if (!keeps_kv) p.computed_tokens = 0;
    record_phase(id, RequestPhase::kPreempted);
  };
  env.prefix_blocks = prefix_blocks_;
  env.arrived = &arrived_;
  env.total_requests = &total_requests_;
  clients_.expose(env);
  env.use_cached_prefix = [this, &env](RequestId id, int64_t tokens) {
    RequestProgress& p = progress_[id];
    if (p.state != RequestState::kWaiting || p.computed_tokens != 0 || tokens < 1 || tokens >= env.known_tokens(id)) {
      throw std::logic_error(fmt::format("policy claimed {} cached tokens for request {} (computed {}, known {})",
                                         tokens, id, p.computed_tokens, env.known_tokens(id)));
    }
    p.computed_tokens = tokens;
    p.cached_tokens += tokens;
    admission_hit_[id] = tokens;
  };
  // The cohort needs every batch's requests to be the replica's business alone, and its
  // members listed by nobody: not with fast-forward off (whose runs the tests compare with
  // it), a hook or a log that wants every item, or pools (a hand-off reads the items).
  if (options_.fast_forward && !options_.on_iteration &&
      !(options_.record_iterations && options_.record_iteration_items) && !pooled()) {
    r.cohorts.resize(static_cast<size_t>(std::max(1, r.policy->attention_ranks())));
    for (DecodeCohort& cohort : r.cohorts) cohort.attach(&progress_);
    env.cohort = &r.cohorts.front();
    if (r.cohorts.size() > 1) env.rank_cohorts = r.cohorts;
  }
  r.policy->attach(env);
  // Blocks given by count: the capacity is what the policy built from them (N x its block
  // size), and the KV fractions are over that. From memory it stays the memory's, as ever.
  if (r.num_gpu_blocks > 0) r.kv_capacity_tokens = r.policy->kv_cache().capacity_tokens();
}

SimulationResult Simulation::run() {
  const auto n = static_cast<int64_t>(workload_.size());
  reset(n);
  set_up_replicas();

  // The workload's arrivals are taken in order, each before any event at its time, as if all
  // had been queued up front (ahead of every later event: arrivals at one instant are all seen
  // before any replica schedules at that instant). Kept out of the event queue, whose heap then
  // holds the replicas' few events instead of every request. A streaming run reads them from
  // its source one by one in the same order. (Closed-loop sends are events: they come later.)
  for (;;) {
    if (next_request_ && (events_.empty() || next_request_->arrival <= events_.next_time())) {
      arrive_from_source();
      continue;
    }
    if (!streaming() && scheduled_ < n &&
        (events_.empty() || workload_[static_cast<size_t>(scheduled_)].arrival <= events_.next_time())) {
      const Request& next = workload_[static_cast<size_t>(scheduled_)];
      if (next.arrival < now_) throw std::logic_error("time went backwards");
      now_ = next.arrival;
      ++scheduled_;
      client_arrival(next.id);
      continue;
    }
    if (events_.empty()) break;
    const Event e = events_.pop();
    if (e.time < now_) throw std::logic_error("time went backwards");
    now_ = e.time;
    switch (e.kind) {
      case EventKind::kArrival:
        client_arrival(static_cast<RequestId>(e.payload));
        break;
      case EventKind::kWakeUp: {
        Replica& r = replicas_[static_cast<size_t>(e.payload)];
        if (r.wake_pending && e.time == r.wake_time) r.wake_pending = false;
        try_start_iteration(r);
        break;
      }
      case EventKind::kIterationDone:
        finish_iteration(replicas_[static_cast<size_t>(e.payload)]);
        break;
      case EventKind::kTransferDone:
        pools_.finish_kv_transfer(static_cast<RequestId>(e.payload), now_);
        break;
    }
  }
  if (const int64_t all = streaming() ? read_ : n; settled_ != all) {
    throw std::logic_error(fmt::format("policy '{}' left {} of {} requests neither finished nor rejected",
                                       policies_.front()->name(), all - settled_, all));
  }
  // Logged in event order; each request's changes are in time order already.
  std::stable_sort(result_.request_phases.begin(), result_.request_phases.end(),
                   [](const RequestPhaseChange& a, const RequestPhaseChange& b) { return a.request < b.request; });

  for (RequestId id = 0; id < n; ++id) fill_record(result_.requests[id], id);
  latency_.check_sums(*requests_, progress_);
  summarize_replicas();
  if (pooled()) pools_.summarize(result_.summary, result_.requests);
  return std::move(result_);
}

Policy::KvSizing Simulation::size_kv(const Policy& policy, const CostModel& cm) const {
  if (options_.engine_kv_rules) {
    if (std::optional<Policy::KvSizing> own = policy.kv_sizing(cm, options_.gpu_memory_utilization)) return *own;
  }
  return Policy::after_profile_run(cm, options_.gpu_memory_utilization, CostModel::kDefaultActivationTokens,
                                   CostModel::kSamplerRows);
}

void Simulation::summarize_replicas() {
  for (const Replica& r : replicas_) {
    if (const std::optional<KvOffloadStats> o = r.policy->kv_cache().offload_stats()) {
      if (!result_.kv_offload) result_.kv_offload.emplace();
      *result_.kv_offload += *o;
    }
    if (const std::optional<KvOffloadStats> o = r.policy->kv_cache().disk_offload_stats()) {
      if (!result_.kv_offload_disk) result_.kv_offload_disk.emplace();
      *result_.kv_offload_disk += *o;
    }
  }
  // Cluster-wide sums, in replica order (so they are the same whatever order the replicas'
  // events interleaved in); with one replica these are that replica's figures, to the bit.
  double busy_s = 0, kv_used_area = 0, kv_alloc_area = 0, kv_used_peak = 0, kv_alloc_peak = 0;
  int64_t bubble = 0, useful = 0, iterations = 0, admitted = 0, cached = 0;
  SketchedSamples tbt_sketch;
  for (Replica& r : replicas_) {
    busy_s += r.busy_s;
    kv_used_area += r.kv_used_area;
    kv_alloc_area += r.kv_alloc_area;
    kv_used_peak = std::max(kv_used_peak, r.kv_used_peak);
    kv_alloc_peak = std::max(kv_alloc_peak, r.kv_alloc_peak);
    bubble += r.bubble_slots;
    useful += r.useful_slots;
    iterations += r.iterations;
    admitted += r.prefill_admitted_tokens;
    cached += r.prefill_cached_tokens;
    if (replicas_.size() == 1) {
      result_.tbt_s = std::move(r.tbt_s.exact);
      tbt_sketch = std::move(r.tbt_s.sketched);
    } else {
      result_.tbt_s.merge(r.tbt_s.exact);
      tbt_sketch.merge(r.tbt_s.sketched);
    }
  }
  if (replicas_.size() > 1 && options_.record_iterations) {
    // Replicas close iterations in event order, and fast-forward closes a run of them early:
    // order the log by start (then replica) so that it does not depend on either.
    std::stable_sort(result_.iterations.begin(), result_.iterations.end(),
                     [](const IterationRecord& a, const IterationRecord& b) {
                       return a.start != b.start ? a.start < b.start : a.replica < b.replica;
                     });
    std::stable_sort(
        result_.idle_samples.begin(), result_.idle_samples.end(),
        [](const IdleSample& a, const IdleSample& b) { return a.at != b.at ? a.at < b.at : a.replica < b.replica; });
  }
  const auto num_replicas = static_cast<double>(replicas_.size());
  if (streaming()) {
    figures_.finish(result_.summary, busy_s / num_replicas, tbt_sketch);
  } else {
    result_.summary = summarize(result_, busy_s / num_replicas);
  }
  Summary& s = result_.summary;
  s.iterations = iterations;
  s.bubble_fraction = (bubble + useful) > 0 ? static_cast<double>(bubble) / static_cast<double>(bubble + useful) : 0.0;
  // KV fractions while busy, weighted by busy time over the replicas (all have the capacity).
  if (busy_s > 0) {
    s.kv_used_fraction_mean = kv_used_area / busy_s;
    s.kv_allocated_fraction_mean = kv_alloc_area / busy_s;
  }
  s.kv_used_fraction_peak = kv_used_peak;
  s.kv_allocated_fraction_peak = kv_alloc_peak;
  s.prefill_admitted_tokens = admitted;
  s.prefill_cached_tokens = cached;
  if (admitted > 0) {
    s.prefix_hit_rate = static_cast<double>(cached) / static_cast<double>(admitted);
  }
  for (const Replica& r : replicas_) {
    ReplicaSummary rs;
    rs.requests = r.routed;
    rs.completed = r.completed;  // a streaming run's, counted as they settle
    rs.iterations = r.iterations;
    if (s.makespan_s > 0) rs.busy_fraction = r.busy_s / s.makespan_s;
    if (r.busy_s > 0) rs.kv_allocated_fraction_mean = r.kv_alloc_area / r.busy_s;
    if (r.prefill_admitted_tokens > 0) {
      rs.prefix_hit_rate =
          static_cast<double>(r.prefill_cached_tokens) / static_cast<double>(r.prefill_admitted_tokens);
    }
    s.replicas.push_back(rs);
  }
  for (const RequestRecord& rec : result_.requests) {  // an exact run's
    if (rec.completed()) ++s.replicas[static_cast<size_t>(rec.replica)].completed;
  }
}

void Simulation::client_arrival(RequestId id) {
  switch (clients_.arrive(id, now_)) {
    case ClientPool::Delivery::kToServer:
      arrive(id);
      break;
    case ClientPool::Delivery::kHeld:  // it waits for a settle: so may every request not arrived
      wake_if_none_can_arrive();
      break;
    case ClientPool::Delivery::kLater:
      break;
  }
}

void Simulation::arrive(RequestId id) {
  ++arrived_;
  // With pools, arrivals go to the prefill pool (the first replicas).
  const size_t count = pooled() ? static_cast<size_t>(options_.disaggregation.prefill_replicas) : replicas_.size();
  Replica& r = replicas_[static_cast<size_t>(
      router_.pick(id, std::span<const Replica>(replicas_).first(count), prefix_blocks_))];
  ++r.routed;
  ++r.outstanding;
  RequestProgress& p = progress_[id];
  p.replica = r.index;
  p.state = RequestState::kWaiting;
  record_phase(id, RequestPhase::kQueued);
  // Timed from its send: `now_` but for a request that waited for a client connection
  // (SimulationOptions::client_connections), whose wait is queueing too.
  latency_.arrived(id, (*requests_)[id].arrival);
  r.policy->on_arrival(id, now_);
  // Defer scheduling to a wake-up at this instant: it runs after every arrival at `now_`.
  r.wake_now(events_, now_);
  wake_if_none_can_arrive();
}

void Simulation::wake_if_none_can_arrive() {
  // The last arrival changes what the replicas may do (a static batcher that waits to fill a
  // batch runs a short one once no request is left to come: PolicyEnv::all_arrived), so every
  // idle replica that holds work gets to schedule again. So does a session's turn that starts
  // waiting on an answer when every other request not arrived does too.
  if (arrived_ == total_requests_ || clients_.blocked(arrived_, total_requests_)) {
    for (Replica& other : replicas_) {
      if (!other.policy->idle()) other.wake_now(events_, now_);
    }
  }
}

SimTime Simulation::next_arrival_time() const {
  if (streaming()) return next_request_ ? next_request_->arrival : SimTime::max();
  return scheduled_ < static_cast<int64_t>(workload_.size()) ? workload_[static_cast<size_t>(scheduled_)].arrival
                                                             : SimTime::max();
}

void Simulation::arrive_from_source() {
  check_request(*next_request_, read_, now_);
  now_ = next_request_->arrival;
  // Slots whose policy has freed their KV since they settled are free again.
  std::erase_if(kv_held_slots_, [this](RequestId slot) {
    if (replicas_[static_cast<size_t>(progress_[static_cast<size_t>(slot)].replica)].policy->holds_kv(slot)) {
      return false;
    }
    free_slots_.push_back(slot);
    return true;
  });
  if (free_slots_.empty()) {
    throw UserError(
        fmt::format("--streaming-slots: {} requests are in flight at t={:.3f}s (request {} arrives), more than the {} "
                    "slots of this streaming run; give a larger --streaming-slots (or a lighter load)",
                    options_.streaming.slots + 1, now_.seconds(), read_, options_.streaming.slots));
  }
  const RequestId slot = free_slots_.back();
  free_slots_.pop_back();
  // The slot's last occupant settled: its state starts afresh (its KV and queue places are gone).
  slots_[static_cast<size_t>(slot)] = *next_request_;
  if (!slot_prefix_blocks_.empty()) {
    const std::span<const uint64_t> hashes = source_->prefix_hashes();  // next_request_'s: not read past yet
    slot_prefix_blocks_.per_slot[static_cast<size_t>(slot)].assign(hashes.begin(), hashes.end());
  }
  progress_[static_cast<size_t>(slot)] = RequestProgress{};
  admission_hit_[static_cast<size_t>(slot)] = 0;
  slot_reject_reason_[static_cast<size_t>(slot)].clear();
  latency_.recycle(slot);
  ++read_;
  // Read ahead before it arrives, so that arrive() knows whether it is the last.
  next_request_ = source_->next();
  if (!next_request_) total_requests_ = read_;
  client_arrival(slot);
}

void Simulation::fill_record(RequestRecord& rec, RequestId id) const {
  static_cast<Request&>(rec) = (*requests_)[id];
  static_cast<RequestProgress&>(rec) = progress_[id];
  rec.breakdown = latency_.of(id);
}

void Simulation::settle_slot(RequestId id) {
  RequestRecord rec;
  fill_record(rec, id);
  rec.reject_reason = std::move(slot_reject_reason_[static_cast<size_t>(id)]);
  latency_.check_sum(id, rec, rec);
  if (rec.completed()) ++replicas_[static_cast<size_t>(rec.replica)].completed;
  figures_.add(rec);
  if (options_.streaming.on_settled) options_.streaming.on_settled(rec);
  // A policy may keep a settled request until it frees its KV (static batching frees a
  // batch's rows together, and reads the finished rows' progress until then).
  const bool held = replicas_[static_cast<size_t>(rec.replica)].policy->holds_kv(id);
  (held ? kv_held_slots_ : free_slots_).push_back(id);
}

void Simulation::reject(RequestId id, std::string reason) {
  RequestProgress& p = progress_[id];
  if (p.state == RequestState::kFinished || p.state == RequestState::kRejected) {
    throw std::logic_error(fmt::format("request {} rejected after it was settled", id));
  }
  latency_.rejected(id);
  p.state = RequestState::kRejected;
  if (const int context = cost_model_.model().max_context_tokens;
      context > 0 && (*requests_)[id].prompt_tokens + int64_t{(*requests_)[id].output_tokens} > context) {
    ++result_.rejected_beyond_context;
  }
  record_phase(id, RequestPhase::kRejected);
  (streaming() ? slot_reject_reason_[static_cast<size_t>(id)] : result_.requests[id].reject_reason) = std::move(reason);
  // Refused by the decode replica it was handed to: the prefill replica's KV is no longer needed.
  if (pooled() && result_.handoffs[id].decode_replica >= 0 && !result_.handoffs[id].transferred()) {
    replicas_[static_cast<size_t>(result_.handoffs[id].prefill_replica)].policy->release_held_kv(id);
  }
  --replicas_[static_cast<size_t>(p.replica)].outstanding;
  ++settled_;
  clients_.rejected(id, now_);
  // The policy drops it from its queues before the next arrival, the first that may take the slot.
  if (streaming()) settle_slot(id);
}

void Simulation::start_items(Replica& r, int64_t stamp) {
  // Check the batch the policy built: each request live and at most once here; each item's
  // tokens follow its computed ones, never past its known tokens, which finish_iteration checks
  // as it reads them (check_item), before it applies any. (That a replica lists only requests
  // routed to it is checked by the cluster tests through on_iteration, not here: a policy only
  // ever hears of its own arrivals, and the check per item cost a single-replica run 2% of its
  // time.)
  const bool record_items = options_.record_iterations && options_.record_iteration_items;
  const bool plain_running = !record_items && r.role != PoolRole::kDecode;
  r.batch_first_item = static_cast<int64_t>(result_.iteration_items.size());
  // (Local: through the members every stamp stored would reload them.)
  RequestProgress* const progress = progress_.data();
  int64_t* const stamps = scheduled_in_batch_.data();
  for (const BatchItem& item : r.batch.items) {
    RequestProgress& p = progress[item.id];
    if (stamps[item.id] == stamp) {
      throw std::logic_error(fmt::format("policy scheduled request {} twice in one batch", item.id));
    }
    stamps[item.id] = stamp;
    if (p.state == RequestState::kRunning && plain_running) {
      continue;  // running on (most items): no phase starts, nothing to record
    }
    if (p.state != RequestState::kWaiting && p.state != RequestState::kRunning) {
      throw std::logic_error(fmt::format("policy scheduled request {} that is not live", item.id));
    }
    const int64_t known = r.env.known_tokens(item.id);
    check_item(item, p, known);
    // A waiting request with nothing computed but its cached prefix is admitted to prefill (a
    // swapped-in one keeps computed tokens of its own).
    if (p.state == RequestState::kWaiting && p.computed_tokens == admission_hit_[item.id]) {
      r.prefill_admitted_tokens += known;
      r.prefill_cached_tokens += admission_hit_[item.id];
      admission_hit_[item.id] = 0;
    }
    const bool phase_starts = p.state == RequestState::kWaiting;  // admitted, or readmitted
    if (phase_starts) latency_.joined(item.id, r.index, now_);
    if (record_items || (phase_starts && item.id < options_.record_phases_of_first_requests)) {
      const bool decode = is_decode_step(p, item, known);
      if (phase_starts) record_phase(item.id, decode ? RequestPhase::kDecoding : RequestPhase::kPrefilling);
      if (record_items) result_.iteration_items.push_back({item.id, item.new_tokens, !decode});
    }
    // A request whose KV landed here decodes from its first iteration on this replica (its
    // kv_transfer phase ends); its first token here marks every later iteration.
    if (!phase_starts && r.role == PoolRole::kDecode &&
        result_.handoffs[item.id].decode_first_token == SimTime::max()) {
      record_phase(item.id, RequestPhase::kDecoding);
    }
    p.state = RequestState::kRunning;
    if (p.first_scheduled == SimTime::max()) p.first_scheduled = now_;
  }
}

void Simulation::try_start_iteration(Replica& r) {
  if (r.busy) return;
  Batch& batch = r.batch;
  Policy& policy = *r.policy;
  batch.clear();
  ++r.schedules;
  policy.schedule(now_, batch);
  if (batch.empty()) {
    if (options_.record_iterations) r.record_idle(now_, result_.idle_samples);
    if (batch.wake_at) {
      if (*batch.wake_at <= now_) {
        throw std::logic_error(fmt::format("policy '{}' asked to wake at a time not in the future", policy.name()));
      }
      r.wake_at(events_, *batch.wake_at);
    } else if (!policy.idle() && events_.empty() &&
               next_arrival_time() == SimTime::max()) {  // (arrivals are not events)
      throw std::logic_error(
          fmt::format("policy '{}' stalled at t={}s: it holds work but scheduled nothing and nothing is "
                      "left to wait for",
                      policy.name(), now_.seconds()));
    }
    return;
  }

  const int64_t stamp = batches_++;
  start_items(r, stamp);

  listed_cohorts_.clear();  // (a rank's cohort whose members sit this step out is not listed)
  batch.for_each_cohort([&](int32_t rank, size_t, std::span<const RequestId> members) {
    const DecodeCohort* cohort =
        static_cast<size_t>(rank) < r.cohorts.size() ? &r.cohorts[static_cast<size_t>(rank)] : nullptr;
    if (cohort == nullptr || !cohort->enabled() || static_cast<int64_t>(members.size()) != cohort->size() ||
        cohort->steps_in_flight() != 1) {
      throw std::logic_error(fmt::format(
          "policy '{}' listed a decode cohort that is not its rank's whole cohort, stepped once", policy.name()));
    }
    listed_cohorts_.push_back(cohort);
  });
  // (A DP step keeps each rank's cost, from which a fast-forward advances them.)
  const IterationCost cost = batch.rank_shapes.empty() ? r.cost_model->iteration(batch.shape, &r.cost_memo)
                                                       : r.cost_model->step(batch.rank_shapes, &r.cost_memo,
                                                                            &r.repeat_rank_costs, batch.rank_repeats);
  const SimTime duration = r.open_iteration(now_, cost, batch.extra_time);
  latency_.iteration_started(r.index, now_, batch, cost, duration, *r.cost_model, scheduled_in_batch_, stamp,
                             listed_cohorts_);
  r.first_end = now_ + duration;
  r.repeats = 0;
  r.busy = true;
  SimTime end = r.first_end;
  if (options_.fast_forward && !options_.on_iteration && batch.shape.prefills.empty() &&
      batch.extra_time == SimTime::zero()) {
    // Output tokens still to come.
    int64_t min_remaining = std::numeric_limits<int64_t>::max();
    batch.for_each_cohort([&](int32_t rank, size_t, std::span<const RequestId>) {
      min_remaining = std::min(min_remaining, r.cohorts[static_cast<size_t>(rank)].min_remaining());
    });
    for (const BatchItem& item : batch.items) {
      min_remaining =
          std::min<int64_t>(min_remaining, (*requests_)[item.id].output_tokens - progress_[item.id].generated_tokens);
    }
    end = fast_forward(r, r.first_end, min_remaining, cost);
  }
  r.done_at = end;
  events_.push(end, EventKind::kIterationDone, r.index);
}

SimTime Simulation::fast_forward(Replica& r, SimTime end, int64_t min_remaining, IterationCost cost) {
  // Repeat the decode batch while (a) no request finishes before the last repeat — a request
  // with r tokens to go finishes in the r-th iteration —, (b) no arrival falls due at or
  // before an intermediate iteration boundary (an arrival there may be routed here and would be
  // seen by the next schedule()), and (c) the policy vouches that its next schedule() would be
  // this batch.
  // Why the next arrival of ANY request bounds it: only an arrival can add work to a busy
  // replica (its own wake-ups are no-ops while it is busy; other replicas' iteration ends touch
  // only their own policies). Which replica an arrival goes to is known only when it arrives
  // (least-outstanding and least-kv read the replicas' state then), so we stop before every
  // arrival. That also keeps routing exact: a router reading this replica at time t sees the
  // state after its last schedule() at or before t, which no repeat runs past.
  // The next request to reach a replica: the workload's next arrival, none while every
  // closed-loop client has a request at the server (until a settle); with closed-loop clients
  // also the next queued send (at this instant, or when its client has thought), a request
  // given a connection at this instant, and a settle on another replica, at its iteration's
  // end, while the clients hold requests to send or to connect then (a settle here ends the
  // run).
  SimTime next_arrival = clients_.saturated() && !clients_.sends_pending() ? SimTime::max() : next_arrival_time();
  next_arrival = std::min(next_arrival, clients_.next_send(now_));
  // Likewise a settle elsewhere that sends a session's next turn.
  if (clients_.waits_for_settles()) {
    for (const Replica& other : replicas_) {
      if (&other != &r) next_arrival = std::min(next_arrival, other.done_at);
    }
  }
  // With pools, work also reaches a replica from the others: hand-offs and landed transfers.
  if (pooled()) next_arrival = std::min(next_arrival, pools_.next_event(r));
  Batch& batch = r.batch;
  BatchShape shape = batch.shape;  // decodes only: copying allocates nothing
  // DP attention's lockstep step, by its ranks' shapes (an idle rank's stays empty).
  r.repeat_rank_shapes.assign(batch.rank_shapes.begin(), batch.rank_shapes.end());
  r.repeat_gaps.clear();
  r.max_repeat_gap = SimTime::zero();
  while (r.repeats + 1 < min_remaining && end < next_arrival) {
    if (!r.policy->repeat_decode_step(batch)) break;
    r.set_counts(/*num_prefills=*/0, /*prefill_tokens=*/0);
    r.close_iteration(iteration_log());

    shape.advance_decodes(1);  // every row attends to one more token
    for (BatchShape& rank : r.repeat_rank_shapes) rank.advance_decodes(1);
    // Only the decodes' attention changes from the step before (CostModel::advance_decodes).
    cost = r.repeat_rank_shapes.empty()
               ? r.cost_model->advance_decodes(cost, shape, &r.cost_memo)
               : r.cost_model->advance_step(r.repeat_rank_shapes, r.repeat_rank_costs, &r.cost_memo);
    // KV is sampled as the repeated schedule() left it.
    const SimTime duration = r.open_iteration(end, cost, SimTime::zero());
    latency_.iteration_repeated(r.index, r.current.cost, duration);
    r.repeat_gaps.push_back(duration);
    r.max_repeat_gap = std::max(r.max_repeat_gap, duration);
    end += duration;
    ++r.repeats;
  }
  result_.fast_forwarded_iterations += r.repeats;
  return end;
}

void Simulation::note_decode_first_token(RequestId id, SimTime at) {
  if (result_.handoffs[id].decode_first_token == SimTime::max()) result_.handoffs[id].decode_first_token = at;
}

void Simulation::leave(Replica& r, RequestId id, RequestProgress& p) {
  finished_.push_back(id);  // for the policy: it leaves this replica
  if (r.role == PoolRole::kPrefill && p.generated_tokens < (*requests_)[id].output_tokens) {
    handing_off_.push_back(id);  // its decode goes on elsewhere
    latency_.kv_transfer_started(id, now_);
    record_phase(id, RequestPhase::kKvTransfer);
    return;
  }
  p.state = RequestState::kFinished;
  p.finished = now_;
  latency_.finished(id, now_);
  record_phase(id, RequestPhase::kFinished);
}

void Simulation::accept_drafts(Replica& r, const BatchItem& item, RequestProgress& p, int32_t output_tokens) {
  // Position i is accepted with rate[i] / rate[i - 1] once i - 1 was (unconditional rates,
  // speculative.h); the first rejection ends the step. The accepted drafts are kept (their KV
  // was computed in this step) and the token after them was sampled (record_token counted it):
  // 1 + accepted tokens, one inter-token gap (vLLM counts ITL per step; TPOT divides by tokens).
  const std::vector<double>& rates = r.cost_model->speculative().accept;
  int32_t accepted = 0;
  double before = 1;
  for (int32_t i = 0; i < item.drafts && i < static_cast<int32_t>(rates.size()); ++i) {
    const double rate = rates[static_cast<size_t>(i)];
    if (rate <= 0 || speculative_rng_.uniform01() * before >= rate) break;
    before = rate;
    ++accepted;
  }
  // Tokens past the request's output are dropped (it stops at max_tokens).
  const int32_t kept = std::min(accepted, output_tokens - p.generated_tokens);
  p.computed_tokens += kept;
  p.generated_tokens += kept;
  SimulationResult::SpeculativeCounts& c = result_.speculative;
  ++c.steps;
  c.draft_tokens += item.drafts;
  c.accepted_tokens += accepted;
  c.emitted_tokens += 1 + kept;
}

void Simulation::finish_cohort_steps(Replica& r, DecodeCohort& cohort, GapRun& gaps) {
  // A DP attention rank whose fast-forward run went one step past the replica's (its repeat
  // was vouched for before a later rank refused: dp_attention_policy.h) has that step in flight
  // still; it ends with the next iteration, which keeps the rank's batch.
  const int64_t in_flight = cohort.steps_in_flight();
  if (in_flight != 1 + r.repeats && !(r.cohorts.size() > 1 && in_flight == 2 + r.repeats)) {
    throw std::logic_error("the decode cohort's steps do not match the iteration's");
  }
  // The first step: members that stepped before close the common gap, then each joiner its
  // own (they are the cohort's last, in join order), as the items would add them in order.
  const int64_t continuing = cohort.continuing();
  const SimTime common = cohort.step_ended(r.first_end);
  if (continuing > 0) gaps.add(r.tbt_s, common, continuing);
  cohort.joiners_ended(r.first_end, [&](RequestId, SimTime gap) { gaps.add(r.tbt_s, gap); });
  // The run's repeats, whose gaps' maxima finish_iteration found (the run ends now).
  cohort.steps_ended(now_, r.repeats, r.repeat_gap_maxima);
  RequestProgress* const progress = progress_.data();
  const Request* const view = r.env.requests->data();
  cohort.pop_finished([&](RequestId id) {
    RequestProgress& p = progress[id];
    if (p.generated_tokens != view[id].output_tokens) {
      throw std::logic_error(fmt::format("the decode cohort finished request {} at {} of its {} tokens", id,
                                         p.generated_tokens, view[id].output_tokens));
    }
    leave(r, id, p);
  });
}

void Simulation::finish_iteration(Replica& r) {
  r.busy = false;
  r.done_at = SimTime::max();
  finished_.clear();
  handing_off_.clear();
  latency_.iteration_ended(r.index, now_);
  const Batch& batch = r.batch;
  int32_t num_prefills = 0;
  int64_t prefill_tokens = 0;
  // (Local: through the members every store to a request's progress would reload them.)
  RequestProgress* const progress = progress_.data();
  const Request* const requests = requests_->data();
  const Request* const view = r.env.requests->data();  // a prefill replica's: one output token
  const bool decode_pool = r.role == PoolRole::kDecode;
  const SimTime now = now_;  // (as the pointers above)
  GapRun gaps;
  // The items [first, last), in batch order.
  const auto finish_items = [&](size_t first, size_t last) {
    const BatchItem* const items = batch.items.data();
    if (r.repeats > 0) {
      // 1 + repeats identical decode iterations: the first token of each request closes a gap
      // of its own; every later one closes the common gap of its iteration.
      for (size_t i = first; i < last; ++i) {
        const BatchItem& item = items[i];
        RequestProgress& p = progress[item.id];
        check_item(item, p, requests[item.id].prompt_tokens + p.generated_tokens);
        p.computed_tokens += 1 + r.repeats;
        record_token(r, decode_pool, item.id, p, r.first_end, gaps);
        p.generated_tokens += static_cast<int32_t>(r.repeats);
        p.last_token = now;
        if (r.max_repeat_gap > p.max_tbt) p.max_tbt = r.max_repeat_gap;
        finish_if_done(r, view, item.id, p);
      }
      return;
    }
    for (size_t i = first; i < last; ++i) {
      const BatchItem& item = items[i];
      RequestProgress& p = progress[item.id];
      const Request& req = requests[item.id];
      const int64_t known = req.prompt_tokens + p.generated_tokens;
      check_item(item, p, known);
      const bool was_decode = is_decode_step(p, item, known);
      if (!was_decode) {
        latency_.prefill_chunk_done(item.id, item.context_before, item.new_tokens);
        ++num_prefills;
        prefill_tokens += item.new_tokens;
      }
      p.computed_tokens += item.new_tokens;
      if (p.computed_tokens < known) continue;  // a prefill chunk that does not sample yet
      // All known tokens are in the KV cache: the model samples the next token.
      record_token(r, decode_pool, item.id, p, now, gaps);
      if (item.drafts > 0) accept_drafts(r, item, p, view[item.id].output_tokens);
      const bool left = finish_if_done(r, view, item.id, p);
      // A prefill that sampled: the request decodes from here (in a prefill pool, elsewhere).
      if (!was_decode && !left) record_phase(item.id, RequestPhase::kDecoding);
    }
  };
  if (r.repeats > 0 && batch.has_cohort()) {
    // The run's gaps, once for every cohort of the batch (DecodeCohort::steps_ended).
    SimTime end = r.first_end;
    for (const SimTime gap : r.repeat_gaps) end += gap;
    if (r.repeat_gaps.size() != static_cast<size_t>(r.repeats) || end != now_) {
      throw std::logic_error("the decode cohort's steps end elsewhere than the run");
    }
    repeat_gap_maxima(r.repeat_gaps, r.repeat_gap_maxima);
  }
  // Each cohort's members come right before the items from its items_begin on.
  size_t next_item = 0;
  batch.for_each_cohort([&](int32_t rank, size_t items_begin, std::span<const RequestId>) {
    finish_items(next_item, items_begin);
    finish_cohort_steps(r, r.cohorts[static_cast<size_t>(rank)], gaps);
    next_item = items_begin;
  });
  finish_items(next_item, batch.items.size());
  gaps.flush(r.tbt_s);
  if (batch.has_cohort()) result_.cohort_iterations += 1 + r.repeats;
  if (r.repeats > 0) {
    const auto rows = static_cast<int64_t>(batch.size());
    for (const SimTime gap : r.repeat_gaps) r.tbt_s.add(gap.seconds(), rows);
  }
  r.policy->on_iteration_end(batch, finished_, now_);
  // Requests handed to the decode pool leave this replica but are not settled.
  const auto settled_now = static_cast<int64_t>(finished_.size() - handing_off_.size());
  settled_ += settled_now;
  r.outstanding -= static_cast<int64_t>(finished_.size());
  if (r.role == PoolRole::kPrefill) {
    // A prefill replica holds every finished request's KV (sim/policy.h); one that finished
    // for good (a one-token output) needs no transfer.
    for (const RequestId id : finished_) {
      if (progress_[id].state == RequestState::kFinished) r.policy->release_held_kv(id);
    }
    for (const RequestId id : handing_off_) pools_.hand_off(r, id, now_);
  }
  clients_.finished(finished_, settled_now, now_);
  if (streaming()) {
    for (const RequestId id : finished_) settle_slot(id);  // no hand-offs: no pools while streaming
  }

  r.set_counts(num_prefills, prefill_tokens);
  r.close_iteration(iteration_log());
  if (options_.on_iteration) options_.on_iteration(batch, r.current, *r.policy);
  try_start_iteration(r);
}

Summary summarize(const SimulationResult& result, double busy_s) {
  Summary s;
  RequestFigures<WeightedSamples> figures;
  figures.reserve(result.requests.size());
  for (const RequestRecord& r : result.requests) figures.add(r);
  figures.finish(s, busy_s, result.tbt_s);
  s.latency_breakdown = summarize_latency_breakdown(result.requests, s.e2e_s.p99);
  return s;
}

std::vector<PriorityClassSummary> summarize_priority_classes(const std::vector<RequestRecord>& requests) {
  RequestFigures<WeightedSamples> figures;
  for (const RequestRecord& r : requests) figures.add(r);
  Summary s;
  figures.finish(s, 0.0, WeightedSamples{});
  return std::move(s.priority_classes);
}

}  // namespace batchsim
