// batchsim — ContinuousPolicy's packing: how many tokens each request that holds KV computes in
// this step, within the step's token budget.
//
// The second of TensorRT-LLM's two scheduling levels: its MicroBatchScheduler
// (cpp/include/tensorrt_llm/batch_manager/microBatchScheduler.h and
// cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp) takes the requests that the capacity
// scheduler let hold KV and fills one micro batch within maxBatchSize and maxNumTokens, sizing
// the context chunks (setCtxRequestsChunkSize). vLLM's counterpart is the token_budget of v1
// schedule() (vllm/v1/core/sched/scheduler.py) and v0's SchedulingBudget. ContinuousPacking owns
// the token budget, the size of one request's step (a whole prefill, a chunk, a decode, a decode
// that verifies drafts) and the batch's count of unfinished prefills. It never touches KV: whether
// a step's tokens fit in memory is the capacity part's answer (continuous_capacity.h), and the
// order in which running, swapped and waiting requests are offered to both is ContinuousPolicy's
// (continuous_policy.h).
//
// The options it reads (ContinuousPolicyConfig, continuous_config.h):
//   chunked=true           Sarathi-Serve (OSDI'24) stall-free batching / vLLM v1 `schedule()`
//                          (vllm/v1/core/sched/scheduler.py): per-iteration token budget; running
//                          requests first in admission order (the decodes and the partial
//                          prefill in progress, which is the newest), then new requests, the last
//                          one cut to the remaining budget; a chunk attends to the KV of earlier
//                          chunks (BatchShape carries each chunk's context_before).
//                          long_prefill_token_threshold caps one request's chunk (v1), so
//                          that several partial prefills share the budget.
//                          Without chunking a request runs its whole prefill in one step or waits.
//   max_num_partial_prefills  (chunked only; 0: no bound) at most this many requests may end a
//                          step with their prefill unfinished: a new request that would be cut
//                          waits. vLLM v1 never reads the option (vllm/v1/core/sched/scheduler.py;
//                          EngineArgs._check_feature_supported refuses any value but 1 as
//                          "Concurrent Partial Prefill"), nor does Sarathi-Serve bound them; the
//                          bound is the gist of vLLM v0's concurrent partial prefills
//                          (vllm/core/scheduler.py PartialPrefillMetadata, PR #10235, until V0's
//                          removal in v0.11), which also splits the budget into equal slots and
//                          caps the long prompts (max_long_partial_prefills) — not modelled.
//   enable_chunked_context TensorRT-LLM's micro-batch scheduler (microBatchScheduler.cpp) with
//                          context chunking: generation requests first (one token each), then
//                          context chunks in order, each the rest of its prompt or, when cut
//                          by max_num_tokens, rounded down to a multiple of the chunk unit,
//                          which is tokens_per_block (block_size). A chunk rounded down to 0
//                          stops the step (TensorRT-LLM would still give a later, shorter
//                          prompt the leftover; not modelled). (The generation-first order is
//                          ContinuousPolicy's, the rounding this part's.)
//   speculative decoding   (CostModel::speculative) a decode verifies up to k drafts, clipped by
//                          the budget and by the most KV the request may take; a draft model's
//                          slots come off the budget (vLLM v1).
//
// Invariants: the new tokens of a step's items, drafts included, sum to at most token_budget();
// partial_prefills() counts the items of the batch being built that leave a prefill unfinished.
#pragma once

#include <algorithm>
#include <cstdint>

#include "policies/continuous/continuous_config.h"
#include "sim/batch.h"
#include "sim/policy.h"

namespace batchsim {

// Adds `new_tokens` of request `id` to `batch` at its computed tokens, sampling when they
// complete what it knows (a decode when that is one generated token's successor). Returns
// whether the step samples. The second form takes the request's progress and known tokens the
// caller already read (inline: schedulers add every running request at every step).
inline bool add_batch_step(RequestId id, int64_t new_tokens, const RequestProgress& p, int64_t known, Batch& batch) {
  const bool samples = p.computed_tokens + new_tokens == known;
  const bool is_decode = new_tokens == 1 && p.generated_tokens > 0 && p.computed_tokens == known - 1;
  batch.add(id, static_cast<int32_t>(new_tokens), p.computed_tokens, is_decode, samples);
  return samples;
}
inline bool add_batch_step(const PolicyEnv& env, RequestId id, int64_t new_tokens, Batch& batch) {
  return add_batch_step(id, new_tokens, env.progress_of(id), env.known_tokens(id), batch);
}

class ContinuousPacking {
 public:
  // Tokens per iteration: max_num_batched_tokens, or max(max_model_len, 2048) (vLLM v0's default).
  static int64_t budget_for(const ContinuousPolicyConfig& c, int64_t max_model_len);

  // Takes the configuration with its limits resolved, and the replica's speculative decoding;
  // throws UserError when a draft model's slots leave no budget for a step.
  void attach(const ContinuousPolicyConfig& config, const PolicyEnv& env);
  int64_t token_budget() const { return budget_; }

  // Tokens a request that still needs `need` tokens computes this step with `budget` tokens
  // left; 0 when it must wait.
  int64_t step_tokens(int64_t need, int64_t budget) const;
  // The tokens request `id` knows (prompt and output so far) but has not computed.
  int64_t need_of(RequestId id) const { return env_->known_tokens(id) - env_->progress_of(id).computed_tokens; }
  // step_tokens for a waiting request while `partial_prefills` items of the batch leave their
  // prefill unfinished: 0 when it would be cut beyond max_num_partial_prefills.
  int64_t admission_tokens(int64_t need, int64_t budget, int64_t partial_prefills) const {
    const int64_t tokens = step_tokens(need, budget);
    if (max_num_partial_prefills_ > 0 && tokens < need && partial_prefills >= max_num_partial_prefills_) return 0;
    return tokens;
  }

  // Speculative decoding: whether decodes draft, and what a decode drafts with `budget` tokens
  // left when its KV may take `room` more tokens: drafts to verify, and the KV slots they and
  // the drafter's lookahead take.
  bool speculates() const { return draft_k_ > 0; }
  struct Drafts {
    int64_t drafts = 0;
    int64_t slots = 0;
  };
  Drafts drafts_within(int64_t room, int64_t budget) const {
    Drafts d;
    d.drafts = std::min({draft_k_, budget - 1, room});
    d.slots = d.drafts > 0 ? std::min(d.drafts + draft_lookahead_, room) : 0;
    return d;
  }

  // A new batch is being built.
  void begin_batch() { partial_prefills_ = 0; }
  int64_t partial_prefills() const { return partial_prefills_; }
  // Adds the step to the batch (add_batch_step) and counts a prefill it leaves unfinished; a
  // decode with `drafts` verifies them too (Batch::add_speculative_decode). The first form takes
  // the progress and known tokens the caller already read.
  void add_step(RequestId id, int64_t new_tokens, const RequestProgress& p, int64_t known, Batch& batch,
                int32_t drafts = 0) {
    if (drafts > 0) {
      batch.add_speculative_decode(id, p.computed_tokens, drafts);
    } else if (!add_batch_step(id, new_tokens, p, known, batch)) {
      ++partial_prefills_;
    }
  }
  void add_step(RequestId id, int64_t new_tokens, Batch& batch, int32_t drafts = 0) {
    add_step(id, new_tokens, env_->progress_of(id), env_->known_tokens(id), batch, drafts);
  }
  // Takes `victim`'s item (scheduled earlier in this step) out of the batch and returns its
  // tokens, which go back to the budget; 0 when it has none.
  int64_t remove_from_batch(RequestId victim, Batch& batch);

 private:
  const PolicyEnv* env_ = nullptr;
  bool chunked_ = false;
  int64_t long_prefill_token_threshold_ = 0;  // 0: off
  int64_t max_num_partial_prefills_ = 0;      // 0: any
  int32_t chunk_unit_ = 0;                    // 0: no rounding
  int64_t budget_ = 0;
  // Speculative decoding (CostModel::speculative): drafts per decode and the lookahead slots
  // each drafting request holds; 0 when off.
  int64_t draft_k_ = 0;
  int64_t draft_lookahead_ = 0;
  int64_t partial_prefills_ = 0;  // items of the batch being built that do not finish a prefill
};

}  // namespace batchsim
