#include "policies/continuous/continuous_packing.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "hwmodel/base/error.h"

namespace batchsim {

int64_t ContinuousPacking::budget_for(const ContinuousPolicyConfig& c, int64_t max_model_len) {
  return c.max_num_batched_tokens > 0 ? c.max_num_batched_tokens : std::max<int64_t>(max_model_len, 2048);
}

void ContinuousPacking::attach(const ContinuousPolicyConfig& config, const PolicyEnv& env) {
  env_ = &env;
  chunked_ = config.chunked;
  long_prefill_token_threshold_ = config.long_prefill_token_threshold;
  max_num_partial_prefills_ = config.max_num_partial_prefills;
  chunk_unit_ = config.chunk_unit;
  budget_ = budget_for(config, env.max_model_len);
  const SpeculativeDecoding& spec = env.cost_model->speculative();
  draft_k_ = spec.k;
  draft_lookahead_ = spec.lookahead_slots();
  if (spec.budget_slots_per_sequence() > 0) {
    // vLLM VllmConfig._set_max_num_scheduled_tokens: a draft model's slots come off the budget,
    // max_num_seqs of them.
    const int64_t seqs = config.max_num_seqs > 0 ? config.max_num_seqs : 256;
    const int64_t left = budget_ - spec.budget_slots_per_sequence() * seqs;
    if (left < 2) {
      throw UserError(
          fmt::format("--spec-decode draft: the token budget {} less {} drafting slots (one per "
                      "sequence, max_num_seqs={}) leaves no room for a step: raise "
                      "max_num_batched_tokens or lower max_num_seqs",
                      budget_, spec.budget_slots_per_sequence() * seqs, seqs));
    }
    budget_ = left;
  }
  partial_prefills_ = 0;
}

int64_t ContinuousPacking::step_tokens(int64_t need, int64_t budget) const {
  if (chunked_) {
    // vLLM v1 schedule(): num_new_tokens = num_tokens - num_computed_tokens, clamped by
    // long_prefill_token_threshold (when > 0) and by the token budget left.
    int64_t n = need;
    if (long_prefill_token_threshold_ > 0) {
      n = std::min(n, long_prefill_token_threshold_);
    }
    n = std::min(n, budget);
    // TensorRT-LLM setCtxRequestsChunkSize<kFIRST_COME_FIRST_SERVED>: a chunk that is not the
    // rest of the prompt is rounded down to a multiple of chunkUnitSize.
    if (chunk_unit_ > 1 && n < need) n -= n % chunk_unit_;
    return n;
  }
  if (need <= budget) return need;
  // Without chunking a request runs its whole prefill in one iteration or waits (vLLM v0
  // budget.can_schedule). Prompts longer than the whole budget were rejected on arrival, but
  // the re-prefill of a recomputed request (prompt + generated tokens) can outgrow it: vLLM v0
  // would drop it as FINISHED_IGNORED (prompt_limit); we neither drop it nor exceed the budget,
  // but split that one re-prefill into budget-sized chunks.
  return need > budget_ ? budget : 0;
}

int64_t ContinuousPacking::remove_from_batch(RequestId victim, Batch& batch) {
  const auto it = std::find_if(batch.items.begin(), batch.items.end(),
                               [victim](const BatchItem& item) { return item.id == victim; });
  if (it == batch.items.end()) return 0;
  const int64_t tokens = it->new_tokens + it->drafts;
  batch.items.erase(it);
  // The shape is rebuilt from the items left: their progress is what it was when they were
  // added (the replica advances it only after the iteration), so each is added as before.
  std::vector<BatchItem> kept;
  kept.swap(batch.items);
  batch.shape.clear();
  partial_prefills_ = 0;
  for (const BatchItem& item : kept) add_step(item.id, item.new_tokens, batch, item.drafts);
  return tokens;
}

}  // namespace batchsim
