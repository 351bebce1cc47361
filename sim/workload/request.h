// batchsim — requests and workloads.
//
// A Request is immutable arrival data: when it arrives, how many prompt tokens it brings, how
// many output tokens it will generate, and the client's limit on them (max_tokens, the
// max_tokens / max_new_tokens of an OpenAI or TGI request). The output ends at the model's
// end-of-sequence or at max_tokens, whichever comes first, so output_tokens is already that
// minimum (sim/workload/workload.h builds it); max_tokens matters to servers that reserve KV for the
// longest output a request may have before knowing when it ends. Its priority is the client's
// (vLLM's `priority` request field): a smaller value is served first under a scheduler's
// scheduling_policy=priority (policies/common/scheduling_order.h), and every request has 0 unless a
// trace's `priority` column or --priority gives another. Its progress through a
// server (tokens computed, tokens generated, preemptions, timestamps) lives in RequestProgress,
// owned by the simulation. Request ids are dense: a workload of n requests has ids 0..n-1 in
// arrival order, so per-request state is a plain vector indexed by id.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hwmodel/base/time.h"

namespace batchsim {

using RequestId = int32_t;

struct Request {
  RequestId id = 0;
  SimTime arrival;
  int32_t prompt_tokens = 0;  // >= 1
  int32_t output_tokens = 0;  // >= 1; the first one is produced by the prefill
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

// Each request's prompt-block hashes in compressed rows (no allocation per request): request
// id's are hashes[offsets[id] .. offsets[id+1]). Empty when the trace has none. For prefix
// caching: in Mooncake traces one hash covers `block_tokens` = 512 prompt tokens.
struct PrefixBlockHashes {
  int32_t block_tokens = 0;
  std::vector<int64_t> offsets;  // empty, or one more than the number of requests
  std::vector<uint64_t> hashes;
  // A streaming run's instead (offsets empty): one list per slot, rewritten when a request
  // takes the slot (sim/simulation.h), so `of(slot)` is its current occupant's.
  std::vector<std::vector<uint64_t>> per_slot;
  // The hashes describe each request's output too, not only its prompt: a session's turns
  // (SessionLinks) are one conversation, whose next turn's prompt holds this turn's answer, so
  // the answer's full KV blocks are shared content like the prompt's (vLLM v1 caches every full
  // block of a request, output included). Off: tokens past the prompt are the request's own.
  bool covers_outputs = false;

  bool empty() const { return offsets.empty() && per_slot.empty(); }
  // How many requests (or slots) it describes.
  int64_t size() const {
    return per_slot.empty() ? std::max<int64_t>(0, static_cast<int64_t>(offsets.size()) - 1)
                            : static_cast<int64_t>(per_slot.size());
  }
  std::span<const uint64_t> of(RequestId id) const {
    if (!per_slot.empty()) return per_slot[static_cast<size_t>(id)];
    return {hashes.data() + offsets[id], hashes.data() + offsets[id + 1]};
  }
};

// Multi-turn sessions (an agent or a chat user): each turn after the first is sent `delay` (the
// user's think time, or the tool's run) after the answer to its predecessor has ended, and its
// prompt holds the whole conversation so far (sim/workload/workload.h builds them). A later turn
// is sent only when its predecessor settles, and not before its arrival in the Workload: a
// synthetic session's start (its turns have consecutive ids), or a trace row's recorded time
// (sim/workload/trace_sessions.h).
struct SessionLinks {
  std::vector<RequestId> predecessor;  // per request: the turn before it, -1 for a first turn
  std::vector<SimTime> delay;          // per request: from its predecessor's end to its send
  bool empty() const { return predecessor.empty(); }
};

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
  // Prompt-block hashes (PrefixBlockHashes, above), for prefix caching: how many
  // prompt tokens one hash covers, the same for every request (0: the source has none), and
  // the hashes of the request next() returned last (valid until next() is called again).
  virtual int32_t prefix_block_tokens() const { return 0; }
  virtual std::span<const uint64_t> prefix_hashes() const { return {}; }
};

// A Workload as a RequestSource (tests, and runs whose workload is in memory anyway), with its
// prompt-block hashes when given (a BuiltWorkload's prefix_blocks; null or empty: none).
class WorkloadSource final : public RequestSource {
 public:
  explicit WorkloadSource(const Workload& requests, const PrefixBlockHashes* prefix_blocks = nullptr)
      : requests_(requests),
        prefix_blocks_(prefix_blocks != nullptr && !prefix_blocks->empty() ? prefix_blocks : nullptr) {}
  std::optional<Request> next() override {
    if (next_ >= requests_.size()) return std::nullopt;
    return requests_[next_++];
  }
  int32_t prefix_block_tokens() const override { return prefix_blocks_ != nullptr ? prefix_blocks_->block_tokens : 0; }
  std::span<const uint64_t> prefix_hashes() const override {
    if (prefix_blocks_ == nullptr || next_ == 0) return {};
    return prefix_blocks_->of(static_cast<RequestId>(next_ - 1));
  }

 private:
  const Workload& requests_;
  const PrefixBlockHashes* prefix_blocks_;
  size_t next_ = 0;
};

}  // namespace batchsim
