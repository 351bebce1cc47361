// Sample statistics and the nvbench-style stopping rule used for every measured point.
#include "calibration/sample_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace batchsim::calibration {
namespace {

TEST(Summarize, OrderStatisticsOfOneToTen) {
  const std::vector<double> samples{7, 3, 10, 1, 5, 2, 9, 4, 8, 6};
  const SampleSummary s = summarize(samples);
  EXPECT_EQ(s.count, 10);
  EXPECT_DOUBLE_EQ(s.min_s, 1);
  EXPECT_DOUBLE_EQ(s.max_s, 10);
  EXPECT_DOUBLE_EQ(s.mean_s, 5.5);
  EXPECT_DOUBLE_EQ(s.median_s, 5.5);
  // numpy.percentile([1..10], 10) = 1.9, (…, 90) = 9.1; numpy.std = sqrt(8.25).
  EXPECT_NEAR(s.p10_s, 1.9, 1e-12);
  EXPECT_NEAR(s.p90_s, 9.1, 1e-12);
  EXPECT_NEAR(s.std_s, std::sqrt(8.25), 1e-12);
  EXPECT_NEAR(s.rel_noise(), std::sqrt(8.25) / 5.5, 1e-12);
}

TEST(Summarize, OddCountMedianIsTheMiddleSample) {
  const std::vector<double> samples{3e-6, 1e-6, 2e-6};
  EXPECT_DOUBLE_EQ(summarize(samples).median_s, 2e-6);
  EXPECT_THROW(summarize(std::vector<double>{}), std::invalid_argument);
}

StoppingRule rule_without_time_floor() {
  StoppingRule rule;
  rule.min_samples = 10;
  rule.min_measured_time_s = 0;
  rule.time_cap_s = 100;
  return rule;
}

TEST(StoppingCriterion, SteadySamplesStopExactlyAtMinSamples) {
  StoppingCriterion c(rule_without_time_floor());
  for (int i = 1; i <= 9; ++i) {
    c.add_sample(1e-3);
    EXPECT_EQ(c.check(0.0), StopReason::kContinue) << "after " << i << " samples";
  }
  c.add_sample(1e-3);
  EXPECT_EQ(c.check(0.0), StopReason::kConverged);
}

TEST(StoppingCriterion, WaitsForTheMinimumMeasuredTime) {
  StoppingRule rule = rule_without_time_floor();
  rule.min_measured_time_s = 0.05;  // 50 samples of 1 ms
  StoppingCriterion c(rule);
  int n = 0;
  while (c.check(0.0) == StopReason::kContinue) {
    c.add_sample(1e-3);
    ++n;
    ASSERT_LT(n, 1000);
  }
  // 50 samples of 1e-3 may sum to a hair under 0.05 in floating point.
  EXPECT_GE(n, 50);
  EXPECT_LE(n, 51);
}

TEST(StoppingCriterion, NoisyButStableSamplesStopOnceTheNoiseStopsMoving) {
  // Alternating 1 ms / 2 ms: relative noise ≈ 1/3, never below 0.5 %, but it settles; the
  // window of 64 noise values must first lose the unsettled early ones.
  StoppingCriterion c(rule_without_time_floor());
  int n = 0;
  StopReason reason = StopReason::kContinue;
  while ((reason = c.check(0.0)) == StopReason::kContinue) {
    c.add_sample(n % 2 == 0 ? 1e-3 : 2e-3);
    ++n;
    ASSERT_LT(n, 1000);
  }
  EXPECT_EQ(reason, StopReason::kNoiseStable);
  EXPECT_GE(n, 64);
  EXPECT_LE(n, 80);
  EXPECT_NEAR(c.rel_noise(), 1.0 / 3.0, 0.01);
}

TEST(StoppingCriterion, TimeCapAndSampleCapEndAnyPoint) {
  StoppingRule rule = rule_without_time_floor();
  rule.time_cap_s = 2.0;
  StoppingCriterion c(rule);
  c.add_sample(1.0);
  EXPECT_EQ(c.check(1.9), StopReason::kContinue);
  EXPECT_EQ(c.check(2.0), StopReason::kTimeCap);  // even below min_samples

  rule.max_samples = 12;
  StoppingCriterion capped(rule);
  for (int i = 0; i < 12; ++i) capped.add_sample(i % 2 ? 1.0 : 3.0);
  EXPECT_EQ(capped.check(0.0), StopReason::kMaxSamples);
}

TEST(StoppingCriterion, QuickRuleIsLooserThanNvbenchDefaults) {
  const StoppingRule full = StoppingRule::nvbench_defaults(), quick = StoppingRule::quick();
  EXPECT_EQ(full.min_samples, 10);              // nvbench m_min_samples
  EXPECT_DOUBLE_EQ(full.max_rel_noise, 0.005);  // stdrel max-noise 0.5 %
  EXPECT_DOUBLE_EQ(full.min_measured_time_s, 0.5);
  EXPECT_DOUBLE_EQ(full.time_cap_s, 15.0);
  EXPECT_LT(quick.time_cap_s, full.time_cap_s);
  EXPECT_GE(quick.max_rel_noise, full.max_rel_noise);
  EXPECT_THROW(StoppingCriterion(StoppingRule{.min_samples = 1}), std::invalid_argument);
}

}  // namespace
}  // namespace batchsim::calibration
