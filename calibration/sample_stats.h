// batchsim calibration — sample statistics and the stopping rule for timing a kernel.
//
// A measured point (one GEMM shape, one attention batch) is timed repeatedly; each sample is
// one cold launch's GPU time in seconds. `StoppingCriterion` decides when to stop, following
// NVIDIA nvbench (nvbench/detail/measure_cold.cuh, stopping_criterion.cuh, stdrel criterion;
// defaults from benchmark_base.cuh):
//   * never before `min_samples` samples (nvbench: 10);
//   * converged once the relative standard deviation (stdev/mean) is below `max_rel_noise`
//     (nvbench: 0.5 %) and at least `min_measured_time_s` of GPU time was measured (0.5 s);
//   * or once the noise itself has stopped moving: over the last `noise_window` samples
//     (nvbench: 64) the relative noise varied by at most `noise_stable_rel_spread` of its mean —
//     a simpler test than nvbench's regression slope over the same trailing window;
//   * or when the wall-clock time for the point exceeds `time_cap_s` (nvbench m_timeout: 15 s),
//     or `max_samples` is reached.
// Plain C++ so that the rule is unit-tested on machines without a GPU.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace batchsim::calibration {

// Order statistics of a sample set, all in seconds. `std_s` is the population standard
// deviation (numpy's default, which Vidur's time_stats.*.std columns use).
struct SampleSummary {
  int64_t count = 0;
  double min_s = 0, max_s = 0, mean_s = 0, median_s = 0, std_s = 0, p10_s = 0, p90_s = 0;

  double rel_noise() const { return mean_s > 0 ? std_s / mean_s : 0; }
};

// Throws std::invalid_argument on an empty sample set.
SampleSummary summarize(std::span<const double> samples_s);
// Percentile by linear interpolation between closest ranks (numpy's default "linear"):
// fraction 0 is the minimum, 1 the maximum. `sorted` must be ascending and non-empty.
double percentile_of_sorted(std::span<const double> sorted, double fraction);

struct StoppingRule {
  int64_t min_samples = 10;
  int64_t max_samples = 100000;
  double max_rel_noise = 0.005;
  double min_measured_time_s = 0.5;
  double time_cap_s = 15.0;
  int64_t noise_window = 64;
  double noise_stable_rel_spread = 0.05;

  // nvbench's defaults: thorough, for a full calibration run.
  static StoppingRule nvbench_defaults() { return {}; }
  // For `--quick`: a few hundred points within a couple of minutes on one GPU.
  static StoppingRule quick();
};

enum class StopReason { kContinue, kConverged, kNoiseStable, kTimeCap, kMaxSamples };
std::string_view to_string(StopReason reason);

// Accumulates samples (O(1) per sample: Welford's running mean/variance) and applies the rule.
class StoppingCriterion {
 public:
  explicit StoppingCriterion(StoppingRule rule);

  void add_sample(double sample_s);
  // `elapsed_wall_s`: wall-clock time spent on this point so far (launches, flushes, syncs).
  StopReason check(double elapsed_wall_s) const;

  int64_t count() const { return count_; }
  double measured_time_s() const { return sum_s_; }
  double rel_noise() const;
  const std::vector<double>& samples_s() const { return samples_s_; }

 private:
  StoppingRule rule_;
  std::vector<double> samples_s_;
  std::vector<double> noise_history_;  // rel_noise after each sample
  int64_t count_ = 0;
  double sum_s_ = 0, mean_s_ = 0, m2_ = 0;
};

}  // namespace batchsim::calibration
