#include "sim/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "hwmodel/error.h"

namespace batchsim {

PagedKvCache::PagedKvCache(int64_t num_requests, int64_t num_blocks, int32_t block_size,
                           double watermark_fraction)
    : KvCacheManager(num_requests),
      num_blocks_(num_blocks),
      block_size_(block_size),
      watermark_blocks_(0),
      free_blocks_(num_blocks) {
  if (block_size < 1) throw UserError("block_size must be >= 1");
  if (num_blocks < 1) throw UserError("the KV cache has no blocks: the model's weights leave no memory for KV");
  // Checked before the cast below, and written so that NaN fails: casting NaN to an integer is
  // undefined (on x86 it gives INT64_MIN, a watermark that admits into negative free blocks).
  if (!(watermark_fraction >= 0 && watermark_fraction < 1)) throw UserError("watermark must be in [0, 1)");
  // vLLM v0: watermark_blocks = int(watermark * num_gpu_blocks).
  watermark_blocks_ = static_cast<int64_t>(watermark_fraction * static_cast<double>(num_blocks));
}

bool PagedKvCache::can_admit(int64_t tokens, int64_t /*reserve_tokens*/) const {
  // vLLM v0 can_allocate: OK only if free - required >= watermark_blocks.
  return free_blocks_ - blocks_for(tokens) >= watermark_blocks_;
}

bool PagedKvCache::try_admit(RequestId id, int64_t tokens, int64_t reserve_tokens) {
  if (holds(id)) throw std::logic_error("PagedKvCache: request admitted twice");
  if (!can_admit(tokens, reserve_tokens)) return false;
  const int64_t needed = blocks_for(tokens);
  free_blocks_ -= needed;
  tokens_[id] = tokens;
  used_tokens_ += tokens;
  return true;
}

bool PagedKvCache::try_grow(RequestId id, int64_t tokens) {
  if (!holds(id)) throw std::logic_error("PagedKvCache: growing a request that holds no KV");
  const int64_t have = tokens_[id];
  if (tokens <= have) return true;
  // Decode growth ignores the watermark (vLLM v0 can_append_slots).
  const int64_t needed = blocks_for(tokens) - blocks_for(have);
  if (needed > free_blocks_) return false;
  free_blocks_ -= needed;
  used_tokens_ += tokens - have;
  tokens_[id] = tokens;
  return true;
}

void PagedKvCache::release(RequestId id) {
  if (!holds(id)) return;
  free_blocks_ += blocks_for(tokens_[id]);
  used_tokens_ -= tokens_[id];
  tokens_[id] = -1;
}

bool PagedKvCache::fits_when_empty(int64_t reserve_tokens) const {
  return num_blocks_ - blocks_for(reserve_tokens) >= watermark_blocks_;
}

ReservedKvCache::ReservedKvCache(int64_t num_requests, int64_t capacity_tokens)
    : KvCacheManager(num_requests), capacity_(capacity_tokens), reserved_(num_requests, 0) {
  if (capacity_tokens < 1) throw UserError("the KV cache has no room: the model's weights leave no memory for KV");
}

bool ReservedKvCache::can_admit(int64_t tokens, int64_t reserve_tokens) const {
  return reserved_total_ + std::max(tokens, reserve_tokens) <= capacity_;
}

bool ReservedKvCache::try_admit(RequestId id, int64_t tokens, int64_t reserve_tokens) {
  if (holds(id)) throw std::logic_error("ReservedKvCache: request admitted twice");
  if (!can_admit(tokens, reserve_tokens)) return false;
  if (reserve_tokens < tokens) reserve_tokens = tokens;
  reserved_total_ += reserve_tokens;
  reserved_[id] = reserve_tokens;
  tokens_[id] = tokens;
  used_tokens_ += tokens;
  return true;
}

bool ReservedKvCache::try_grow(RequestId id, int64_t tokens) {
  if (!holds(id)) throw std::logic_error("ReservedKvCache: growing a request that holds no KV");
  if (tokens > reserved_[id]) return false;  // a contiguous reservation cannot grow in place
  if (tokens > tokens_[id]) {
    used_tokens_ += tokens - tokens_[id];
    tokens_[id] = tokens;
  }
  return true;
}

void ReservedKvCache::release(RequestId id) {
  if (!holds(id)) return;
  reserved_total_ -= reserved_[id];
  used_tokens_ -= tokens_[id];
  reserved_[id] = 0;
  tokens_[id] = -1;
}

bool ReservedKvCache::fits_when_empty(int64_t reserve_tokens) const {
  return reserve_tokens <= capacity_;
}

}  // namespace batchsim
