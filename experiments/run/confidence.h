// batchsim — how sure a figure is: confidence intervals over seeds, and paired differences
// between policies that saw the same requests.
//
// Each seed of a run is an independent replication: new arrivals and lengths for a synthetic
// workload, a new block-bootstrap replicate for a trace (sim/workload/workload.h, "resample").
// A figure's interval is then Student's t interval of its mean over the seeds,
//     mean ± t(1 - (1 - level)/2, n - 1) · s / sqrt(n),
// the textbook interval for independent replications (Law, "Simulation Modeling and Analysis",
// 5th ed., 2015, §9.4.1). It covers the figure's expected value over workloads like this one,
// not one replay's value; p99s of short runs are skewed, so few seeds give a rough interval
// (docs/usage.md, "How many seeds").
//
// Policies of one comparison run on the same requests per seed (common random numbers), so a
// difference between two of them is judged per seed: the paired t-test on the per-seed
// differences (Law 2015, §10.2.1, "paired-t confidence interval"), whose interval is far
// narrower than two separate intervals would suggest, because the workload's own variation
// cancels out.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace batchsim {

// A figure reported with an interval: its key in summary.json's `confidence.metrics` (the short
// name `--slo` accepts, e.g. ttft_p99_s, or the dotted path for throughput and goodput), its
// summary.json path, and how the terminal shows it.
struct ConfidenceMetric {
  const char* key;
  const char* path;
  const char* label;  // "TTFT p99"
  double scale;       // to the shown unit
  const char* unit;   // "s", "ms", "tok/s"
};
std::span<const ConfidenceMetric> confidence_metrics();

inline constexpr double kConfidenceLevel = 0.95;

// Student's t interval of the mean of `samples` at `level`; with fewer than two samples lo and
// hi are the mean (no interval can be had).
struct Interval {
  double mean = 0, lo = 0, hi = 0;
  int64_t n = 0;
  double half_width() const { return (hi - lo) / 2; }
};
Interval mean_interval(std::span<const double> samples, double level = kConfidenceLevel);

// The paired t-test of `policy` against `baseline`, sample i of each from the same seed:
// the interval of the mean difference (policy - baseline) and the two-sided p-value of "no
// difference". Identical pairs give p = 1; a difference that is the same, non-zero, in every
// seed gives p = 0. Throws std::invalid_argument when the sizes differ.
struct PairedDifference {
  Interval difference;
  double p_value = 1;
  bool significant(double level = kConfidenceLevel) const { return p_value < 1 - level; }
};
PairedDifference paired_difference(std::span<const double> baseline, std::span<const double> policy,
                                   double level = kConfidenceLevel);

// One figure's values over the seeds' summaries (nullopt where a summary lacks it, e.g. goodput
// without thresholds, or a latency with no completed request). Empty when any lacks it.
std::vector<double> metric_samples(const std::vector<const nlohmann::ordered_json*>& runs, const char* path);

// summary.json's `confidence` for the summaries of one configuration run with several seeds:
//   {seeds: [...], level, method, varies, metrics: {KEY: {mean, lo, hi}}}
// `varies` says what the seeds changed (seed_variation). When no figure moved between seeds the
// block says so in `warning` and gives each metric's mean alone: a zero-width interval would
// claim a certainty that only comes from the seeds changing nothing.
nlohmann::ordered_json confidence_json(const std::vector<const nlohmann::ordered_json*>& runs,
                                       const std::vector<uint64_t>& seeds, const std::string& varies);

// "0.076 ± 0.004 s": a value with the half-width of its interval, `precision` digits.
std::string format_with_half_width(const Interval& interval, int precision);

// The block's figures for the terminal, one line each ("  TTFT p99   0.076 ± 0.004 s"), after
// a heading that names the seeds and the method; its warning instead when the seeds varied nothing.
void print_confidence(std::ostream& out, const nlohmann::ordered_json& confidence);

}  // namespace batchsim
