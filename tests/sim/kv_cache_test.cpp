#include "sim/kv_cache.h"

#include <cmath>

#include <gtest/gtest.h>

#include "hwmodel/error.h"

namespace batchsim {
namespace {

TEST(PagedKvCache, AllocatesWholeBlocksJustInTime) {
  PagedKvCache kv(/*num_requests=*/4, /*num_blocks=*/10, /*block_size=*/16);
  ASSERT_TRUE(kv.try_admit(0, 17, 100));  // 17 tokens -> 2 blocks
  EXPECT_EQ(kv.allocated_blocks(), 2);
  EXPECT_EQ(kv.used_tokens(), 17);
  EXPECT_EQ(kv.allocated_tokens(), 32);
  ASSERT_TRUE(kv.try_grow(0, 32));        // still 2 blocks
  EXPECT_EQ(kv.allocated_blocks(), 2);
  ASSERT_TRUE(kv.try_grow(0, 33));        // a third block
  EXPECT_EQ(kv.allocated_blocks(), 3);
  EXPECT_EQ(kv.free_blocks() + kv.allocated_blocks(), kv.num_blocks());
  kv.release(0);
  EXPECT_EQ(kv.free_blocks(), 10);
  EXPECT_EQ(kv.used_tokens(), 0);
  EXPECT_FALSE(kv.holds(0));
}

TEST(PagedKvCache, RefusesWhenBlocksRunOutAndChangesNothing) {
  PagedKvCache kv(2, 4, 16);
  ASSERT_TRUE(kv.try_admit(0, 48, 48));  // 3 blocks
  EXPECT_FALSE(kv.try_admit(1, 32, 32)); // needs 2, 1 free
  EXPECT_FALSE(kv.holds(1));
  ASSERT_TRUE(kv.try_admit(1, 16, 16));
  EXPECT_FALSE(kv.try_grow(1, 17));      // no block left
  EXPECT_EQ(kv.tokens_of(1), 16);
  EXPECT_EQ(kv.free_blocks(), 0);
}

TEST(PagedKvCache, WatermarkAppliesToAdmissionNotGrowth) {
  // vLLM v0: watermark_blocks = int(0.25 * 8) = 2.
  PagedKvCache kv(2, 8, 1, 0.25);
  EXPECT_EQ(kv.watermark_blocks(), 2);
  EXPECT_FALSE(kv.try_admit(0, 7, 7));   // 8 - 7 = 1 < 2
  ASSERT_TRUE(kv.try_admit(0, 6, 6));    // 8 - 6 = 2 >= 2
  EXPECT_TRUE(kv.try_grow(0, 8));        // growth may use the watermark blocks
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

}  // namespace
}  // namespace batchsim
