// batchsim — static batching (HF pipelines, FasterTransformer).
//
// The server collects `batch_size` requests (or all that remain, or whatever has arrived when
// the oldest has waited `batch_timeout_s`), reserves KV for the whole batch ahead of time,
// prefills every prompt together (padded to the batch's longest with pad=true), then decodes
// until the batch's longest output ends. No request joins a running batch. Slots of sequences
// that already ended are bubbles:
//   release=batch    (HF pipeline `generate`): finished rows keep computing (padding tokens)
//                    until the longest ends; their compute is wasted.
//   release=request  (FasterTransformer-like): finished rows stop costing compute, but their
//                    slot is not refilled until the whole batch ends.
// KV: the batch's cache is one rectangular tensor, [batch, longest prompt + output allowance]
// (HF's cache grows for every row together; FasterTransformer allocates [batch, max_seq_len]),
// reserved when the batch starts and freed when it ends; a batch is cut short when that
// rectangle does not fit.
// Sources: HF transformers `generate` with batched inputs; TensorRT-LLM kSTATIC_BATCH
// (capacityScheduler.cpp: new work only when nothing is in progress); the Anyscale
// continuous-batching write-up ("How continuous batching enables 23x throughput", 2023) for
// the bubble picture.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "sim/policy.h"

namespace batchsim {

struct StaticPolicyConfig {
  int64_t batch_size = 8;
  double batch_timeout_s = 0;  // 0: wait for a full batch (or for all remaining requests)
  bool pad = true;
  bool release_per_request = false;
  // KV reserved per request: padded prompt + this many output tokens (or the row's own output,
  // if longer); 0 means the batch's longest max_tokens (PolicyEnv::output_limit: a server
  // told each request's max_new_tokens, which HF `generate` takes per batch).
  int64_t max_new_tokens = 0;
};

class StaticPolicy final : public Policy {
 public:
  explicit StaticPolicy(StaticPolicyConfig config, std::string name = "static");
  std::string_view name() const override { return name_; }
  void attach(PolicyEnv& env) override;
  void on_arrival(RequestId id, SimTime now) override;
  void schedule(SimTime now, Batch& batch) override;
  void on_iteration_end(const Batch& batch, std::span<const RequestId> finished, SimTime now) override;
  bool idle() const override { return waiting_.empty() && batch_.empty(); }
  const KvCacheManager& kv_cache() const override { return *kv_; }
  bool repeat_decode_step(const Batch& batch) override;
  std::string unsupported_role_reason(PoolRole role) const override {
    if (role == PoolRole::kColocated) return "";
    return "static batching has no disaggregated role: a static batch prefills and decodes its "
           "requests together, holding its slots until the longest ends (use a continuous or "
           "chunked-prefill policy in the pools)";
  }

  const StaticPolicyConfig& config() const { return config_; }

 private:
  bool form_batch(SimTime now, Batch& batch);
  // Output tokens row `id` reserves (see StaticPolicyConfig::max_new_tokens).
  int64_t output_allowance(RequestId id) const;

  StaticPolicyConfig config_;
  std::string name_;
  PolicyEnv* env_ = nullptr;
  std::unique_ptr<ReservedKvCache> kv_;
  std::deque<RequestId> waiting_;
  std::vector<RequestId> batch_;  // the running batch, in admission order
  int64_t padded_prompt_ = 0;     // longest prompt in the batch
  int64_t steps_ = 0;             // decode steps done by the batch
  int64_t unfinished_ = 0;
};

}  // namespace batchsim
