// batchsim — KV-cache managers: who may hold KV memory, and how much.
//
// Two managers, switchable per policy:
//  * PagedKvCache (vLLM PagedAttention): memory is `num_blocks` blocks of `block_size` tokens;
//    a request holds ceil(tokens / block_size) blocks, allocated just in time as its tokens are
//    written and freed on completion or preemption. Admission keeps `watermark_blocks` free
//    (vLLM v0 SelfAttnBlockSpaceManager.can_allocate); growth of running requests ignores the
//    watermark (can_append_slots).
//    With prefix caching (vLLM v1 automatic prefix caching, SGLang RadixAttention) physical
//    blocks are shared by reference count between requests whose prompts start alike; see
//    "Prefix caching" below.
//  * ReservedKvCache (HF pipelines, FasterTransformer, Orca): contiguous memory; at admission a
//    request reserves its whole future footprint (prompt + max_new_tokens, or max_model_len
//    when the server cannot know the output length). The vLLM paper measures this
//    over-reservation as 60-80% waste. A reservation may be counted in whole blocks
//    (`block_size` > 1): TensorRT-LLM's GUARANTEED_NO_EVICT reserves
//    ceil(tokens / tokens_per_block) blocks of a paged cache (capacityScheduler.cpp with
//    kvCacheManager.cpp getRemainingBlocksToCompletion), which is a contiguous reservation
//    rounded up to blocks; block_size 1 counts tokens.
//
// Invariants (checked by tests on every iteration of randomized runs):
//   paged:    allocated_blocks + free_blocks == num_blocks; a request's blocks cover its tokens;
//             with prefix caching also: reference counts equal the requests holding each block,
//             no evictable block is referenced (PagedKvCache::check_invariants checks them all).
//   reserved: reserved_tokens <= capacity_tokens; a request's tokens <= its reservation.
//   both:     used_tokens <= allocated_tokens <= capacity_tokens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "sim/batch.h"
#include "sim/kv_offload.h"
#include "sim/workload/request.h"
#include "sim/workload/trace_reader.h"

namespace batchsim {

// Tokens per KV block unless a policy says otherwise: vLLM's CacheConfig default block_size.
// Also the unit of --num-gpu-blocks for managers that have no blocks (SimulationOptions).
inline constexpr int32_t kDefaultBlockSize = 16;

class KvCacheManager {
 public:
  virtual ~KvCacheManager() = default;
  virtual std::string_view kind() const = 0;
  // The offload tier's figures, when the manager has one (PagedKvCache::set_host_tier).
  virtual std::optional<KvOffloadStats> offload_stats() const { return std::nullopt; }
  virtual std::optional<KvOffloadStats> disk_offload_stats() const { return std::nullopt; }

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
  virtual bool can_admit(RequestId id, int64_t tokens, int64_t reserve_tokens) const = 0;
  // Leading tokens of `id` whose KV the cache still holds (computed by another request with
  // the same prefix, or by `id` itself before a recompute preemption, its output included):
  // what try_admit(id, tokens, ...) shares instead of allocating, for any tokens in
  // (result, known_tokens]. Never all of `known_tokens` (at least the last token is computed
  // so that the model can sample). 0 for managers without prefix caching.
  virtual int64_t cached_prefix_tokens(RequestId /*id*/, int64_t /*known_tokens*/) const { return 0; }
  // For a cache-aware router (Router::kPrecisePrefix): the longest run of `id`'s leading full
  // prompt blocks this cache holds, as blocks in GPU memory and, continuing them, in a host
  // tier, and the prompt's full blocks that the run is scored against. Zeros without caching.
  struct PrefixHeld {
    int64_t gpu_blocks = 0, host_blocks = 0, prompt_blocks = 0;
  };
  virtual PrefixHeld prefix_held(RequestId /*id*/) const { return {}; }
  // For a dry run of admission that changes nothing (TGI's "would enough requests fit?"):
  // the room left for new requests and what admitting one takes from it, in the manager's own
  // unit (paged: free blocks above the watermark; reserving: unreserved tokens). Prefix-cache
  // hits are not subtracted, so a dry run never counts more admissions than would succeed.
  virtual int64_t admission_room() const = 0;
  virtual int64_t admission_cost(int64_t tokens, int64_t reserve_tokens) const = 0;

  virtual int64_t capacity_tokens() const = 0;
  virtual int64_t allocated_tokens() const = 0;  // blocks * block_size, or reservations
  virtual int64_t used_tokens() const = 0;       // tokens really written
  bool holds(RequestId id) const { return id < static_cast<RequestId>(tokens_.size()) && tokens_[id] >= 0; }
  int64_t tokens_of(RequestId id) const { return holds(id) ? tokens_[id] : 0; }

  // Decode runs (fast-forward, Policy::repeat_decode_step): steps in each of which every
  // request of a decode batch grows by one token, as try_grow(id, tokens_of(id) + 1) of each
  // item in batch order would grow it. begin_decode_run(items) starts a run over the items'
  // requests (each held); decode_run_blocks() is what the next step allocates (paged: blocks;
  // the reserving manager allocates nothing); decode_run_step() takes that step, or returns
  // false and changes nothing when memory does not allow it; end_decode_run() closes the run.
  // Why: a run of identical decode iterations must cost per event, not per sequence-step
  // (DESIGN.md, "Performance principles"). Without prefix caching a step is O(1): a request
  // takes a block exactly when its tokens are a multiple of the block size, so a histogram of
  // the requests' tokens modulo the block size says how many blocks each step takes, and a
  // reservation's smallest slack says when growth stops fitting. Per-request counts
  // (tokens_of) of the run's requests then lag behind until end_decode_run(), while the totals
  // (used, allocated, free) are exact after every step. With prefix caching each step grows
  // each request in batch order, since which block a request takes and when a full block
  // enters the table must follow that order to the block. Between begin and end nothing else
  // may be called but the totals' getters and these.
  void begin_decode_run(std::span<const BatchItem> items);
  virtual int64_t decode_run_blocks() const = 0;
  virtual bool decode_run_step() = 0;
  void end_decode_run();

  // Decode cohorts (sim/decode_cohort.h): the lockstep decodes a policy keeps as one set grow
  // by `tokens` in all per step, taking `blocks` blocks (the set counts them: its members at a
  // block boundary; 0 for the reserving manager); false, changing nothing, when they are not
  // free. The members' own counts (tokens_of) lag behind until settle_cohort_member gives each
  // its tokens as it leaves the set; the totals are exact after every step. Only where
  // cohort_grows_by_count(): a paged cache with prefix caching must grow each request in order.
  virtual bool cohort_grows_by_count() const = 0;
  virtual bool grow_cohort(int64_t tokens, int64_t blocks) = 0;
  void settle_cohort_member(RequestId id, int64_t tokens) {
    if (!holds(id)) throw std::logic_error("KvCacheManager: settling a cohort member that holds no KV");
    tokens_[id] = tokens;
  }
  // Whether request `id` can grow one token per step until it holds `final_tokens`, whatever
  // the others do, without asking for memory that may be missing: a reservation that covers
  // them (paged growth takes blocks, counted per step instead).
  virtual bool grows_within(RequestId id, int64_t final_tokens) const = 0;
  bool in_decode_run() const { return in_run_; }
  int64_t decode_run_steps() const { return run_steps_; }

 protected:
  explicit KvCacheManager(int64_t num_requests) : tokens_(num_requests, -1) {}
  // The manager's own part of begin_decode_run (after run_ids_ is filled) and whether its
  // steps keep tokens_ current (else end_decode_run adds the steps to each request's tokens).
  virtual void start_decode_run() = 0;
  virtual bool decode_run_steps_in_place() const = 0;
  std::vector<int64_t> tokens_;  // per request: tokens written, -1 when holding nothing
  int64_t used_tokens_ = 0;
  // The decode run in progress (see begin_decode_run).
  std::vector<RequestId> run_ids_;
  int64_t run_steps_ = 0;
  bool in_run_ = false;
};

// The key of block `k` of a prompt whose content hash there is `hash` (a trace's hash_id, or a
// synthetic prefix's): the prefix cache keys its blocks so, and a run of keys from block 0 is a
// shared prefix. Distinct (hash, k) collide only as often as random 64-bit keys do.
uint64_t prefix_block_key(uint64_t hash, int64_t k);

// key -> block of the prefix cache: open addressing with linear probing and backward-shift
// deletion, sized to at most half full. A std::unordered_map allocated a node per insert and
// spent most of a cached Mooncake replay in malloc and cache misses (Abseil's flat_hash_map
// and vLLM's dict do not allocate per entry either). Keys are already well mixed.
class BlockKeyTable {
 public:
  static constexpr int32_t kAbsent = -1;
  explicit BlockKeyTable(int64_t max_entries = 0);
  int32_t find(uint64_t key) const;
  bool insert(uint64_t key, int32_t block);  // false, changing nothing, if the key is there
  void erase(uint64_t key);                  // the key must be there
  int64_t size() const { return size_; }
  template <typename F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < blocks_.size(); ++i) {
      if (blocks_[i] != kAbsent) f(keys_[i], blocks_[i]);
    }
  }

 private:
  size_t slot_of(uint64_t key) const;  // where `key` is, or the empty slot ending its probe
  std::vector<uint64_t> keys_;
  std::vector<int32_t> blocks_;  // kAbsent: empty slot
  uint64_t mask_ = 0;
  int64_t size_ = 0;
};

// The host tier of a paged prefix cache: an LRU set of block keys (the prefix cache's keys, so
// a block computed once is found again by any request whose prompt holds it). Flat: slots in
// arrays linked least recent first, found through an open-addressing table, so that storing
// every block a run computes costs O(1) without an allocation. A scan may stamp the slots it
// walks, so that the cache learns whether a dropped key was in the run it keeps.
class HostKvTier {
 public:
  // `max_distinct`: at most this many distinct keys will ever be stored (sizes the table).
  HostKvTier(int64_t capacity_blocks, int64_t max_distinct);
  int64_t capacity_blocks() const { return capacity_; }
  bool contains(uint64_t key) const { return table_.find(key) != BlockKeyTable::kAbsent; }
  // Whether `key` is here; if so its slot is stamped with `stamp`.
  bool contains_stamping(uint64_t key, uint64_t stamp);
  // The stamp of `key`'s slot (0: absent, or never stamped since it was stored).
  uint64_t stamp_of(uint64_t key) const;
  struct Stored {
    bool added = false;          // a key new to the tier
    uint64_t dropped_stamp = 0;  // the stamp of the key it dropped (0: none dropped)
    bool dropped = false;
  };
  // Stores `key` (or refreshes it) as the most recent; drops the least recent beyond capacity.
  Stored store(uint64_t key);
  // A block served from here: the most recent again.
  void touch(uint64_t key);
  int64_t stored_blocks() const { return stored_; }
  int64_t evicted_blocks() const { return evicted_; }

 private:
  void unlink(int32_t slot);
  void push_back(int32_t slot);
  int64_t capacity_;
  BlockKeyTable table_;  // key -> slot
  std::vector<uint64_t> keys_, stamps_;
  std::vector<int32_t> prev_, next_;
  int32_t head_ = -1, tail_ = -1;  // least and most recent
  int64_t stored_ = 0, evicted_ = 0;
};

// What prefix caching needs to know of each request: its prompt length and the hashes of its
// prompt blocks (sim/workload/trace_reader.h). Caching is per block when both are given and
// hashes exist; with the requests alone, only a preempted request's own blocks are found again
// (PreemptedBlockQueue); with neither, it is off.
struct PrefixCacheSource {
  const Workload* requests = nullptr;
  const PrefixBlockHashes* hashes = nullptr;
  bool usable() const { return requests != nullptr && hashes != nullptr && !hashes->empty(); }
};

// vLLM's free block queue seen by count, for prefix caching on a workload without prompt-block
// hashes: no request shares another's blocks then, and the only blocks ever found again are a
// preempted request's own (vLLM hashes every full block of every request; a request preempted
// by recompute is looked up again at readmission and recomputes only what was evicted). The
// queue is a list of runs of free blocks: anonymous ones (never used, a finished request's, a
// last partial block) and each waiting preempted request's full blocks. A release appends at
// the back, a request's tail first (BlockPool.free_blocks of the reversed blocks), so its head
// blocks are taken last; allocation takes from the front (FreeKVCacheBlockQueue.popleft_n).
// This is what PagedKvCache's per-block queue does on such a workload, in O(1) per allocation
// whatever the number of blocks, so that a decode cohort can still grow by count.
class PreemptedBlockQueue {
 public:
  void reset(int64_t num_requests, int64_t free_blocks);
  void take(int64_t n);                       // n blocks from the front
  void free_anonymous(int64_t n);             // appended at the back
  void park(RequestId id, int64_t blocks);    // id's full blocks, appended after its partial one
  int64_t surviving(RequestId id) const;      // of them, not taken yet (its first blocks)
  int64_t ahead_of(RequestId id) const;       // free blocks before them
  bool takes_parked(int64_t n) const;         // taking n would take a parked block
  void unpark(RequestId id, int64_t reused);  // id readmitted with `reused` of them
  int64_t size() const;                       // every free block (invariants)

 private:
  struct Run {
    RequestId owner;  // -1: anonymous
    int64_t blocks;
  };
  std::deque<Run> runs_;
  int64_t first_ = 0;            // the index of runs_.front() since reset
  std::vector<int64_t> run_of_;  // per request: the index of its parked run, or -1
};

// Prefix caching (vLLM v1 automatic prefix caching, read at vLLM main, commit 28be48f of
// 2026-05-24: vllm/v1/core/kv_cache_manager.py get_computed_blocks and allocate_slots,
// vllm/v1/core/block_pool.py, FreeKVCacheBlockQueue and hash_block_tokens in
// vllm/v1/core/kv_cache_utils.py, cache_blocks and free in single_type_kv_cache_manager.py):
//  * Every full paged block k (block_size B) of a request is cacheable, prompt or output: v1
//    hashes each full block of all_token_ids as tokens are appended (get_request_block_hasher)
//    and caches it. A block's key names its whole prefix, as hash_block_tokens chains a
//    block's hash from its parent's and its own tokens. The simulator has no token ids, so:
//     - the first `content_blocks` blocks, those inside both the prompt (with the output where
//       the hashes cover outputs: a session's conversation) and the tokens the workload's
//       prompt-block hashes cover (G = hashes.block_tokens), are keyed
//       mix(hashes[((k+1)B - 1) / G], k): the hash covering the block's last token names the
//       prefix up to there (the workload's hashes are chained), k its place in it;
//     - every later block (the output, and prompt tokens the hashes do not describe, which
//       the workloads make unique to the request) is keyed from the chain so far (the last
//       content key), the request id and k. It is never shared with another request, but the
//       request finds it again: one preempted by recompute is re-prefilled with prompt and
//       output (v1 resets num_computed_tokens and looks its block_hashes up again), and hits
//       what of its own blocks was not evicted.
//    Nothing is invented for conversations: where a trace's hash_ids cover the history
//    (Mooncake's multi-turn prompts hold the earlier turns and their answers), a later turn
//    already shares those blocks through its prompt hashes.
//  * Admission shares the longest run of cached blocks from block 0 (ref++), but never the
//    whole of the tokens to hold (v1 max_cache_hit_length = num_tokens - 1: the last token is
//    recomputed to sample from it). New blocks that are (or become) full enter the table when
//    they are allocated, as v1 caches blocks in allocate_slots, so a request admitted later in
//    the same step can hit them. A key already in the table is not entered twice: the
//    duplicate block stays uncached (v1's BlockHashToBlockMap keeps both; either serves a hit).
//  * One LRU free queue, as FreeKVCacheBlockQueue: it starts in block order and holds every
//    block at ref 0, cached or not; those are the free blocks. Release does ref-- over the
//    request's blocks last block first (free() passes them reversed to
//    BlockPool.free_blocks) and appends those that reach 0, so a request's tail is evicted
//    before its head and a prefix outlives its continuations. Allocation takes from the
//    front, the least recently freed block; a cached one loses its key then (get_new_blocks,
//    _maybe_evict_cached_block). A hit on a block at ref 0 takes it out of the queue
//    (BlockPool.touch).
//  * Admission needs its new blocks plus its evictable hit blocks (which leave the free pool
//    when shared) to be free, keeping the watermark (v1 allocate_slots counts
//    num_evictable_computed_blocks the same way).
// Every operation costs O(blocks it touches) hash-table operations; nothing is per token.
class PagedKvCache final : public KvCacheManager {
 public:
  PagedKvCache(int64_t num_requests, int64_t num_blocks, int32_t block_size, double watermark_fraction = 0.0,
               PrefixCacheSource prefix = {});
  std::string_view kind() const override { return "paged"; }
  // Blocks every admitted request holds beside those of its tokens, taken at admission and
  // freed with it: the pages of a hybrid pool's sliding-window layers (CostModel::WindowKv::
  // hybrid, sliding_window_side_blocks), bounded by the window, never shared. Set before any
  // admission.
  void set_side_blocks(int64_t blocks);
  int64_t side_blocks() const { return side_blocks_; }
  // A host (CPU) tier of `blocks` blocks under the prefix cache (prefix caching only; set before
  // any admission). Every block that becomes full is stored there too, as vLLM's
  // OffloadingConnector stores completed blocks after they are computed
  // (vllm/v1/kv_offload/cpu/gpu_worker.py), by LRU. Admission finds the longest run of cached
  // blocks on the GPU and continues it with the blocks the host holds: those are allocated on
  // the GPU like new ones and loaded instead of computed (loaded_tokens_of; the policy times
  // the copy), and they enter the GPU's prefix cache.
  void set_host_tier(int64_t blocks);
  // A disk tier of `blocks` blocks beside the host tier (set after it, before any admission), as
  // LMCache keeps one below its CPU cache: every block stored in the host tier is written to
  // disk too, with its own LRU, so the disk keeps what the host dropped for longer; a block
  // found only on disk is read from it and stored in the host again (LMCache's hybrid backend
  // puts a chunk to its local and its lower store, and a get that misses locally fetches from
  // below and puts it locally: lmcache/storage_backend/hybrid_backend.py, LMCHybridBackend.put
  // and get, LMCache@54641ca). Admission continues the GPU's run with blocks either tier holds;
  // the policy times a disk block's read at the GPU profile's disk_bytes_per_s
  // (disk_loaded_tokens_of).
  void set_disk_tier(int64_t blocks);
  std::optional<KvOffloadStats> offload_stats() const override;
  std::optional<KvOffloadStats> disk_offload_stats() const override;
  // The policy's part of the figures: a load of `bytes` that took `seconds` (from the host
  // tier, or read from the disk tier).
  void note_host_load(double bytes, double seconds) { tier(host_, "host").note_load(bytes, seconds); }
  void note_disk_load(double bytes, double seconds) { tier(disk_, "disk").note_load(bytes, seconds); }
  // Tokens `id` took from the offload tiers at its admission (part of cached_prefix_tokens),
  // and of them those read from disk.
  int64_t loaded_tokens_of(RequestId id) const { return holds(id) && host_ ? host_->loaded_tokens[id] : 0; }
  int64_t disk_loaded_tokens_of(RequestId id) const { return holds(id) && disk_ ? disk_->loaded_tokens[id] : 0; }
  bool try_admit(RequestId id, int64_t tokens, int64_t reserve_tokens) override;
  // Inline: policies grow every running request at every step they schedule (a caller that
  // holds a PagedKvCache, which is final, gets it without a virtual call).
  bool try_grow(RequestId id, int64_t tokens) override {
    if (!holds(id)) throw_growing_unheld();
    const int64_t have = tokens_[id];
    if (tokens <= have) return true;
    // Decode growth ignores the watermark (vLLM v0 can_append_slots).
    const int64_t needed = blocks_for(tokens) - blocks_for(have);
    if (needed > free_blocks_) return false;
    if (caching_) {
      take_blocks_for_growth(id, have, tokens, needed);
    } else {
      take_counted(needed);
    }
    used_tokens_ += tokens - have;
    tokens_[id] = tokens;
    return true;
  }
  // try_grow(id, computed + 1) for a running decode whose KV holds its `computed` tokens: the
  // same result and effect, but a token that stays in the request's last block (15 of 16
  // steps at vLLM's block size) only counts it. Policies grow every decode at every step.
  bool try_grow_decode(RequestId id, int64_t computed) {
    const int64_t tokens = computed + 1;
    const bool block_full = block_shift_ >= 0 ? (computed & (block_size_ - 1)) == 0 : computed % block_size_ == 0;
    if (caching_ || block_full || id >= static_cast<RequestId>(tokens_.size()) || tokens_[id] != computed) {
      return try_grow(id, tokens);
    }
    ++used_tokens_;
    tokens_[id] = tokens;
    return true;
  }
  // try_grow_decode for many decodes in one loop (ContinuousPolicy::schedule_leading_decodes):
  // the cache's invariants read once and the tokens it counts kept in a local, written back
  // before any slow step and when the view goes; nothing else may use the cache meanwhile.
  // (Through the cache, every decode stored its count and reloaded the members it read, as the
  // compiler cannot tell the request tables from the cache's own fields.)
  class DecodeGrowth {
   public:
    explicit DecodeGrowth(PagedKvCache& kv)
        : kv_(kv),
          tokens_(kv.tokens_.data()),
          size_(static_cast<RequestId>(kv.tokens_.size())),
          mask_(kv.block_size_ - 1),
          fast_(!kv.caching_ && kv.block_shift_ >= 0) {}
    DecodeGrowth(const DecodeGrowth&) = delete;
    DecodeGrowth& operator=(const DecodeGrowth&) = delete;
    ~DecodeGrowth() { kv_.used_tokens_ += grown_; }
    bool grow(RequestId id, int64_t computed) {
      if (fast_ && (computed & mask_) != 0 && id < size_ && tokens_[id] == computed) {
        tokens_[id] = computed + 1;
        ++grown_;
        return true;
      }
      kv_.used_tokens_ += grown_;
      grown_ = 0;
      return kv_.try_grow_decode(id, computed);
    }

   private:
    PagedKvCache& kv_;
    int64_t* tokens_;
    RequestId size_;
    int64_t mask_;
    bool fast_;
    int64_t grown_ = 0;
  };
  void release(RequestId id) override;
  // release() of a request preempted by recompute: with prefix caching its full blocks stay
  // findable by it until they are taken (what release() does with hashes; without them, the
  // own-blocks queue keeps them).
  void release_preempted(RequestId id);
  bool fits_when_empty(int64_t reserve_tokens) const override;
  bool can_admit(RequestId id, int64_t tokens, int64_t reserve_tokens) const override;
  int64_t cached_prefix_tokens(RequestId id, int64_t known_tokens) const override;
  PrefixHeld prefix_held(RequestId id) const override;
  int64_t admission_room() const override { return free_blocks_ - watermark_blocks_; }
  int64_t admission_cost(int64_t tokens, int64_t /*reserve_tokens*/) const override {
    return blocks_for(tokens) + side_blocks_;
  }
  int64_t capacity_tokens() const override { return num_blocks_ * block_size_; }
  int64_t allocated_tokens() const override { return (num_blocks_ - free_blocks_) * block_size_; }
  // Tokens written, each shared block once (a shared block is full in every holder).
  int64_t used_tokens() const override { return used_tokens_ - shared_refs_ * block_size_; }

  int64_t num_blocks() const { return num_blocks_; }
  int64_t free_blocks() const { return free_blocks_; }
  int64_t allocated_blocks() const { return num_blocks_ - free_blocks_; }
  int64_t watermark_blocks() const { return watermark_blocks_; }
  int32_t block_size() const { return block_size_; }
  int64_t blocks_for(int64_t tokens) const {
    // A shift for power-of-two block sizes (vLLM's are): two 64-bit divisions were the
    // costliest part of growing a decode by one token. Tokens are never negative.
    return block_shift_ >= 0 ? (tokens + block_size_ - 1) >> block_shift_ : (tokens + block_size_ - 1) / block_size_;
  }
  // The blocks of `id`'s tokens (its side blocks apart).
  int64_t blocks_of(RequestId id) const { return blocks_for(tokens_of(id)); }

  int64_t decode_run_blocks() const override;
  bool decode_run_step() override;
  bool cohort_grows_by_count() const override { return !caching_; }
  bool grow_cohort(int64_t tokens, int64_t blocks) override {
    if (caching_) throw std::logic_error("PagedKvCache: a decode cohort cannot grow with prefix caching");
    if (blocks > free_blocks_) return false;
    take_counted(blocks);
    used_tokens_ += tokens;
    return true;
  }
  bool grows_within(RequestId /*id*/, int64_t /*final_tokens*/) const override { return true; }

  bool prefix_caching() const { return caching_; }
  // Prefix caching on a workload without hashes: only a preempted request's own blocks are found.
  bool own_blocks_only() const { return own_blocks_; }
  // Tokens `id` shared from the cache at its current admission (0 when not held).
  int64_t shared_tokens_of(RequestId id) const { return holds(id) && (caching_ || own_blocks_) ? hit_tokens_[id] : 0; }
  int64_t cached_blocks() const { return table_.size(); }  // in the table
  int64_t evictable_blocks() const { return evictable_; }  // cached, ref 0, counted free
  // Whether allocating `n` blocks now would evict a cached block: one of the first `n` of the
  // free queue is in the table. O(n).
  bool allocation_evicts(int64_t n) const;
  // Whether it would evict a block of the cached run that `id` finds now (what
  // cached_prefix_tokens(id, ...) counts). O(n), and a scan of `id` unless kept.
  bool allocation_evicts_run_of(RequestId id, int64_t n) const;
  // For tests: the free queue, front (taken next) first, O(free blocks); and the blocks `id`
  // holds, in token order.
  std::vector<int32_t> free_queue() const;
  const std::vector<int32_t>& block_ids_of(RequestId id) const { return blocks_[id]; }
  // Recounts everything from the per-request block lists and throws std::logic_error naming
  // the first broken invariant. O(blocks + requests): for tests, not for the hot path.
  void check_invariants() const;

 private:
  static constexpr int32_t kNone = -1;
  [[noreturn]] static void throw_growing_unheld();
  // try_grow with prefix caching: `needed` new blocks for `id` growing from `have` to `tokens`,
  // and the blocks that become full enter the table.
  void take_blocks_for_growth(RequestId id, int64_t have, int64_t tokens, int64_t needed);
  void start_decode_run() override;
  bool decode_run_steps_in_place() const override { return caching_; }
  int64_t content_blocks(RequestId id) const;   // keyed by the workload's hashes
  int64_t max_full_blocks(RequestId id) const;  // full blocks of prompt + output
  uint64_t block_key(RequestId id, int64_t k) const;
  // The longest run of cached blocks of `id` from block 0, into run_. A request at the head
  // of the waiting queue is looked up at every step while it waits, so the run is kept until
  // the run may have changed (generation_: a block left the table, or the key that ended the
  // run entered it) or another request is looked up.
  void scan(RequestId id) const;
  struct Hit {
    int64_t blocks = 0;     // the first `blocks` of run_
    int64_t evictable = 0;  // of them at ref 0
    int64_t host = 0;       // blocks after them that the offload tiers hold (host_run_)
  };
  Hit look_up(RequestId id, int64_t max_blocks) const;
  int64_t max_distinct_blocks() const;  // sizes an offload tier's key table
  int32_t take_free_block();
  // Without per-block prefix caching: n free blocks, counted.
  void take_counted(int64_t n) {
    free_blocks_ -= n;
    if (own_blocks_) own_queue_.take(n);
  }
  void release_blocks(RequestId id, bool preempted);
  // Of the blocks parked under `id`, those not taken yet, if its current request parked them
  // (a streaming run's slot changes hands).
  int64_t own_surviving(RequestId id) const {
    return parked_request_[id] == (*prefix_.requests)[id].id ? own_queue_.surviving(id) : 0;
  }
  void enter_full_blocks(RequestId id, int64_t from_tokens, int64_t to_tokens);
  void queue_unlink(int32_t b);
  void queue_push_back(int32_t b);

  int64_t num_blocks_;
  int32_t block_size_;
  int64_t side_blocks_ = 0;
  int64_t holders_ = 0;       // requests holding KV (each holds side_blocks_ more)
  int32_t block_shift_ = -1;  // log2(block_size_) when that is a power of two, else -1
  int64_t watermark_blocks_;
  int64_t free_blocks_;

  // Prefix caching without hashes (own_blocks_only): the free queue by count; hit_tokens_ too.
  bool own_blocks_ = false;
  PreemptedBlockQueue own_queue_;
  std::vector<RequestId> parked_request_;  // per request (slot): the Request::id that parked

  // Prefix caching only (all empty when off).
  bool caching_ = false;
  PrefixCacheSource prefix_;
  std::vector<std::vector<int32_t>> blocks_;  // per request, in token order
  std::vector<std::vector<int32_t>> side_;    // per request: its side blocks
  std::vector<int64_t> hit_tokens_;           // per request: shared at admission
  std::vector<int32_t> ref_;                  // per block
  std::vector<uint64_t> key_;                 // per block; meaningful when in_table_
  std::vector<uint8_t> in_table_;
  std::vector<int32_t> index_;  // per block in the table: its index k in its request
  // The free queue: every block at ref 0, least recently freed first, linked through the
  // blocks as FreeKVCacheBlockQueue links them.
  std::vector<int32_t> queue_prev_, queue_next_;
  int32_t queue_head_ = kNone, queue_tail_ = kNone;
  int64_t evictable_ = 0;  // blocks in the queue that are in the table
  BlockKeyTable table_;
  int64_t shared_refs_ = 0;           // sum over blocks of max(ref - 1, 0)
  uint64_t generation_ = 0;           // see scan()
  mutable std::vector<int32_t> run_;  // cached blocks found by the last scan()
  // (The host tier, stamped by scan(): mutable as the run is.)
  mutable int64_t host_run_ = 0;                   // blocks after run_ that the offload tiers hold
  mutable std::vector<uint8_t> host_run_on_disk_;  // with a disk tier: whether each is on disk only
  mutable uint64_t host_end_key_ = 0;              // the key that ended the host's part of the run
  mutable bool host_end_ = false;                  // whether one did
  mutable uint64_t host_stamp_ = 0;                // the stamp of the last scan's host slots (0: none)
  mutable uint64_t host_scans_ = 0;                // scans that stamped, for a fresh stamp each
  // An offload tier: its blocks by LRU (which count what it stored and dropped), the tokens it
  // served and what their loads moved and took, and per request the tokens loaded at its
  // admission (the host tier's: all the tiers served; the disk tier's: those read from disk).
  struct OffloadTier {
    OffloadTier(int64_t blocks, int64_t max_distinct, size_t requests)
        : lru(blocks, max_distinct), loaded_tokens(requests, 0) {}
    void note_load(double bytes, double seconds) {
      load_bytes += bytes;
      load_s += seconds;
    }
    KvOffloadStats stats(int64_t block_size) const;
    HostKvTier lru;
    int64_t hit_tokens = 0;
    double load_bytes = 0, load_s = 0;
    std::vector<int64_t> loaded_tokens;
  };
  static OffloadTier& tier(std::optional<OffloadTier>& t, const char* which);
  // The host tier (set_host_tier) and the disk tier beside it (set_disk_tier).
  mutable std::optional<OffloadTier> host_, disk_;
  mutable uint64_t run_end_key_ = 0;  // the key that ended the run (if one did)
  mutable RequestId run_id_ = -1;
  mutable uint64_t run_generation_ = 0;
  // Decode run without prefix caching: how many of the run's requests held a number of tokens
  // congruent to r modulo block_size at its start, for each r.
  std::vector<int64_t> run_residues_;
};

class ReservedKvCache final : public KvCacheManager {
 public:
  // `capacity_tokens` is cut down to whole blocks; every reservation is rounded up to them.
  ReservedKvCache(int64_t num_requests, int64_t capacity_tokens, int32_t block_size = 1);
  std::string_view kind() const override { return "reserve"; }
  bool try_admit(RequestId id, int64_t tokens, int64_t reserve_tokens) override;
  bool try_grow(RequestId id, int64_t tokens) override;
  void release(RequestId id) override;
  bool fits_when_empty(int64_t reserve_tokens) const override;
  bool can_admit(RequestId id, int64_t tokens, int64_t reserve_tokens) const override;
  int64_t admission_room() const override { return capacity_ - reserved_total_; }
  int64_t admission_cost(int64_t tokens, int64_t reserve_tokens) const override {
    return rounded(std::max(tokens, reserve_tokens));
  }
  int64_t capacity_tokens() const override { return capacity_; }
  int64_t allocated_tokens() const override { return reserved_total_; }
  int64_t used_tokens() const override { return used_tokens_; }
  int64_t reservation_of(RequestId id) const { return holds(id) ? reserved_[id] : 0; }
  int32_t block_size() const { return block_size_; }
  int64_t decode_run_blocks() const override { return 0; }
  bool decode_run_step() override;
  bool cohort_grows_by_count() const override { return true; }
  bool grow_cohort(int64_t tokens, int64_t blocks) override {
    if (blocks != 0) throw std::logic_error("ReservedKvCache: a reservation takes no blocks as it grows");
    used_tokens_ += tokens;
    return true;
  }
  bool grows_within(RequestId id, int64_t final_tokens) const override {
    return holds(id) && final_tokens <= reserved_[id];
  }

 private:
  void start_decode_run() override;
  bool decode_run_steps_in_place() const override { return false; }
  int64_t run_slack_ = 0;  // decode run: the least room left in its requests' reservations
  int64_t rounded(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_ * block_size_; }
  int32_t block_size_;
  int64_t capacity_;
  int64_t reserved_total_ = 0;
  std::vector<int64_t> reserved_;
};

}  // namespace batchsim
