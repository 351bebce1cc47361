#include "policies/static/static_policy.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace batchsim {

StaticPolicy::StaticPolicy(StaticPolicyConfig config, std::string name) : config_(config), name_(std::move(name)) {}

void StaticPolicy::attach(PolicyEnv& env) {
  env_ = &env;
  kv_ = std::make_unique<ReservedKvCache>(static_cast<int64_t>(env.requests->size()), env.kv_capacity_tokens);
}

int64_t StaticPolicy::output_allowance(RequestId id) const {
  if (config_.max_new_tokens > 0) {
    return std::max<int64_t>(env_->request(id).output_tokens, config_.max_new_tokens);
  }
  return env_->output_limit(id);
}

void StaticPolicy::on_arrival(RequestId id, SimTime /*now*/) {
  const Request& r = env_->request(id);
  if (env_->max_model_len > 0 && r.prompt_tokens + r.output_tokens > env_->max_model_len) {
    env_->reject(id, fmt::format("prompt + output exceed the model's context of {}: {} + {} tokens",
                                 env_->max_model_len, r.prompt_tokens, r.output_tokens));
    return;
  }
  const int64_t need = r.prompt_tokens + output_allowance(id);
  if (!kv_->fits_when_empty(need)) {
    env_->reject(id, fmt::format("needs more KV than the whole cache holds ({} tokens): {} tokens",
                                 kv_->capacity_tokens(), need));
    return;
  }
  waiting_.push_back(id);
}

bool StaticPolicy::form_batch(SimTime now, Batch& batch) {
  if (waiting_.empty()) return false;
  const bool all_arrived = env_->all_arrived();
  const auto waiting = static_cast<int64_t>(waiting_.size());
  if (waiting < config_.batch_size && !all_arrived) {
    if (config_.batch_timeout_s <= 0) return false;  // wait for more arrivals
    const SimTime deadline = env_->request(waiting_.front()).arrival + SimTime::from_seconds(config_.batch_timeout_s);
    if (now < deadline) {
      batch.wake_at = deadline;
      return false;
    }
  }
  // Take requests FCFS while the whole batch's reservation fits. The KV cache of a static batch
  // is one rectangular [batch, longest prompt + output allowance] tensor, with or without
  // padded compute (HF `generate` pads input_ids and its cache grows for every row together;
  // FasterTransformer allocates k_cache/v_cache as [batch, max_seq_len] in allocateBuffer), so
  // every row reserves the batch's longest prompt plus the batch's output allowance.
  const int64_t take = std::min(config_.batch_size, waiting);
  int64_t chosen = 0, max_prompt = 0, max_output = 0;
  for (int64_t i = 0; i < take; ++i) {
    const Request& r = env_->request(waiting_[i]);
    const int64_t p = std::max<int64_t>(max_prompt, r.prompt_tokens);
    const int64_t o = std::max<int64_t>(max_output, output_allowance(waiting_[i]));
    // The first request always fits: on_arrival rejected any that cannot fit alone.
    if (i > 0 && (i + 1) * (p + o) > kv_->capacity_tokens()) break;
    max_prompt = p;
    max_output = o;
    chosen = i + 1;
  }
  padded_prompt_ = max_prompt;
  steps_ = 0;
  batch_.assign(waiting_.begin(), waiting_.begin() + chosen);
  waiting_.erase(waiting_.begin(), waiting_.begin() + chosen);
  unfinished_ = chosen;
  for (RequestId id : batch_) {
    const Request& r = env_->request(id);
    if (!kv_->try_admit(id, r.prompt_tokens, padded_prompt_ + max_output)) {
      throw std::logic_error("static batch reservation did not fit after sizing");
    }
  }
  return true;
}

void StaticPolicy::schedule(SimTime now, Batch& batch) {
  if (batch_.empty()) {
    if (!form_batch(now, batch)) return;
    // Prefill iteration: every prompt at once, padded to the longest when pad=true.
    for (RequestId id : batch_) {
      const Request& r = env_->request(id);
      batch.items.push_back({id, r.prompt_tokens, 0});
      batch.shape.add_prefill(config_.pad ? padded_prompt_ : r.prompt_tokens, 0);
      ++batch.shape.num_sampled;
    }
    return;
  }
  // Decode iteration over the batch's rows.
  ++steps_;
  for (RequestId id : batch_) {
    const RequestProgress& p = env_->progress_of(id);
    const Request& r = env_->request(id);
    if (p.state == RequestState::kFinished) {
      ++batch.bubble_slots;
      if (!config_.release_per_request) {
        // The row still runs (padding token), attending over its padded length.
        batch.shape.add_decode((config_.pad ? padded_prompt_ : r.prompt_tokens) + steps_ - 1);
        ++batch.shape.num_sampled;
      }
      continue;
    }
    const int64_t context = p.computed_tokens;
    if (!kv_->try_grow(id, context + 1)) {
      throw std::logic_error("static batch row outgrew its reservation");
    }
    batch.items.push_back({id, 1, context});
    batch.shape.add_decode(config_.pad ? padded_prompt_ + steps_ - 1 : context);
    ++batch.shape.num_sampled;
  }
}

bool StaticPolicy::repeat_decode_step(const Batch& batch) {
  // A decode iteration of a running batch repeats until a row finishes (the simulation stops
  // repeating before that): the same rows, each one token further, the padding rows too.
  if (batch_.empty() || !batch.shape.prefills.empty()) return false;
  ++steps_;
  // O(1) per step (KvCacheManager::begin_decode_run); the rows' counts catch up at the run's end.
  if (!kv_->in_decode_run()) kv_->begin_decode_run(batch.items);
  if (!kv_->decode_run_step()) throw std::logic_error("static batch row outgrew its reservation");
  return true;
}

void StaticPolicy::on_iteration_end(const Batch& /*batch*/, std::span<const RequestId> finished, SimTime /*now*/) {
  kv_->end_decode_run();  // the iteration (run) that grew the rows has ended
  // The batch's KV is one preallocated tensor: rows are freed together when the batch ends.
  unfinished_ -= static_cast<int64_t>(finished.size());
  if (unfinished_ == 0) {
    for (RequestId id : batch_) kv_->release(id);
    batch_.clear();
  }
}

}  // namespace batchsim
