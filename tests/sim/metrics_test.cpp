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
  EXPECT_DOUBLE_EQ(s.percentile(0.5), 5);  // ceil(0.5*10) = 5th smallest
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
      const auto rank =
          std::max<size_t>(1, static_cast<size_t>(std::ceil(qs[i] * static_cast<double>(expanded.size()) - 1e-9)));
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

// Above 64 pairs percentiles() selects by the values' order keys (a radix select) instead of
// sorting: the figures must still be the nearest ranks, whatever the values' spread, sign,
// repeats and weights, and the pairs must stay in the order they came (mean() sums them so).
TEST(WeightedSamples, RadixSelectedPercentilesAreTheNearestRanks) {
  std::mt19937_64 rng(23);
  std::lognormal_distribution<double> gap(-3.5, 0.8);
  const std::array<double, 7> qs = {0.0, 0.001, 0.5, 0.9, 0.99, 0.999, 1.0};
  for (int trial = 0; trial < 60; ++trial) {
    WeightedSamples s;
    std::vector<std::pair<double, int64_t>> pairs;
    const int n = 65 + static_cast<int>(rng() % 20000);
    for (int i = 0; i < n; ++i) {
      double value = 0;
      switch (trial % 6) {
        case 0:
          value = gap(rng);
          break;  // decode gaps
        case 1:
          value = static_cast<double>(rng() % 5) * 0.001;
          break;  // few values, repeats
        case 2:
          value = gap(rng) * (rng() % 2 == 0 ? -1.0 : 1.0);
          break;  // both signs
        case 3:
          value = i % 1000 == 0 ? 1e6 : gap(rng);
          break;  // far outliers
        case 4:
          value = 0.25;
          break;  // one value
        case 5:
          value = std::ldexp(1.0, static_cast<int>(rng() % 80) - 40) * (rng() % 3 == 0 ? -1 : 1);
          break;
      }
      if (trial % 6 == 1 && i % 7 == 0) value = -0.0;
      const auto weight = static_cast<int64_t>(trial % 3 == 0 ? 1 : 1 + rng() % 1000);
      s.add(value, weight);
      if (!pairs.empty() && pairs.back().first == value) {
        pairs.back().second += weight;  // add()'s run-length merge
      } else {
        pairs.emplace_back(value, weight);
      }
    }
    std::vector<std::pair<double, int64_t>> sorted = pairs;
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    int64_t total = 0;
    for (const auto& p : sorted) total += p.second;
    std::array<double, qs.size()> got{};
    s.percentiles(qs, got);
    for (size_t i = 0; i < qs.size(); ++i) {
      const int64_t rank =
          std::max<int64_t>(1, static_cast<int64_t>(std::ceil(qs[i] * static_cast<double>(total) - 1e-9)));
      int64_t cumulative = 0;
      double expected = sorted.back().first;
      for (const auto& p : sorted) {
        cumulative += p.second;
        if (cumulative >= rank) {
          expected = p.first;
          break;
        }
      }
      EXPECT_EQ(got[i], expected) << "trial " << trial << " q " << qs[i];
    }
    EXPECT_EQ(s.max(), sorted.back().first) << "trial " << trial;
    double sum = 0;  // summed in the order the pairs came: the selection moved none of them
    for (const auto& [value, weight] : pairs) sum += value * static_cast<double>(weight);
    EXPECT_EQ(s.mean(), sum / static_cast<double>(total)) << "trial " << trial;
  }
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
