#include "policies/example_sjf/example_sjf_policy.h"

#include "policies/continuous/continuous_policy.h"  // reject_over_context, reject_over_cache, add_batch_step

namespace batchsim {

void ExampleSjfPolicy::attach(PolicyEnv& env) {
  env_ = &env;
  // Blocks of vLLM's default size; --num-gpu-blocks, when given, sets their number.
  const int64_t blocks = env.num_gpu_blocks > 0 ? env.num_gpu_blocks : env.kv_capacity_tokens / kDefaultBlockSize;
  kv_ = std::make_unique<PagedKvCache>(static_cast<int64_t>(env.requests->size()), blocks, kDefaultBlockSize);
}

void ExampleSjfPolicy::on_arrival(RequestId id, SimTime /*now*/) {
  // A request that can never run is rejected now, with its reason, instead of waiting forever:
  // longer than the model's context, or more KV than the whole cache (prompt + output - 1
  // tokens: the last output token is sampled, never written).
  if (reject_over_context(*env_, id)) return;
  const Request& r = env_->request(id);
  if (reject_over_cache(*env_, *kv_, id, int64_t{r.prompt_tokens} + r.output_tokens - 1)) return;
  waiting_.insert({r.prompt_tokens, r.id, id});
}

void ExampleSjfPolicy::schedule(SimTime /*now*/, Batch& batch) {
  // 1. Every running request decodes one token. When its next block is not free, preempt the
  //    newest running request by recompute (it drops its KV and waits to prefill again),
  //    possibly this one.
  bool preempted = false;
  for (size_t i = 0; i < running_.size();) {
    const RequestId id = running_[i];
    const int64_t computed = env_->progress_of(id).computed_tokens;
    if (kv_->try_grow(id, computed + 1)) {
      add_batch_step(*env_, id, 1, batch);
      ++i;
      continue;
    }
    const RequestId victim = running_.back();
    running_.pop_back();
    kv_->release(victim);
    env_->preempt(victim, /*keeps_kv=*/false);
    waiting_.insert({env_->request(victim).prompt_tokens, env_->request(victim).id, victim});
    preempted = true;
    if (victim == id) break;  // nothing after it: it was the newest
  }
  if (preempted) return;  // no room to admit anyone this step

  // 2. Admit the shortest prompts first, each with its whole prefill (a recomputed request
  //    prefills its prompt and what it had generated), while a slot and the KV are free. The
  //    first that does not fit stops admission (head-of-line, as vLLM's).
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    const RequestId id = std::get<2>(*waiting_.begin());
    const int64_t tokens = env_->known_tokens(id);
    const Request& r = env_->request(id);
    if (!kv_->try_admit(id, tokens, int64_t{r.prompt_tokens} + r.output_tokens - 1)) break;
    waiting_.erase(waiting_.begin());
    running_.push_back(id);
    add_batch_step(*env_, id, tokens, batch);
  }
}

void ExampleSjfPolicy::on_iteration_end(const Batch& /*batch*/, std::span<const RequestId> finished, SimTime /*now*/) {
  for (const RequestId id : finished) {
    kv_->release(id);
    std::erase(running_, id);
  }
}

}  // namespace batchsim
