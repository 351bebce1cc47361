// batchsim — attention data parallelism (see dp_attention_policy.h).
#include "policies/dp_attention/dp_attention_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "sim/decode_cohort.h"

namespace batchsim {

DpAttentionPolicy::DpAttentionPolicy(std::vector<std::unique_ptr<Policy>> ranks) : ranks_(std::move(ranks)) {
  if (ranks_.size() < 2) throw std::logic_error("DpAttentionPolicy: needs at least two ranks");
  name_ = std::string(ranks_.front()->name());
  const size_t n = ranks_.size();
  outstanding_.assign(n, 0);
  running_.assign(n, 0);
  batches_.resize(n);
  rank_shapes_.resize(n);
  rank_repeats_.assign(n, 0);
  vouched_.assign(n, 0);
  changed_.assign(n, 0);
  finished_.resize(n);
}

void DpAttentionPolicy::attach(PolicyEnv& env) {
  envs_.assign(ranks_.size(), env);
  vouch_at_boundaries_ = env.rank_cohorts.size() == ranks_.size();
  rank_of_.assign(env.requests != nullptr ? env.requests->size() : 0, -1);
  for (size_t r = 0; r < ranks_.size(); ++r) {
    PolicyEnv& e = envs_[r];
    // Each rank keeps its own decode cohort where the simulation offers one per rank.
    e.cohort = env.rank_cohorts.size() == ranks_.size() ? &env.rank_cohorts[r] : nullptr;
    e.rank_cohorts = {};
    // A rejected request leaves its rank as a finished one does.
    e.reject = [this, r, reject = env.reject](RequestId id, std::string reason) {
      --outstanding_[r];
      reject(id, std::move(reason));
    };
    ranks_[r]->attach(e);
  }
  std::vector<const KvCacheManager*> caches;
  for (const auto& rank : ranks_) caches.push_back(&rank->kv_cache());
  summed_kv_.set_ranks(std::move(caches));
}

int DpAttentionPolicy::rank_of(RequestId id) const {
  return static_cast<size_t>(id) < rank_of_.size() ? rank_of_[static_cast<size_t>(id)] : -1;
}

void DpAttentionPolicy::on_arrival(RequestId id, SimTime now) {
  // vLLM's DPLBAsyncMPClient: the rank with the fewest 4 x waiting + running.
  size_t best = 0;
  int64_t best_score = 0;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const int64_t waiting = outstanding_[r] - running_[r];
    const int64_t score = 4 * waiting + running_[r];
    if (r == 0 || score < best_score) {
      best = r;
      best_score = score;
    }
  }
  if (static_cast<size_t>(id) >= rank_of_.size()) rank_of_.resize(static_cast<size_t>(id) + 1, -1);
  rank_of_[static_cast<size_t>(id)] = static_cast<int32_t>(best);
  ++outstanding_[best];
  changed_[best] = 1;
  ranks_[best]->on_arrival(id, now);
}

void DpAttentionPolicy::schedule(SimTime now, Batch& batch) {
  bool any = false;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    Batch& b = batches_[r];
    rank_repeats_[r] = vouched_[r];  // the cost model advances a repeating rank's cost of the step before
    if (vouched_[r] != 0) {
      // Its schedule() already ran, in repeat_decode_step: the same decodes again, as many
      // tokens further on as the replica's run had steps (as the simulation advances a
      // repeated step's shape).
      vouched_[r] = 0;
      const int64_t steps = 1 + repeats_;
      for (BatchItem& item : b.items) item.context_before += steps;
      b.shape.advance_decodes(steps);
      rank_shapes_[r].advance_decodes(steps);
    } else {
      b.clear();
      ranks_[r]->schedule(now, b);
      rank_shapes_[r] = b.shape;
    }
    changed_[r] = 0;
    running_[r] = static_cast<int64_t>(b.size());
    any = any || !b.empty();
    if (b.wake_at && (!batch.wake_at || *b.wake_at < *batch.wake_at)) batch.wake_at = b.wake_at;
  }
  repeats_ = 0;
  if (!any) return;
  // The replica's batch: every rank's items in rank order, the shapes summed, and each rank's
  // shape for the lockstep step (an idle rank's empty shape runs the dummy batch).
  batch.rank_shapes = rank_shapes_;
  batch.rank_repeats = rank_repeats_;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const Batch& b = batches_[r];
    batch.add_rank_cohort(static_cast<int32_t>(r), b.cohort);  // ahead of the rank's items, as in its batch
    // (A rank's cohort is most of it: most ranks add no item.)
    if (!b.items.empty()) batch.items.insert(batch.items.end(), b.items.begin(), b.items.end());
    if (!b.shape.prefills.empty()) {
      batch.shape.prefills.insert(batch.shape.prefills.end(), b.shape.prefills.begin(), b.shape.prefills.end());
    }
    batch.shape.num_decodes += b.shape.num_decodes;
    batch.shape.decode_context_sum += b.shape.decode_context_sum;
    batch.shape.decode_context_max = std::max(batch.shape.decode_context_max, b.shape.decode_context_max);
    batch.shape.num_sampled += b.shape.num_sampled;
    batch.extra_time = std::max(batch.extra_time, b.extra_time);
    batch.bubble_slots += b.bubble_slots;
  }
}

void DpAttentionPolicy::on_iteration_end(const Batch& /*batch*/, std::span<const RequestId> finished, SimTime now) {
  for (auto& f : finished_) f.clear();
  for (const RequestId id : finished) {
    const int r = rank_of(id);
    if (r < 0) throw std::logic_error(fmt::format("DpAttentionPolicy: request {} finished on no rank", id));
    finished_[static_cast<size_t>(r)].push_back(id);
    --outstanding_[static_cast<size_t>(r)];
  }
  for (size_t r = 0; r < ranks_.size(); ++r) {
    // A rank that vouched for the next step is still in its run (none of its requests finished).
    if (vouched_[r] != 0) continue;
    if (vouch_at_boundaries_ && finished_[r].empty() && changed_[r] == 0 && vouches_for_next_step(r)) {
      vouched_[r] = 1;  // schedule() keeps its batch
      ++boundary_repeats_;
      continue;
    }
    ranks_[r]->on_iteration_end(batches_[r], finished_[r], now);
  }
}

bool DpAttentionPolicy::vouches_for_next_step(size_t r) {
  const Batch& b = batches_[r];
  // An idle rank schedules nothing again while nothing reaches it (as in repeat_decode_step);
  // a rank's repeat is asked only after a decode-only step, as the simulation asks it.
  if (b.empty()) return ranks_[r]->idle();
  return b.shape.prefills.empty() && b.extra_time == SimTime::zero() && ranks_[r]->repeat_decode_step(b);
}

bool DpAttentionPolicy::repeat_decode_step(const Batch& /*batch*/) {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (vouched_[r] != 0) continue;  // an earlier refused repeat took it through this step
    const Batch& b = batches_[r];
    if (b.empty()) {
      // An idle rank schedules nothing again while no request arrives (the simulation stops
      // before any); one that holds requests but ran none might admit one (a timer, a wait
      // rule), so only its own schedule() can tell.
      if (!ranks_[r]->idle()) return false;
      continue;
    }
    if (!ranks_[r]->repeat_decode_step(b)) return false;
    vouched_[r] = 1;
  }
  // Every rank stepped: the replica's run goes on, and the next refusal starts afresh.
  std::fill(vouched_.begin(), vouched_.end(), uint8_t{0});
  ++repeats_;
  return true;
}

bool DpAttentionPolicy::idle() const {
  return std::all_of(ranks_.begin(), ranks_.end(), [](const auto& p) { return p->idle(); });
}

const KvCacheManager& DpAttentionPolicy::kv_cache() const { return summed_kv_; }

bool DpAttentionPolicy::holds_kv(RequestId id) const {
  const int r = rank_of(id);
  return r >= 0 && ranks_[static_cast<size_t>(r)]->holds_kv(id);
}

std::optional<Policy::KvSizing> DpAttentionPolicy::kv_sizing(const CostModel& cost_model,
                                                             double gpu_memory_utilization) const {
  // Each rank sizes its own cache on its own GPUs, as one engine would (the cost model's
  // capacity is per attention rank).
  return ranks_.front()->kv_sizing(cost_model, gpu_memory_utilization);
}

std::optional<int64_t> DpAttentionPolicy::cuda_graph_max_batch(const HardwareProfile& gpu, int tp) const {
  return ranks_.front()->cuda_graph_max_batch(gpu, tp);
}

std::string DpAttentionPolicy::unsupported_role_reason(PoolRole role) const {
  return ranks_.front()->unsupported_role_reason(role);
}

void DpAttentionPolicy::release_held_kv(RequestId id) {
  const size_t r = owning_rank(id);
  changed_[r] = 1;
  ranks_[r]->release_held_kv(id);
}

void DpAttentionPolicy::on_kv_received(RequestId id, SimTime now) {
  const size_t r = owning_rank(id);
  changed_[r] = 1;
  ranks_[r]->on_kv_received(id, now);
}

size_t DpAttentionPolicy::owning_rank(RequestId id) const {
  const int r = rank_of(id);
  if (r < 0) throw std::logic_error(fmt::format("DpAttentionPolicy: request {} is on no rank", id));
  return static_cast<size_t>(r);
}

bool DpAttentionPolicy::SummedKv::bug() {
  throw std::logic_error("DpAttentionPolicy: the ranks' summed KV cache admits nothing; each rank admits into its own");
}

bool DpAttentionPolicy::SummedKv::fits_when_empty(int64_t reserve_tokens) const {
  return owner_.ranks_.front()->kv_cache().fits_when_empty(reserve_tokens);
}

int64_t DpAttentionPolicy::SummedKv::capacity_tokens() const {
  int64_t n = 0;
  for (const KvCacheManager* kv : caches_) n += kv->capacity_tokens();
  return n;
}

int64_t DpAttentionPolicy::SummedKv::allocated_tokens() const {
  int64_t n = 0;
  for (const KvCacheManager* kv : caches_) n += kv->allocated_tokens();
  return n;
}

int64_t DpAttentionPolicy::SummedKv::used_tokens() const {
  int64_t n = 0;
  for (const KvCacheManager* kv : caches_) n += kv->used_tokens();
  return n;
}

}  // namespace batchsim
