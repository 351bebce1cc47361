#include "policies/continuous/continuous_capacity.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "hwmodel/base/error.h"
#include "policies/common/host_copy.h"

namespace batchsim {

void ContinuousCapacity::attach(const ContinuousPolicyConfig& config, PolicyEnv& env, const std::string& policy_name) {
  config_ = config;
  name_ = policy_name;
  env_ = &env;
  const auto n = static_cast<int64_t>(env.requests->size());
  if (config_.paged) {
    // Weights that leave no KV memory at all are reported by the simulation; here the memory
    // exists but is smaller than one block, which the user fixes differently.
    if (env.num_gpu_blocks == 0 && env.kv_capacity_tokens < config_.block_size) {
      throw UserError(
          fmt::format("the KV memory left after the weights ({}) holds {} tokens, less than one block of "
                      "block_size={}: use a smaller block_size, or more memory (a larger share, --tp, a "
                      "larger GPU)",
                      env.kv_sizing_rule, env.kv_capacity_tokens, config_.block_size));
    }
    PrefixCacheSource prefix;  // unusable (no caching) unless switched on and hashes exist
    if (config_.prefix_caching) prefix = {env.requests, env.prefix_blocks};
    const int64_t blocks = env.num_gpu_blocks > 0 ? env.num_gpu_blocks : env.kv_capacity_tokens / config_.block_size;
    auto paged = std::make_unique<PagedKvCache>(n, blocks, config_.block_size, config_.watermark, prefix);
    paged->set_side_blocks(env.cost_model->sliding_window_side_blocks(config_.block_size));
    if (env.kv_offload_cpu_tokens > 0) {
      if (config_.prefix_caching && !prefix.usable()) {
        throw UserError(
            "--kv-offload: the workload has no prompt-block hashes (a trace's hash_ids, or --prefix), so "
            "no block would ever be found again");
      }
      if (!config_.prefix_caching) {
        throw UserError(
            fmt::format("--kv-offload: policy '{}' has no prefix caching, whose evicted blocks the "
                        "host tier would keep: add --policy-opt prefix_caching=true",
                        name_));
      }
      paged->set_host_tier(std::max<int64_t>(1, env.kv_offload_cpu_tokens / config_.block_size));
      if (env.kv_offload_disk_tokens > 0) {
        paged->set_disk_tier(std::max<int64_t>(1, env.kv_offload_disk_tokens / config_.block_size));
      }
    }
    paged_kv_ = paged.get();
    kv_ = std::move(paged);
  } else {
    paged_kv_ = nullptr;
    // Counted in blocks only for TensorRT-LLM's no-evict reservation; --num-gpu-blocks then
    // sets the block count as it does for a paged cache.
    const int32_t unit = config_.reserve_blocks_to_completion ? config_.block_size : 1;
    const int64_t capacity = env.num_gpu_blocks > 0 && config_.reserve_blocks_to_completion ? env.num_gpu_blocks * unit
                                                                                            : env.kv_capacity_tokens;
    kv_ = std::make_unique<ReservedKvCache>(n, capacity, unit);
  }
  swapped_tokens_.assign(n, 0);
  finished_flag_.assign(n, 0);
  ranking_ = RequestRanking(config_.scheduling_policy, config_.sjf_by, *env.requests);
  waiting_ = WaitingQueue(&ranking_);
  held_.assign(env.role == PoolRole::kPrefill ? n : 0, 0);
  remote_pending_.assign(env.role == PoolRole::kDecode ? n : 0, 0);
}

int64_t ContinuousCapacity::reserve_tokens(RequestId id) const {
  const Request& r = env_->request(id);
  if (!config_.paged && config_.reserve_max_model_len && env_->max_model_len > 0) {
    return env_->max_model_len;
  }
  // The last output token is sampled but never fed back, so it needs no KV.
  // A reservation is made before the output's length is known, so for the longest output the
  // client allows: TGI 1.x's router counts input + max_new_tokens (router/src/queue.rs
  // next_batch), TensorRT-LLM 1.x GUARANTEED_NO_EVICT reserves prompt + mMaxNewTokens
  // (capacityScheduler.cpp through kvCacheManager.cpp getRemainingBlocksToCompletion). Paged
  // KV is allocated as tokens are written, so what the request really holds, prompt + output,
  // decides whether it can ever fit (vLLM's can_allocate / allocate_slots never read
  // max_tokens).
  const int64_t output = config_.paged ? r.output_tokens : env_->output_limit(id);
  // TensorRT-LLM counts mPromptLen + mMaxNewTokens (getRemainingBlocksToCompletion), the
  // sampled-only last token included.
  if (!config_.paged && config_.reserve_blocks_to_completion) return r.prompt_tokens + output;
  return static_cast<int64_t>(r.prompt_tokens) + output - 1;
}

SimTime ContinuousCapacity::transfer_time(int64_t tokens) const { return host_kv_copy_time(*env_->cost_model, tokens); }

void ContinuousCapacity::preempt(RequestId victim, Batch& batch, bool allow_swap) {
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  if (config_.swap && allow_swap) {
    // vLLM v0 _preempt_by_swap: the victim's blocks go to host memory (swap_out) and it joins
    // `swapped`; its computed tokens are kept. Under fcfs the victim is the newest running
    // request, which has not been grown in this step yet, so it holds exactly its computed
    // tokens; a ranked victim may have been grown for an item of this step that was just taken
    // out of the batch, and that KV is dropped, not moved.
    const int64_t tokens = env_->progress_of(victim).computed_tokens;
    const int64_t held = kv_->tokens_of(victim);
    if (ranking_.ranked() ? held < tokens : held != tokens) {
      throw std::logic_error("swap victim holds KV for tokens it has not computed");
    }
    swapped_tokens_[victim] = tokens;
    kv_->release(victim);
    batch.extra_time += transfer_time(tokens);  // device -> host
    swapped_.push_back(victim);
    env_->preempt(victim, /*keeps_kv=*/true);
  } else {
    // Its blocks stay findable by it until taken: readmitted, it recomputes only what was
    // evicted (vLLM v1 with prefix caching; without it, everything).
    if (paged_kv_ != nullptr) {
      paged_kv_->release_preempted(victim);
    } else {
      kv_->release(victim);
    }
    // Back to the head of the waiting queue (vLLM v0 appendleft, v1 prepend_request), or to
    // its rank under a ranked policy (PriorityRequestQueue.prepend_request adds by rank).
    waiting_.add_preempted(victim);
    env_->preempt(victim, /*keeps_kv=*/false);
  }
}

RequestId ContinuousCapacity::preemption_victim(const Batch& batch) const {
  const auto in_batch = [&batch](RequestId id) {
    return std::any_of(batch.items.begin(), batch.items.end(), [id](const BatchItem& item) { return item.id == id; });
  };
  if (ranking_.ranked()) {
    // vLLM v1 under --scheduling-policy priority: max(running, key=(priority, arrival_time)),
    // scheduled in this step or not; with generation_first the decodes already in the batch
    // stay, as below.
    const RequestId* victim = nullptr;
    for (const RequestId& id : running_) {
      if (config_.generation_first && in_batch(id)) continue;
      if (victim == nullptr || ranking_.before(*victim, id)) victim = &id;
    }
    if (victim == nullptr) throw std::logic_error("no running request left to preempt");
    return *victim;
  }
  if (!config_.generation_first) return running_.back();
  // The decodes of this step are in the batch already; a victim must not be one of them.
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (!in_batch(*it)) return *it;
  }
  throw std::logic_error("no running request left to preempt");
}

bool ContinuousCapacity::preempt_for_best_waiting(Batch& batch, const ContinuousPacking& packing) {
  // vLLM v0 _schedule_priority_preemption: `while running_queue and _get_priority(
  // running_queue[-1]) > _get_priority(seq_group)`: preempt the lowest-ranked running request
  // unless the waiting head can be allocated (can_allocate OK) and scheduled (budget and
  // max_num_seqs, counting the running ones), in which case the next step admits it.
  if (waiting_.empty()) return false;
  const RequestId head = waiting_.front();
  bool preempted = false;
  while (!running_.empty()) {
    const RequestId victim = preemption_victim(batch);
    if (!ranking_.before(head, victim)) break;
    if (static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
      const AdmissionStep step = admission_step(head, packing.token_budget(), 0, packing);
      if (step.tokens > 0 && kv_->can_admit(head, step.fit, reserve_tokens(head))) break;
    }
    // v0 appends the victim to `waiting` whatever its preemption mode: recompute.
    preempt(victim, batch, /*allow_swap=*/false);
    preempted = true;
  }
  return preempted;
}

ContinuousCapacity::AdmissionStep ContinuousCapacity::admission_step(RequestId id, int64_t budget,
                                                                     int64_t partial_prefills,
                                                                     const ContinuousPacking& packing) const {
  AdmissionStep step;
  // vLLM v1 get_computed_blocks: a prefix whose KV the cache holds is not computed again
  // (0 without prefix caching). A waiting request has computed nothing (new, or recomputed).
  step.cached = kv_->cached_prefix_tokens(id, env_->known_tokens(id));
  step.need = packing.need_of(id) - step.cached;
  // Its step's tokens, 0 when it must wait (max_num_partial_prefills among the rules).
  step.tokens = packing.admission_tokens(step.need, budget, partial_prefills);
  // Without chunking, admission needs room for the whole prefill (v0 can_allocate counts
  // every block of the prompt), also when an over-long re-prefill is cut at the budget: else
  // it would be admitted for one chunk and preempted again at the next. With chunking the
  // same holds under admission=full_prompt: vLLM v1 allocate_slots(full_sequence_must_fit=
  // scheduler_reserve_full_isl) refuses a request unless blocks for all its num_tokens
  // (prompt + output so far), less its prefix-cache hit, are free, and allocates only this
  // step's chunk (vllm/v1/core/kv_cache_manager.py, main 2026-05; v0.19.0 and later).
  const bool whole = !config_.chunked || config_.admit_full_prompt;
  step.fit = step.cached + (whole ? step.need : step.tokens);
  return step;
}

int64_t ContinuousCapacity::count_admissible(int64_t budget, int64_t enough, const ContinuousPacking& packing) const {
  // ContinuousPolicy::schedule_waiting's admissions, on copies of its budgets and with the KV room
  // as a count.
  int64_t count = 0;
  int64_t room = kv_->admission_room();
  int64_t seqs = static_cast<int64_t>(running_.size());
  int64_t partial = packing.partial_prefills();
  waiting_.visit_in_order([&](RequestId id) {
    if (count >= enough || budget <= 0 || seqs >= config_.max_num_seqs) return false;
    const AdmissionStep step = admission_step(id, budget, partial, packing);
    const int64_t n = step.tokens;
    if (n == 0) return false;
    if (n < step.need) ++partial;
    // Room for what admission checks, less what it allocates (the first chunk only, under
    // admission=full_prompt).
    if (kv_->admission_cost(step.fit, reserve_tokens(id)) > room) return false;
    room -= kv_->admission_cost(step.cached + n, reserve_tokens(id));
    budget -= n;
    ++seqs;
    ++count;
    return true;
  });
  return count;
}

bool ContinuousCapacity::admission_allowed(int64_t budget, int64_t steps_since_admission,
                                           const ContinuousPacking& packing) const {
  if (config_.max_waiting_tokens == 0 || running_.empty() || waiting_.empty()) return true;
  // TGI's rule keeps prefills from interrupting the decodes; a remote request's admission
  // prefills nothing.
  if (is_remote_pending(waiting_.front())) return true;
  // TGI: `if waiting_tokens >= max_waiting_tokens` take any new requests; else only a batch of
  // at least floor(batch_size * waiting_served_ratio) (queue.next_batch's min_size).
  if (steps_since_admission + 1 >= config_.max_waiting_tokens) return true;
  const auto min_size =
      static_cast<int64_t>(std::floor(static_cast<double>(running_.size()) * config_.waiting_served_ratio));
  return count_admissible(budget, min_size, packing) >= min_size;
}

bool ContinuousCapacity::admit_remote(RequestId id) {
  // vLLM v1 with a KV connector (scheduler.py schedule(), WAITING loop): the connector reports
  // the prompt's tokens as external (NixlConnector get_num_new_matched_tokens: all prompt
  // tokens not computed locally, load_kv_async=True); allocate_slots takes blocks for them,
  // with the watermark and the prefix cache as any admission, and schedules no tokens; the
  // request waits in WAITING_FOR_REMOTE_KVS. Blocks for the first decode step are taken when it
  // runs, as for any running request.
  const int64_t prompt = env_->request(id).prompt_tokens;
  if (!kv_->try_admit(id, prompt, reserve_tokens(id))) return false;
  const int64_t shared = config_.paged ? static_cast<const PagedKvCache&>(*kv_).shared_tokens_of(id) : 0;
  remote_pending_[id] = 0;
  waiting_.pop_front();
  ++receiving_;
  remote_admitted_ = true;
  // Tokens this cache already held (a shared prefix) are not pulled (the connector counts only
  // tokens beyond num_computed_tokens).
  env_->start_kv_transfer(id, prompt - shared);
  return true;
}

void ContinuousCapacity::on_kv_received(RequestId id) {
  if (receiving_ < 1 || !kv_->holds(id)) {
    throw std::logic_error(fmt::format("{}: KV of request {} arrived, but none was awaited", name_, id));
  }
  --receiving_;
  received_.push_back(id);
}

void ContinuousCapacity::promote_received() {
  remote_admitted_ = false;  // admit_remote sets it
  // Landed requests re-enter the WAITING loop (v1 moves them from WAITING_FOR_REMOTE_KVS back to
  // WAITING at the queue's front) and join `running` while sequence slots are left; with their
  // prompt computed, their next step is a decode.
  while (!received_.empty() && static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    running_.push_back(received_.front());
    received_.pop_front();
  }
}

void ContinuousCapacity::release_held_kv(RequestId id) {
  if (held_.empty() || held_[id] == 0) {
    throw std::logic_error(fmt::format("{}: release of request {}'s KV, which is not held", name_, id));
  }
  held_[id] = 0;
  kv_->release(id);
}

bool ContinuousCapacity::admit(RequestId id, const AdmissionStep& step, Batch& batch) {
  const auto [cached, need, n, fit] = step;
  // Room for more than this step writes (admission_step): checked, not allocated.
  if (fit > cached + n && !kv_->can_admit(id, fit, reserve_tokens(id))) return false;
  // vLLM v0 can_allocate (watermark) / v1 allocate_slots returning None: wait.
  if (!kv_->try_admit(id, cached + n, reserve_tokens(id))) return false;
  if (cached > 0) {
    PagedKvCache& paged = static_cast<PagedKvCache&>(*kv_);
    const int64_t loaded = paged.loaded_tokens_of(id);
    if (paged.shared_tokens_of(id) + loaded != cached) {
      throw std::logic_error("prefix cache shared another prefix than it found");
    }
    if (loaded > 0) {
      // Blocks from the host tier are copied to the GPU before the step's forward pass, as
      // LMCache does by default (use_layerwise=False: the retrieve completes before the
      // forward); vLLM's native OffloadingConnector instead lets the request wait while
      // others step (WAITING_FOR_REMOTE_KVS), which this charges to every request of the step.
      // Blocks only the disk tier holds are read from it first (host_copy.h).
      const int64_t from_disk = paged.disk_loaded_tokens_of(id);
      const SimTime load = transfer_time(loaded - from_disk);
      const double bytes_per_token = static_cast<double>(env_->cost_model->model().kv_bytes_per_token());
      batch.extra_time += load;
      paged.note_host_load(static_cast<double>(loaded - from_disk) * bytes_per_token, load.seconds());
      if (from_disk > 0) {
        const SimTime read = disk_kv_read_time(*env_->cost_model, from_disk);
        batch.extra_time += read;
        paged.note_disk_load(static_cast<double>(from_disk) * bytes_per_token, read.seconds());
      }
    }
    env_->use_cached_prefix(id, cached);
  }
  waiting_.pop_front();
  running_.push_back(id);
  return true;
}

bool ContinuousCapacity::swap_in(RequestId id, int64_t new_tokens, Batch& batch) {
  const int64_t tokens = swapped_tokens_[id];
  // Blocks for the swapped-in KV plus the tokens this step writes.
  if (!kv_->try_admit(id, tokens + new_tokens, reserve_tokens(id))) return false;
  swapped_.pop_front();
  running_.push_back(id);
  batch.extra_time += transfer_time(tokens);  // host -> device
  return true;
}

void ContinuousCapacity::release_finished(std::span<const RequestId> finished, bool settle_cohort) {
  for (RequestId id : finished) {
    finished_flag_[id] = 1;
    // A member left the cohort as it finished (its progress is exact now): its KV tokens, which
    // lagged, are its computed ones (every running request's are, between steps).
    if (settle_cohort) kv_->settle_cohort_member(id, env_->progress_of(id).computed_tokens);
    // Prefill role: the KV stays until its transfer lands (release_held_kv).
    if (held_.empty()) {
      kv_->release(id);
    } else {
      held_[id] = 1;
    }
  }
  // Out of running_, in order. The finished are few: once all are passed, the rest moves down in
  // one block instead of being tested one by one.
  size_t unseen = finished.size();
  auto kept = running_.begin(), it = running_.begin();
  for (; it != running_.end() && unseen > 0; ++it) {
    if (finished_flag_[*it] != 0) {
      --unseen;
    } else {
      *kept++ = *it;
    }
  }
  running_.erase(std::move(it, running_.end(), kept), running_.end());
}

}  // namespace batchsim
