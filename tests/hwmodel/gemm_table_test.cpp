// GemmTable: measured GEMM times looked up in log space. Exact at grid points (tile steps
// kept), exact between them for any power law in m, n and k, no answer outside the grid's span,
// and a text form that reads back to the same table.
#include "hwmodel/gemm_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "hwmodel/base/error.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::HasSubstr;
using testing::user_error_of;

// t = c m^a n^b k^g: log-log interpolation reproduces it exactly between grid points.
double power_law(double m, double n, double k) { return 3e-9 * std::pow(m, 0.7) * std::pow(n, 0.9) * std::pow(k, 1.1); }

GemmTable power_law_table(const std::vector<int64_t>& ms, const std::vector<int64_t>& ns,
                          const std::vector<int64_t>& ks) {
  std::vector<GemmPoint> points;
  for (int64_t m : ms)
    for (int64_t n : ns)
      for (int64_t k : ks) points.push_back({m, n, k, power_law(m, n, k)});
  return GemmTable::from_points("bf16", "test", points);
}

TEST(GemmTable, InterpolatesPowerLawsExactlyInLogSpace) {
  const GemmTable t = power_law_table({1, 16, 256, 4096}, {1024, 4096, 16384}, {1024, 2048, 8192});
  for (double m : {1.0, 3.0, 16.0, 100.5, 4096.0}) {
    for (int64_t n : {1024, 3000, 16384}) {
      for (int64_t k : {1024, 1500, 5000, 8192}) {
        const auto s = t.seconds(m, n, k);
        ASSERT_TRUE(s.has_value()) << m << " " << n << " " << k;
        EXPECT_NEAR(*s / power_law(m, static_cast<double>(n), static_cast<double>(k)), 1.0, 1e-9);
      }
    }
  }
}

TEST(GemmTable, KeepsTileStepsAtGridPointsAndHasNoAnswerOutsideItsSpan) {
  // A step at m 256 -> 257, as cuBLAS changes tiles: both sides are kept.
  std::vector<GemmPoint> points;
  for (int64_t n : {4096, 8192}) {
    for (int64_t k : {4096, 8192}) {
      const double scale = static_cast<double>(n) * static_cast<double>(k) / (4096.0 * 4096.0);
      points.push_back({1, n, k, 13e-6 * scale});
      points.push_back({256, n, k, 20e-6 * scale});
      points.push_back({257, n, k, 25.8e-6 * scale});
      points.push_back({512, n, k, 30e-6 * scale});
    }
  }
  const GemmTable t = GemmTable::from_points("bf16", "steps", points);
  EXPECT_DOUBLE_EQ(*t.seconds(256, 4096, 4096), 20e-6);
  EXPECT_DOUBLE_EQ(*t.seconds(257, 4096, 4096), 25.8e-6);
  EXPECT_GT(*t.seconds(384, 4096, 4096), 25.8e-6);
  EXPECT_LT(*t.seconds(384, 4096, 4096), 30e-6);
  EXPECT_NEAR(*t.seconds(256, 8192, 8192), 80e-6, 1e-12);
  EXPECT_FALSE(t.seconds(513, 4096, 4096));  // m above the grid
  EXPECT_FALSE(t.seconds(0.5, 4096, 4096));  // m below it
  EXPECT_FALSE(t.seconds(16, 2048, 4096));   // n below the span
  EXPECT_FALSE(t.seconds(16, 4096, 16384));  // k above the span
}

// A table with holes (a checkerboard of (n, k) held out): a missing column is interpolated from
// its k neighbours at the same n; a shape whose bracketing columns lack the m is left to the
// roofline rather than guessed.
TEST(GemmTable, InterpolatesAcrossMissingColumnsAndMissingTimes) {
  std::vector<GemmPoint> points;
  const std::vector<int64_t> grid = {1024, 2048, 4096, 8192};
  for (size_t i = 0; i < grid.size(); ++i)
    for (size_t j = 0; j < grid.size(); ++j)
      if ((i + j) % 2 == 0)
        for (int64_t m : {1, 64, 4096}) points.push_back({m, grid[i], grid[j], power_law(m, grid[i], grid[j])});
  points.push_back({8192, 1024, 1024, power_law(8192, 1024, 1024)});  // one column reaches higher m
  const GemmTable t = GemmTable::from_points("fp8", "checkerboard", points);
  EXPECT_EQ(t.format(), WeightFormat::fp8);
  const auto held_out = t.seconds(64, 2048, 4096);  // (1, 2): odd, not in the table
  ASSERT_TRUE(held_out);
  EXPECT_NEAR(*held_out / power_law(64, 2048, 4096), 1.0, 1e-9);
  // m = 6000: the (1024, 1024) column has 4096 and 8192 around it; (2048, 2048) stops at 4096.
  ASSERT_TRUE(t.seconds(6000, 1024, 1024));
  EXPECT_NEAR(*t.seconds(6000, 1024, 1024) / power_law(6000, 1024, 1024), 1.0, 1e-9);
  EXPECT_FALSE(t.seconds(6000, 2048, 2048));
}

TEST(GemmTable, TextRoundTripsAndBadTextIsNamedByLine) {
  const GemmTable t = power_law_table({1, 2, 300}, {512, 1024}, {512, 2048});
  const GemmTable back = GemmTable::parse(t.to_text(), "t.txt");
  EXPECT_EQ(back.dtype(), "bf16");
  EXPECT_EQ(back.source(), "test");
  EXPECT_EQ(back.m_grid(), t.m_grid());
  ASSERT_EQ(back.columns().size(), t.columns().size());
  for (double m : {1.0, 7.0, 300.0}) {
    EXPECT_NEAR(*back.seconds(m, 700, 1000) / *t.seconds(m, 700, 1000), 1.0, 1e-4);  // 5 significant digits
  }
  EXPECT_THAT(user_error_of([] { GemmTable::parse("dtype int4\n", "x.txt"); }), HasSubstr("x.txt:1: dtype 'int4'"));
  EXPECT_THAT(user_error_of([] { GemmTable::parse("m 1 2\ncolumn 8 8 1.0\n", "x.txt"); }),
              HasSubstr("x.txt:2: a column needs n, k and 2 times"));
  EXPECT_THAT(user_error_of([] { GemmTable::parse("m 2 1\n", "x.txt"); }),
              HasSubstr("x.txt:1: the m grid must be ascending"));
  EXPECT_THAT(user_error_of([] { GemmTable::parse("m 1\ncolumn 8 8 -3\n", "x.txt"); }),
              HasSubstr("'-3' is not a positive number"));
  EXPECT_THAT(user_error_of([] { GemmTable::parse("m 1\ncolumn 8 8 inf\n", "x.txt"); }), HasSubstr("'inf'"));
  EXPECT_THAT(user_error_of([] { GemmTable::parse("m 1\ncolumn 8 8 1\ncolumn 8 8 2\n", "x.txt"); }),
              HasSubstr("column n=8 k=8 appears twice"));
  EXPECT_THAT(user_error_of([] { GemmTable::parse("# nothing\n", "x.txt"); }),
              HasSubstr("x.txt: no GEMM table columns"));
  EXPECT_THAT(user_error_of([] { GemmTable::parse("m 1\nrow 1\n", "x.txt"); }),
              HasSubstr("x.txt:2: unknown line 'row'"));
}

}  // namespace
}  // namespace batchsim
