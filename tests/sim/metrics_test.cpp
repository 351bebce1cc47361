#include "sim/metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "sim/simulation.h"

namespace batchsim {
namespace {

TEST(WeightedSamples, NearestRankPercentiles) {
  WeightedSamples s;
  for (int v = 10; v >= 1; --v) s.add(v);  // unsorted input
  EXPECT_EQ(s.count(), 10);
  EXPECT_DOUBLE_EQ(s.percentile(0.5), 5);   // ceil(0.5*10) = 5th smallest
  EXPECT_DOUBLE_EQ(s.percentile(0.9), 9);
  EXPECT_DOUBLE_EQ(s.percentile(0.99), 10);
  EXPECT_DOUBLE_EQ(s.percentile(0.0), 1);
  EXPECT_DOUBLE_EQ(s.mean(), 5.5);
  EXPECT_DOUBLE_EQ(s.max(), 10);
}

TEST(WeightedSamples, WeightsCountAsRepeatedSamples) {
  WeightedSamples weighted, repeated;
  weighted.add(1.0, 98);
  weighted.add(5.0, 2);
  for (int i = 0; i < 98; ++i) repeated.add(1.0);
  repeated.add(5.0);
  repeated.add(5.0);
  for (double q : {0.5, 0.9, 0.98, 0.99, 1.0}) {
    EXPECT_DOUBLE_EQ(weighted.percentile(q), repeated.percentile(q)) << q;
  }
  EXPECT_DOUBLE_EQ(weighted.percentile(0.98), 1.0);
  EXPECT_DOUBLE_EQ(weighted.percentile(0.99), 5.0);
  EXPECT_DOUBLE_EQ(weighted.mean(), repeated.mean());
}

// Distribution::of takes its percentiles in one walk (WeightedSamples::percentiles): each must
// be the nearest rank of the expanded multiset, as percentile(q) and a sorted expansion say.
TEST(WeightedSamples, PercentilesInOneWalkAreTheNearestRanksOfTheExpandedSamples) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    WeightedSamples s;
    std::vector<double> expanded;
    const int pairs = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < pairs; ++i) {
      const double value = static_cast<double>(rng() % 17) * 0.25;
      const auto weight = static_cast<int64_t>(1 + rng() % (trial % 2 == 0 ? 3 : 500));
      s.add(value, weight);
      expanded.insert(expanded.end(), static_cast<size_t>(weight), value);
    }
    std::sort(expanded.begin(), expanded.end());
    const std::array<double, 6> qs = {0.0, 0.01, 0.5, 0.9, 0.99, 1.0};
    std::array<double, 6> got{};
    s.percentiles(qs, got);
    for (size_t i = 0; i < qs.size(); ++i) {
      const auto rank = std::max<size_t>(1, static_cast<size_t>(std::ceil(qs[i] * static_cast<double>(expanded.size()) - 1e-9)));
      EXPECT_EQ(got[i], expanded[rank - 1]) << "trial " << trial << " q " << qs[i];
      EXPECT_EQ(got[i], s.percentile(qs[i]));
    }
  }
  WeightedSamples empty;
  std::array<double, 2> got{1, 1};
  empty.percentiles(std::array<double, 2>{0.5, 0.9}, got);
  EXPECT_EQ(got[0], 0.0);
  EXPECT_EQ(got[1], 0.0);
}

TEST(WeightedSamples, EmptyIsZero) {
  WeightedSamples s;
  EXPECT_EQ(s.percentile(0.5), 0.0);
  EXPECT_EQ(s.mean(), 0.0);
}

TEST(EventQueue, OrdersByTimeThenInsertion) {
  EventQueue q;
  q.push(SimTime::from_ns(5), EventKind::kArrival, 1);
  q.push(SimTime::from_ns(3), EventKind::kArrival, 2);
  q.push(SimTime::from_ns(5), EventKind::kWakeUp, 3);
  q.push(SimTime::from_ns(5), EventKind::kArrival, 4);
  q.push(SimTime::from_ns(3), EventKind::kIterationDone, 5);
  std::vector<int64_t> order;
  while (!q.empty()) order.push_back(q.pop().payload);
  EXPECT_EQ(order, (std::vector<int64_t>{2, 5, 1, 3, 4}));
}

TEST(RequestRecord, TpotExcludesTheFirstToken) {
  RequestRecord r;
  r.arrival = SimTime::from_seconds(1);
  r.first_token = SimTime::from_seconds(1.5);
  r.finished = SimTime::from_seconds(3.5);
  r.output_tokens = 5;
  EXPECT_DOUBLE_EQ(r.ttft_s(), 0.5);
  EXPECT_DOUBLE_EQ(r.e2e_s(), 2.5);
  EXPECT_DOUBLE_EQ(r.tpot_s(), 0.5);  // (2.5 - 0.5) / 4
  r.output_tokens = 1;
  EXPECT_DOUBLE_EQ(r.tpot_s(), 0.0);
}

}  // namespace
}  // namespace batchsim
