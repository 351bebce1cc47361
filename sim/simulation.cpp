#include "sim/simulation.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <fmt/format.h>

#include "hwmodel/error.h"

namespace batchsim {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}  // namespace

void EventQueue::push(SimTime time, EventKind kind, int64_t payload) {
  heap_.push(Event{time, next_seq_++, kind, payload});
}

Event EventQueue::pop() {
  Event e = heap_.top();
  heap_.pop();
  return e;
}

Simulation::Simulation(const Workload& workload, Policy& policy, const CostModel& cost_model,
                       SimulationOptions options)
    : workload_(workload), policy_(policy), cost_model_(cost_model), options_(std::move(options)) {}

SimulationResult Simulation::run() {
  const auto n = static_cast<int64_t>(workload_.size());
  for (int64_t i = 0; i < n; ++i) {
    if (workload_[i].id != i) throw std::logic_error("workload ids must be 0..n-1 in order");
    if (i > 0 && workload_[i].arrival < workload_[i - 1].arrival) {
      throw std::logic_error("workload must be sorted by arrival");
    }
    if (workload_[i].prompt_tokens < 1 || workload_[i].output_tokens < 1) {
      throw std::logic_error(fmt::format("request {} has no prompt or no output tokens", i));
    }
  }
  if (options_.prefix_blocks != nullptr && !options_.prefix_blocks->empty() &&
      static_cast<int64_t>(options_.prefix_blocks->offsets.size()) != n + 1) {
    throw std::logic_error("prefix block hashes do not match the workload");
  }
  progress_.assign(n, RequestProgress{});
  admission_hit_.assign(n, 0);
  prefill_admitted_tokens_ = prefill_cached_tokens_ = 0;
  scheduled_in_iteration_.assign(n, -1);
  result_ = SimulationResult{};
  result_.requests.resize(n);
  result_.kv_capacity_tokens = cost_model_.kv_capacity_tokens(options_.gpu_memory_utilization);
  if (result_.kv_capacity_tokens < 1) {
    const ModelSpec& m = cost_model_.model();
    throw UserError(fmt::format(
        "model '{}' ({:.1f} GiB of weights, {:.1f} GiB per GPU at --tp {}) leaves no room for a "
        "KV cache on '{}' ({:.0f} GiB at --gpu-memory-utilization {}): use a larger --tp or GPU",
        m.name, static_cast<double>(m.weight_bytes()) / kGiB,
        static_cast<double>(m.weight_bytes()) / kGiB / cost_model_.tensor_parallel(),
        cost_model_.tensor_parallel(), cost_model_.gpu().name,
        static_cast<double>(cost_model_.gpu().memory_bytes) / kGiB, options_.gpu_memory_utilization));
  }

  env_.requests = &workload_;
  env_.progress = &progress_;
  env_.cost_model = &cost_model_;
  env_.kv_capacity_tokens = result_.kv_capacity_tokens;
  env_.max_model_len = cost_model_.model().max_context_tokens;
  env_.reject = [this](RequestId id, std::string reason) { reject(id, std::move(reason)); };
  env_.preempt = [this](RequestId id, bool keeps_kv) {
    RequestProgress& p = progress_[id];
    if (p.state != RequestState::kRunning) {
      throw std::logic_error(fmt::format("policy preempted request {} that is not running", id));
    }
    ++p.preemptions;
    p.state = RequestState::kWaiting;
    if (!keeps_kv) p.computed_tokens = 0;
  };
  env_.prefix_blocks = options_.prefix_blocks;
  env_.use_cached_prefix = [this](RequestId id, int64_t tokens) {
    RequestProgress& p = progress_[id];
    if (p.state != RequestState::kWaiting || p.computed_tokens != 0 || tokens < 1 ||
        tokens >= env_.known_tokens(id)) {
      throw std::logic_error(fmt::format(
          "policy claimed {} cached tokens for request {} (computed {}, known {})", tokens, id,
          p.computed_tokens, env_.known_tokens(id)));
    }
    p.computed_tokens = tokens;
    p.cached_tokens += tokens;
    admission_hit_[id] = tokens;
  };
  policy_.attach(env_);

  // All arrivals are queued up front, so that arrivals at one instant have consecutive
  // sequence numbers and are all seen before the replica schedules at that instant.
  for (const Request& r : workload_) events_.push(r.arrival, EventKind::kArrival, r.id);

  while (!events_.empty()) {
    const Event e = events_.pop();
    if (e.time < now_) throw std::logic_error("time went backwards");
    now_ = e.time;
    switch (e.kind) {
      case EventKind::kArrival:
        arrive(static_cast<RequestId>(e.payload));
        break;
      case EventKind::kWakeUp:
        if (wake_pending_ && e.time == wake_time_) wake_pending_ = false;
        try_start_iteration();
        break;
      case EventKind::kIterationDone:
        finish_iteration();
        break;
    }
  }
  if (settled_ != n) {
    throw std::logic_error(fmt::format(
        "policy '{}' left {} of {} requests neither finished nor rejected", policy_.name(),
        n - settled_, n));
  }

  for (RequestId id = 0; id < n; ++id) {
    RequestRecord& rec = result_.requests[id];
    static_cast<Request&>(rec) = workload_[id];
    static_cast<RequestProgress&>(rec) = progress_[id];
  }
  result_.summary = summarize(result_, busy_s_);
  Summary& s = result_.summary;
  s.iterations = iterations_;
  s.bubble_fraction = (bubble_slots_ + useful_slots_) > 0
                          ? static_cast<double>(bubble_slots_) / static_cast<double>(bubble_slots_ + useful_slots_)
                          : 0.0;
  if (busy_s_ > 0) {
    s.kv_used_fraction_mean = kv_used_area_ / busy_s_;
    s.kv_allocated_fraction_mean = kv_alloc_area_ / busy_s_;
  }
  s.kv_used_fraction_peak = kv_used_peak_;
  s.kv_allocated_fraction_peak = kv_alloc_peak_;
  s.prefill_admitted_tokens = prefill_admitted_tokens_;
  s.prefill_cached_tokens = prefill_cached_tokens_;
  if (prefill_admitted_tokens_ > 0) {
    s.prefix_hit_rate = static_cast<double>(prefill_cached_tokens_) /
                        static_cast<double>(prefill_admitted_tokens_);
  }
  return std::move(result_);
}

void Simulation::arrive(RequestId id) {
  progress_[id].state = RequestState::kWaiting;
  policy_.on_arrival(id, now_);
  // Defer scheduling to a wake-up at this instant: it runs after every arrival at `now_`.
  if (!busy_ && !(wake_pending_ && wake_time_ == now_)) {
    wake_pending_ = true;
    wake_time_ = now_;
    events_.push(now_, EventKind::kWakeUp);
  }
}

void Simulation::reject(RequestId id, std::string reason) {
  RequestProgress& p = progress_[id];
  if (p.state == RequestState::kFinished || p.state == RequestState::kRejected) {
    throw std::logic_error(fmt::format("request {} rejected after it was settled", id));
  }
  p.state = RequestState::kRejected;
  result_.requests[id].reject_reason = std::move(reason);
  ++settled_;
}

void Simulation::try_start_iteration() {
  if (busy_) return;
  batch_.clear();
  policy_.schedule(now_, batch_);
  if (batch_.empty()) {
    if (batch_.wake_at) {
      if (*batch_.wake_at <= now_) {
        throw std::logic_error(fmt::format("policy '{}' asked to wake at a time not in the future",
                                           policy_.name()));
      }
      if (!wake_pending_ || *batch_.wake_at < wake_time_) {
        wake_pending_ = true;
        wake_time_ = *batch_.wake_at;
        events_.push(wake_time_, EventKind::kWakeUp);
      }
    } else if (!policy_.idle() && events_.empty()) {
      throw std::logic_error(fmt::format(
          "policy '{}' stalled at t={}s: it holds work but scheduled nothing and nothing is "
          "left to wait for",
          policy_.name(), now_.seconds()));
    }
    return;
  }

  // Check the batch the policy built: each request at most once, never past its known tokens.
  int64_t min_remaining = std::numeric_limits<int64_t>::max();  // output tokens still to come
  for (const BatchItem& item : batch_.items) {
    RequestProgress& p = progress_[item.id];
    min_remaining = std::min<int64_t>(min_remaining,
                                      workload_[item.id].output_tokens - p.generated_tokens);
    if (p.state != RequestState::kWaiting && p.state != RequestState::kRunning) {
      throw std::logic_error(fmt::format("policy scheduled request {} that is not live", item.id));
    }
    if (item.new_tokens < 1 || item.context_before != p.computed_tokens ||
        p.computed_tokens + item.new_tokens > env_.known_tokens(item.id)) {
      throw std::logic_error(fmt::format(
          "policy scheduled request {} with {} new tokens after {} (computed {}, known {})",
          item.id, item.new_tokens, item.context_before, p.computed_tokens,
          env_.known_tokens(item.id)));
    }
    if (scheduled_in_iteration_[item.id] == iterations_) {
      throw std::logic_error(fmt::format("policy scheduled request {} twice in one batch", item.id));
    }
    scheduled_in_iteration_[item.id] = iterations_;
    // A waiting request with nothing computed but its cached prefix is admitted to prefill (a
    // swapped-in one keeps computed tokens of its own).
    if (p.state == RequestState::kWaiting && p.computed_tokens == admission_hit_[item.id]) {
      prefill_admitted_tokens_ += env_.known_tokens(item.id);
      prefill_cached_tokens_ += admission_hit_[item.id];
      admission_hit_[item.id] = 0;
    }
    p.state = RequestState::kRunning;
    if (p.first_scheduled == SimTime::max()) p.first_scheduled = now_;
  }

  const IterationCost cost = cost_model_.iteration(batch_.shape);
  const SimTime duration =
      std::max(SimTime::from_ns(1), SimTime::from_seconds(cost.total_s) + batch_.extra_time);
  current_ = IterationRecord{};
  current_.index = iterations_;
  current_.start = now_;
  current_.duration = duration;
  current_.cost = cost;
  sample_kv(current_);
  first_end_ = now_ + duration;
  repeats_ = 0;
  busy_ = true;
  SimTime end = first_end_;
  if (options_.fast_forward && !options_.on_iteration && batch_.shape.prefills.empty() &&
      batch_.extra_time == SimTime::zero()) {
    end = fast_forward(first_end_, min_remaining);
  }
  events_.push(end, EventKind::kIterationDone);
}

SimTime Simulation::fast_forward(SimTime end, int64_t min_remaining) {
  // Repeat the decode batch while (a) no request finishes before the last repeat — a request
  // with r tokens to go finishes in the r-th iteration —, (b) no event falls due at or before
  // an intermediate iteration boundary (an arrival there would be seen by the next
  // schedule()), and (c) the policy vouches that its next schedule() would be this batch.
  const SimTime next_event = events_.empty() ? SimTime::max() : events_.next_time();
  BatchShape shape = batch_.shape;  // decodes only: copying allocates nothing
  repeat_gaps_.clear();
  max_repeat_gap_ = SimTime::zero();
  while (repeats_ + 1 < min_remaining && end < next_event) {
    if (!policy_.repeat_decode_step(batch_)) break;
    set_counts(current_, /*num_prefills=*/0, /*prefill_tokens=*/0);
    close_iteration();

    shape.decode_context_sum += shape.num_decodes;  // every row attends to one more token
    ++shape.decode_context_max;
    const IterationCost cost = cost_model_.iteration(shape);
    const SimTime duration = std::max(SimTime::from_ns(1), SimTime::from_seconds(cost.total_s));
    current_ = IterationRecord{};
    current_.index = iterations_;
    current_.start = end;
    current_.duration = duration;
    current_.cost = cost;
    sample_kv(current_);  // as the repeated schedule() left it
    repeat_gaps_.push_back(duration);
    max_repeat_gap_ = std::max(max_repeat_gap_, duration);
    end += duration;
    ++repeats_;
  }
  result_.fast_forwarded_iterations += repeats_;
  return end;
}

void Simulation::set_counts(IterationRecord& record, int32_t num_prefills,
                            int64_t prefill_tokens) const {
  record.num_requests = static_cast<int32_t>(batch_.items.size());
  record.num_prefills = num_prefills;
  record.num_decodes = record.num_requests - num_prefills;
  record.prefill_tokens = prefill_tokens;
  record.bubble_slots = batch_.bubble_slots;
}

void Simulation::sample_kv(IterationRecord& record) const {
  const KvCacheManager& kv = policy_.kv_cache();
  record.kv_used_tokens = kv.used_tokens();
  record.kv_allocated_tokens = kv.allocated_tokens();
}

void Simulation::close_iteration() {
  ++iterations_;
  const double dur_s = current_.duration.seconds();
  // Over the KV memory (summary.json's kv.capacity_tokens, which the KV plot divides by too),
  // not over the manager's own capacity: a paged cache carves whole blocks from that memory,
  // and the tokens left over hold no block — they are memory that is never allocated.
  const double capacity = static_cast<double>(std::max<int64_t>(1, result_.kv_capacity_tokens));
  const double used = static_cast<double>(current_.kv_used_tokens) / capacity;
  const double alloc = static_cast<double>(current_.kv_allocated_tokens) / capacity;
  busy_s_ += dur_s;
  kv_used_area_ += used * dur_s;
  kv_alloc_area_ += alloc * dur_s;
  kv_used_peak_ = std::max(kv_used_peak_, used);
  kv_alloc_peak_ = std::max(kv_alloc_peak_, alloc);
  bubble_slots_ += current_.bubble_slots;
  useful_slots_ += current_.num_requests;
  if (options_.record_iterations) result_.iterations.push_back(current_);
}

void Simulation::record_token(RequestProgress& p, SimTime at) {
  if (p.generated_tokens == 0) {
    p.first_token = at;
  } else {
    const SimTime gap = at - p.last_token;
    if (gap > p.max_tbt) p.max_tbt = gap;
    result_.tbt_s.add(gap.seconds());
  }
  ++p.generated_tokens;
  p.last_token = at;
}

void Simulation::finish_if_done(RequestId id, RequestProgress& p) {
  if (p.generated_tokens < workload_[id].output_tokens) return;
  p.state = RequestState::kFinished;
  p.finished = now_;
  finished_.push_back(id);
}

void Simulation::finish_iteration() {
  busy_ = false;
  finished_.clear();
  int32_t num_prefills = 0;
  int64_t prefill_tokens = 0;
  if (repeats_ > 0) {
    // 1 + repeats_ identical decode iterations: the first token of each request closes a gap
    // of its own; every later one closes the common gap of its iteration.
    const auto rows = static_cast<int64_t>(batch_.items.size());
    for (const BatchItem& item : batch_.items) {
      RequestProgress& p = progress_[item.id];
      p.computed_tokens += 1 + repeats_;
      record_token(p, first_end_);
      p.generated_tokens += static_cast<int32_t>(repeats_);
      p.last_token = now_;
      if (max_repeat_gap_ > p.max_tbt) p.max_tbt = max_repeat_gap_;
      finish_if_done(item.id, p);
    }
    for (const SimTime gap : repeat_gaps_) result_.tbt_s.add(gap.seconds(), rows);
  } else {
    for (const BatchItem& item : batch_.items) {
      RequestProgress& p = progress_[item.id];
      const Request& r = workload_[item.id];
      const int64_t known = r.prompt_tokens + p.generated_tokens;
      const bool was_decode = p.generated_tokens > 0 && item.context_before == known - 1 &&
                              item.new_tokens == 1;
      if (!was_decode) {
        ++num_prefills;
        prefill_tokens += item.new_tokens;
      }
      p.computed_tokens += item.new_tokens;
      if (p.computed_tokens < known) continue;  // a prefill chunk that does not sample yet
      // All known tokens are in the KV cache: the model samples the next token.
      record_token(p, now_);
      finish_if_done(item.id, p);
    }
  }
  policy_.on_iteration_end(batch_, finished_, now_);
  settled_ += static_cast<int64_t>(finished_.size());

  set_counts(current_, num_prefills, prefill_tokens);
  close_iteration();
  if (options_.on_iteration) options_.on_iteration(batch_, current_, policy_);
  try_start_iteration();
}

Summary summarize(const SimulationResult& result, double busy_s) {
  Summary s;
  WeightedSamples e2e, ttft, tpot, norm, queue;
  SimTime first_arrival = SimTime::max(), last_finish = SimTime::zero();
  for (const RequestRecord& r : result.requests) {
    ++s.requests_total;
    first_arrival = std::min(first_arrival, r.arrival);
    s.preemptions += r.preemptions;
    if (r.state == RequestState::kRejected) {
      ++s.requests_rejected;
      continue;
    }
    if (!r.completed()) continue;
    ++s.requests_completed;
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    last_finish = std::max(last_finish, r.finished);
    e2e.add(r.e2e_s());
    ttft.add(r.ttft_s());
    if (r.output_tokens > 1) tpot.add(r.tpot_s());
    norm.add(r.e2e_s() / r.output_tokens);
    queue.add(r.queueing_s());
  }
  if (s.requests_completed > 0) s.makespan_s = (last_finish - first_arrival).seconds();
  if (s.makespan_s > 0) {
    s.output_tokens_per_s = static_cast<double>(s.output_tokens) / s.makespan_s;
    s.total_tokens_per_s = static_cast<double>(s.prompt_tokens + s.output_tokens) / s.makespan_s;
    s.requests_per_s = static_cast<double>(s.requests_completed) / s.makespan_s;
    s.busy_fraction = busy_s / s.makespan_s;
  }
  s.e2e_s = Distribution::of(e2e);
  s.ttft_s = Distribution::of(ttft);
  s.tpot_s = Distribution::of(tpot);
  s.tbt_s = Distribution::of(result.tbt_s);
  s.normalized_latency_s_per_token = Distribution::of(norm);
  s.queueing_s = Distribution::of(queue);
  return s;
}

}  // namespace batchsim
