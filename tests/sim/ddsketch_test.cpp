#include "sim/ddsketch.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hwmodel/base/random.h"
#include "sim/metrics.h"

namespace batchsim {
namespace {

constexpr double kAlpha = 0.01;
// log() and pow() may put a value lying exactly on a bucket edge one bucket over: a few ulps.
constexpr double kSlack = 1e-9;

struct NamedDistribution {
  std::string name;
  std::function<double(Rng&)> sample;
};

// Several shapes: narrow, wide, heavy-tailed (Pareto with infinite variance), with many zeros,
// and a handful of distinct values (where nearest rank jumps between them).
std::vector<NamedDistribution> distributions() {
  return {
      {"uniform", [](Rng& rng) { return 1.0 + rng.uniform01(); }},
      {"exponential", [](Rng& rng) { return sample_exponential(rng, 0.05); }},
      {"lognormal", [](Rng& rng) { return 0.2 * std::exp(2.0 * sample_standard_normal(rng)); }},
      {"pareto-1.2", [](Rng& rng) { return 1e-3 / std::pow(1.0 - rng.uniform01(), 1.0 / 1.2); }},
      {"zeros-and-exponential", [](Rng& rng) { return rng.uniform01() < 0.3 ? 0.0 : sample_exponential(rng, 2.0); }},
      {"few-values", [](Rng& rng) { return static_cast<double>(1 + sample_below(rng, 4)) * 1e-3; }},
  };
}

TEST(DDSketch, QuantilesWithinRelativeErrorOfExactNearestRank) {
  for (const NamedDistribution& d : distributions()) {
    Rng rng(42);
    DDSketch sketch(kAlpha);
    WeightedSamples exact;
    for (int i = 0; i < 20000; ++i) {
      const double v = d.sample(rng);
      sketch.add(v);
      exact.add(v);
    }
    ASSERT_EQ(sketch.count(), exact.count());
    for (const double q : {0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0}) {
      const double want = exact.percentile(q);
      const double got = sketch.quantile(q);
      EXPECT_LE(std::abs(got - want), (kAlpha + kSlack) * want) << d.name << " q=" << q;
    }
    EXPECT_EQ(sketch.max(), exact.max()) << d.name;
  }
}

TEST(DDSketch, WeightsCountAsRepeatedSamples) {
  DDSketch weighted, repeated;
  weighted.add(1.0, 98);
  weighted.add(5.0, 2);
  for (int i = 0; i < 98; ++i) repeated.add(1.0);
  repeated.add(5.0);
  repeated.add(5.0);
  EXPECT_EQ(weighted.bucket_counts(), repeated.bucket_counts());
  // Rank 98 of 100 is the last 1.0, rank 99 the first 5.0, as WeightedSamples says.
  EXPECT_NEAR(weighted.quantile(0.98), 1.0, kAlpha);
  EXPECT_NEAR(weighted.quantile(0.99), 5.0, 5.0 * kAlpha);
}

TEST(DDSketch, MergeEqualsTheSketchOfTheUnion) {
  Rng rng(7);
  DDSketch a, b, both;
  for (int i = 0; i < 5000; ++i) {
    // Disjoint ranges, so the merged buckets extend both ends of the first sketch's.
    const double small = 1e-4 * (1.0 + rng.uniform01());
    const double large = 10.0 * sample_exponential(rng, 1.0);
    const double zero = i % 10 == 0 ? 0.0 : 1.0;
    a.add(large);
    b.add(small);
    b.add(zero);
    both.add(large);
    both.add(small);
    both.add(zero);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), both.count());
  EXPECT_EQ(a.zero_count(), both.zero_count());
  EXPECT_EQ(a.first_bucket_index(), both.first_bucket_index());
  EXPECT_EQ(a.bucket_counts(), both.bucket_counts());
  EXPECT_EQ(a.min(), both.min());
  EXPECT_EQ(a.max(), both.max());
  for (const double q : {0.0, 0.3, 0.5, 0.99, 1.0}) EXPECT_EQ(a.quantile(q), both.quantile(q)) << q;
}

TEST(DDSketch, ZerosAreExactAndEmptyIsZero) {
  DDSketch s;
  EXPECT_EQ(s.quantile(0.5), 0.0);
  EXPECT_EQ(s.count(), 0);
  for (int i = 0; i < 60; ++i) s.add(0.0);
  for (int i = 0; i < 40; ++i) s.add(3.0);
  EXPECT_EQ(s.quantile(0.6), 0.0);
  EXPECT_NEAR(s.quantile(0.61), 3.0, 3.0 * kAlpha);
  EXPECT_EQ(s.quantile(1.0), 3.0);  // clamped to the exact max
}

TEST(DDSketch, StorageGrowsWithTheRangeNotTheCount) {
  DDSketch s;
  Rng rng(3);
  for (int i = 0; i < 200000; ++i) s.add(1e-3 * (1.0 + 999.0 * rng.uniform01()));
  // 1e-3 .. 1 s at 1%: ln(1000) / ln(1.0101 / 0.99) = 346 buckets.
  EXPECT_LE(s.bucket_counts().size(), 350u);
}

TEST(DDSketch, RefusesWhatItCannotHold) {
  DDSketch s;
  EXPECT_THROW(s.add(-1.0), std::logic_error);
  EXPECT_THROW(s.add(std::nan("")), std::logic_error);
  EXPECT_THROW(DDSketch(0.0), std::logic_error);
  DDSketch other(0.02);
  other.add(1.0);
  EXPECT_THROW(s.merge(other), std::logic_error);
}

}  // namespace
}  // namespace batchsim
