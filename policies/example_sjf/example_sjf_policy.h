// batchsim — the worked example of policies/README.md ("Writing a policy"): a small continuous
// batcher that admits the waiting request with the SHORTEST PROMPT first.
//
// Iteration-level scheduling with whole prefills mixed into the running decodes (Orca's
// selective batching), paged KV allocated as tokens are written, at most max_num_seqs requests
// running, and, when a decode finds no free block, the newest running request preempted by
// recompute. Unlike the continuous base with scheduling_policy=sjf, which it resembles, it has no
// token budget, no chunking and no fast-forward: it is the least a policy needs, so that every
// line of it is explained in the guide. The guide quotes this file; a test checks that the quotes
// are still in it (tests/policies/example_sjf_test.cpp).
//
// Invariants: a request is in exactly one of waiting_ and running_ until it finishes; every
// running request holds KV for exactly the tokens it has computed (plus this step's).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sim/policy.h"

namespace batchsim {

struct ExampleSjfConfig {
  int64_t max_num_seqs = 64;  // most requests running at once
};

class ExampleSjfPolicy final : public Policy {
 public:
  ExampleSjfPolicy(ExampleSjfConfig config, std::string name) : config_(config), name_(std::move(name)) {}

  std::string_view name() const override { return name_; }
  void attach(PolicyEnv& env) override;
  void on_arrival(RequestId id, SimTime now) override;
  void schedule(SimTime now, Batch& batch) override;
  void on_iteration_end(const Batch& batch, std::span<const RequestId> finished, SimTime now) override;
  bool idle() const override { return waiting_.empty() && running_.empty(); }
  const KvCacheManager& kv_cache() const override { return *kv_; }

  const ExampleSjfConfig& config() const { return config_; }

 private:
  ExampleSjfConfig config_;
  std::string name_;
  PolicyEnv* env_ = nullptr;
  std::unique_ptr<KvCacheManager> kv_;
  // (prompt tokens, Request::id, id): begin() is the shortest prompt, the earliest of equals
  // (by Request::id, the arrival order: in a streaming run an id is a recycled slot).
  std::set<std::tuple<int32_t, RequestId, RequestId>> waiting_;
  std::vector<RequestId> running_;  // admission order: the newest at the back
};

}  // namespace batchsim
