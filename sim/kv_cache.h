// batchsim — KV-cache managers: who may hold KV memory, and how much.
//
// Two managers, switchable per policy:
//  * PagedKvCache (vLLM PagedAttention): memory is `num_blocks` blocks of `block_size` tokens;
//    a request holds ceil(tokens / block_size) blocks, allocated just in time as its tokens are
//    written and freed on completion or preemption. Admission keeps `watermark_blocks` free
//    (vLLM v0 SelfAttnBlockSpaceManager.can_allocate); growth of running requests ignores the
//    watermark (can_append_slots).
//  * ReservedKvCache (HF pipelines, FasterTransformer, Orca): contiguous memory; at admission a
//    request reserves its whole future footprint (prompt + max_new_tokens, or max_model_len
//    when the server cannot know the output length). The vLLM paper measures this
//    over-reservation as 60-80% waste.
//
// Invariants (checked by tests on every iteration of randomized runs):
//   paged:    allocated_blocks + free_blocks == num_blocks; a request's blocks cover its tokens.
//   reserved: reserved_tokens <= capacity_tokens; a request's tokens <= its reservation.
//   both:     used_tokens <= allocated_tokens <= capacity_tokens.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "sim/request.h"

namespace batchsim {

class KvCacheManager {
 public:
  virtual ~KvCacheManager() = default;
  virtual std::string_view kind() const = 0;

  // Admits `id` with `tokens` tokens to be written now; `reserve_tokens` (>= tokens) is its
  // whole future footprint, used by the reserving manager. Returns false, changing nothing,
  // if memory does not allow it now.
  virtual bool try_admit(RequestId id, int64_t tokens, int64_t reserve_tokens) = 0;
  // Grows an admitted request to hold `tokens` tokens. Returns false, changing nothing, if
  // memory does not allow it.
  virtual bool try_grow(RequestId id, int64_t tokens) = 0;
  // Frees everything `id` holds (completion or preemption). A no-op for a request holding none.
  virtual void release(RequestId id) = 0;
  // Whether a request of `reserve_tokens` could be admitted into an otherwise empty cache.
  virtual bool fits_when_empty(int64_t reserve_tokens) const = 0;
  // Whether try_admit(id, tokens, reserve_tokens) would succeed now (changes nothing).
  virtual bool can_admit(int64_t tokens, int64_t reserve_tokens) const = 0;

  virtual int64_t capacity_tokens() const = 0;
  virtual int64_t allocated_tokens() const = 0;   // blocks * block_size, or reservations
  virtual int64_t used_tokens() const = 0;        // tokens really written
  bool holds(RequestId id) const { return id < static_cast<RequestId>(tokens_.size()) && tokens_[id] >= 0; }
  int64_t tokens_of(RequestId id) const { return holds(id) ? tokens_[id] : 0; }

 protected:
  explicit KvCacheManager(int64_t num_requests) : tokens_(num_requests, -1) {}
  std::vector<int64_t> tokens_;  // per request: tokens written, -1 when holding nothing
  int64_t used_tokens_ = 0;
};

class PagedKvCache final : public KvCacheManager {
 public:
  PagedKvCache(int64_t num_requests, int64_t num_blocks, int32_t block_size,
               double watermark_fraction = 0.0);
  std::string_view kind() const override { return "paged"; }
  bool try_admit(RequestId id, int64_t tokens, int64_t reserve_tokens) override;
  bool try_grow(RequestId id, int64_t tokens) override;
  void release(RequestId id) override;
  bool fits_when_empty(int64_t reserve_tokens) const override;
  bool can_admit(int64_t tokens, int64_t reserve_tokens) const override;
  int64_t capacity_tokens() const override { return num_blocks_ * block_size_; }
  int64_t allocated_tokens() const override { return (num_blocks_ - free_blocks_) * block_size_; }
  int64_t used_tokens() const override { return used_tokens_; }

  int64_t num_blocks() const { return num_blocks_; }
  int64_t free_blocks() const { return free_blocks_; }
  int64_t allocated_blocks() const { return num_blocks_ - free_blocks_; }
  int64_t watermark_blocks() const { return watermark_blocks_; }
  int32_t block_size() const { return block_size_; }
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }
  int64_t blocks_of(RequestId id) const { return blocks_for(tokens_of(id)); }

 private:
  int64_t num_blocks_;
  int32_t block_size_;
  int64_t watermark_blocks_;
  int64_t free_blocks_;
};

class ReservedKvCache final : public KvCacheManager {
 public:
  ReservedKvCache(int64_t num_requests, int64_t capacity_tokens);
  std::string_view kind() const override { return "reserve"; }
  bool try_admit(RequestId id, int64_t tokens, int64_t reserve_tokens) override;
  bool try_grow(RequestId id, int64_t tokens) override;
  void release(RequestId id) override;
  bool fits_when_empty(int64_t reserve_tokens) const override;
  bool can_admit(int64_t tokens, int64_t reserve_tokens) const override;
  int64_t capacity_tokens() const override { return capacity_; }
  int64_t allocated_tokens() const override { return reserved_total_; }
  int64_t used_tokens() const override { return used_tokens_; }
  int64_t reservation_of(RequestId id) const { return holds(id) ? reserved_[id] : 0; }

 private:
  int64_t capacity_;
  int64_t reserved_total_ = 0;
  std::vector<int64_t> reserved_;
};

}  // namespace batchsim
