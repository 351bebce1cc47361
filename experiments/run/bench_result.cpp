#include "experiments/run/bench_result.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "experiments/run/slo.h"
#include "hwmodel/base/error.h"

namespace batchsim {

namespace {

using nlohmann::ordered_json;

// vLLM's metric names, in the order serve.py's process_one_metric writes them.
const std::vector<std::string>& metric_names() {
  static const std::vector<std::string> names = {"ttft", "tpot", "itl", "e2el"};
  return names;
}

// "p99", "p99.9": Python's str() of the percentile as serve.py spells it (int when whole).
std::string percentile_word(double p) {
  if (p == std::floor(p)) return fmt::format("{}", static_cast<int64_t>(p));
  return fmt::format("{}", p);
}

// request_rate and burstiness as vllm bench serve would have been given them for this
// arrival process: poisson:R is --request-rate R (burstiness 1), gamma:R:CV is burstiness
// 1/CV^2 (serve.py's gamma has shape = burstiness, so CV = 1/sqrt(burstiness)), offline is
// "inf". A trace has no such pair: nothing is written.
void write_arrival(const WorkloadSpec& w, ordered_json& j) {
  const std::string& a = w.arrival;
  std::vector<std::string> parts = split_items(a, ":");
  if (parts.empty()) parts.emplace_back();
  if (a == "offline" || (a.empty() && w.trace.empty())) {
    j["request_rate"] = "inf";
    j["burstiness"] = 1.0;
  } else if (parts[0] == "poisson" && parts.size() == 2 && parse_finite(parts[1])) {
    j["request_rate"] = *parse_finite(parts[1]);
    j["burstiness"] = 1.0;
  } else if (parts[0] == "gamma" && parts.size() == 3 && parse_finite(parts[1]) && parse_finite(parts[2])) {
    const double cv = *parse_finite(parts[2]);
    j["request_rate"] = *parse_finite(parts[1]);
    j["burstiness"] = 1.0 / (cv * cv);
  }
}

// serve.py's max_concurrent_requests: over completed requests, one-second buckets from the
// earliest start; a request counts in every bucket from int(start - first) to int(end - first).
int64_t max_concurrent_requests(const SimulationResult& result) {
  SimTime first = SimTime::max(), last = SimTime::zero();
  for (const RequestRecord& r : result.requests) {
    if (!r.completed()) continue;
    first = std::min(first, r.arrival);
    last = std::max(last, r.finished);
  }
  if (first == SimTime::max()) return 0;
  const auto buckets = static_cast<size_t>(std::ceil((last - first).seconds())) + 1;
  std::vector<int64_t> starts(buckets + 1, 0);  // a difference array over the buckets
  for (const RequestRecord& r : result.requests) {
    if (!r.completed()) continue;
    const auto from = static_cast<size_t>((r.arrival - first).seconds());
    const auto to = static_cast<size_t>((r.finished - first).seconds());
    ++starts[std::min(from, buckets)];
    --starts[std::min(to + 1, buckets)];
  }
  int64_t running = 0, peak = 0;
  for (size_t i = 0; i < buckets; ++i) peak = std::max(peak, running += starts[i]);
  return peak;
}

}  // namespace

std::vector<std::string> parse_percentile_metrics(const std::string& text, const std::string& option) {
  const auto items = split_items(text, ",");
  if (items.empty())
    throw UserError(fmt::format("{}: give metric names separated by commas, e.g. ttft,tpot,itl", option));
  std::vector<std::string> metrics;
  for (const std::string& m : items) {
    if (std::find(metric_names().begin(), metric_names().end(), m) == metric_names().end()) {
      throw UserError(
          fmt::format("{}: unknown metric '{}' (expected ttft, tpot, itl or e2el, as vllm bench serve)", option, m));
    }
    if (std::find(metrics.begin(), metrics.end(), m) == metrics.end()) metrics.push_back(m);
  }
  return metrics;
}

std::vector<double> parse_metric_percentiles(const std::string& text, const std::string& option) {
  const auto items = split_items(text, ",");
  if (items.empty()) throw UserError(fmt::format("{}: give percentiles separated by commas, e.g. 50,90,99", option));
  std::vector<double> percentiles;
  for (const std::string& item : items) {
    const auto p = parse_finite(item);
    if (!p || *p < 0 || *p > 100) {
      throw UserError(fmt::format("{}: '{}' is not a percentile (a number from 0 to 100)", option, item));
    }
    percentiles.push_back(*p);
  }
  return percentiles;
}

ordered_json bench_json(const RunOutcome& outcome) {
  const RunConfig& c = outcome.config;
  const SimulationResult& result = outcome.result;
  const Summary& s = result.summary;
  ordered_json j;
  j["num_prompts"] = s.requests_total;
  write_arrival(c.workload, j);
  j["max_concurrency"] = c.max_concurrency > 0 ? ordered_json(c.max_concurrency) : ordered_json(nullptr);
  // vLLM's duration runs from the benchmark's start, when its first request is sent, to the
  // last response: the makespan (first arrival to last completion).
  const double duration = s.makespan_s;
  const auto per_s = [&](double x) { return duration > 0 ? x / duration : 0.0; };
  j["duration"] = duration;
  j["completed"] = s.requests_completed;
  j["failed"] = s.requests_rejected;  // a request the server refuses fails in vLLM's client
  j["total_input_tokens"] = s.prompt_tokens;
  j["total_output_tokens"] = s.output_tokens;
  j["request_throughput"] = per_s(static_cast<double>(s.requests_completed));
  if (c.goodput.empty()) {
    j["request_goodput"] = nullptr;
  } else {
    j["request_goodput"] = compute_goodput(result, c.goodput, duration).requests_per_s;
  }
  j["output_throughput"] = per_s(static_cast<double>(s.output_tokens));
  j["total_token_throughput"] = per_s(static_cast<double>(s.prompt_tokens + s.output_tokens));
  j["max_concurrent_requests"] = max_concurrent_requests(result);
  j["rtfx"] = 0.0;  // input audio seconds / duration: no audio input here

  WeightedSamples ttft, tpot, e2el;
  for (const RequestRecord& r : result.requests) {
    if (!r.completed()) continue;
    ttft.add(r.ttft_s());
    if (r.output_tokens > 1) tpot.add(r.tpot_s());
    e2el.add(r.e2e_s());
  }
  for (const std::string& metric : metric_names()) {
    if (std::find(c.percentile_metrics.begin(), c.percentile_metrics.end(), metric) == c.percentile_metrics.end())
      continue;
    const WeightedSamples& v = metric == "ttft"   ? ttft
                               : metric == "tpot" ? tpot
                               : metric == "itl"  ? result.tbt_s
                                                  : e2el;
    j[fmt::format("mean_{}_ms", metric)] = v.mean() * 1000;
    j[fmt::format("median_{}_ms", metric)] = v.interpolated_percentile(0.5) * 1000;
    j[fmt::format("std_{}_ms", metric)] = v.stddev() * 1000;
    for (double p : c.metric_percentiles) {
      j[fmt::format("p{}_{}_ms", percentile_word(p), metric)] = v.interpolated_percentile(p / 100) * 1000;
    }
  }
  return j;
}

}  // namespace batchsim
