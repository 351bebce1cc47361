#include "calibration/sample_stats.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace batchsim::calibration {

double percentile_of_sorted(std::span<const double> sorted, double fraction) {
  if (sorted.empty()) throw std::invalid_argument("percentile of an empty sample set");
  const double rank = std::clamp(fraction, 0.0, 1.0) * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (rank - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

SampleSummary summarize(std::span<const double> samples_s) {
  if (samples_s.empty()) throw std::invalid_argument("summary of an empty sample set");
  std::vector<double> sorted(samples_s.begin(), samples_s.end());
  std::sort(sorted.begin(), sorted.end());
  SampleSummary s;
  s.count = static_cast<int64_t>(sorted.size());
  s.min_s = sorted.front();
  s.max_s = sorted.back();
  double sum = 0;
  for (double x : sorted) sum += x;
  s.mean_s = sum / static_cast<double>(s.count);
  double sq = 0;
  for (double x : sorted) sq += (x - s.mean_s) * (x - s.mean_s);
  s.std_s = std::sqrt(sq / static_cast<double>(s.count));
  s.median_s = percentile_of_sorted(sorted, 0.5);
  s.p10_s = percentile_of_sorted(sorted, 0.1);
  s.p90_s = percentile_of_sorted(sorted, 0.9);
  return s;
}

StoppingRule StoppingRule::quick() {
  StoppingRule rule;
  rule.max_rel_noise = 0.01;
  rule.min_measured_time_s = 0.001;
  rule.time_cap_s = 0.25;
  rule.noise_window = 32;
  rule.max_samples = 2000;
  return rule;
}

std::string_view to_string(StopReason reason) {
  switch (reason) {
    case StopReason::kContinue:
      return "continue";
    case StopReason::kConverged:
      return "converged";
    case StopReason::kNoiseStable:
      return "noise_stable";
    case StopReason::kTimeCap:
      return "time_cap";
    case StopReason::kMaxSamples:
      return "max_samples";
  }
  return "?";
}

StoppingCriterion::StoppingCriterion(StoppingRule rule) : rule_(rule) {
  if (rule_.min_samples < 2 || rule_.max_samples < rule_.min_samples || rule_.noise_window < 2) {
    throw std::invalid_argument("stopping rule: need 2 <= min_samples <= max_samples, noise_window >= 2");
  }
}

void StoppingCriterion::add_sample(double sample_s) {
  samples_s_.push_back(sample_s);
  ++count_;
  sum_s_ += sample_s;
  const double delta = sample_s - mean_s_;
  mean_s_ += delta / static_cast<double>(count_);
  m2_ += delta * (sample_s - mean_s_);
  noise_history_.push_back(rel_noise());
}

double StoppingCriterion::rel_noise() const {
  if (count_ < 2 || mean_s_ <= 0) return 0;
  return std::sqrt(m2_ / static_cast<double>(count_)) / mean_s_;
}

StopReason StoppingCriterion::check(double elapsed_wall_s) const {
  if (count_ >= rule_.max_samples) return StopReason::kMaxSamples;
  if (elapsed_wall_s >= rule_.time_cap_s) return StopReason::kTimeCap;
  if (count_ < rule_.min_samples || sum_s_ < rule_.min_measured_time_s) return StopReason::kContinue;
  if (rel_noise() < rule_.max_rel_noise) return StopReason::kConverged;
  if (count_ >= rule_.noise_window) {
    const auto window = std::span(noise_history_).last(static_cast<size_t>(rule_.noise_window));
    const auto [lo, hi] = std::minmax_element(window.begin(), window.end());
    double mean = 0;
    for (double x : window) mean += x;
    mean /= static_cast<double>(window.size());
    if (mean > 0 && (*hi - *lo) <= rule_.noise_stable_rel_spread * mean) return StopReason::kNoiseStable;
  }
  return StopReason::kContinue;
}

}  // namespace batchsim::calibration
