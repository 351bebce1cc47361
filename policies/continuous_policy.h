// batchsim — iteration-level (continuous) batching, with or without chunked prefill.
//
// One scheduler whose mechanisms switch on and off independently, so that an ablation can
// isolate each (the presets in registry.cpp combine them as real engines do):
//   kv=paged|reserve       PagedAttention blocks allocated just in time (vLLM), or a contiguous
//                          reservation of prompt + output (reserve_to=output) or of
//                          max_model_len (reserve_to=max_model_len: Orca, which cannot know
//                          the output length).
//   prefill=exclusive|mixed  vLLM v0 `_schedule_default`: an iteration is all prefill or all
//                          decode, prefills first; Orca selective batching: decodes and new
//                          prefills share an iteration.
//   chunked=true           Sarathi-Serve stall-free batching / vLLM v1 `schedule()`: per
//                          iteration token budget; running requests (decodes and the partial
//                          prefill in progress) first, then new requests, the last one cut to
//                          the remaining budget; a chunk attends to the KV of earlier chunks.
//   preemption=recompute|swap  on block shortage the newest running request is preempted
//                          (vLLM `running.pop()`); recompute frees its KV and prefills prompt +
//                          generated tokens again, swap moves its KV over PCIe and back.
// Admission is FCFS and head-of-line: the first waiting request that does not fit stops
// admission (vLLM v0 and v1). A request that can never be served (prompt + output beyond
// max_model_len, prompt beyond max_num_batched_tokens without chunking, footprint beyond the
// whole KV cache) is rejected on arrival with its reason.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "sim/policy.h"

namespace batchsim {

struct ContinuousPolicyConfig {
  bool paged = true;
  int32_t block_size = 16;              // vLLM CacheConfig.DEFAULT_BLOCK_SIZE
  double watermark = 0.0;               // fraction of blocks kept free at admission (v0: 0.01)
  bool reserve_max_model_len = false;   // kv=reserve: reserve max_model_len, not prompt+output
  bool mixed_prefill = true;            // false: vLLM v0 exclusive prefill iterations
  bool chunked = false;
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 0;   // 0: max(max_model_len, 2048) (vLLM v0 default)
  int64_t long_prefill_token_threshold = 0;  // 0: off; caps one request's chunk
  int64_t max_num_partial_prefills = 1;      // requests whose prefill may be unfinished at once
  bool swap = false;                    // preemption=swap (else recompute)
};

class ContinuousPolicy final : public Policy {
 public:
  ContinuousPolicy(ContinuousPolicyConfig config, std::string name);
  std::string_view name() const override { return name_; }
  void attach(PolicyEnv& env) override;
  void on_arrival(RequestId id, SimTime now) override;
  void schedule(SimTime now, Batch& batch) override;
  void on_iteration_end(const Batch& batch, std::span<const RequestId> finished,
                        SimTime now) override;
  bool idle() const override { return waiting_.empty() && running_.empty() && swapped_.empty(); }
  const KvCacheManager& kv_cache() const override { return *kv_; }

  const ContinuousPolicyConfig& config() const { return config_; }
  int64_t token_budget() const { return budget_; }
  size_t num_running() const { return running_.size(); }

 private:
  int64_t reserve_tokens(RequestId id) const;
  // Schedules running requests in admission order, preempting the newest when KV runs out.
  // Returns false when a preemption happened.
  bool schedule_running(Batch& batch, int64_t& budget);
  void schedule_swapped(Batch& batch, int64_t& budget);
  void schedule_waiting(Batch& batch, int64_t& budget);
  void preempt(RequestId victim, Batch& batch);
  void add_step(RequestId id, int64_t new_tokens, Batch& batch);
  SimTime transfer_time(int64_t tokens) const;

  ContinuousPolicyConfig config_;
  std::string name_;
  PolicyEnv* env_ = nullptr;
  std::unique_ptr<KvCacheManager> kv_;
  int64_t budget_ = 0;
  std::deque<RequestId> waiting_;
  std::vector<RequestId> running_;   // admission order: the newest is at the back
  std::deque<RequestId> swapped_;
  std::vector<int64_t> swapped_tokens_;
  std::vector<bool> finished_flag_;
};

}  // namespace batchsim
