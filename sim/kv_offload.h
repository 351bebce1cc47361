// batchsim — the figures of a KV offload tier (kv_cache.h, HostKvTier), kept apart so that both
// the KV managers and the run's results (metrics.h) can name them.
#pragma once

#include <cstdint>

namespace batchsim {

// A KV offload tier below the GPU (CPU memory), what it held and served over a run: blocks
// stored, served back to the GPU instead of being recomputed, and dropped by its LRU, in
// tokens; the loads' bytes and seconds (the policy's, which times them).
struct KvOffloadStats {
  int64_t capacity_tokens = 0, stored_tokens = 0, hit_tokens = 0, evicted_tokens = 0;
  double load_bytes = 0, load_s = 0;
  KvOffloadStats& operator+=(const KvOffloadStats& o) {
    capacity_tokens += o.capacity_tokens;
    stored_tokens += o.stored_tokens;
    hit_tokens += o.hit_tokens;
    evicted_tokens += o.evicted_tokens;
    load_bytes += o.load_bytes;
    load_s += o.load_s;
    return *this;
  }
};

}  // namespace batchsim
