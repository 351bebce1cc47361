#include "sim/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "hwmodel/base/error.h"

namespace batchsim {
namespace {

TEST(PagedKvCache, AllocatesWholeBlocksJustInTime) {
  PagedKvCache kv(/*num_requests=*/4, /*num_blocks=*/10, /*block_size=*/16);
  ASSERT_TRUE(kv.try_admit(0, 17, 100));  // 17 tokens -> 2 blocks
  EXPECT_EQ(kv.allocated_blocks(), 2);
  EXPECT_EQ(kv.used_tokens(), 17);
  EXPECT_EQ(kv.allocated_tokens(), 32);
  ASSERT_TRUE(kv.try_grow(0, 32));  // still 2 blocks
  EXPECT_EQ(kv.allocated_blocks(), 2);
  ASSERT_TRUE(kv.try_grow(0, 33));  // a third block
  EXPECT_EQ(kv.allocated_blocks(), 3);
  EXPECT_EQ(kv.free_blocks() + kv.allocated_blocks(), kv.num_blocks());
  kv.release(0);
  EXPECT_EQ(kv.free_blocks(), 10);
  EXPECT_EQ(kv.used_tokens(), 0);
  EXPECT_FALSE(kv.holds(0));
}

TEST(PagedKvCache, RefusesWhenBlocksRunOutAndChangesNothing) {
  PagedKvCache kv(2, 4, 16);
  ASSERT_TRUE(kv.try_admit(0, 48, 48));   // 3 blocks
  EXPECT_FALSE(kv.try_admit(1, 32, 32));  // needs 2, 1 free
  EXPECT_FALSE(kv.holds(1));
  ASSERT_TRUE(kv.try_admit(1, 16, 16));
  EXPECT_FALSE(kv.try_grow(1, 17));  // no block left
  EXPECT_EQ(kv.tokens_of(1), 16);
  EXPECT_EQ(kv.free_blocks(), 0);
}

TEST(PagedKvCache, DecodeGrowthIsTryGrowOfOneToken) {
  // try_grow_decode takes its shortcut inside a block only: stepped beside try_grow on a twin
  // cache, through block boundaries and until the blocks run out, both caches agree at every
  // step, for a power-of-two block size (a mask) and another (a division).
  for (const int32_t block_size : {16, 12}) {
    PagedKvCache fast(3, 7, block_size), exact(3, 7, block_size);
    const std::vector<int64_t> prompts = {5, static_cast<int64_t>(block_size), 2 * block_size - 1};
    for (RequestId id = 0; id < 3; ++id) {
      ASSERT_TRUE(fast.try_admit(id, prompts[static_cast<size_t>(id)], 1000));
      ASSERT_TRUE(exact.try_admit(id, prompts[static_cast<size_t>(id)], 1000));
    }
    int failures = 0;
    for (int step = 0; step < 3 * block_size; ++step) {
      for (RequestId id = 0; id < 3; ++id) {
        const int64_t computed = exact.tokens_of(id);
        const bool grew = exact.try_grow(id, computed + 1);
        ASSERT_EQ(fast.try_grow_decode(id, computed), grew) << "block " << block_size << " step " << step;
        failures += grew ? 0 : 1;
        ASSERT_EQ(fast.tokens_of(id), exact.tokens_of(id));
        ASSERT_EQ(fast.used_tokens(), exact.used_tokens());
        ASSERT_EQ(fast.free_blocks(), exact.free_blocks());
      }
    }
    EXPECT_GT(failures, 0) << "the blocks never ran out: the test missed the refusal";
  }
  // A request whose KV holds more than `computed` (not a plain decode) gets try_grow's answer:
  // nothing to grow.
  PagedKvCache kv(1, 4, 16);
  ASSERT_TRUE(kv.try_admit(0, 20, 100));
  EXPECT_TRUE(kv.try_grow_decode(0, 10));
  EXPECT_EQ(kv.tokens_of(0), 20);
  EXPECT_EQ(kv.used_tokens(), 20);
}

TEST(PagedKvCache, WatermarkAppliesToAdmissionNotGrowth) {
  // vLLM v0: watermark_blocks = int(0.25 * 8) = 2.
  PagedKvCache kv(2, 8, 1, 0.25);
  EXPECT_EQ(kv.watermark_blocks(), 2);
  EXPECT_FALSE(kv.try_admit(0, 7, 7));  // 8 - 7 = 1 < 2
  ASSERT_TRUE(kv.try_admit(0, 6, 6));   // 8 - 6 = 2 >= 2
  EXPECT_TRUE(kv.try_grow(0, 8));       // growth may use the watermark blocks
  EXPECT_TRUE(kv.fits_when_empty(6));
  EXPECT_FALSE(kv.fits_when_empty(7));
}

TEST(ReservedKvCache, ReservesTheWholeFootprintAtAdmission) {
  ReservedKvCache kv(3, 1000);
  ASSERT_TRUE(kv.try_admit(0, 100, 600));
  EXPECT_EQ(kv.allocated_tokens(), 600);
  EXPECT_EQ(kv.used_tokens(), 100);
  EXPECT_FALSE(kv.try_admit(1, 100, 500));  // 600 + 500 > 1000
  ASSERT_TRUE(kv.try_admit(1, 100, 400));
  EXPECT_TRUE(kv.try_grow(0, 600));
  EXPECT_FALSE(kv.try_grow(0, 601));  // a reservation cannot grow in place
  EXPECT_EQ(kv.used_tokens(), 700);
  kv.release(0);
  EXPECT_EQ(kv.allocated_tokens(), 400);
  EXPECT_EQ(kv.used_tokens(), 100);
}

TEST(KvCache, BadConfigurationIsAUserError) {
  EXPECT_THROW(PagedKvCache(1, 0, 16), UserError);
  EXPECT_THROW(PagedKvCache(1, 10, 0), UserError);
  EXPECT_THROW(ReservedKvCache(1, 0), UserError);
  EXPECT_THROW(PagedKvCache(1, 10, 16, 1.0), UserError);
  EXPECT_THROW(PagedKvCache(1, 10, 16, -0.1), UserError);
  // NaN fails every comparison: a range check written as `w < 0 || w >= 1` lets it through.
  EXPECT_THROW(PagedKvCache(1, 10, 16, std::nan("")), UserError);
}

// Prefix caching: requests with prompts of the given lengths and prompt-block hashes (one
// hash per `hash_tokens` tokens), kept alive for the cache that points at them.
struct PrefixFixture {
  Workload requests;
  PrefixBlockHashes hashes;

  PrefixFixture(int32_t hash_tokens, const std::vector<std::pair<int32_t, std::vector<uint64_t>>>& prompts) {
    hashes.block_tokens = hash_tokens;
    hashes.offsets.push_back(0);
    for (const auto& [prompt, ids] : prompts) {
      Request r;
      r.id = static_cast<RequestId>(requests.size());
      r.prompt_tokens = prompt;
      r.output_tokens = 8;
      requests.push_back(r);
      hashes.hashes.insert(hashes.hashes.end(), ids.begin(), ids.end());
      hashes.offsets.push_back(static_cast<int64_t>(hashes.hashes.size()));
    }
  }
  PagedKvCache cache(int64_t num_blocks, int32_t block_size, double watermark = 0.0) const {
    return PagedKvCache(static_cast<int64_t>(requests.size()), num_blocks, block_size, watermark,
                        PrefixCacheSource{&requests, &hashes});
  }
};

TEST(PrefixCache, ASecondRequestSharesTheCachedPrefixByReference) {
  // Block size 4, one hash per 8 tokens. Request 1 starts like request 0 for 16 tokens.
  const PrefixFixture f(8, {{16, {1, 2}}, {20, {1, 2, 3}}});
  PagedKvCache kv = f.cache(10, 4);
  ASSERT_TRUE(kv.prefix_caching());
  EXPECT_EQ(kv.cached_prefix_tokens(1, 20), 0);  // nothing cached yet
  ASSERT_TRUE(kv.try_admit(0, 16, 16));
  EXPECT_EQ(kv.cached_blocks(), 4);  // full prompt blocks enter the table at allocation
  EXPECT_EQ(kv.cached_prefix_tokens(1, 20), 16);
  ASSERT_TRUE(kv.try_admit(1, 20, 20));
  EXPECT_EQ(kv.shared_tokens_of(1), 16);
  EXPECT_EQ(kv.allocated_blocks(), 5);  // 4 shared + 1 new, not 4 + 5
  EXPECT_EQ(kv.used_tokens(), 20);      // the shared 16 tokens count once
  EXPECT_EQ(kv.tokens_of(1), 20);
  kv.check_invariants();
  kv.release(0);  // still referenced by request 1: nothing is freed
  EXPECT_EQ(kv.allocated_blocks(), 5);
  EXPECT_EQ(kv.evictable_blocks(), 0);
  kv.check_invariants();
  kv.release(1);  // every block is free; the 5 full prompt blocks stay cached
  EXPECT_EQ(kv.free_blocks(), 10);
  EXPECT_EQ(kv.evictable_blocks(), 5);
  EXPECT_EQ(kv.used_tokens(), 0);
  kv.check_invariants();
}

// A hybrid pool's sliding-window pages (PagedKvCache::set_side_blocks): every admitted request
// holds them beside its tokens' blocks, admission needs room for them, release frees them, and a
// prefix hit never shares them.
TEST(PagedKvCache, SideBlocksAreHeldPerRequestAndFreedWithIt) {
  PagedKvCache kv(3, 20, 16);
  kv.set_side_blocks(3);
  EXPECT_TRUE(kv.fits_when_empty(17 * 16));
  EXPECT_FALSE(kv.fits_when_empty(17 * 16 + 1));  // 18 + 3 > 20
  EXPECT_EQ(kv.admission_cost(17, 17), 2 + 3);
  ASSERT_TRUE(kv.try_admit(0, 17, 17));
  EXPECT_EQ(kv.allocated_blocks(), 2 + 3);
  ASSERT_TRUE(kv.try_grow(0, 48));  // growth takes the tokens' blocks only
  EXPECT_EQ(kv.allocated_blocks(), 3 + 3);
  EXPECT_TRUE(kv.can_admit(1, 16 * 11, 0));  // 11 + 3 = 14 free
  EXPECT_FALSE(kv.can_admit(1, 16 * 11 + 1, 0));
  ASSERT_TRUE(kv.try_admit(1, 16, 16));
  EXPECT_EQ(kv.allocated_blocks(), 6 + 4);
  kv.check_invariants();
  kv.release(0);
  EXPECT_EQ(kv.allocated_blocks(), 4);
  kv.release(1);
  EXPECT_EQ(kv.free_blocks(), 20);
  kv.check_invariants();
  EXPECT_THROW(
      {
        PagedKvCache busy(1, 4, 16);
        ASSERT_TRUE(busy.try_admit(0, 1, 1));
        busy.set_side_blocks(1);
      },
      std::logic_error);
}

// KV offload's host tier (PagedKvCache::set_host_tier): least recently stored or served first out.
TEST(HostKvTier, KeepsTheMostRecentKeys) {
  HostKvTier t(3, 100);
  EXPECT_TRUE(t.store(1).added);
  EXPECT_TRUE(t.store(2).added);
  EXPECT_TRUE(t.contains_stamping(3, 0) == false);
  EXPECT_TRUE(t.store(3).added);
  EXPECT_TRUE(t.contains_stamping(3, 7));   // a scan stamps it
  EXPECT_FALSE(t.store(1).added);           // refreshed, nothing new
  t.touch(2);                               // order now 3, 1, 2
  const HostKvTier::Stored s = t.store(4);  // drops 3, and says it was stamped
  EXPECT_TRUE(s.added && s.dropped);
  EXPECT_EQ(s.dropped_stamp, 7u);
  EXPECT_FALSE(t.contains(3));
  EXPECT_TRUE(t.contains(1) && t.contains(2) && t.contains(4));
  EXPECT_EQ(t.stored_blocks(), 4);
  EXPECT_EQ(t.evicted_blocks(), 1);
}

// A prefix evicted from the GPU is found in the host tier: it counts as cached, its blocks are
// allocated on the GPU and marked loaded, and they enter the GPU's prefix cache again.
TEST(PrefixCache, TheHostTierServesBlocksTheGpuEvicted) {
  // Block size 4, one hash per 8 tokens; requests 0 and 2 share 16 tokens, request 1 is another.
  const PrefixFixture f(8, {{16, {1, 2}}, {16, {7, 8}}, {20, {1, 2, 3}}});
  PagedKvCache kv = f.cache(5, 4);
  kv.set_host_tier(100);
  ASSERT_TRUE(kv.try_admit(0, 16, 16));
  kv.release(0);
  ASSERT_TRUE(kv.try_admit(1, 16, 16));  // takes 4 of the 5 blocks: request 0's prefix is evicted
  EXPECT_LT(kv.cached_blocks(), 8);
  kv.release(1);
  ASSERT_TRUE(kv.try_admit(1, 16, 16));  // its own blocks again (a GPU hit), request 0's still gone
  kv.release(1);
  const int64_t cached = kv.cached_prefix_tokens(2, 20);
  EXPECT_EQ(cached, 16);  // all four of request 0's blocks: the GPU's and the host's
  ASSERT_TRUE(kv.try_admit(2, 20, 20));
  EXPECT_EQ(kv.shared_tokens_of(2) + kv.loaded_tokens_of(2), 16);
  EXPECT_GT(kv.loaded_tokens_of(2), 0);
  const std::optional<KvOffloadStats> stats = kv.offload_stats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->capacity_tokens, 400);
  EXPECT_EQ(stats->hit_tokens, kv.loaded_tokens_of(2));
  EXPECT_EQ(stats->stored_tokens, 8 * 4 + 4);  // requests 0's and 1's four blocks, then 2's fifth
  kv.check_invariants();
  kv.release(2);
  kv.check_invariants();
  // Without a host tier the same sequence finds only what the GPU kept.
  PagedKvCache gpu_only = f.cache(5, 4);
  ASSERT_TRUE(gpu_only.try_admit(0, 16, 16));
  gpu_only.release(0);
  ASSERT_TRUE(gpu_only.try_admit(1, 16, 16));
  gpu_only.release(1);
  EXPECT_LT(gpu_only.cached_prefix_tokens(2, 20), 16);
  EXPECT_FALSE(gpu_only.offload_stats().has_value());
  EXPECT_THROW(gpu_only.note_host_load(1, 1), std::logic_error);  // a load from a tier it lacks
  EXPECT_THROW(gpu_only.note_disk_load(1, 1), std::logic_error);
  PagedKvCache plain(3, 5, 4);
  EXPECT_THROW(plain.set_host_tier(10), std::logic_error);  // nothing to offload without caching
}

// A disk tier beside the host tier (PagedKvCache::set_disk_tier) is written through with every
// block the host stores and keeps its own LRU: what the host dropped is read from disk, and the
// cache says which tier served each block.
TEST(PrefixCache, TheDiskTierServesBlocksTheHostDropped) {
  // Block size 4, one hash per 8 tokens; requests 0 and 3 share 16 tokens, 1 and 2 are others.
  const PrefixFixture f(8, {{16, {1, 2}}, {16, {7, 8}}, {16, {5, 6}}, {20, {1, 2, 3}}});
  PagedKvCache kv = f.cache(5, 4);
  kv.set_host_tier(4);                                                            // one request's blocks
  EXPECT_THROW(PagedKvCache(f.cache(5, 4)).set_disk_tier(10), std::logic_error);  // no host tier
  kv.set_disk_tier(100);
  for (RequestId id : {0, 1, 2}) {  // each evicts the one before from the GPU and the host
    ASSERT_TRUE(kv.try_admit(id, 16, 16));
    kv.release(id);
  }
  EXPECT_EQ(kv.cached_prefix_tokens(3, 20), 16);  // request 0's four blocks, the GPU's and the disk's
  ASSERT_TRUE(kv.try_admit(3, 20, 20));
  EXPECT_EQ(kv.shared_tokens_of(3) + kv.loaded_tokens_of(3), 16);
  EXPECT_GT(kv.loaded_tokens_of(3), 0);
  EXPECT_EQ(kv.disk_loaded_tokens_of(3), kv.loaded_tokens_of(3));  // the host dropped them all
  const std::optional<KvOffloadStats> host = kv.offload_stats();
  const std::optional<KvOffloadStats> disk = kv.disk_offload_stats();
  ASSERT_TRUE(host.has_value() && disk.has_value());
  EXPECT_EQ(host->hit_tokens, 0);
  EXPECT_EQ(disk->hit_tokens, kv.disk_loaded_tokens_of(3));
  EXPECT_EQ(disk->capacity_tokens, 400);
  EXPECT_EQ(disk->stored_tokens, 3 * 16 + 4);  // three requests' blocks, then request 3's fifth
  EXPECT_EQ(host->stored_tokens, 3 * 16 + kv.loaded_tokens_of(3) + 4);  // the loaded ones stored again
  EXPECT_EQ(disk->evicted_tokens, 0);
  kv.check_invariants();
  kv.release(3);
  // Request 1 again: the host holds request 3's blocks now, so its own come from disk, and
  // they enter the host in turn (dropping request 3's): request 0's prefix is on disk again.
  const int64_t disk_hits_before = disk->hit_tokens;
  ASSERT_TRUE(kv.try_admit(1, 16, 16));
  EXPECT_GT(kv.disk_loaded_tokens_of(1), 0);
  EXPECT_EQ(kv.disk_loaded_tokens_of(1), kv.loaded_tokens_of(1));
  const int64_t loaded_1 = kv.disk_loaded_tokens_of(1);
  kv.release(1);
  EXPECT_EQ(kv.cached_prefix_tokens(0, 17), 16);
  ASSERT_TRUE(kv.try_admit(0, 17, 17));
  EXPECT_EQ(kv.loaded_tokens_of(0) + kv.shared_tokens_of(0), 16);
  EXPECT_EQ(kv.disk_loaded_tokens_of(0), kv.loaded_tokens_of(0));
  EXPECT_EQ(kv.disk_offload_stats()->hit_tokens, disk_hits_before + loaded_1 + kv.disk_loaded_tokens_of(0));
  EXPECT_EQ(kv.offload_stats()->hit_tokens, 0);
  // The policy's timings land in the tier they name.
  kv.note_disk_load(300, 0.25);
  kv.note_host_load(40, 0.5);
  kv.note_disk_load(100, 0.5);
  EXPECT_EQ(kv.disk_offload_stats()->load_bytes, 400);
  EXPECT_EQ(kv.disk_offload_stats()->load_s, 0.75);
  EXPECT_EQ(kv.offload_stats()->load_bytes, 40);
  EXPECT_EQ(kv.offload_stats()->load_s, 0.5);
  kv.check_invariants();
  // Without a disk tier the host alone has forgotten request 0's prefix.
  PagedKvCache host_only = f.cache(5, 4);
  host_only.set_host_tier(4);
  for (RequestId id : {0, 1, 2}) {
    ASSERT_TRUE(host_only.try_admit(id, 16, 16));
    host_only.release(id);
  }
  EXPECT_EQ(host_only.cached_prefix_tokens(3, 20), 0);
  EXPECT_FALSE(host_only.disk_offload_stats().has_value());
}

// Preemption by recompute with a host tier: the request's blocks, its output's included, were
// stored as they filled, so its re-admission finds them there after the GPU evicted them and
// loads them instead of computing them again (vLLM v1 preempts by recompute only; with the
// OffloadingConnector the re-admission's lookup finds the stored blocks like any prefix).
TEST(PrefixCache, APreemptedRequestReloadsItsBlocksFromTheHostTier) {
  const PrefixFixture f(8, {{16, {1, 2}}, {16, {7, 8}}});
  PagedKvCache kv = f.cache(7, 4);
  kv.set_host_tier(100);
  ASSERT_TRUE(kv.try_admit(0, 16, 16));
  ASSERT_TRUE(kv.try_grow(0, 24));  // 8 output tokens: two more full blocks
  kv.release(0);                    // preempted
  ASSERT_TRUE(kv.try_admit(1, 16, 16));
  ASSERT_TRUE(kv.try_grow(1, 28));   // takes all 7 blocks: request 0's are gone from the GPU
  EXPECT_EQ(kv.cached_blocks(), 7);  // request 1's only
  kv.release(1);
  // Re-admitted with its prompt and output known: all six blocks from the host, none recomputed.
  EXPECT_EQ(kv.cached_prefix_tokens(0, 25), 24);
  ASSERT_TRUE(kv.try_admit(0, 25, 25));
  EXPECT_EQ(kv.shared_tokens_of(0), 0);
  EXPECT_EQ(kv.loaded_tokens_of(0), 24);
  kv.check_invariants();
}

TEST(PrefixCache, SideBlocksAreNeverShared) {
  const PrefixFixture f(8, {{16, {1, 2}}, {20, {1, 2, 3}}});
  PagedKvCache kv = f.cache(12, 4);
  kv.set_side_blocks(2);
  ASSERT_TRUE(kv.try_admit(0, 16, 16));
  EXPECT_EQ(kv.allocated_blocks(), 4 + 2);
  EXPECT_EQ(kv.cached_blocks(), 4);  // the side blocks do not enter the table
  ASSERT_TRUE(kv.try_admit(1, 20, 20));
  EXPECT_EQ(kv.shared_tokens_of(1), 16);
  EXPECT_EQ(kv.allocated_blocks(), 4 + 1 + 2 + 2);  // 4 shared, 1 new, 2 side each
  kv.check_invariants();
  kv.release(0);
  kv.release(1);
  EXPECT_EQ(kv.free_blocks(), 12);
  EXPECT_EQ(kv.evictable_blocks(), 5);
  kv.check_invariants();
  // Side blocks come from the free queue and may evict cached blocks, never the hit itself.
  PagedKvCache tight = f.cache(7, 4);
  tight.set_side_blocks(2);
  ASSERT_TRUE(tight.try_admit(0, 16, 16));
  tight.release(0);                         // 4 cached, evictable
  ASSERT_TRUE(tight.try_admit(1, 20, 20));  // hit 4, 1 new, 2 side: 7 of 7
  EXPECT_EQ(tight.shared_tokens_of(1), 16);
  EXPECT_EQ(tight.free_blocks(), 0);
  tight.check_invariants();
}

TEST(PrefixCache, AHitNeverCoversTheWholePrompt) {
  // vLLM v1 max_cache_hit_length = num_tokens - 1: the last token is computed to sample.
  const PrefixFixture f(8, {{16, {1, 2}}, {16, {1, 2}}});
  PagedKvCache kv = f.cache(10, 4);
  ASSERT_TRUE(kv.try_admit(0, 16, 16));
  EXPECT_EQ(kv.cached_prefix_tokens(1, 16), 12);
  // A readmitted request knows more tokens (prompt + generated): the whole prompt may hit.
  EXPECT_EQ(kv.cached_prefix_tokens(1, 17), 16);
  ASSERT_TRUE(kv.try_admit(1, 16, 16));
  EXPECT_EQ(kv.shared_tokens_of(1), 12);
  EXPECT_EQ(kv.allocated_blocks(), 5);
  kv.check_invariants();
}

TEST(PrefixCache, EveryFullBlockIsCachedThoseBeyondTheHashesUnderTheRequestsOwnKey) {
  // Prompt 14 with hashes over 16 tokens: blocks 0-2 (12 tokens) are full prompt blocks;
  // block 3 holds 2 prompt tokens and fills with generated ones. Prompt 30 with one hash
  // (8 tokens): blocks 0-1 are keyed by the hash, blocks 2-6 by the request (its suffix).
  const PrefixFixture f(8, {{14, {1, 2}}, {30, {5}}, {14, {1, 2}}, {30, {5}}});
  PagedKvCache kv = f.cache(30, 4);
  ASSERT_TRUE(kv.try_admit(0, 14, 14));
  EXPECT_EQ(kv.cached_blocks(), 3);
  ASSERT_TRUE(kv.try_grow(0, 16));  // block 3 is full: cached (vLLM v1 caches output blocks)
  EXPECT_EQ(kv.cached_blocks(), 4);
  ASSERT_TRUE(kv.try_admit(1, 30, 30));
  EXPECT_EQ(kv.cached_blocks(), 11);
  kv.check_invariants();
  // Requests 2 and 3 start like 0 and 1 but find only the blocks the hashes describe: another
  // request's output and unhashed suffix are its own.
  EXPECT_EQ(kv.cached_prefix_tokens(2, 20), 12);
  EXPECT_EQ(kv.cached_prefix_tokens(3, 30), 8);
}

TEST(PrefixCache, TwoRequestsOutputsNeverShareBlocks) {
  // Identical prompts (same hashes, 8 tokens): both generate 8 tokens. Request 1, admitted
  // as if readmitted with all 16 tokens known, finds request 0's prompt blocks but none of its
  // output blocks; its own output fills other blocks than request 0's.
  const PrefixFixture f(8, {{8, {1}}, {8, {1}}});
  PagedKvCache kv = f.cache(10, 4);
  ASSERT_TRUE(kv.try_admit(0, 8, 8));
  ASSERT_TRUE(kv.try_grow(0, 16));
  EXPECT_EQ(kv.cached_blocks(), 4);
  EXPECT_EQ(kv.cached_prefix_tokens(1, 16), 8);
  ASSERT_TRUE(kv.try_admit(1, 8, 8));
  EXPECT_EQ(kv.shared_tokens_of(1), 4);  // the last prompt token is recomputed to sample
  ASSERT_TRUE(kv.try_grow(1, 16));
  const std::vector<int32_t> b0 = kv.block_ids_of(0);
  const std::vector<int32_t> b1 = kv.block_ids_of(1);
  ASSERT_EQ(b0.size(), 4u);
  ASSERT_EQ(b1.size(), 4u);
  EXPECT_EQ(b1[0], b0[0]);  // the shared prompt block
  for (size_t k = 1; k < b1.size(); ++k) {
    EXPECT_EQ(std::count(b0.begin(), b0.end(), b1[k]), 0) << "block " << k;
  }
  kv.check_invariants();
  // Released, request 0 readmitted with its 16 tokens finds all its own blocks but the last
  // (one token is always computed); request 1 likewise its own.
  kv.release(0);
  kv.release(1);
  EXPECT_EQ(kv.cached_prefix_tokens(0, 16), 12);
  EXPECT_EQ(kv.cached_prefix_tokens(1, 17), 16);
  ASSERT_TRUE(kv.try_admit(0, 16, 16));
  EXPECT_EQ(kv.shared_tokens_of(0), 12);
  EXPECT_EQ(std::vector<int32_t>(kv.block_ids_of(0).begin(), kv.block_ids_of(0).begin() + 3),
            std::vector<int32_t>(b0.begin(), b0.begin() + 3));
  kv.check_invariants();
}

TEST(PrefixCache, ChunkedPrefillEntersBlocksAsTheyFill) {
  const PrefixFixture f(8, {{16, {1, 2}}, {16, {1, 2, 9}}});
  PagedKvCache kv = f.cache(10, 4);
  ASSERT_TRUE(kv.try_admit(0, 6, 16));  // a first chunk of 6: block 0 full, block 1 not
  EXPECT_EQ(kv.cached_blocks(), 1);
  EXPECT_EQ(kv.cached_prefix_tokens(1, 16), 4);
  ASSERT_TRUE(kv.try_grow(0, 16));
  EXPECT_EQ(kv.cached_blocks(), 4);
  EXPECT_EQ(kv.cached_prefix_tokens(1, 16), 12);
  kv.check_invariants();
}

TEST(PrefixCache, OneLruFreeQueueTailFirstCachedOrNot) {
  // vLLM v1 FreeKVCacheBlockQueue: 8 blocks of 4 tokens, one hash per block.
  const PrefixFixture f(
      4, {{8, {1, 2}}, {6, {7, 8}}, {20, {20, 21, 22, 23, 24}}, {8, {1, 2}}, {12, {1, 2, 3}}, {8, {7, 9}}});
  PagedKvCache kv = f.cache(8, 4);
  EXPECT_EQ(kv.free_queue(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));  // block order
  ASSERT_TRUE(kv.try_admit(0, 8, 8));                                          // blocks 0, 1
  kv.release(0);  // appended tail first: its last block is evicted before its first
  EXPECT_EQ(kv.free_queue(), (std::vector<int32_t>{2, 3, 4, 5, 6, 7, 1, 0}));
  EXPECT_EQ(kv.evictable_blocks(), 2);
  ASSERT_TRUE(kv.try_admit(1, 6, 6));  // blocks 2 (cached) and 3 (partial, not cached)
  kv.release(1);
  EXPECT_EQ(kv.free_queue(), (std::vector<int32_t>{4, 5, 6, 7, 1, 0, 3, 2}));
  // Five blocks from the front: 4-7, then request 0's tail, although the never-cached block 3
  // is free: one queue, least recently freed first.
  ASSERT_TRUE(kv.try_admit(2, 20, 20));
  EXPECT_EQ(kv.free_queue(), (std::vector<int32_t>{0, 3, 2}));
  EXPECT_EQ(kv.evictable_blocks(), 2);
  EXPECT_EQ(kv.cached_prefix_tokens(4, 12), 4);  // request 0's prefix lost its second block
  EXPECT_EQ(kv.cached_prefix_tokens(5, 8), 4);   // request 1's, freed later, is intact
  EXPECT_TRUE(kv.allocation_evicts(1));          // block 0 is next
  kv.check_invariants();
  // A hit on a free block takes it out of the queue (BlockPool.touch); the new block comes
  // from the front.
  ASSERT_TRUE(kv.try_admit(3, 8, 8));
  EXPECT_EQ(kv.shared_tokens_of(3), 4);
  EXPECT_EQ(kv.block_ids_of(3), (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(kv.free_queue(), (std::vector<int32_t>{2}));
  EXPECT_EQ(kv.evictable_blocks(), 1);
  kv.check_invariants();
  kv.release(3);
  EXPECT_EQ(kv.free_queue(), (std::vector<int32_t>{2, 3, 0}));
  kv.check_invariants();
}

TEST(PrefixCache, AdmissionCountsHitsAsNeedingNoNewBlocksButEvictableHitsAsTaken) {
  const PrefixFixture f(4, {{12, {1, 2, 3}}, {16, {1, 2, 3, 4}}, {4, {9}}});
  {
    PagedKvCache kv = f.cache(4, 4);
    ASSERT_TRUE(kv.try_admit(0, 12, 12));  // 3 blocks held, 1 free
    // Without sharing request 1 would need 4 blocks; with its 12-token prefix held, one.
    PagedKvCache plain(3, 4, 4);
    ASSERT_TRUE(plain.try_admit(0, 12, 12));
    EXPECT_FALSE(plain.can_admit(1, 16, 16));
    EXPECT_TRUE(kv.can_admit(1, 16, 16));
    ASSERT_TRUE(kv.try_admit(1, 16, 16));
    EXPECT_EQ(kv.free_blocks(), 0);
    kv.check_invariants();
  }
  {
    PagedKvCache kv = f.cache(4, 4);
    ASSERT_TRUE(kv.try_admit(0, 12, 12));
    kv.release(0);                       // 3 evictable + 1 uncached free
    ASSERT_TRUE(kv.try_admit(2, 4, 4));  // takes the uncached block
    EXPECT_EQ(kv.free_blocks(), 3);
    // Request 1's 3 hit blocks are free only while nobody holds them: sharing them takes them
    // from the free pool, and it needs a fourth.
    EXPECT_EQ(kv.cached_prefix_tokens(1, 16), 12);
    EXPECT_FALSE(kv.can_admit(1, 16, 16));
    EXPECT_FALSE(kv.try_admit(1, 16, 16));
    EXPECT_FALSE(kv.holds(1));
    kv.check_invariants();
  }
}

TEST(PrefixCache, WatermarkAppliesToNewAndEvictableHitBlocks) {
  const PrefixFixture f(4, {{8, {1, 2}}, {12, {1, 2, 3}}});
  PagedKvCache kv = f.cache(10, 4, 0.2);  // watermark 2 blocks
  ASSERT_TRUE(kv.try_admit(0, 8, 8));
  kv.release(0);
  // 2 evictable hits + 1 new = 3 of 10 free: 7 >= 2.
  EXPECT_TRUE(kv.can_admit(1, 12, 12));
  EXPECT_TRUE(kv.fits_when_empty(32));
  EXPECT_FALSE(kv.fits_when_empty(33));
}

// Without prompt-block hashes no request shares another's blocks, but a request preempted by
// recompute finds what of its own full blocks survived, as vLLM hashes every request's blocks:
// freed last block first to the free queue's back, its tail is taken by the next allocations
// and its head stays found. The cache still counts blocks (a decode cohort can grow it).
TEST(PrefixCache, WithoutHashesAPreemptedRequestFindsItsOwnSurvivingBlocks) {
  Workload requests(2);
  for (RequestId id = 0; id < 2; ++id) {
    requests[id].id = id;
    requests[id].prompt_tokens = 64;
    requests[id].output_tokens = 16;
  }
  const PrefixBlockHashes none;
  PagedKvCache kv(2, 7, 16, 0.0, PrefixCacheSource{&requests, &none});
  EXPECT_FALSE(kv.prefix_caching());
  ASSERT_TRUE(kv.own_blocks_only());
  EXPECT_TRUE(kv.cohort_grows_by_count());
  ASSERT_TRUE(kv.try_admit(0, 66, 66));  // 4 full blocks and a partial one: 2 of 7 left
  EXPECT_EQ(kv.cached_prefix_tokens(1, 64), 0);
  kv.release_preempted(0);  // queue: 2 unused, its partial block, then its 4 full ones
  kv.check_invariants();
  EXPECT_EQ(kv.cached_prefix_tokens(0, 67), 64);
  EXPECT_EQ(kv.cached_prefix_tokens(0, 40), 32);  // never the last known token's block
  EXPECT_TRUE(kv.allocation_evicts_run_of(0, 4));
  EXPECT_FALSE(kv.allocation_evicts_run_of(0, 3));
  // Request 1 takes 4: the 3 anonymous ones, then request 0's last full block.
  ASSERT_TRUE(kv.try_admit(1, 64, 64));
  EXPECT_EQ(kv.shared_tokens_of(1), 0);
  EXPECT_EQ(kv.cached_prefix_tokens(0, 67), 48);
  EXPECT_TRUE(kv.try_grow(1, 80));  // one more block: request 0's third
  EXPECT_EQ(kv.cached_prefix_tokens(0, 67), 32);
  kv.check_invariants();
  EXPECT_FALSE(kv.try_admit(0, 67, 67));  // 5 blocks, 2 of them its own: 2 free in all
  kv.release(1);                          // finished: nobody finds its blocks
  EXPECT_EQ(kv.cached_prefix_tokens(1, 64), 0);
  ASSERT_TRUE(kv.try_admit(0, 67, 67));  // readmitted: recomputes from token 32 on
  EXPECT_EQ(kv.shared_tokens_of(0), 32);
  EXPECT_EQ(kv.allocated_blocks(), 5);
  EXPECT_EQ(kv.cached_prefix_tokens(0, 67), 0);  // held again, nothing parked
  kv.check_invariants();
  // A release that is not a preemption keeps nothing for the request.
  kv.release(0);
  EXPECT_EQ(kv.cached_prefix_tokens(0, 67), 0);
  kv.check_invariants();
}

// Without the requests, nothing is cached at all: the plain counting cache.
TEST(PrefixCache, WithoutTheRequestsTheCacheIsThePlainOne) {
  PagedKvCache kv(2, 10, 16, 0.0, PrefixCacheSource{});
  EXPECT_FALSE(kv.prefix_caching());
  EXPECT_FALSE(kv.own_blocks_only());
  ASSERT_TRUE(kv.try_admit(0, 17, 17));
  kv.release_preempted(0);
  EXPECT_EQ(kv.cached_prefix_tokens(0, 100), 0);
  EXPECT_EQ(kv.free_blocks(), 10);
  kv.check_invariants();
}

TEST(BlockKeyTable, AgreesWithAMapThroughCollidingInsertsAndErases) {
  // 64 entries at most: 128 slots. Keys share their low bits in clusters, so probe runs wrap
  // around the end of the table and backward-shift deletion has entries to move.
  BlockKeyTable table(64);
  std::map<uint64_t, int32_t> reference;
  std::mt19937_64 rng(7);
  for (int step = 0; step < 20000; ++step) {
    const uint64_t key = (rng() % 5) * 128 + 120 + (rng() % 12) + ((rng() % 40) << 20);
    if (rng() % 2 == 0 && reference.size() < 64) {
      const auto block = static_cast<int32_t>(step);
      const bool fresh = reference.emplace(key, block).second;
      ASSERT_EQ(table.insert(key, block), fresh) << step;
    } else if (reference.count(key) != 0) {
      table.erase(key);
      reference.erase(key);
    }
    ASSERT_EQ(table.size(), static_cast<int64_t>(reference.size()));
    if (step % 97 == 0) {
      for (const auto& [k, b] : reference) ASSERT_EQ(table.find(k), b) << step;
      int64_t seen = 0;
      table.for_each([&](uint64_t k, int32_t b) {
        ++seen;
        EXPECT_EQ(reference.at(k), b);
      });
      ASSERT_EQ(seen, table.size());
    }
  }
  EXPECT_EQ(table.find(12345), BlockKeyTable::kAbsent);
}

// A decode run (KvCacheManager::begin_decode_run) must take each step exactly as growing every
// request by one token would, in batch order: the same blocks per step, the same refusal when
// memory runs out (changing nothing), and the same per-request tokens once the run ends. The
// reference is a second cache stepped with try_grow.
template <typename Cache, typename MakeCache, typename Admit>
void expect_decode_run_matches_growth(MakeCache make_cache, Admit admit, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    Cache run = make_cache(rng);
    Cache stepped = run;
    std::vector<BatchItem> items;
    for (RequestId id = 0; id < 24; ++id) {
      const auto tokens = static_cast<int64_t>(1 + rng() % 70);
      const auto room = static_cast<int64_t>(rng() % 300);  // beyond the tokens, for a reservation
      if (admit(run, id, tokens, room) != admit(stepped, id, tokens, room)) FAIL() << "admission differs";
      if (run.holds(id) && rng() % 4 != 0) items.push_back({id, 1, tokens});
    }
    if (items.empty()) continue;
    std::shuffle(items.begin(), items.end(), rng);
    run.begin_decode_run(items);
    int64_t steps = 0;
    for (; steps < 400; ++steps) {
      int64_t blocks = 0;
      for (const BatchItem& item : items) {
        if constexpr (std::is_same_v<Cache, PagedKvCache>) {
          blocks += stepped.tokens_of(item.id) % stepped.block_size() == 0 ? 1 : 0;
        }
      }
      ASSERT_EQ(run.decode_run_blocks(), blocks) << "trial " << trial << " step " << steps;
      // Whether growing every request by one token succeeds (on a copy, since a reserving
      // cache refuses one request after growing the ones before it).
      Cache probe = stepped;
      bool fits = true;
      for (const BatchItem& item : items) fits = fits && probe.try_grow(item.id, probe.tokens_of(item.id) + 1);
      ASSERT_EQ(run.decode_run_step(), fits) << "trial " << trial << " step " << steps;
      if (!fits) break;
      stepped = probe;
      ASSERT_EQ(run.used_tokens(), stepped.used_tokens());
      ASSERT_EQ(run.allocated_tokens(), stepped.allocated_tokens());
    }
    EXPECT_EQ(run.decode_run_steps(), steps);
    EXPECT_EQ(run.used_tokens(), stepped.used_tokens());
    EXPECT_EQ(run.allocated_tokens(), stepped.allocated_tokens());
    run.end_decode_run();
    EXPECT_FALSE(run.in_decode_run());
    for (RequestId id = 0; id < 24; ++id) EXPECT_EQ(run.tokens_of(id), stepped.tokens_of(id)) << "request " << id;
  }
}

TEST(KvCacheDecodeRun, PagedStepsTakeTheBlocksOfGrowingEachRequestByOneToken) {
  for (const int32_t block_size : {1, 2, 7, 16}) {
    expect_decode_run_matches_growth<PagedKvCache>(
        [block_size](std::mt19937_64& rng) {
          return PagedKvCache(24, static_cast<int64_t>(20 + rng() % 150), block_size);
        },
        [](PagedKvCache& kv, RequestId id, int64_t tokens, int64_t /*room*/) {
          return kv.try_admit(id, tokens, tokens);
        },
        static_cast<uint64_t>(block_size));
  }
}

TEST(KvCacheDecodeRun, ReservedStepsStopWhereAReservationIsFull) {
  for (const int32_t block_size : {1, 16}) {
    expect_decode_run_matches_growth<ReservedKvCache>(
        [block_size](std::mt19937_64& rng) {
          return ReservedKvCache(24, static_cast<int64_t>(500 + rng() % 3000), block_size);
        },
        [](ReservedKvCache& kv, RequestId id, int64_t tokens, int64_t room) {
          return kv.try_admit(id, tokens, tokens + room);
        },
        static_cast<uint64_t>(100 + block_size));
  }
}

TEST(KvCacheDecodeRun, ReleaseInsideARunIsABug) {
  PagedKvCache kv(2, 10, 16);
  ASSERT_TRUE(kv.try_admit(0, 5, 5));
  const std::vector<BatchItem> items = {{0, 1, 5}};
  kv.begin_decode_run(items);
  EXPECT_THROW(kv.release(0), std::logic_error);
  EXPECT_THROW(kv.begin_decode_run(items), std::logic_error);
  kv.end_decode_run();
  kv.release(0);
  EXPECT_EQ(kv.free_blocks(), 10);
}

}  // namespace
}  // namespace batchsim
