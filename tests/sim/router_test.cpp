// The request routers' picks over hand-built replicas (sim/router.h); the cluster tests run each
// router through whole simulations.
#include "sim/router.h"

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace batchsim {
namespace {

// Requests' prompt-block hashes, one list each.
PrefixBlockHashes hashes_of(const std::vector<std::vector<uint64_t>>& prompts) {
  PrefixBlockHashes h;
  h.block_tokens = 16;
  h.offsets.push_back(0);
  for (const std::vector<uint64_t>& p : prompts) {
    h.hashes.insert(h.hashes.end(), p.begin(), p.end());
    h.offsets.push_back(static_cast<int64_t>(h.hashes.size()));
  }
  return h;
}

TEST(CacheAwareRouter, FollowsThePrefixItRoutedWhenItCoversOverThirtyPercentElseTheLeastLoaded) {
  const PrefixBlockHashes h = hashes_of({
      {1, 2, 3},     // 0: nothing routed yet: the least loaded, replica 0 (ties: lowest index)
      {9, 8},        // 1: no match: the least loaded, replica 1
      {1, 2, 4},     // 2: 2 of 3 blocks on replica 0 (67% > 30%): there, though it is busier
      {1, 5, 6, 7},  // 3: 1 of 4 on replica 0 (25%): the least loaded, replica 1
      {9, 8, 7},     // 4: 2 of 3 on replica 1
      {},            // 5: no hashes: the least loaded
  });
  std::vector<Replica> pool(2);
  RequestRouter router(Router::kCacheAware, Rng(1));
  const auto route = [&](RequestId id) {
    const int32_t pick = router.pick(id, pool, &h);
    ++pool[static_cast<size_t>(pick)].outstanding;
    return pick;
  };
  EXPECT_EQ(route(0), 0);
  EXPECT_EQ(route(1), 1);
  EXPECT_EQ(route(2), 0);  // loads 2 and 1 now
  EXPECT_EQ(route(3), 1);
  EXPECT_EQ(route(4), 1);  // loads 2 and 3
  EXPECT_EQ(route(5), 0);
  // Request 3 joined replica 1's tree: a prompt that starts as it does now follows it there.
  pool[0].outstanding = 0;
  pool[1].outstanding = 10;
  EXPECT_EQ(router.pick(3, pool, &h), 1);
}

TEST(CacheAwareRouter, BalancesLoadWhileTheReplicasDifferByOver64AndOneAndAHalfTimes) {
  const PrefixBlockHashes h = hashes_of({{1, 2, 3}, {1, 2, 3}, {1, 2, 3}});
  std::vector<Replica> pool(2);
  RequestRouter router(Router::kCacheAware, Rng(1));
  ASSERT_EQ(router.pick(0, pool, &h), 0);
  // 65 more than replica 1, and over 1.5x: imbalanced, so the least loaded despite the full match.
  pool[0].outstanding = 100;
  pool[1].outstanding = 35;
  EXPECT_EQ(router.pick(1, pool, &h), 1);
  // 64 apart is balanced again: the match wins (both trees hold the prompt now; the first).
  pool[1].outstanding = 36;
  EXPECT_EQ(router.pick(2, pool, &h), 0);
  // Over 64 apart but within 1.5x: balanced.
  const PrefixBlockHashes other = hashes_of({{7, 7}, {7, 7}});
  RequestRouter fresh(Router::kCacheAware, Rng(1));
  std::vector<Replica> busy(2);
  busy[0].outstanding = 1;
  ASSERT_EQ(fresh.pick(0, busy, &other), 1);  // least loaded
  busy[0].outstanding = 134;
  busy[1].outstanding = 200;
  EXPECT_EQ(fresh.pick(1, busy, &other), 1);  // the match, on the busier replica
}

}  // namespace
}  // namespace batchsim
