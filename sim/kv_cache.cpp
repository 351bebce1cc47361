#include "sim/kv_cache.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <stdexcept>

#include <fmt/format.h>

#include "hwmodel/base/error.h"

namespace batchsim {

namespace {

// splitmix64's finaliser over the hash and the block index: a bijection of its input, so
// distinct (hash, k) collide only as often as random 64-bit keys do.
uint64_t mix_key(uint64_t hash, int64_t k) {
  uint64_t x = hash + 0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(k) + 1);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Keys of the blocks a request's own tokens fill (kv_cache.h "Prefix caching"): the chain so
// far, salted so that it differs from a content key, then the request and the block index.
constexpr uint64_t kOwnBlockSalt = 0xD6E8FEB86659FD93ULL;
constexpr uint64_t kNoParentKey = 0x243F6A8885A308D3ULL;
uint64_t own_block_key(uint64_t chain, RequestId id, int64_t k) {
  return mix_key(mix_key(chain ^ kOwnBlockSalt, id), k);
}

}  // namespace

uint64_t prefix_block_key(uint64_t hash, int64_t k) { return mix_key(hash, k); }

BlockKeyTable::BlockKeyTable(int64_t max_entries) {
  size_t slots = 16;
  while (slots < 2 * static_cast<size_t>(std::max<int64_t>(max_entries, 1))) slots *= 2;
  keys_.assign(slots, 0);
  blocks_.assign(slots, kAbsent);
  mask_ = slots - 1;
}

size_t BlockKeyTable::slot_of(uint64_t key) const {
  size_t i = key & mask_;
  while (blocks_[i] != kAbsent && keys_[i] != key) i = (i + 1) & mask_;
  return i;
}

int32_t BlockKeyTable::find(uint64_t key) const { return blocks_[slot_of(key)]; }

bool BlockKeyTable::insert(uint64_t key, int32_t block) {
  const size_t i = slot_of(key);
  if (blocks_[i] != kAbsent) return false;
  if (2 * (size_ + 1) > static_cast<int64_t>(blocks_.size())) {
    throw std::logic_error("BlockKeyTable: more entries than it was sized for");
  }
  keys_[i] = key;
  blocks_[i] = block;
  ++size_;
  return true;
}

void BlockKeyTable::erase(uint64_t key) {
  size_t hole = slot_of(key);
  if (blocks_[hole] == kAbsent) throw std::logic_error("BlockKeyTable: erasing a missing key");
  // Backward-shift deletion: move later entries of the probe run into the hole when their home
  // slot does not lie (cyclically) between the hole and where they are.
  for (size_t j = (hole + 1) & mask_; blocks_[j] != kAbsent; j = (j + 1) & mask_) {
    const size_t home = keys_[j] & mask_;
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    keys_[hole] = keys_[j];
    blocks_[hole] = blocks_[j];
    hole = j;
  }
  blocks_[hole] = kAbsent;
  --size_;
}

void PreemptedBlockQueue::reset(int64_t num_requests, int64_t free_blocks) {
  runs_.clear();
  first_ = 0;
  run_of_.assign(static_cast<size_t>(num_requests), -1);
  free_anonymous(free_blocks);
}

void PreemptedBlockQueue::take(int64_t n) {
  while (n > 0) {
    if (runs_.empty()) throw std::logic_error("PreemptedBlockQueue: more blocks taken than are free");
    Run& front = runs_.front();
    const int64_t taken = std::min(n, front.blocks);
    front.blocks -= taken;
    n -= taken;
    if (front.blocks == 0) {
      if (front.owner >= 0) run_of_[front.owner] = -1;
      runs_.pop_front();
      ++first_;
    }
  }
}

void PreemptedBlockQueue::free_anonymous(int64_t n) {
  if (n <= 0) return;
  if (!runs_.empty() && runs_.back().owner < 0) {
    runs_.back().blocks += n;
  } else {
    runs_.push_back({-1, n});
  }
}

void PreemptedBlockQueue::park(RequestId id, int64_t blocks) {
  // A run still parked under this id is a former occupant's (a streaming run's slot, its
  // request settled without readmission): it becomes anonymous.
  if (run_of_[id] >= 0) unpark(id, 0);
  if (blocks <= 0) return;
  runs_.push_back({id, blocks});
  run_of_[id] = first_ + static_cast<int64_t>(runs_.size()) - 1;
}

int64_t PreemptedBlockQueue::surviving(RequestId id) const {
  const int64_t run = run_of_[id];
  return run < 0 ? 0 : runs_[static_cast<size_t>(run - first_)].blocks;
}

int64_t PreemptedBlockQueue::ahead_of(RequestId id) const {
  const int64_t run = run_of_[id];
  if (run < 0) return 0;
  int64_t ahead = 0;
  for (int64_t i = first_; i < run; ++i) ahead += runs_[static_cast<size_t>(i - first_)].blocks;
  return ahead;
}

bool PreemptedBlockQueue::takes_parked(int64_t n) const {
  for (const Run& run : runs_) {
    if (n <= 0) return false;
    if (run.owner >= 0 && run.blocks > 0) return true;
    n -= run.blocks;
  }
  return false;
}

void PreemptedBlockQueue::unpark(RequestId id, int64_t reused) {
  const int64_t run = run_of_[id];
  if (run < 0) {
    if (reused > 0) throw std::logic_error("PreemptedBlockQueue: reusing blocks of a request not parked");
    return;
  }
  Run& r = runs_[static_cast<size_t>(run - first_)];
  if (reused > r.blocks) throw std::logic_error("PreemptedBlockQueue: reusing more blocks than survive");
  r.blocks -= reused;  // the rest stay where they are, free for anyone
  r.owner = -1;
  run_of_[id] = -1;
}

int64_t PreemptedBlockQueue::size() const {
  int64_t blocks = 0;
  for (const Run& run : runs_) blocks += run.blocks;
  return blocks;
}

PagedKvCache::PagedKvCache(int64_t num_requests, int64_t num_blocks, int32_t block_size, double watermark_fraction,
                           PrefixCacheSource prefix)
    : KvCacheManager(num_requests),
      num_blocks_(num_blocks),
      block_size_(block_size),
      watermark_blocks_(0),
      free_blocks_(num_blocks) {
  if (block_size < 1) throw UserError("block_size must be >= 1");
  if (std::has_single_bit(static_cast<uint32_t>(block_size))) {
    block_shift_ = std::countr_zero(static_cast<uint32_t>(block_size));
  }
  if (num_blocks < 1) throw UserError("the KV cache has no blocks: the model's weights leave no memory for KV");
  // Checked before the cast below, and written so that NaN fails: casting NaN to an integer is
  // undefined (on x86 it gives INT64_MIN, a watermark that admits into negative free blocks).
  if (!(watermark_fraction >= 0 && watermark_fraction < 1)) throw UserError("watermark must be in [0, 1)");
  // vLLM v0: watermark_blocks = int(watermark * num_gpu_blocks).
  watermark_blocks_ = static_cast<int64_t>(watermark_fraction * static_cast<double>(num_blocks));
  if (prefix.requests != nullptr && !prefix.usable()) {
    own_blocks_ = true;
    prefix_ = prefix;
    own_queue_.reset(num_requests, num_blocks);
    parked_request_.assign(static_cast<size_t>(num_requests), -1);
    hit_tokens_.assign(static_cast<size_t>(num_requests), 0);
    return;
  }
  if (!prefix.usable()) return;
  if (num_blocks > std::numeric_limits<int32_t>::max()) {
    throw UserError("prefix caching: more KV blocks than 2^31; use a larger block_size");
  }
  if (prefix.hashes->block_tokens < 1 || prefix.hashes->size() != static_cast<int64_t>(prefix.requests->size())) {
    throw std::logic_error("prefix caching: prefix block hashes do not match the workload");
  }
  caching_ = true;
  prefix_ = prefix;
  blocks_.resize(static_cast<size_t>(num_requests));
  hit_tokens_.assign(static_cast<size_t>(num_requests), 0);
  ref_.assign(static_cast<size_t>(num_blocks), 0);
  key_.assign(static_cast<size_t>(num_blocks), 0);
  in_table_.assign(static_cast<size_t>(num_blocks), 0);
  index_.assign(static_cast<size_t>(num_blocks), 0);
  queue_prev_.assign(static_cast<size_t>(num_blocks), kNone);
  queue_next_.assign(static_cast<size_t>(num_blocks), kNone);
  // FreeKVCacheBlockQueue starts ordered by block id: block 0 is handed out first.
  for (int64_t b = 0; b < num_blocks; ++b) queue_push_back(static_cast<int32_t>(b));
  table_ = BlockKeyTable(num_blocks);
}

int64_t PagedKvCache::content_blocks(RequestId id) const {
  const int64_t hashed = static_cast<int64_t>(prefix_.hashes->of(id).size()) * prefix_.hashes->block_tokens;
  const Request& r = (*prefix_.requests)[id];
  const int64_t described = r.prompt_tokens + (prefix_.hashes->covers_outputs ? int64_t{r.output_tokens} : 0);
  return std::min<int64_t>(described, hashed) / block_size_;
}

int64_t PagedKvCache::max_full_blocks(RequestId id) const {
  const Request& r = (*prefix_.requests)[id];
  return (static_cast<int64_t>(r.prompt_tokens) + r.output_tokens) / block_size_;
}

uint64_t PagedKvCache::block_key(RequestId id, int64_t k) const {
  auto content_key = [&](int64_t j) {
    const int64_t last_token = (j + 1) * block_size_ - 1;
    return prefix_block_key(prefix_.hashes->of(id)[static_cast<size_t>(last_token / prefix_.hashes->block_tokens)], j);
  };
  const int64_t content = content_blocks(id);
  if (k < content) return content_key(k);
  // Keyed by the request's own id (Request::id), not the slot it is held in: in a streaming run
  // a slot's later occupant must not find its predecessor's blocks (in an exact run they agree).
  return own_block_key(content > 0 ? content_key(content - 1) : kNoParentKey, (*prefix_.requests)[id].id, k);
}

void PagedKvCache::scan(RequestId id) const {
  // The request (Request::id), not its slot: a streaming run recycles slots.
  const RequestId request = (*prefix_.requests)[id].id;
  if (run_id_ == request && run_generation_ == generation_) return;
  run_.clear();
  host_run_ = 0;
  const int64_t n = max_full_blocks(id);
  int64_t k = 0;
  for (; k < n; ++k) {
    const uint64_t key = block_key(id, k);
    const int32_t b = table_.find(key);
    if (b == BlockKeyTable::kAbsent) {
      run_end_key_ = key;
      break;
    }
    run_.push_back(b);
  }
  // The host tier continues the run where the GPU's ends; its slots are stamped, so that a
  // store that drops one of them, or that adds the key ending it, renews the run.
  if (host_) {
    host_stamp_ = ++host_scans_;
    host_end_ = false;
    host_run_on_disk_.clear();
    for (; k < n; ++k) {
      const uint64_t key = block_key(id, k);
      const bool on_host = host_->lru.contains_stamping(key, host_stamp_);
      // (Both tiers stamp: a drop from either may change the run or where its blocks load from.)
      const bool on_disk = disk_ && disk_->lru.contains_stamping(key, host_stamp_);
      if (!on_host && !on_disk) {
        host_end_key_ = key;
        host_end_ = true;
        break;
      }
      if (disk_) host_run_on_disk_.push_back(on_host ? 0 : 1);
      ++host_run_;
    }
  }
  run_id_ = request;
  run_generation_ = generation_;
}

PagedKvCache::Hit PagedKvCache::look_up(RequestId id, int64_t max_blocks) const {
  scan(id);
  Hit hit;
  hit.blocks = std::min(static_cast<int64_t>(run_.size()), max_blocks);
  for (int64_t k = 0; k < hit.blocks; ++k) hit.evictable += ref_[run_[k]] == 0;
  if (hit.blocks == static_cast<int64_t>(run_.size())) hit.host = std::min(host_run_, max_blocks - hit.blocks);
  return hit;
}

int64_t PagedKvCache::cached_prefix_tokens(RequestId id, int64_t known_tokens) const {
  if (own_blocks_ && known_tokens >= 1) {
    return std::min(own_surviving(id), (known_tokens - 1) / block_size_) * block_size_;
  }
  if (!caching_ || known_tokens < 1) return 0;
  scan(id);
  return std::min(static_cast<int64_t>(run_.size()) + host_run_, (known_tokens - 1) / block_size_) * block_size_;
}

KvCacheManager::PrefixHeld PagedKvCache::prefix_held(RequestId id) const {
  if (!caching_) return {};
  scan(id);
  PrefixHeld held;
  held.prompt_blocks = (*prefix_.requests)[id].prompt_tokens / block_size_;
  held.gpu_blocks = std::min(static_cast<int64_t>(run_.size()), held.prompt_blocks);
  held.host_blocks = std::min(host_run_, held.prompt_blocks - held.gpu_blocks);
  return held;
}

HostKvTier::HostKvTier(int64_t capacity_blocks, int64_t max_distinct)
    : capacity_(capacity_blocks), table_(std::max<int64_t>(1, std::min(capacity_blocks, max_distinct))) {
  if (capacity_blocks < 1) throw std::logic_error("HostKvTier: no capacity");
  if (capacity_blocks > std::numeric_limits<int32_t>::max()) {
    throw UserError("--kv-offload: more host blocks than 2^31; use a larger block_size or a smaller tier");
  }
}

uint64_t HostKvTier::stamp_of(uint64_t key) const {
  const int32_t slot = table_.find(key);
  return slot == BlockKeyTable::kAbsent ? 0 : stamps_[static_cast<size_t>(slot)];
}

bool HostKvTier::contains_stamping(uint64_t key, uint64_t stamp) {
  const int32_t slot = table_.find(key);
  if (slot == BlockKeyTable::kAbsent) return false;
  stamps_[static_cast<size_t>(slot)] = stamp;
  return true;
}

void HostKvTier::unlink(int32_t slot) {
  const int32_t p = prev_[static_cast<size_t>(slot)], n = next_[static_cast<size_t>(slot)];
  (p < 0 ? head_ : next_[static_cast<size_t>(p)]) = n;
  (n < 0 ? tail_ : prev_[static_cast<size_t>(n)]) = p;
}

void HostKvTier::push_back(int32_t slot) {
  prev_[static_cast<size_t>(slot)] = tail_;
  next_[static_cast<size_t>(slot)] = -1;
  (tail_ < 0 ? head_ : next_[static_cast<size_t>(tail_)]) = slot;
  tail_ = slot;
}

HostKvTier::Stored HostKvTier::store(uint64_t key) {
  Stored result;
  if (const int32_t slot = table_.find(key); slot != BlockKeyTable::kAbsent) {
    unlink(slot);
    push_back(slot);
    return result;
  }
  int32_t slot;
  if (static_cast<int64_t>(keys_.size()) < capacity_) {
    slot = static_cast<int32_t>(keys_.size());
    keys_.push_back(key);
    stamps_.push_back(0);
    prev_.push_back(-1);
    next_.push_back(-1);
  } else {
    // Full: the least recent key leaves and its slot takes the new one.
    slot = head_;
    unlink(slot);
    table_.erase(keys_[static_cast<size_t>(slot)]);
    result.dropped = true;
    result.dropped_stamp = stamps_[static_cast<size_t>(slot)];
    ++evicted_;
    keys_[static_cast<size_t>(slot)] = key;
  }
  stamps_[static_cast<size_t>(slot)] = 0;
  table_.insert(key, slot);
  push_back(slot);
  ++stored_;
  result.added = true;
  return result;
}

void HostKvTier::touch(uint64_t key) {
  if (const int32_t slot = table_.find(key); slot != BlockKeyTable::kAbsent) {
    unlink(slot);
    push_back(slot);
  }
}

// An offload tier's figures: what its LRU kept and dropped, in tokens, and what it served.
KvOffloadStats PagedKvCache::OffloadTier::stats(int64_t block_size) const {
  KvOffloadStats s;
  s.capacity_tokens = lru.capacity_blocks() * block_size;
  s.stored_tokens = lru.stored_blocks() * block_size;
  s.evicted_tokens = lru.evicted_blocks() * block_size;
  s.hit_tokens = hit_tokens;
  s.load_bytes = load_bytes;
  s.load_s = load_s;
  return s;
}

PagedKvCache::OffloadTier& PagedKvCache::tier(std::optional<OffloadTier>& t, const char* which) {
  if (!t) throw std::logic_error(fmt::format("PagedKvCache: a load noted for a {} tier it does not have", which));
  return *t;
}

std::optional<KvOffloadStats> PagedKvCache::offload_stats() const {
  if (!host_) return std::nullopt;
  return host_->stats(block_size_);
}

int64_t PagedKvCache::max_distinct_blocks() const {
  // At most every block of every request's prompt and output, the distinct keys a run can store.
  int64_t distinct = 0;
  for (const Request& r : *prefix_.requests)
    distinct += blocks_for(static_cast<int64_t>(r.prompt_tokens) + r.output_tokens);
  return distinct;
}

std::optional<KvOffloadStats> PagedKvCache::disk_offload_stats() const {
  if (!disk_) return std::nullopt;
  return disk_->stats(block_size_);
}

void PagedKvCache::set_disk_tier(int64_t blocks) {
  if (!host_) throw std::logic_error("PagedKvCache: a disk tier needs the host tier");
  if (holders_ > 0) throw std::logic_error("PagedKvCache: disk tier set after an admission");
  disk_.emplace(blocks, max_distinct_blocks(), blocks_.size());
  ++generation_;  // a kept run was scanned without it
}

void PagedKvCache::set_host_tier(int64_t blocks) {
  if (!caching_) throw std::logic_error("PagedKvCache: a host tier needs prefix caching");
  if (holders_ > 0) throw std::logic_error("PagedKvCache: host tier set after an admission");
  host_.emplace(blocks, max_distinct_blocks(), blocks_.size());
}

// The queue's own links only; free_blocks_ and evictable_ are counted by the callers.
void PagedKvCache::queue_unlink(int32_t b) {
  const int32_t prev = queue_prev_[b], next = queue_next_[b];
  (prev == kNone ? queue_head_ : queue_next_[prev]) = next;
  (next == kNone ? queue_tail_ : queue_prev_[next]) = prev;
  queue_prev_[b] = queue_next_[b] = kNone;
}

void PagedKvCache::queue_push_back(int32_t b) {
  queue_prev_[b] = queue_tail_;
  queue_next_[b] = kNone;
  (queue_tail_ == kNone ? queue_head_ : queue_next_[queue_tail_]) = b;
  queue_tail_ = b;
}

int32_t PagedKvCache::take_free_block() {
  // The least recently freed block (FreeKVCacheBlockQueue.popleft_n), evicted from the cache
  // if it is in it (BlockPool.get_new_blocks, _maybe_evict_cached_block).
  const int32_t b = queue_head_;
  if (b == kNone) throw std::logic_error("PagedKvCache: no free block to take");
  queue_unlink(b);
  --free_blocks_;
  if (in_table_[b]) {
    table_.erase(key_[b]);
    ++generation_;  // the block may have been in the run scan() keeps
    in_table_[b] = 0;
    --evictable_;
  }
  ref_[b] = 1;
  return b;
}

bool PagedKvCache::allocation_evicts(int64_t n) const {
  if (own_blocks_) return own_queue_.takes_parked(n);
  if (!caching_) return false;
  int32_t b = queue_head_;
  for (int64_t i = 0; i < n && b != kNone; ++i, b = queue_next_[b]) {
    if (in_table_[b]) return true;
  }
  return false;
}

bool PagedKvCache::allocation_evicts_run_of(RequestId id, int64_t n) const {
  if (own_blocks_) return own_surviving(id) > 0 && own_queue_.ahead_of(id) < n;
  if (!caching_) return false;
  scan(id);
  const auto run = static_cast<int64_t>(run_.size());
  int32_t b = queue_head_;
  for (int64_t i = 0; i < n && b != kNone; ++i, b = queue_next_[b]) {
    // A block of the run sits at its index in it.
    if (in_table_[b] && index_[b] < run && run_[index_[b]] == b) return true;
  }
  return false;
}

std::vector<int32_t> PagedKvCache::free_queue() const {
  std::vector<int32_t> queue;
  if (!caching_) return queue;
  for (int32_t b = queue_head_; b != kNone; b = queue_next_[b]) queue.push_back(b);
  return queue;
}

void PagedKvCache::enter_full_blocks(RequestId id, int64_t from_tokens, int64_t to_tokens) {
  // Blocks that become full with tokens (from_tokens, to_tokens].
  const int64_t end = to_tokens / block_size_;
  const std::vector<int32_t>& blocks = blocks_[id];
  for (int64_t k = from_tokens / block_size_; k < end; ++k) {
    const int32_t b = blocks[static_cast<size_t>(k)];
    const uint64_t key = block_key(id, k);
    if (table_.insert(key, b)) {
      key_[b] = key;
      in_table_[b] = 1;
      index_[b] = static_cast<int32_t>(k);
      if (key == run_end_key_) ++generation_;  // the run scan() keeps may go on further
    }
    // Stored to the host tier as it is computed; the run scan() keeps changes if the key is the
    // one that ended its host part, or if the key dropped for it was in that part.
    if (host_) {
      auto renews = [&](const HostKvTier::Stored& stored) {
        return (stored.added && host_end_ && key == host_end_key_) ||
               (stored.dropped && stored.dropped_stamp == host_stamp_);
      };
      const HostKvTier::Stored stored = host_->lru.store(key);
      bool renew = renews(stored);
      if (disk_) {
        // A block of the run that only the disk held is now on the host too: it loads faster.
        renew = renew || (stored.added && host_stamp_ != 0 && disk_->lru.stamp_of(key) == host_stamp_);
        renew = renews(disk_->lru.store(key)) || renew;
      }
      if (renew) ++generation_;
    }
  }
}

void PagedKvCache::set_side_blocks(int64_t blocks) {
  if (blocks < 0) throw std::logic_error("PagedKvCache: negative side blocks");
  if (holders_ > 0) throw std::logic_error("PagedKvCache: side blocks set after an admission");
  side_blocks_ = blocks;
  if (caching_) side_.resize(blocks_.size());
}

bool PagedKvCache::can_admit(RequestId id, int64_t tokens, int64_t /*reserve_tokens*/) const {
  if (!caching_) {
    // vLLM v0 can_allocate: OK only if free - required >= watermark_blocks.
    return free_blocks_ - blocks_for(tokens) - side_blocks_ >= watermark_blocks_;
  }
  // Hit blocks are not allocated, but those at ref 0 leave the free pool when shared.
  const Hit hit = look_up(id, (tokens - 1) / block_size_);
  return free_blocks_ - (blocks_for(tokens) - hit.blocks) - hit.evictable - side_blocks_ >= watermark_blocks_;
}

bool PagedKvCache::try_admit(RequestId id, int64_t tokens, int64_t reserve_tokens) {
  if (holds(id)) throw std::logic_error("PagedKvCache: request admitted twice");
  if (!can_admit(id, tokens, reserve_tokens)) return false;
  if (caching_) {
    // The hit can_admit counted (scan() kept the run: nothing changed since).
    const Hit hit = look_up(id, (tokens - 1) / block_size_);
    const int64_t hits = hit.blocks;
    std::vector<int32_t>& blocks = blocks_[id];
    blocks.clear();
    blocks.reserve(static_cast<size_t>(blocks_for(std::max(tokens, reserve_tokens))));
    for (int64_t k = 0; k < hits; ++k) {
      const int32_t b = run_[k];
      if (ref_[b] == 0) {
        queue_unlink(b);  // evictable -> in use (BlockPool.touch)
        --free_blocks_;
        --evictable_;
      } else {
        ++shared_refs_;
      }
      ++ref_[b];
      blocks.push_back(b);
    }
    const int64_t hit_tokens = static_cast<int64_t>(blocks.size()) * block_size_;
    hit_tokens_[id] = hit_tokens;
    if (host_) {
      // The offload tiers' blocks after the GPU's: new GPU blocks, loaded (entered below).
      // Each is touched before enter_full_blocks stores it again: those stores also promote the
      // disk-only blocks to the host, and without the touch one of them could drop a host block
      // of this very run, which would then be stored anew (measured: the host's stored and
      // evicted counts change on Mooncake with a disk tier; without one the touch is redundant).
      int64_t from_disk = 0;
      for (int64_t k = hits; k < hits + hit.host; ++k) {
        if (disk_ && host_run_on_disk_[static_cast<size_t>(k - hits)] != 0) {
          ++from_disk;
          disk_->lru.touch(block_key(id, k));
        } else {
          host_->lru.touch(block_key(id, k));
        }
      }
      host_->loaded_tokens[id] = hit.host * block_size_;
      host_->hit_tokens += (hit.host - from_disk) * block_size_;
      if (disk_) {
        disk_->loaded_tokens[id] = from_disk * block_size_;
        disk_->hit_tokens += from_disk * block_size_;
      }
    }
    for (int64_t k = static_cast<int64_t>(blocks.size()); k < blocks_for(tokens); ++k) {
      blocks.push_back(take_free_block());
    }
    enter_full_blocks(id, hit_tokens, tokens);
    // The side blocks last: taking them may evict a cached block, never one of the hit.
    for (int64_t k = 0; k < side_blocks_; ++k) side_[id].push_back(take_free_block());
  } else {
    const int64_t blocks = blocks_for(tokens) + side_blocks_;
    if (own_blocks_) {
      // Its surviving own blocks, up to the hit cached_prefix_tokens gave, leave the queue
      // (BlockPool.touch); the others it needs come from the front.
      const int64_t reused = std::min(own_surviving(id), (tokens - 1) / block_size_);
      own_queue_.unpark(id, reused);
      hit_tokens_[id] = reused * block_size_;
      free_blocks_ -= reused;
      take_counted(blocks - reused);
    } else {
      free_blocks_ -= blocks;
    }
  }
  ++holders_;
  tokens_[id] = tokens;
  used_tokens_ += tokens;
  return true;
}

void PagedKvCache::throw_growing_unheld() {
  throw std::logic_error("PagedKvCache: growing a request that holds no KV");
}

void PagedKvCache::take_blocks_for_growth(RequestId id, int64_t have, int64_t tokens, int64_t needed) {
  for (int64_t i = 0; i < needed; ++i) blocks_[id].push_back(take_free_block());
  if (tokens / block_size_ > have / block_size_) enter_full_blocks(id, have, tokens);
}

void KvCacheManager::begin_decode_run(std::span<const BatchItem> items) {
  if (in_run_) throw std::logic_error("KV cache: a decode run began inside another");
  // Written in place, not pushed: a run begins at every fast-forward, over every decode.
  run_ids_.resize(items.size());
  RequestId* ids = run_ids_.data();
  for (const BatchItem& item : items) {
    if (!holds(item.id)) throw std::logic_error("KV cache: a decode run over a request that holds no KV");
    *ids++ = item.id;
  }
  run_steps_ = 0;
  in_run_ = true;
  start_decode_run();
}

void KvCacheManager::end_decode_run() {
  if (!in_run_) return;
  if (!decode_run_steps_in_place()) {
    for (const RequestId id : run_ids_) tokens_[id] += run_steps_;
  }
  in_run_ = false;
}

void PagedKvCache::start_decode_run() {
  if (caching_) return;
  run_residues_.assign(static_cast<size_t>(block_size_), 0);
  for (const RequestId id : run_ids_) ++run_residues_[static_cast<size_t>(tokens_[id] % block_size_)];
}

int64_t PagedKvCache::decode_run_blocks() const {
  if (!in_run_) throw std::logic_error("PagedKvCache: no decode run");
  if (caching_) {
    int64_t blocks = 0;
    for (const RequestId id : run_ids_) blocks += tokens_[id] % block_size_ == 0 ? 1 : 0;
    return blocks;
  }
  // After s steps a request that began with t tokens holds t + s; its next token takes a block
  // when t + s is a multiple of the block size, i.e. t = -s modulo the block size.
  const int64_t s = run_steps_ % block_size_;
  return run_residues_[static_cast<size_t>((block_size_ - s) % block_size_)];
}

bool PagedKvCache::decode_run_step() {
  const int64_t blocks = decode_run_blocks();
  // Decode growth ignores the watermark (vLLM v0 can_append_slots), as try_grow.
  if (blocks > free_blocks_) return false;
  if (caching_) {
    for (const RequestId id : run_ids_) {
      if (!try_grow(id, tokens_[id] + 1))
        throw std::logic_error("PagedKvCache: decode run growth failed after its blocks were counted");
    }
  } else {
    take_counted(blocks);
    used_tokens_ += static_cast<int64_t>(run_ids_.size());
  }
  ++run_steps_;
  return true;
}

void PagedKvCache::release(RequestId id) { release_blocks(id, false); }

void PagedKvCache::release_preempted(RequestId id) { release_blocks(id, true); }

void PagedKvCache::release_blocks(RequestId id, bool preempted) {
  if (in_run_) throw std::logic_error("PagedKvCache: release inside a decode run");
  if (!holds(id)) return;
  if (caching_) {
    std::vector<int32_t>& blocks = blocks_[id];
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {  // tail first (v1 free order)
      const int32_t b = *it;
      if (--ref_[b] > 0) {
        --shared_refs_;
        continue;
      }
      queue_push_back(b);
      ++free_blocks_;
      evictable_ += in_table_[b];
    }
    blocks.clear();
    hit_tokens_[id] = 0;
    if (host_) host_->loaded_tokens[id] = 0;
    if (disk_) disk_->loaded_tokens[id] = 0;
    if (side_blocks_ > 0) {
      for (const int32_t b : side_[id]) {
        ref_[b] = 0;
        queue_push_back(b);
        ++free_blocks_;
      }
      side_[id].clear();
    }
  } else {
    const int64_t blocks = blocks_for(tokens_[id]) + side_blocks_;
    free_blocks_ += blocks;
    if (own_blocks_) {
      // The partial last block and the side blocks first, then the full ones; only a preempted
      // request will look its blocks up again (a finished one never comes back).
      const int64_t full = preempted ? tokens_[id] / block_size_ : 0;
      own_queue_.free_anonymous(blocks - full);
      own_queue_.park(id, full);
      parked_request_[id] = (*prefix_.requests)[id].id;
      hit_tokens_[id] = 0;
    }
  }
  --holders_;
  used_tokens_ -= tokens_[id];
  tokens_[id] = -1;
}

bool PagedKvCache::fits_when_empty(int64_t reserve_tokens) const {
  // Prefix-cache hits are not counted: a cached prefix may be evicted before the request is
  // (re)admitted, so it must fit without one.
  return num_blocks_ - blocks_for(reserve_tokens) - side_blocks_ >= watermark_blocks_;
}

void PagedKvCache::check_invariants() const {
  auto fail = [](const std::string& what) { throw std::logic_error("PagedKvCache: " + what); };
  const auto n = static_cast<RequestId>(tokens_.size());
  int64_t held_blocks = 0, tokens = 0, holders = 0;
  for (RequestId id = 0; id < n; ++id) {
    held_blocks += blocks_of(id) + (holds(id) ? side_blocks_ : 0);
    holders += holds(id);
    tokens += tokens_of(id);
    if (caching_ && side_blocks_ > 0 && static_cast<int64_t>(side_[id].size()) != (holds(id) ? side_blocks_ : 0)) {
      fail(fmt::format("request {} holds {} side blocks, not {}", id, side_[id].size(), side_blocks_));
    }
    if (caching_ && static_cast<int64_t>(blocks_[id].size()) != blocks_of(id)) {
      fail(fmt::format("request {} holds {} blocks for {} tokens", id, blocks_[id].size(), tokens_of(id)));
    }
  }
  if (tokens != used_tokens_) fail("per-request tokens do not add up to used_tokens");
  if (holders != holders_) fail("the count of requests holding KV is off");
  if (free_blocks_ < 0 || free_blocks_ > num_blocks_) fail("free block count out of range");
  if (!caching_) {
    if (held_blocks + free_blocks_ != num_blocks_) fail("blocks lost or made up");
    if (own_blocks_ && own_queue_.size() != free_blocks_) fail("the own-blocks queue does not hold the free blocks");
    return;
  }
  std::vector<int32_t> refs(static_cast<size_t>(num_blocks_), 0);
  for (RequestId id = 0; id < n; ++id) {
    for (const int32_t b : blocks_[id]) ++refs[b];
    if (side_blocks_ > 0) {
      for (const int32_t b : side_[id]) {
        if (in_table_[b]) fail(fmt::format("side block {} is in the prefix cache", b));
        ++refs[b];
      }
    }
  }
  int64_t referenced = 0, shared = 0;
  for (int64_t b = 0; b < num_blocks_; ++b) {
    if (refs[b] != ref_[b]) fail(fmt::format("block {} has ref {} but {} holders", b, ref_[b], refs[b]));
    referenced += refs[b] > 0;
    shared += std::max(refs[b] - 1, 0);
  }
  if (shared != shared_refs_) fail("shared reference count is off");
  if (referenced + free_blocks_ != num_blocks_) fail("allocated + free != num_blocks");
  int64_t queued = 0, evictable = 0;
  std::vector<uint8_t> in_queue(static_cast<size_t>(num_blocks_), 0);
  for (int32_t b = queue_head_; b != kNone; b = queue_next_[b]) {
    if (ref_[b] != 0) fail(fmt::format("free block {} is referenced", b));
    if (in_queue[b]) fail("free queue has a cycle");
    in_queue[b] = 1;
    evictable += in_table_[b];
    ++queued;
    if (queue_next_[b] == kNone && queue_tail_ != b) fail("free queue ends before its tail");
  }
  if (queued != free_blocks_) fail("free queue and free block count differ");
  if (evictable != evictable_) fail("evictable count is off");
  int64_t in_table = 0;
  for (int64_t b = 0; b < num_blocks_; ++b) in_table += in_table_[b];
  if (in_table != table_.size()) fail("blocks marked cached and table entries differ");
  table_.for_each([&](uint64_t key, int32_t b) {
    if (!in_table_[b] || key_[b] != key) fail(fmt::format("table entry of block {} is stale", b));
    if (table_.find(key) != b) fail(fmt::format("table entry of block {} cannot be found", b));
  });
}

ReservedKvCache::ReservedKvCache(int64_t num_requests, int64_t capacity_tokens, int32_t block_size)
    : KvCacheManager(num_requests),
      block_size_(block_size),
      capacity_(block_size > 0 ? capacity_tokens / block_size * block_size : 0),
      reserved_(num_requests, 0) {
  if (block_size < 1) throw UserError("block_size must be >= 1");
  if (capacity_ < 1) throw UserError("the KV cache has no room: the model's weights leave no memory for KV");
}

bool ReservedKvCache::can_admit(RequestId /*id*/, int64_t tokens, int64_t reserve_tokens) const {
  return reserved_total_ + rounded(std::max(tokens, reserve_tokens)) <= capacity_;
}

bool ReservedKvCache::try_admit(RequestId id, int64_t tokens, int64_t reserve_tokens) {
  if (holds(id)) throw std::logic_error("ReservedKvCache: request admitted twice");
  if (!can_admit(id, tokens, reserve_tokens)) return false;
  reserve_tokens = rounded(std::max(tokens, reserve_tokens));
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

void ReservedKvCache::start_decode_run() {
  run_slack_ = std::numeric_limits<int64_t>::max();
  for (const RequestId id : run_ids_) run_slack_ = std::min(run_slack_, reserved_[id] - tokens_[id]);
}

bool ReservedKvCache::decode_run_step() {
  if (!in_run_) throw std::logic_error("ReservedKvCache: no decode run");
  // A contiguous reservation cannot grow in place: the step fits while every request's
  // reservation has room for one more token.
  if (run_steps_ >= run_slack_) return false;
  used_tokens_ += static_cast<int64_t>(run_ids_.size());
  ++run_steps_;
  return true;
}

void ReservedKvCache::release(RequestId id) {
  if (in_run_) throw std::logic_error("ReservedKvCache: release inside a decode run");
  if (!holds(id)) return;
  reserved_total_ -= reserved_[id];
  used_tokens_ -= tokens_[id];
  reserved_[id] = 0;
  tokens_[id] = -1;
}

bool ReservedKvCache::fits_when_empty(int64_t reserve_tokens) const { return rounded(reserve_tokens) <= capacity_; }

}  // namespace batchsim
