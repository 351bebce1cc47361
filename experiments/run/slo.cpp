#include "experiments/run/slo.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "experiments/run/output.h"
#include "hwmodel/base/error.h"

namespace batchsim {

namespace {

using nlohmann::ordered_json;

// A summary.json with every key present, to check that SLO paths name a number.
const ordered_json& probe_summary() {
  static const ordered_json probe = [] {
    RunOutcome empty;
    return summary_to_json(empty);
  }();
  return probe;
}

bool names_number(const std::string& path) {
  const ordered_json& probe = probe_summary();
  try {
    const auto ptr = json_path_pointer(path);
    return probe.contains(ptr) && probe.at(ptr).is_number();
  } catch (const std::exception&) {
    return false;  // not a path at all ("a..b")
  }
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

}  // namespace

std::optional<double> parse_finite(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::vector<std::string> split_items(const std::string& text, const char* separators) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = text.find_first_of(separators, start);
    const std::string part = trim(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (!part.empty()) parts.push_back(part);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return parts;
}

const char* const kSloKeyHelp =
    "a numeric summary.json figure by its path (latency.ttft_s.p99, latency.tbt_s.p99, "
    "latency.e2e_s.p50, latency.queueing_s.p50, ...) or METRIC_STAT_s / METRIC_STAT_ms / METRIC_STAT with "
    "METRIC one of e2e, ttft, tpot, tbt, queueing and STAT one of mean, p50, p90, p99, max "
    "(ttft_p99_s = latency.ttft_s.p99)";

std::optional<SloKey> resolve_slo_key(const std::string& key) {
  if (key.find('.') != std::string::npos) {
    if (names_number(key)) return SloKey{key, 1};
    return std::nullopt;
  }
  // METRIC_STAT_s or METRIC_STAT_ms: the summary's latency.METRIC_s.STAT; METRIC_STAT alone is
  // in seconds (its bound may carry its unit: parse_slo).
  for (const auto& [suffix, scale] : {std::pair<const char*, double>{"_ms", 1e-3}, {"_s", 1}, {"", 1}}) {
    const std::string tail = suffix;
    if (key.size() <= tail.size() || key.compare(key.size() - tail.size(), tail.size(), tail) != 0) continue;
    const std::string stem = key.substr(0, key.size() - tail.size());  // "ttft_p99"
    const auto underscore = stem.rfind('_');
    if (underscore == std::string::npos) return std::nullopt;
    const std::string metric = stem.substr(0, underscore), stat = stem.substr(underscore + 1);
    static const std::vector<std::string> metrics = {"e2e", "ttft", "tpot", "tbt", "queueing"};
    static const std::vector<std::string> stats = {"mean", "p50", "p90", "p99", "max"};
    if (std::find(metrics.begin(), metrics.end(), metric) == metrics.end() ||
        std::find(stats.begin(), stats.end(), stat) == stats.end()) {
      return std::nullopt;
    }
    return SloKey{fmt::format("latency.{}_s.{}", metric, stat), scale};
  }
  return std::nullopt;
}

std::pair<std::string, double> slo_bound(const std::string& key, double bound, const std::string& option) {
  const auto resolved = resolve_slo_key(key);
  if (!resolved) throw UserError(fmt::format("{}: '{}' is not an SLO figure: expected {}", option, key, kSloKeyHelp));
  if (!(std::isfinite(bound) && bound >= 0)) {
    throw UserError(fmt::format("{}: {}={}: the bound must be a number >= 0", option, key, bound));
  }
  return {resolved->path, bound * resolved->bound_scale};
}

SloBounds parse_slo(const std::string& text, const std::string& option) {
  const auto items = split_items(text, ",");
  if (items.empty()) {
    throw UserError(
        fmt::format("{}: give KEY=BOUND pairs separated by commas, e.g. ttft_p99_s=2,tbt_p99_s=0.1", option));
  }
  SloBounds bounds;
  for (const std::string& item : items) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw UserError(fmt::format("{}: '{}': expected KEY=BOUND, e.g. ttft_p99_s=2", option, item));
    }
    const std::string key = trim(item.substr(0, eq));
    std::string value = trim(item.substr(eq + 1));
    // A latency bound may carry its unit: ttft_p99=2s, tbt_p99=100ms.
    double unit = 1;
    const auto resolved = resolve_slo_key(key);
    if (resolved && resolved->path.rfind("latency.", 0) == 0) {
      if (value.size() > 2 && value.compare(value.size() - 2, 2, "ms") == 0) {
        unit = 1e-3;
        value.resize(value.size() - 2);
      } else if (value.size() > 1 && value.back() == 's') {
        value.pop_back();
      }
    }
    auto v = parse_finite(value);
    if (v) *v *= unit;
    auto bound = slo_bound(key, v.value_or(0), option);  // the key first, then its bound
    if (!v) throw UserError(fmt::format("{}: {}: the bound '{}' is not a number >= 0", option, key, value));
    if (std::any_of(bounds.begin(), bounds.end(), [&](const auto& b) { return b.first == bound.first; })) {
      throw UserError(fmt::format("{}: {} is bounded twice", option, bound.first));
    }
    bounds.push_back(std::move(bound));
  }
  return bounds;
}

void set_goodput_threshold(GoodputSpec& spec, const std::string& key, double ms, const std::string& option) {
  std::optional<double>* slot = key == "ttft"   ? &spec.ttft_ms
                                : key == "tpot" ? &spec.tpot_ms
                                : key == "e2el" ? &spec.e2el_ms
                                                : nullptr;
  if (slot == nullptr) {
    throw UserError(fmt::format("{}: unknown metric '{}' (expected ttft, tpot or e2el, as vllm bench serve --goodput)",
                                option, key));
  }
  if (!(std::isfinite(ms) && ms >= 0)) {
    throw UserError(fmt::format("{}: {}:{}: the threshold must be a number of milliseconds >= 0", option, key, ms));
  }
  if (*slot) throw UserError(fmt::format("{}: {} is given twice", option, key));
  *slot = ms;
}

GoodputSpec parse_goodput(const std::vector<std::string>& pairs, const std::string& option) {
  GoodputSpec spec;
  std::vector<std::string> items;
  for (const std::string& p : pairs) {
    for (std::string& item : split_items(p, ", \t")) items.push_back(std::move(item));
  }
  if (items.empty()) {
    throw UserError(fmt::format("{}: give KEY:MS pairs, e.g. {} ttft:2000 tpot:100", option, option));
  }
  for (const std::string& item : items) {
    const auto colon = item.find(':');
    if (colon == std::string::npos || colon == 0 || item.find(':', colon + 1) != std::string::npos) {
      throw UserError(
          fmt::format("{}: '{}': expected KEY:VALUE with the value in milliseconds, e.g. ttft:2000", option, item));
    }
    const std::string key = item.substr(0, colon), value = item.substr(colon + 1);
    const auto v = parse_finite(value);
    if (!v || *v < 0) {
      throw UserError(
          fmt::format("{}: {}: the threshold '{}' is not a number of milliseconds >= 0", option, key, value));
    }
    set_goodput_threshold(spec, key, *v, option);
  }
  return spec;
}

SloVerdict evaluate_slo(const ordered_json& summary, const SloBounds& bounds) {
  SloVerdict verdict;
  for (const auto& [path, bound] : bounds) {
    const double value = summary.at(json_path_pointer(path)).get<double>();
    if (value > bound) verdict.violations.push_back({path, bound, value});
  }
  const auto rejected = json_path_pointer("requests.rejected");
  if (summary.contains(rejected)) {
    const auto beyond_context = json_path_pointer("requests.beyond_context");
    verdict.left_out = summary.contains(beyond_context) ? summary.at(beyond_context).get<int64_t>() : 0;
    const int64_t n = summary.at(rejected).get<int64_t>() - verdict.left_out;
    if (n > 0) verdict.violations.push_back({"requests.rejected", 0, static_cast<double>(n)});
  }
  verdict.met = verdict.violations.empty();
  return verdict;
}

bool is_good_request(const RequestRecord& r, const GoodputSpec& spec) {
  if (!r.completed()) return false;
  // Thresholds in ms against seconds, compared as vLLM does: threshold / 1000 >= value.
  if (spec.ttft_ms && !(r.ttft_s() <= *spec.ttft_ms / 1000)) return false;
  if (spec.tpot_ms && !(r.tpot_s() <= *spec.tpot_ms / 1000)) return false;  // 0 for one token
  if (spec.e2el_ms && !(r.e2e_s() <= *spec.e2el_ms / 1000)) return false;
  return true;
}

void Goodput::add(const RequestRecord& r, const GoodputSpec& spec) {
  ++total_requests;
  good_requests += is_good_request(r, spec);
}

void Goodput::finish(double duration_s) {
  if (duration_s > 0) requests_per_s = static_cast<double>(good_requests) / duration_s;
  if (total_requests > 0) fraction = static_cast<double>(good_requests) / static_cast<double>(total_requests);
}

Goodput compute_goodput(const SimulationResult& result, const GoodputSpec& spec, double duration_s) {
  Goodput g;
  for (const RequestRecord& r : result.requests) g.add(r, spec);
  g.finish(duration_s);
  return g;
}

ordered_json slo_json(const SloVerdict& verdict, const SloBounds& bounds) {
  ordered_json j;
  j["met"] = verdict.met;
  j["violations"] = ordered_json::array();
  for (const SloViolation& v : verdict.violations) {
    j["violations"].push_back({{"metric", v.metric}, {"bound", v.bound}, {"value", v.value}});
  }
  if (verdict.left_out > 0) j["left_out_beyond_context"] = verdict.left_out;
  j["bounds"] = slo_bounds_json(bounds);
  return j;
}

ordered_json slo_bounds_json(const SloBounds& bounds) {
  ordered_json b = ordered_json::object();
  for (const auto& [path, bound] : bounds) b[path] = bound;
  return b;
}

ordered_json goodput_json(const Goodput& g, const GoodputSpec& spec) {
  ordered_json j;
  j["requests_per_s"] = g.requests_per_s;
  j["fraction"] = g.fraction;
  j["good_requests"] = g.good_requests;
  j["total_requests"] = g.total_requests;
  ordered_json t = ordered_json::object();
  if (spec.ttft_ms) t["ttft"] = *spec.ttft_ms;
  if (spec.tpot_ms) t["tpot"] = *spec.tpot_ms;
  if (spec.e2el_ms) t["e2el"] = *spec.e2el_ms;
  j["thresholds_ms"] = t;
  return j;
}

std::string slo_line(const ordered_json& slo) {
  std::vector<std::string> bounds;
  for (const auto& [path, bound] : slo["bounds"].items())
    bounds.push_back(fmt::format("{} <= {}", path, bound.get<double>()));
  // Requests beyond the model's context, which no deployment serves, are not held against it.
  const int64_t left_out = slo.value("left_out_beyond_context", int64_t{0});
  const std::string left_out_text =
      left_out > 0
          ? fmt::format("; {} requests beyond the model's context left out (no deployment serves them)", left_out)
          : "";
  if (slo.value("met", false)) return fmt::format("slo: met ({}){}", fmt::join(bounds, ", "), left_out_text);
  std::vector<std::string> why;
  for (const auto& v : slo["violations"]) {
    const std::string metric = v["metric"].get<std::string>();
    if (metric == "requests.rejected") {
      why.push_back(fmt::format("{} requests rejected (never served)", v["value"].get<double>()));
    } else {
      why.push_back(fmt::format("{} {:.6g} > {}", metric, v["value"].get<double>(), v["bound"].get<double>()));
    }
  }
  return fmt::format("slo: NOT MET: {}{}", fmt::join(why, "; "), left_out_text);
}

std::string goodput_line(const ordered_json& goodput) {
  std::vector<std::string> t;
  for (const auto& [key, ms] : goodput["thresholds_ms"].items())
    t.push_back(fmt::format("{} <= {} ms", key, ms.get<double>()));
  return fmt::format("goodput: {:.3f} req/s, {:.1f}% of {} requests good ({})", goodput["requests_per_s"].get<double>(),
                     100 * goodput["fraction"].get<double>(), goodput["total_requests"].get<int64_t>(),
                     fmt::join(t, ", "));
}

}  // namespace batchsim
