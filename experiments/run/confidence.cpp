#include "experiments/run/confidence.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <stdexcept>

#include <boost/math/distributions/students_t.hpp>
#include <fmt/format.h>
#include <fmt/ostream.h>

#include "experiments/run/output.h"

namespace batchsim {

using nlohmann::ordered_json;

namespace {

// The figures a planner or a scheduler comparison reads: latency percentiles by the short names
// of --slo, then throughput and goodput by their paths.
constexpr ConfidenceMetric kMetrics[] = {
    {"ttft_mean_s", "latency.ttft_s.mean", "TTFT mean", 1, "s"},
    {"ttft_p50_s", "latency.ttft_s.p50", "TTFT p50", 1, "s"},
    {"ttft_p90_s", "latency.ttft_s.p90", "TTFT p90", 1, "s"},
    {"ttft_p99_s", "latency.ttft_s.p99", "TTFT p99", 1, "s"},
    {"tpot_mean_s", "latency.tpot_s.mean", "TPOT mean", 1e3, "ms"},
    {"tpot_p50_s", "latency.tpot_s.p50", "TPOT p50", 1e3, "ms"},
    {"tpot_p90_s", "latency.tpot_s.p90", "TPOT p90", 1e3, "ms"},
    {"tpot_p99_s", "latency.tpot_s.p99", "TPOT p99", 1e3, "ms"},
    {"tbt_p50_s", "latency.tbt_s.p50", "TBT p50", 1e3, "ms"},
    {"tbt_p99_s", "latency.tbt_s.p99", "TBT p99", 1e3, "ms"},
    {"e2e_mean_s", "latency.e2e_s.mean", "e2e mean", 1, "s"},
    {"e2e_p50_s", "latency.e2e_s.p50", "e2e p50", 1, "s"},
    {"e2e_p90_s", "latency.e2e_s.p90", "e2e p90", 1, "s"},
    {"e2e_p99_s", "latency.e2e_s.p99", "e2e p99", 1, "s"},
    {"throughput.output_tokens_per_s", "throughput.output_tokens_per_s", "output", 1, "tok/s"},
    {"throughput.total_tokens_per_s", "throughput.total_tokens_per_s", "total", 1, "tok/s"},
    {"throughput.requests_per_s", "throughput.requests_per_s", "requests", 1, "req/s"},
    {"goodput.requests_per_s", "goodput.requests_per_s", "goodput", 1, "req/s"},
};

double t_quantile(double level, int64_t n) {
  const boost::math::students_t t(static_cast<double>(n - 1));
  return boost::math::quantile(t, 1 - (1 - level) / 2);
}

double mean_of(std::span<const double> x) {
  double sum = 0;
  for (double v : x) sum += v;
  return x.empty() ? 0 : sum / static_cast<double>(x.size());
}

double sample_sd(std::span<const double> x, double mean) {
  double ss = 0;
  for (double v : x) ss += (v - mean) * (v - mean);
  return std::sqrt(ss / static_cast<double>(x.size() - 1));
}

// Digits enough for a value shown in `unit` (latencies in s to the ms, token rates whole).
int precision_of(const ConfidenceMetric& m, double value) {
  if (std::string_view(m.unit) == "s") return 3;
  if (std::string_view(m.unit) == "ms") return value < 10 ? 2 : 1;
  return value < 10 ? 3 : 1;
}

}  // namespace

std::span<const ConfidenceMetric> confidence_metrics() { return kMetrics; }

Interval mean_interval(std::span<const double> samples, double level) {
  Interval iv;
  iv.n = static_cast<int64_t>(samples.size());
  iv.mean = iv.lo = iv.hi = mean_of(samples);
  if (iv.n < 2) return iv;
  const double half = t_quantile(level, iv.n) * sample_sd(samples, iv.mean) / std::sqrt(static_cast<double>(iv.n));
  iv.lo = iv.mean - half;
  iv.hi = iv.mean + half;
  return iv;
}

PairedDifference paired_difference(std::span<const double> baseline, std::span<const double> policy, double level) {
  if (baseline.size() != policy.size()) {
    throw std::invalid_argument("paired_difference: the two policies have different numbers of seeds");
  }
  std::vector<double> d(baseline.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = policy[i] - baseline[i];
  PairedDifference out;
  out.difference = mean_interval(d, level);
  const auto n = out.difference.n;
  if (n < 2) return out;  // one seed: nothing to judge the difference against
  const double sd = sample_sd(d, out.difference.mean);
  if (sd == 0) {
    out.p_value = out.difference.mean == 0 ? 1.0 : 0.0;
    return out;
  }
  const double t = out.difference.mean / (sd / std::sqrt(static_cast<double>(n)));
  const boost::math::students_t dist(static_cast<double>(n - 1));
  out.p_value = 2 * boost::math::cdf(boost::math::complement(dist, std::abs(t)));
  return out;
}

std::vector<double> metric_samples(const std::vector<const ordered_json*>& runs, const char* path) {
  std::vector<double> x;
  const auto ptr = json_path_pointer(path);
  for (const ordered_json* r : runs) {
    if (!r->contains(ptr) || !r->at(ptr).is_number()) return {};
    x.push_back(r->at(ptr).get<double>());
  }
  return x;
}

ordered_json confidence_json(const std::vector<const ordered_json*>& runs, const std::vector<uint64_t>& seeds,
                             const std::string& varies) {
  ordered_json c;
  c["seeds"] = seeds;
  c["level"] = kConfidenceLevel;
  c["method"] =
      "Student t interval of the mean over independent seeds (Law, Simulation Modeling and Analysis, 5th ed., 9.4.1)";
  c["varies"] = varies;
  bool moved = false;
  ordered_json metrics = ordered_json::object();
  for (const ConfidenceMetric& m : kMetrics) {
    const std::vector<double> x = metric_samples(runs, m.path);
    if (x.empty()) continue;
    const Interval iv = mean_interval(x);
    moved = moved || std::any_of(x.begin(), x.end(), [&](double v) { return v != x.front(); });
    metrics[m.key] = {{"mean", iv.mean}, {"lo", iv.lo}, {"hi", iv.hi}};
  }
  if (!moved) {
    c["warning"] = fmt::format(
        "the {} seeds gave the same figures: {} (offline arrivals and fixed lengths, or a trace "
        "replayed as recorded); no interval can be had from them",
        seeds.size(), varies.empty() ? "nothing in this workload depends on the seed" : "the seeds changed " + varies);
    for (auto& item : metrics.items()) item.value() = {{"mean", item.value()["mean"]}};
  }
  c["metrics"] = metrics;
  return c;
}

std::string format_with_half_width(const Interval& interval, int precision) {
  if (interval.n < 2 || interval.hi == interval.lo) return fmt::format("{:.{}f}", interval.mean, precision);
  return fmt::format("{:.{}f} ± {:.{}f}", interval.mean, precision, interval.half_width(), precision);
}

void print_confidence(std::ostream& out, const ordered_json& confidence) {
  const size_t n = confidence["seeds"].size();
  if (confidence.contains("warning")) {
    fmt::print(out, "over {} seeds: {}\n", n, confidence["warning"].get<std::string>());
    return;
  }
  fmt::print(out, "over {} seeds ({}..{}; each draws anew {}), mean ± half-width of the {:.0f}% interval:\n", n,
             confidence["seeds"].front().dump(), confidence["seeds"].back().dump(),
             confidence["varies"].get<std::string>().empty() ? "only the policies' own random choices"
                                                             : confidence["varies"].get<std::string>(),
             100 * confidence["level"].get<double>());
  const ordered_json& metrics = confidence["metrics"];
  for (const ConfidenceMetric& m : kMetrics) {
    if (!metrics.contains(m.key)) continue;
    const ordered_json& v = metrics[m.key];
    Interval iv{v["mean"].get<double>() * m.scale, v["lo"].get<double>() * m.scale, v["hi"].get<double>() * m.scale,
                static_cast<int64_t>(n)};
    fmt::print(out, "  {:<10} {} {}\n", m.label, format_with_half_width(iv, precision_of(m, iv.mean)), m.unit);
  }
}

}  // namespace batchsim
