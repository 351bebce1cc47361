// batchsim — requests and workloads.
//
// A Request is immutable arrival data: when it arrives, how many prompt tokens it brings, how
// many output tokens it will generate, and the client's limit on them (max_tokens, the
// max_tokens / max_new_tokens of an OpenAI or TGI request). The output ends at the model's
// end-of-sequence or at max_tokens, whichever comes first, so output_tokens is already that
// minimum (sim/workload.h builds it); max_tokens matters to servers that reserve KV for the
// longest output a request may have before knowing when it ends. Its priority is the client's
// (vLLM's `priority` request field): a smaller value is served first under a scheduler's
// scheduling_policy=priority (policies/scheduling_order.h), and every request has 0 unless a
// trace's `priority` column or --priority gives another. Its progress through a
// server (tokens computed, tokens generated, preemptions, timestamps) lives in RequestProgress,
// owned by the simulation. Request ids are dense: a workload of n requests has ids 0..n-1 in
// arrival order, so per-request state is a plain vector indexed by id.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/time.h"

namespace batchsim {

using RequestId = int32_t;

struct Request {
  RequestId id = 0;
  SimTime arrival;
  int32_t prompt_tokens = 0;   // >= 1
  int32_t output_tokens = 0;   // >= 1; the first one is produced by the prefill
  // The client's limit on output tokens, >= output_tokens; 0: none beyond the output itself,
  // so that a request built as {id, arrival, prompt, output} runs as it always did.
  int32_t max_tokens = 0;
  // Smaller is more urgent, as vLLM's (vllm/v1/request.py Request.__lt__); any int32, 0 by
  // default. Only a priority-ordered scheduler reads it.
  int32_t priority = 0;

  // The most output tokens the client allows: max_tokens, or the output length without one.
  int32_t output_limit() const { return max_tokens > 0 ? max_tokens : output_tokens; }
};

// Sorted by arrival (ties keep their input order); ids are 0..n-1 in that order.
using Workload = std::vector<Request>;

// A workload read one request at a time, for runs too long to hold it (streaming mode,
// sim/simulation.h): next() gives the requests in the order a Workload would hold them (ids
// 0, 1, 2, ..., arrivals non-decreasing), then nullopt for good.
class RequestSource {
 public:
  virtual ~RequestSource() = default;
  virtual std::optional<Request> next() = 0;
  // What was adjusted in the requests read so far (a trace's clamped lengths), one line each,
  // naming the file; complete once next() ran out. Exact runs see these before they start.
  virtual std::vector<std::string> warnings() const { return {}; }
};

// A Workload as a RequestSource (tests, and runs whose workload is in memory anyway).
class WorkloadSource final : public RequestSource {
 public:
  explicit WorkloadSource(const Workload& requests) : requests_(requests) {}
  std::optional<Request> next() override {
    if (next_ >= requests_.size()) return std::nullopt;
    return requests_[next_++];
  }
 private:
  const Workload& requests_;
  size_t next_ = 0;
};

}  // namespace batchsim
