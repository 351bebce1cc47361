#include "experiments/study/report.h"
#include "experiments/study/text_table.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "experiments/run/confidence.h"
#include "experiments/run/latency_diagnosis.h"
#include "experiments/run/output.h"
#include "hwmodel/base/error.h"
#include "hwmodel/base/json_file.h"

namespace batchsim {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

std::optional<double> number_at(const ordered_json& j, const std::string& dotted) {
  const auto ptr = json_path_pointer(dotted);
  if (!j.contains(ptr)) return std::nullopt;
  const auto& v = j.at(ptr);
  if (!v.is_number()) return std::nullopt;
  return v.get<double>();
}

std::string string_at(const ordered_json& j, const char* a, const char* b) {
  if (!j.contains(a) || !j[a].contains(b)) return "";
  const auto& v = j[a][b];
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// A figure of summary.json shown in a table column: value * scale, printed with `precision`.
struct Column {
  const char* path;
  const char* header;
  double scale;
  int precision;
};

const std::vector<Column>& throughput_columns() {
  static const std::vector<Column> c = {
      {"requests.completed", "done", 1, 0},
      {"requests.rejected", "rej", 1, 0},
      {"throughput.output_tokens_per_s", "out tok/s", 1, 1},
      {"throughput.total_tokens_per_s", "total tok/s", 1, 1},
      {"throughput.requests_per_s", "req/s", 1, 3},
      {"preemptions", "preempt", 1, 0},
      {"kv.used_fraction_mean", "KV used mean %", 100, 1},
      {"kv.allocated_fraction_peak", "KV alloc peak %", 100, 1},
      {"bubble_fraction", "bubble %", 100, 1},
  };
  return c;
}

const std::vector<Column>& latency_columns() {
  static const std::vector<Column> c = {
      {"latency.e2e_s.p50", "e2e p50 s", 1, 2},      {"latency.e2e_s.p90", "e2e p90 s", 1, 2},
      {"latency.e2e_s.p99", "e2e p99 s", 1, 2},      {"latency.ttft_s.p50", "TTFT p50 s", 1, 3},
      {"latency.ttft_s.p90", "TTFT p90 s", 1, 3},    {"latency.ttft_s.p99", "TTFT p99 s", 1, 3},
      {"latency.tpot_s.p50", "TPOT p50 ms", 1e3, 1}, {"latency.tpot_s.p90", "TPOT p90 ms", 1e3, 1},
      {"latency.tpot_s.p99", "TPOT p99 ms", 1e3, 1}, {"latency.tbt_s.p50", "TBT p50 ms", 1e3, 1},
      {"latency.tbt_s.p90", "TBT p90 ms", 1e3, 1},   {"latency.tbt_s.p99", "TBT p99 ms", 1e3, 1},
  };
  return c;
}

struct Spread {
  double mean = 0, min = 0, max = 0;
  int n = 0;
  double half = 0;  // half-width of the mean's 95% interval over the seeds (experiments/run/confidence.h)
};

Spread spread_of(const std::vector<const ordered_json*>& runs, const std::string& path, double scale) {
  Spread s;
  std::vector<double> x;
  for (const ordered_json* r : runs) {
    if (const auto v = number_at(*r, path)) x.push_back(*v * scale);
  }
  if (x.empty()) return s;
  s.n = static_cast<int>(x.size());
  s.min = *std::min_element(x.begin(), x.end());
  s.max = *std::max_element(x.begin(), x.end());
  const Interval iv = mean_interval(x);
  s.mean = iv.mean;
  s.half = iv.half_width();
  return s;
}

// "12.3" for one seed, "12.3 ± 0.4" for several: the mean and the half-width of its 95% interval
// (seeds that gave the same value give none).
std::string format_spread(const Spread& s, int precision) {
  if (s.n == 0) return "–";
  if (s.n == 1 || s.min == s.max) return fmt::format("{:.{}f}", s.mean, precision);
  return fmt::format("{:.{}f} ± {:.{}f}", s.mean, precision, s.half, precision);
}

// Runs of one (group, policy) pair: the seeds of one combination.
struct Row {
  std::string group;
  std::string policy;
  std::vector<const ordered_json*> runs;
};

std::vector<Row> group_rows(const std::vector<ordered_json>& runs) {
  std::vector<Row> rows;
  std::map<std::pair<std::string, std::string>, size_t> index;
  for (const ordered_json& r : runs) {
    const std::string group = string_at(r, "experiment", "group");
    const std::string policy = string_at(r, "experiment", "policy");
    auto [it, inserted] = index.try_emplace({group, policy}, rows.size());
    if (inserted) rows.push_back({group, policy, {}});
    rows[it->second].runs.push_back(&r);
  }
  return rows;
}

struct Table {
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
};

void render_markdown(std::ostream& out, const Table& t) {
  fmt::print(out, "| {} |\n", fmt::join(t.headers, " | "));
  std::vector<std::string> rule;
  for (size_t i = 0; i < t.headers.size(); ++i) rule.push_back(i < 2 ? ":--" : "--:");
  fmt::print(out, "|{}|\n", fmt::join(rule, "|"));
  for (const auto& r : t.rows) fmt::print(out, "| {} |\n", fmt::join(r, " | "));
  out << '\n';
}

void render_text(std::ostream& out, const Table& t) { render_text_table(out, t.headers, t.rows, 2); }

bool is_capacity(const ResultSet& results) {
  return results.experiment.contains("capacity") && !results.experiment.at("capacity").is_null();
}

std::string first_policy(const ResultSet& results) {
  const auto& p = results.experiment.at("policies");
  return p.is_array() && !p.empty() ? p[0].at("label").get<std::string>() : "";
}

// The prefix-cache hit rate is a column only when some run of the result set found anything
// cached: without prefix hashes (synthetic prompts, no --prefix) or without prefix_caching it is
// 0 everywhere, and a column of zeros would only widen every table of the other experiments.
constexpr Column kPrefixHitColumn = {"prefix_cache.hit_rate", "prefix hit %", 100, 1};

bool any_prefix_hits(const std::vector<ordered_json>& runs) {
  return std::any_of(runs.begin(), runs.end(),
                     [](const ordered_json& r) { return number_at(r, "prefix_cache.cached_tokens").value_or(0) > 0; });
}

// Speculative decoding's figures are columns only when some run of the result set speculates
// (docs/speculative.md): the mean acceptance length and the tokens each verification step
// emitted; a run that does not speculate shows "–".
constexpr Column kAcceptLengthColumn = {"speculative_decoding.mean_acceptance_length", "accept len", 1, 2};
constexpr Column kTokensPerStepColumn = {"speculative_decoding.tokens_per_step", "tok/step", 1, 2};

bool any_speculation(const std::vector<ordered_json>& runs) {
  return std::any_of(runs.begin(), runs.end(), [](const ordered_json& r) {
    return number_at(r, "speculative_decoding.verification_steps").value_or(0) > 0;
  });
}

// The replica count is a column only when some run of the result set is a cluster (more than one
// replica), so single-replica experiments keep their tables; and not when an axis named
// `replicas` already puts the count in every run's group label ("replicas=4 router=..."): the
// column would repeat the label on every row. An axis that sets `replicas` under other labels
// (a mapping axis, `{label: big, replicas: 8}`) does not show the count, so the column stays.
// (The terminal drops a group column that is the same on every row, so there a single-valued
// `replicas` axis goes unshown, as any single-valued axis does; report.md keeps it.)
constexpr Column kReplicasColumn = {"config.replicas", "replicas", 1, 0};

bool replicas_column(const std::vector<ordered_json>& runs) {
  const bool cluster = std::any_of(
      runs.begin(), runs.end(), [](const ordered_json& r) { return number_at(r, "config.replicas").value_or(1) > 1; });
  const bool in_group_label = std::all_of(runs.begin(), runs.end(), [](const ordered_json& r) {
    const auto n = number_at(r, "config.replicas");
    const auto label = json_path_pointer("experiment.axes.replicas");
    return n && r.contains(label) && r.at(label).is_string() &&
           r.at(label).get<std::string>() == fmt::format("{}", static_cast<int64_t>(*n));
  });
  return cluster && !in_group_label;
}

// The SLO and goodput columns appear when some run was judged (an experiment's `slo:` block,
// or --slo / --goodput on compare): summary.json's `slo` and `goodput` (experiments/run/slo.h).
bool any_slo(const std::vector<ordered_json>& runs) {
  return std::any_of(runs.begin(), runs.end(), [](const ordered_json& r) { return r.contains("slo"); });
}
bool any_goodput(const std::vector<ordered_json>& runs) {
  return std::any_of(runs.begin(), runs.end(), [](const ordered_json& r) { return r.contains("goodput"); });
}
constexpr Column kGoodputColumn = {"goodput.requests_per_s", "goodput req/s", 1, 3};
constexpr Column kGoodFractionColumn = {"goodput.fraction", "good %", 100, 1};
constexpr const char* kSloHeader = "SLO";

// "pass" when every seed of the row met its SLO, "FAIL" when none did, "pass 2/3" between.
std::string slo_cell(const std::vector<const ordered_json*>& runs) {
  int judged = 0, met = 0;
  for (const ordered_json* r : runs) {
    if (!r->contains("slo")) continue;
    ++judged;
    met += (*r).at("slo").value("met", false);
  }
  if (judged == 0) return "–";
  if (met == judged) return "pass";
  if (met == 0) return "FAIL";
  return fmt::format("pass {}/{}", met, judged);
}

// The `trust` blocks of the runs' GPU profiles (summary.json), each once, in run order; failed
// runs have none.
std::vector<const ordered_json*> distinct_trust(const ResultSet& results) {
  std::vector<const ordered_json*> blocks;
  for (const ordered_json& r : results.runs) {
    if (!r.contains("trust")) continue;
    const ordered_json& t = r.at("trust");
    if (std::none_of(blocks.begin(), blocks.end(), [&](const ordered_json* b) { return *b == t; })) {
      blocks.push_back(&t);
    }
  }
  return blocks;
}

// "How far to trust these figures": per GPU profile what its error was measured on, and one
// table of every validated profile's per-operator figures.
void write_trust_section(std::ostream& out, const ResultSet& results) {
  const auto blocks = distinct_trust(results);
  if (blocks.empty()) return;
  out << "## How far to trust these figures\n\n"
         "Every figure here comes from the cost model, so it is as good as the model's iteration "
         "times. Each GPU profile records how far they are from measured times (`trust` in each "
         "run's `summary.json`; MAPE and p90 of |predicted / measured − 1| over the rows scored, in "
         "percent):\n\n";
  Table t;
  t.headers = {"profile", "operator", "MAPE %", "p90 %", "rows"};
  for (const ordered_json* b : blocks) {
    const std::string profile = b->value("profile", "");
    const std::string source = b->value("source", "");
    const std::string name = fmt::format("`{}`{}", profile, source.empty() ? "" : " (" + source + ")");
    if (!b->value("validated", false)) {
      fmt::print(out, "- {}: **not validated**: {}\n", name, b->value("reason", ""));
      continue;
    }
    fmt::print(out, "- {}: {} ({}) on {}\n", name, b->value("held_out", false) ? "held out" : "in-sample",
               b->value("scored_on", ""), b->value("measured_on", ""));
    for (const auto& [op, e] : (*b).at("operators").items()) {
      t.rows.push_back({profile, op, fmt::format("{:.1f}", e.at("mape").get<double>()),
                        fmt::format("{:.1f}", e.at("p90").get<double>()), e.at("count").dump()});
    }
  }
  out << "\n";
  if (!t.rows.empty()) render_markdown(out, t);
  // End to end: the profiles' predictions of measured serving benchmarks (validate-serving).
  Table e2e;
  e2e.headers = {"profile",       "serving engine",
                 "TTFT MAPE %",   "TTFT predicted / measured",
                 "TPOT MAPE %",   "TPOT predicted / measured",
                 "benchmark runs"};
  // The median ratio where the profile records it ("-" for a profile written before).
  auto ratio = [](const ordered_json& e, const char* key) {
    return e.contains(key) ? fmt::format("{:.2f}", e.at(key).get<double>()) : std::string("-");
  };
  std::vector<std::string> sources;
  for (const ordered_json* b : blocks) {
    if (!b->contains("serving")) continue;
    const std::string profile = b->value("profile", "");
    sources.push_back(fmt::format("`{}`: {}", profile, (*b).at("serving").value("measured_on", "")));
    for (const auto& [engine, e] : (*b).at("serving").at("backends").items()) {
      e2e.rows.push_back({profile, engine, fmt::format("{:.1f}", e.at("ttft_mape").get<double>()),
                          ratio(e, "ttft_median_ratio"), fmt::format("{:.1f}", e.at("tpot_mape").get<double>()),
                          ratio(e, "tpot_median_ratio"), e.at("count").dump()});
    }
  }
  if (e2e.rows.empty()) return;
  out << "\nEnd to end, against measured serving benchmarks the model was never fitted on (mean TTFT and "
         "TPOT of each benchmark run, `batchsim validate-serving`; the median of predicted / measured says "
         "which way the error goes, below 1 predicted short):\n\n";
  for (const std::string& s : sources) fmt::print(out, "- {}\n", s);
  out << "\n";
  render_markdown(out, e2e);
}

Table throughput_table(const ResultSet& results, const std::vector<Row>& rows) {
  std::vector<Column> columns = throughput_columns();
  if (replicas_column(results.runs)) columns.insert(columns.begin(), kReplicasColumn);
  if (any_prefix_hits(results.runs)) columns.push_back(kPrefixHitColumn);
  if (any_speculation(results.runs)) {
    columns.push_back(kAcceptLengthColumn);
    columns.push_back(kTokensPerStepColumn);
  }
  if (any_goodput(results.runs)) {
    columns.push_back(kGoodputColumn);
    columns.push_back(kGoodFractionColumn);
  }
  const bool slo = any_slo(results.runs);
  Table t;
  t.headers = {"group", "policy"};
  if (slo) t.headers.push_back(kSloHeader);
  for (const Column& c : columns) t.headers.push_back(c.header);
  const bool budget = results.experiment.value("iteration_budget", 0) > 0;
  if (budget) {
    t.headers.push_back(fmt::format("done in {} it", results.experiment.at("iteration_budget").get<int64_t>()));
  }
  // A speedup needs a second policy to compare with: with one policy it would read 1.00x
  // everywhere (an experiment that sweeps models or dtypes under one policy).
  const std::string baseline = first_policy(results);
  const bool speedup = results.experiment.at("policies").size() > 1;
  if (speedup) t.headers.push_back(fmt::format("speedup (out tok/s / {}'s)", baseline));
  std::map<std::string, double> baseline_tps;  // group -> mean output tokens/s of the baseline
  for (const Row& r : rows) {
    if (r.policy == baseline) {
      baseline_tps[r.group] = spread_of(r.runs, "throughput.output_tokens_per_s", 1).mean;
    }
  }
  for (const Row& r : rows) {
    std::vector<std::string> cells = {r.group.empty() ? "all" : r.group, r.policy};
    if (slo) cells.push_back(slo_cell(r.runs));
    for (const Column& c : columns) {
      const ordered_json& config = (*r.runs.front()).at("config");
      if (std::string(c.path) == kReplicasColumn.path && config.contains("prefill_replicas")) {
        // A disaggregated run's replicas are its two pools'.
        cells.push_back(fmt::format("{}P+{}D", config.at("prefill_replicas").get<int64_t>(),
                                    config.at("decode_replicas").get<int64_t>()));
        continue;
      }
      cells.push_back(format_spread(spread_of(r.runs, c.path, c.scale), c.precision));
    }
    if (budget) cells.push_back(format_spread(spread_of(r.runs, "experiment.completed_within_budget", 1), 1));
    if (speedup) {
      const auto it = baseline_tps.find(r.group);
      const double tps = spread_of(r.runs, "throughput.output_tokens_per_s", 1).mean;
      cells.push_back(it != baseline_tps.end() && it->second > 0 ? fmt::format("{:.2f}x", tps / it->second) : "–");
    }
    t.rows.push_back(std::move(cells));
  }
  return t;
}

Table latency_table(const std::vector<Row>& rows) {
  Table t;
  t.headers = {"group", "policy"};
  for (const Column& c : latency_columns()) t.headers.push_back(c.header);
  for (const Row& r : rows) {
    std::vector<std::string> cells = {r.group.empty() ? "all" : r.group, r.policy};
    for (const Column& c : latency_columns()) {
      cells.push_back(format_spread(spread_of(r.runs, c.path, c.scale), c.precision));
    }
    t.rows.push_back(std::move(cells));
  }
  return t;
}

// "Where the time went" (summary.json's `latency_breakdown`): what each row's p99 requests spent
// their time on, and the diagnosis `batchsim run` prints, made from the seeds' mean shares.
bool any_breakdown(const std::vector<ordered_json>& runs) {
  return std::any_of(runs.begin(), runs.end(), [](const ordered_json& r) { return r.contains("latency_breakdown"); });
}

std::string breakdown_path(LatencyPart part, const char* key) {
  return fmt::format("latency_breakdown.{}.{}", latency_part_name(part), key);
}

// The parts some run spent time in: a column of zeros (kv_transfer without disaggregation)
// says nothing.
std::vector<LatencyPart> parts_with_time(const std::vector<Row>& rows) {
  std::vector<LatencyPart> parts;
  for (LatencyPart part : kLatencyParts) {
    const bool some = std::any_of(rows.begin(), rows.end(), [&](const Row& r) {
      return spread_of(r.runs, breakdown_path(part, "share"), 1).max > 0;
    });
    if (some) parts.push_back(part);
  }
  return parts;
}

Table breakdown_table(const std::vector<Row>& rows, const std::vector<LatencyPart>& parts) {
  Table t;
  t.headers = {"group", "policy", "e2e p99 s", "p99 requests"};
  for (LatencyPart part : parts) t.headers.push_back(fmt::format("{} %", latency_part_name(part)));
  for (const Row& r : rows) {
    std::vector<std::string> cells = {r.group.empty() ? "all" : r.group, r.policy,
                                      format_spread(spread_of(r.runs, "latency.e2e_s.p99", 1), 2),
                                      format_spread(spread_of(r.runs, "latency_breakdown.p99_requests", 1), 0)};
    for (LatencyPart part : parts) {
      cells.push_back(format_spread(spread_of(r.runs, breakdown_path(part, "share_of_p99_requests"), 100), 1));
    }
    t.rows.push_back(std::move(cells));
  }
  return t;
}

std::string row_diagnosis(const Row& r) {
  DiagnosisInputs in;
  for (LatencyPart part : kLatencyParts) {
    in.share_of_p99[static_cast<size_t>(part)] =
        spread_of(r.runs, breakdown_path(part, "share_of_p99_requests"), 1).mean;
  }
  in.completed = static_cast<int64_t>(std::llround(spread_of(r.runs, "requests.completed", 1).mean));
  in.kv_allocated_fraction_peak = spread_of(r.runs, "kv.allocated_fraction_peak", 1).mean;
  const ordered_json& config = (*r.runs.front()).at("config");
  std::map<std::string, std::string> options;
  if (config.contains("policy_opts")) {
    for (const auto& [key, value] : config.at("policy_opts").items()) options[key] = value.get<std::string>();
  }
  in.policy = policy_traits(config.value("policy", std::string()), options);
  in.sent_at_once =
      sends_all_at_once(config.value("arrival", std::string()), config.value("max_concurrency", int64_t{0}));
  in.client_connections = limiting_client_connections(config.value("max_concurrency", int64_t{0}),
                                                      config.value("client_connections", int64_t{0}));
  return latency_diagnosis(in);
}

void write_breakdown_section(std::ostream& out, const std::vector<Row>& rows) {
  out << "## Where the time went\n\n"
         "Every request's e2e is split into parts that add up to it exactly (`requests.csv`'s "
         "`breakdown_<part>_s`): queueing (arrival to its first iteration), prefill (its own prompt's "
         "iterations), decode (its decode steps, as long as the decodes alone would have taken), stall "
         "(waiting on other requests' prefills once admitted: the rest of an iteration it shared with "
         "them, or one it was left out of), preemption (waiting to run again, recomputing, swapping), "
         "kv_transfer (disaggregated runs: from the hand-off to its first decode iteration) and "
         "overhead (the engine's CPU and launch time). The table is what the p99 requests, the slowest "
         "1%, spent their time on (`latency_breakdown.<part>.share_of_p99_requests`, in %); the figure "
         "*Latency breakdown per policy* shows the mean request's seconds beside it.\n\n";
  render_markdown(out, breakdown_table(rows, parts_with_time(rows)));
  out << "What would have helped, from each row's p99 requests (the rules of "
         "`experiments/run/latency_diagnosis.h`, on the seeds' mean shares):\n\n";
  for (const Row& r : rows) {
    fmt::print(out, "- {}`{}`: {}\n", r.group.empty() ? "" : fmt::format("{}, ", r.group), r.policy, row_diagnosis(r));
  }
  out << "\n";
}

// Prefill/decode disaggregation (summary.json's `pools`): the section appears when some run of
// the set is disaggregated, with its colocated runs beside the P:D ones.
bool any_pools(const std::vector<ordered_json>& runs) {
  return std::any_of(runs.begin(), runs.end(), [](const ordered_json& r) { return r.contains("pools"); });
}

const std::vector<Column>& disaggregation_columns() {
  static const std::vector<Column> c = {
      {"gpus", "GPUs", 1, 0},
      {"latency.ttft_s.p50", "TTFT p50 s", 1, 3},
      {"latency.ttft_s.p99", "TTFT p99 s", 1, 3},
      {"latency.tbt_s.p99", "TBT p99 ms", 1e3, 1},
      {"latency.tpot_s.p99", "TPOT p99 ms", 1e3, 1},
      {"goodput.requests_per_s_per_gpu", "goodput/GPU req/s", 1, 3},
      {"pools.prefill.busy_fraction", "prefill busy %", 100, 1},
      {"pools.decode.busy_fraction", "decode busy %", 100, 1},
      {"pools.kv_transfer.transfer_s.p50", "transfer p50 ms", 1e3, 2},
      {"pools.kv_transfer.transfer_s.p99", "transfer p99 ms", 1e3, 2},
      {"pools.kv_transfer.queue_s.p99", "link queue p99 ms", 1e3, 2},
      {"pools.kv_transfer.wait_s.p99", "KV wait p99 s", 1, 3},
      {"pools.kv_transfer.handoff_gap_s.p99", "hand-off gap p99 ms", 1e3, 1},
  };
  return c;
}

Table disaggregation_table(const std::vector<Row>& rows) {
  Table t;
  t.headers = {"group", "policy", "deployment"};
  for (const Column& c : disaggregation_columns()) t.headers.push_back(c.header);
  for (const Row& r : rows) {
    const ordered_json& config = (*r.runs.front()).at("config");
    const std::string deployment = config.contains("prefill_replicas")
                                       ? fmt::format("{}P:{}D", config.at("prefill_replicas").get<int64_t>(),
                                                     config.at("decode_replicas").get<int64_t>())
                                       : fmt::format("colocated x{}", config.value("replicas", 1));
    std::vector<std::string> cells = {r.group.empty() ? "all" : r.group, r.policy, deployment};
    for (const Column& c : disaggregation_columns()) {
      cells.push_back(format_spread(spread_of(r.runs, c.path, c.scale), c.precision));
    }
    t.rows.push_back(std::move(cells));
  }
  return t;
}

// What a capacity search varied (CapacitySpec::search): "rate", "trace-speedup" or "replicas";
// folders written before searches had kinds searched the rate.
std::string capacity_search(const ResultSet& results) {
  return results.experiment.at("capacity").value("search", std::string("rate"));
}

Table capacity_table(const ResultSet& results) {
  const std::string baseline = first_policy(results);
  const std::string search = capacity_search(results);
  // The searched figure: fewest replicas, or the largest rate (a trace's speedup beside it).
  const char* figure = search == "replicas" ? "capacity.replicas" : "capacity.rate_rps";
  Table t;
  t.headers = {"group",
               "policy",
               search == "replicas" ? "fewest replicas" : "capacity req/s",
               fmt::format("vs {}", baseline),
               "status",
               "probes per search"};
  if (search == "trace-speedup") t.headers.insert(t.headers.begin() + 2, "trace speedup");
  const std::vector<Row> rows = group_rows(results.capacities);
  std::map<std::string, double> baseline_rate;  // group -> mean capacity of the first policy
  for (const Row& r : rows) {
    if (r.policy == baseline) baseline_rate[r.group] = spread_of(r.runs, figure, 1).mean;
  }
  for (const Row& r : rows) {
    std::vector<std::string> statuses;
    for (const ordered_json* c : r.runs) {
      const std::string s = (*c).at("capacity").at("status").get<std::string>();
      if (std::find(statuses.begin(), statuses.end(), s) == statuses.end()) statuses.push_back(s);
    }
    const double rate = spread_of(r.runs, figure, 1).mean;
    const auto it = baseline_rate.find(r.group);
    std::vector<std::string> cells = {
        r.group.empty() ? "all" : r.group,
        r.policy,
        format_spread(spread_of(r.runs, figure, 1), search == "replicas" ? 1 : 3),
        it != baseline_rate.end() && it->second > 0 ? fmt::format("{:.2f}x", rate / it->second) : "–",
        fmt::format("{}", fmt::join(statuses, ", ")),
        format_spread(spread_of(r.runs, "capacity.probes", 1), 1)};
    if (search == "trace-speedup") {
      cells.insert(cells.begin() + 2, format_spread(spread_of(r.runs, "capacity.trace_speedup", 1), 3));
    }
    t.rows.push_back(std::move(cells));
  }
  return t;
}

std::string slo_text(const ResultSet& results) {
  std::vector<std::string> parts;
  for (const auto& [path, bound] : results.experiment.at("capacity").at("slo").items()) {
    parts.push_back(fmt::format("`{}` ≤ {}", path, bound.dump()));
  }
  return fmt::format("{}", fmt::join(parts, " and "));
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int64_t int_at(const ordered_json& j, const char* key) {
  return j.contains("experiment") && j.at("experiment").contains(key) ? j.at("experiment").at(key).get<int64_t>() : -1;
}

}  // namespace

void sort_results(ResultSet& results) {
  auto key = [](const ordered_json& j) { return std::make_pair(int_at(j, "run"), int_at(j, "capacity_probe")); };
  std::stable_sort(results.runs.begin(), results.runs.end(),
                   [&](const auto& a, const auto& b) { return key(a) < key(b); });
  std::stable_sort(results.capacities.begin(), results.capacities.end(),
                   [&](const auto& a, const auto& b) { return key(a) < key(b); });
}

std::vector<std::pair<std::string, const ordered_json*>> json_leaves(const ordered_json& j) {
  std::vector<std::pair<std::string, const ordered_json*>> out;
  auto walk = [&](auto& self, const ordered_json& node, const std::string& prefix) -> void {
    if (node.is_object()) {
      for (const auto& [k, v] : node.items()) self(self, v, prefix.empty() ? k : prefix + "." + k);
    } else {
      out.emplace_back(prefix, &node);
    }
  };
  walk(walk, j, "");
  return out;
}

namespace {

std::string leaf_text(const ordered_json& leaf) {
  if (leaf.is_string()) return leaf.get<std::string>();
  if (leaf.is_null()) return "";
  return leaf.dump();
}

}  // namespace

std::vector<std::pair<std::string, std::string>> flatten_json(const ordered_json& j) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [path, leaf] : json_leaves(j)) out.emplace_back(path, leaf_text(*leaf));
  return out;
}

FlatTable flat_table(const std::vector<ordered_json>& rows) {
  FlatTable table;
  std::vector<std::vector<std::pair<std::string, const ordered_json*>>> leaves;
  for (const auto& r : rows) {
    leaves.push_back(json_leaves(r));
    size_t pos = 0;  // where the previous column of this row sits
    for (const auto& [path, leaf] : leaves.back()) {
      auto it = std::find(table.columns.begin(), table.columns.end(), path);
      if (it == table.columns.end()) {
        it = table.columns.insert(table.columns.begin() + static_cast<long>(std::min(pos, table.columns.size())), path);
      }
      pos = static_cast<size_t>(it - table.columns.begin()) + 1;
    }
  }
  for (const auto& row : leaves) {
    std::map<std::string, const ordered_json*> by_path(row.begin(), row.end());
    std::vector<const ordered_json*>& cells = table.cells.emplace_back();
    for (const std::string& column : table.columns) {
      const auto it = by_path.find(column);
      cells.push_back(it != by_path.end() ? it->second : nullptr);
    }
  }
  return table;
}

void write_flat_csv(const fs::path& file, const std::vector<ordered_json>& rows) {
  const FlatTable table = flat_table(rows);
  auto out = open_for_write(file);
  auto cell = [](const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  };
  for (size_t i = 0; i < table.columns.size(); ++i) out << (i ? "," : "") << cell(table.columns[i]);
  out << '\n';
  for (const auto& row : table.cells) {
    for (size_t i = 0; i < row.size(); ++i)
      out << (i ? "," : "") << (row[i] != nullptr ? cell(leaf_text(*row[i])) : "");
    out << '\n';
  }
}

// "Against the published figures": each published ratio beside the simulated one (the mean of
// the metric over seeds, policy over baseline in the same group).
void write_published_section(std::ostream& out, const ordered_json& published, const std::vector<Row>& rows) {
  const std::string metric = published.at("metric").get<std::string>();
  const std::string baseline = published.at("baseline").get<std::string>();
  auto mean_of = [&](const std::string& policy, const std::string& group) -> std::optional<double> {
    for (const Row& r : rows) {
      if (r.policy == policy && r.group == group) {
        const Spread s = spread_of(r.runs, metric, 1.0);
        if (s.n > 0) return s.mean;
      }
    }
    return std::nullopt;
  };
  fmt::print(out,
             "## Against the published figures\n\n{} over `{}` in the same group, as published ({}) and as "
             "simulated here (mean over seeds). The engines' numbers are cited in their profiles "
             "(`batchsim list engines`); none is fitted to these ratios.\n\n",
             metric, baseline, published.at("source").get<std::string>());
  Table t;
  t.headers = {"policy", "group", "published", "simulated", "simulated / published"};
  for (const auto& r : published.at("ratios")) {
    const std::string policy = r.at("policy").get<std::string>(), group = r.at("group").get<std::string>();
    const double ratio = r.at("ratio").get<double>();
    const auto num = mean_of(policy, group), den = mean_of(baseline, group);
    const bool ok = num && den && *den > 0;
    t.rows.push_back({policy, group, fmt::format("{:.1f}x", ratio), ok ? fmt::format("{:.2f}x", *num / *den) : "–",
                      ok ? fmt::format("{:.2f}", *num / *den / ratio) : "–"});
  }
  render_markdown(out, t);
  // Why they differ: the baseline as simulated beside its published value (one wrong baseline
  // moves every ratio by the same factor), then the experiment's own account.
  if (published.contains("baseline_values")) {
    out << "\n";
    for (const auto& [group, value] : published.at("baseline_values").items()) {
      const auto simulated = mean_of(baseline, group);
      if (!simulated) continue;
      fmt::print(out,
                 "- `{}` in {}: {:.0f} simulated against {:.0f} published, {:.2f}x: every ratio over it shrinks "
                 "by that factor.\n",
                 baseline, group, *simulated, value.get<double>(), *simulated / value.get<double>());
    }
  }
  if (published.contains("why")) fmt::print(out, "\n**Why they differ.** {}\n", published.at("why").get<std::string>());
}

namespace {

// Under the throughput table when runs were judged: what the SLO and goodput columns mean, the
// bounds and thresholds, and every violation of every run that missed its SLO.
void write_slo_section(std::ostream& out, const std::vector<ordered_json>& runs) {
  const ordered_json* slo = nullptr;
  const ordered_json* goodput = nullptr;
  for (const ordered_json& r : runs) {
    if (!slo && r.contains("slo")) slo = &r.at("slo");
    if (!goodput && r.contains("goodput")) goodput = &r.at("goodput");
  }
  // An axis may set `slo` too: then the bounds differ from run to run.
  const bool one_slo = std::all_of(runs.begin(), runs.end(), [&](const ordered_json& r) {
    return !r.contains("slo") || r.at("slo").at("bounds") == (*slo).at("bounds");
  });
  if (slo) {
    std::vector<std::string> bounds;
    for (const auto& [path, bound] : (*slo).at("bounds").items())
      bounds.push_back(fmt::format("`{}` ≤ {}", path, bound.get<double>()));
    if (!one_slo) bounds = {"the bounds of each run (`slo.bounds` in its summary.json; they differ between runs)"};
    fmt::print(out,
               "SLO: {}, and no request rejected (a rejected request was never served, so no latency "
               "percentile sees it). `pass`: every seed met it; `FAIL`: none did; `pass k/n`: k of n seeds "
               "(`slo.met`, `slo.violations`).",
               fmt::join(bounds, " and "));
  }
  if (goodput) {
    std::vector<std::string> t;
    for (const auto& [key, ms] : (*goodput).at("thresholds_ms").items())
      t.push_back(fmt::format("{} ≤ {} ms", key, ms.get<double>()));
    fmt::print(out,
               "{}Goodput (`vllm bench serve --goodput`): requests that completed with {}, per second of the "
               "makespan (`goodput.requests_per_s`), and as a share of all requests, rejected ones included "
               "(`goodput.fraction`).",
               slo ? " " : "", fmt::join(t, " and "));
  }
  if (!slo && !goodput) return;
  out << "\n\n";
  std::vector<std::string> missed;
  for (const ordered_json& r : runs) {
    if (!r.contains("slo") || r.at("slo").value("met", true)) continue;
    std::vector<std::string> why;
    for (const auto& v : r.at("slo").at("violations")) {
      why.push_back(fmt::format("`{}` {:.4g} > {}", v.at("metric").get<std::string>(), v.at("value").get<double>(),
                                v.at("bound").get<double>()));
    }
    missed.push_back(fmt::format("- {}: {}", string_at(r, "experiment", "run_name"), fmt::join(why, ", ")));
  }
  if (!missed.empty()) fmt::print(out, "Runs that missed the SLO:\n\n{}\n\n", fmt::join(missed, "\n"));
}

// ---- differences between policies, paired by seed ------------------------------------------

// The figures judged in "Differences": what a scheduler comparison is read for.
struct DiffMetric {
  const char* path;
  const char* label;
  double scale;
  const char* unit;
  bool higher_is_better;
  int precision;
};
constexpr DiffMetric kDiffMetrics[] = {
    {"throughput.output_tokens_per_s", "out tok/s", 1, "tok/s", true, 1},
    {"goodput.requests_per_s", "goodput", 1, "req/s", true, 3},
    {"latency.ttft_s.p50", "TTFT p50", 1, "s", false, 3},
    {"latency.ttft_s.p99", "TTFT p99", 1, "s", false, 3},
    {"latency.tpot_s.p50", "TPOT p50", 1e3, "ms", false, 2},
    {"latency.tpot_s.p99", "TPOT p99", 1e3, "ms", false, 2},
    {"latency.e2e_s.p99", "e2e p99", 1, "s", false, 2},
};

// A figure of one row, seed by seed.
std::map<uint64_t, double> values_by_seed(const Row& row, const std::string& path) {
  std::map<uint64_t, double> v;
  for (const ordered_json* r : row.runs) {
    const auto x = number_at(*r, path);
    if (x && r->contains("experiment") && (*r).at("experiment").contains("seed")) {
      v[(*r).at("experiment").at("seed").get<uint64_t>()] = *x;
    }
  }
  return v;
}

// One policy against the baseline on one figure, over the seeds both ran.
struct Comparison {
  std::string group, policy;
  std::string path;
  Interval baseline, other;
  PairedDifference difference;
};

Comparison compare_paired(const Row& base, const Row& row, const std::string& path) {
  Comparison c{row.group, row.policy, path, {}, {}, {}};
  const auto a = values_by_seed(base, path), b = values_by_seed(row, path);
  std::vector<double> x, y;
  for (const auto& [seed, value] : a) {
    if (const auto it = b.find(seed); it != b.end()) {
      x.push_back(value);
      y.push_back(it->second);
    }
  }
  c.baseline = mean_interval(x);
  c.other = mean_interval(y);
  c.difference = paired_difference(x, y);
  return c;
}

// The rows of each policy but the first, with the first policy's row of the same group.
std::vector<std::pair<const Row*, const Row*>> baseline_pairs(const ResultSet& results, const std::vector<Row>& rows) {
  const std::string baseline = first_policy(results);
  std::map<std::string, const Row*> base_of;
  for (const Row& r : rows) {
    if (r.policy == baseline) base_of[r.group] = &r;
  }
  std::vector<std::pair<const Row*, const Row*>> pairs;
  for (const Row& r : rows) {
    const auto it = base_of.find(r.group);
    if (r.policy != baseline && it != base_of.end()) pairs.emplace_back(it->second, &r);
  }
  return pairs;
}

std::string verdict(const DiffMetric& m, const Comparison& c) {
  if (c.difference.difference.n < 2) return "–";
  if (!c.difference.significant()) return fmt::format("not significant (p = {:.2g})", c.difference.p_value);
  const bool higher = c.difference.difference.mean > 0;
  return fmt::format("**{} {}** (p = {:.2g})", higher ? "higher" : "lower",
                     higher == m.higher_is_better ? "(better)" : "(worse)", c.difference.p_value);
}

std::string relative(double part, double whole) {
  return whole != 0 ? fmt::format("{:+.1f}%", 100 * part / whole) : "–";
}

// report.md: each policy against the baseline, figure by figure, with the paired interval of
// the difference and whether it is significant at 95%.
void write_differences_section(std::ostream& out, const ResultSet& results, const std::vector<Row>& rows) {
  const auto pairs = baseline_pairs(results, rows);
  if (pairs.empty()) return;
  const std::string baseline = first_policy(results);
  fmt::print(out,
             "## Differences against `{}`\n\n"
             "Every policy of a group ran on the same requests for each seed (common random numbers: Law, "
             "*Simulation Modeling and Analysis*, 5th ed., §11.2), so each difference is taken seed by seed "
             "and judged by the paired t-test (Law, §10.2.1; Student, 1908): the 95% interval of the mean "
             "difference, and the two-sided p-value of \"no difference\". A difference is **significant** "
             "when p < 0.05, i.e. when its interval excludes 0. Each line is its own test: with many lines, "
             "some pass by chance alone (Bonferroni: compare p with 0.05 divided by the number of lines "
             "before acting on a lone one near 0.05).\n\n",
             baseline);
  Table t;
  t.headers = {"group", "policy", "figure", baseline, "policy's", "difference (95% interval)", "relative", "verdict"};
  for (const auto& [base, row] : pairs) {
    for (const DiffMetric& m : kDiffMetrics) {
      const Comparison c = compare_paired(*base, *row, m.path);
      if (c.difference.difference.n < 2) continue;
      const Interval& d = c.difference.difference;
      auto show = [&](double v) { return fmt::format("{:.{}f}", v * m.scale, m.precision); };
      t.rows.push_back(
          {row->group.empty() ? "all" : row->group, row->policy, fmt::format("{} ({})", m.label, m.unit),
           format_with_half_width(
               {c.baseline.mean * m.scale, c.baseline.lo * m.scale, c.baseline.hi * m.scale, c.baseline.n},
               m.precision),
           format_with_half_width({c.other.mean * m.scale, c.other.lo * m.scale, c.other.hi * m.scale, c.other.n},
                                  m.precision),
           fmt::format("{:+.{}f} [{}, {}]", d.mean * m.scale, m.precision, show(d.lo), show(d.hi)),
           relative(d.mean, c.baseline.mean), verdict(m, c)});
    }
  }
  render_markdown(out, t);
}

// The terminal's version: one line per policy and group, each figure's relative difference with
// its interval's half-width, `*` where significant.
void print_differences(std::ostream& out, const ResultSet& results, const std::vector<Row>& rows) {
  const auto pairs = baseline_pairs(results, rows);
  if (pairs.empty()) return;
  fmt::print(out, "against {}, paired by seed (t-test; * significant at 95%; report.md has the intervals):\n",
             first_policy(results));
  for (const auto& [base, row] : pairs) {
    std::vector<std::string> parts;
    for (const DiffMetric& m : kDiffMetrics) {
      const Comparison c = compare_paired(*base, *row, m.path);
      if (c.difference.difference.n < 2 || c.baseline.mean == 0) continue;
      const Interval& d = c.difference.difference;
      parts.push_back(fmt::format("{} {:+.1f}% ± {:.1f}%{}", m.label, 100 * d.mean / c.baseline.mean,
                                  100 * d.half_width() / std::abs(c.baseline.mean),
                                  c.difference.significant() ? " *" : ""));
    }
    fmt::print(out, "  {}{}: {}\n", row->policy, row->group.empty() ? "" : " (" + row->group + ")",
               fmt::join(parts, ", "));
  }
}

}  // namespace

namespace {

// Which axis sets a run key ("output-len" -> "cap"): such parts differ between runs, so the
// setup names the axis instead of the base value.
class AxisSettings {
 public:
  explicit AxisSettings(const ordered_json& e) : base_(e.at("base")) {
    for (const auto& axis : e.at("axes")) {
      if (!axis.contains("sets")) continue;
      for (const auto& key : axis.at("sets"))
        setting_.emplace(key.get<std::string>(), axis.at("name").get<std::string>());
    }
  }
  std::optional<std::string> by_axis(const char* key) const {
    const auto it = setting_.find(key);
    if (it == setting_.end()) return std::nullopt;
    return fmt::format("axis `{}`", it->second);
  }
  std::string code_or_axis(const char* key, const char* base_key) const {
    const auto axis = by_axis(key);
    return axis ? fmt::format("per {}", *axis) : fmt::format("`{}`", base_.at(base_key).get<std::string>());
  }

 private:
  const ordered_json& base_;
  std::map<std::string, std::string> setting_;
};

// The setup's workload line and, where the base sets them, its client and KV limits.
void write_workload_lines(std::ostream& out, const ResultSet& results, const AxisSettings& axes) {
  const ordered_json& base = results.experiment.at("base");
  auto by_axis = [&](const char* key) { return axes.by_axis(key); };
  auto code_or_axis = [&](const char* key, const char* base_key) { return axes.code_or_axis(key, base_key); };
  const std::string trace = base.at("trace").get<std::string>();
  const std::string arrival = base.at("arrival").get<std::string>();
  const auto trace_axis = by_axis("trace");
  const bool has_trace = trace_axis || !trace.empty();
  const auto arrival_axis = by_axis("arrival");
  const auto rate_axis = by_axis("rate");
  // A trace brings its arrivals too unless an arrival process is set (see build_workload).
  const bool trace_arrivals =
      has_trace && !arrival_axis && !rate_axis && (arrival.empty() || arrival == "trace") && !is_capacity(results);
  const std::string trace_name = trace_axis ? fmt::format("the trace of {}", *trace_axis)
                                            : fmt::format("`{}`", fs::path(trace).filename().string());
  const std::string lengths = has_trace
                                  ? fmt::format("lengths{} from {}", trace_arrivals ? " and arrivals" : "", trace_name)
                                  : fmt::format("prompt {}, output {}", code_or_axis("prompt-len", "prompt_len"),
                                                code_or_axis("output-len", "output_len"));
  std::string arrivals;
  if (is_capacity(results)) {
    const std::string search = capacity_search(results);
    arrivals = search == "rate"            ? ", Poisson arrivals at each probed rate"
               : search == "trace-speedup" ? ", the trace's own arrivals sped up by each probed factor"
                                           : "";
  } else if (rate_axis) {
    arrivals = fmt::format(", {} arrivals at the rates of {}",
                           arrival.rfind("gamma:", 0) == 0 ? "gamma (CV of `" + arrival + "`)" : "Poisson", *rate_axis);
  } else if (arrival_axis)
    arrivals = fmt::format(", arrivals per {}", *arrival_axis);
  else if (trace_arrivals)
    arrivals = "";
  else if (arrival.empty() || arrival == "offline")
    arrivals = ", all at t=0";
  else
    arrivals = fmt::format(", arrival `{}`", arrival);
  const std::string count = by_axis("num-requests") ? "requests per " + *by_axis("num-requests")
                            : base.at("num_requests").get<int64_t>() == 0
                                ? std::string("all requests")
                                : fmt::format("{} requests", base.at("num_requests").dump());
  fmt::print(out, "- workload: {}, {}{}\n", count, lengths, arrivals);
  // Client limits and a KV cache sized by block count change what the figures mean; a file
  // without them reads as before. (value(): experiment.json of older results lacks the keys.)
  std::vector<std::string> limits;
  if (const auto axis = by_axis("max-tokens"))
    limits.push_back("max_tokens per " + *axis);
  else if (const std::string m = base.value("max_tokens", ""); !m.empty())
    limits.push_back(fmt::format("max_tokens `{}`", m));
  if (const auto axis = by_axis("ignore-eos"))
    limits.push_back("EOS ignored or not per " + *axis);
  else if (base.value("ignore_eos", false))
    limits.push_back("EOS ignored: every request runs to its max_tokens");
  if (const auto axis = by_axis("num-gpu-blocks"))
    limits.push_back("KV cache blocks per " + *axis);
  else if (const int64_t n = base.value("num_gpu_blocks", int64_t{0}); n > 0) {
    limits.push_back(fmt::format("KV cache of {} blocks (`num-gpu-blocks`)", n));
  }
  if (!limits.empty()) fmt::print(out, "- {}\n", fmt::join(limits, "; "));
}

void write_axes_and_seeds(std::ostream& out, const ResultSet& results) {
  const ordered_json& e = results.experiment;
  for (const auto& axis : e.at("axes")) {
    std::vector<std::string> values;
    for (const auto& v : axis.at("values")) values.push_back(v.get<std::string>());
    // An axis not named after the one key it sets says what it sets ("cap" sets output-len).
    std::vector<std::string> sets;
    if (axis.contains("sets")) {
      for (const auto& k : axis.at("sets"))
        sets.push_back(k.get<std::string>() == "rate" ? "the Poisson rate in req/s" : "`" + k.get<std::string>() + "`");
    }
    const bool named_after = sets.size() == 1 && sets[0] == "`" + axis.at("name").get<std::string>() + "`";
    fmt::print(out, "- axis `{}`{}: {}\n", axis.at("name").get<std::string>(),
               sets.empty() || named_after ? "" : fmt::format(" (sets {})", fmt::join(sets, ", ")),
               fmt::join(values, ", "));
  }
  std::vector<std::string> seeds;
  for (const auto& s : e.at("seeds")) seeds.push_back(s.dump());
  if (seeds.size() > 1) {
    // What the seeds varied, from the runs' own record of it.
    std::set<std::string> varies;
    for (const ordered_json& r : results.runs) {
      if (r.contains("experiment") && r.at("experiment").contains("seed_varies"))
        varies.insert(r.at("experiment").at("seed_varies").get<std::string>());
    }
    std::vector<std::string> v(varies.begin(), varies.end());
    for (auto& text : v) text = text.empty() ? "nothing (every seed gives the same workload)" : text;
    fmt::print(out,
               "- seeds: {}; each seed draws anew {}. A cell reads `mean ± half-width` of the 95% Student t interval "
               "of the mean over the seeds (Law, *Simulation Modeling and Analysis*, 5th ed., §9.4.1)\n",
               fmt::join(seeds, ", "), fmt::join(v, "; "));
  } else {
    fmt::print(out, "- seeds: {} (one seed: no interval; `seeds: [0, 1, 2, ...]` or `--seeds N` gives one)\n",
               fmt::join(seeds, ", "));
  }
}

void write_policies_and_runs(std::ostream& out, const ResultSet& results) {
  const ordered_json& e = results.experiment;
  out << "- policies, each on its engine (`batchsim list engines`):\n";
  std::map<std::string, std::string> engine_of;
  for (const auto& [label, engine] : policy_engines(results)) engine_of[label] = engine;
  for (const auto& p : e.at("policies")) {
    std::vector<std::string> opts;
    for (const auto& [k, v] : p.at("options").items()) opts.push_back(k + "=" + v.get<std::string>());
    const std::string label = p.at("label").get<std::string>();
    fmt::print(out, "  - `{}`: `{}`{}{}\n", label, p.at("policy").get<std::string>(),
               opts.empty() ? "" : fmt::format(" with {}", fmt::join(opts, " ")),
               engine_of.count(label) ? fmt::format(" on engine `{}`", engine_of[label]) : "");
  }
  if (const std::string warning = engines_warning(results); !warning.empty()) {
    fmt::print(out, "- **Engines differ**: {}.\n", warning);
  }
  const int64_t expected = e.at("units").get<int64_t>();
  const int64_t present = is_capacity(results) ? static_cast<int64_t>(results.capacities.size())
                                               : static_cast<int64_t>(results.runs.size());
  fmt::print(out, "- {} {} of {}{}\n\n", present, is_capacity(results) ? "capacity searches" : "runs", expected,
             present < expected ? " (**incomplete: merge the missing shards**)" : "");
  if (const auto failed = failed_runs(results); !failed.empty()) {
    fmt::print(out, "## Failed runs\n\n{} of {} could not run; their rows read `–`:\n\n", failed.size(), present);
    for (const auto& [name, why] : failed) fmt::print(out, "- `{}`: {}\n", name, why);
    out << "\n";
  }
}

void write_setup(std::ostream& out, const ResultSet& results) {
  const ordered_json& e = results.experiment;
  out << "## Setup\n\n";
  const ordered_json& base = e.at("base");
  const AxisSettings axes(e);
  fmt::print(out, "- model {} on {} (TP {}), GPU memory utilisation {}\n", axes.code_or_axis("model", "model"),
             axes.code_or_axis("gpu", "gpu"), axes.by_axis("tp") ? "per " + *axes.by_axis("tp") : base.at("tp").dump(),
             axes.by_axis("gpu-memory-utilization") ? "per " + *axes.by_axis("gpu-memory-utilization")
                                                    : base.at("gpu_memory_utilization").dump());
  write_workload_lines(out, results, axes);
  write_axes_and_seeds(out, results);
  write_policies_and_runs(out, results);
}

void write_capacity_sections(std::ostream& out, const ResultSet& results) {
  const ordered_json& e = results.experiment;
  out << "## Capacity\n\n";
  const std::string search = capacity_search(results);
  if (search == "replicas") {
    fmt::print(out,
               "Searched: replicas. The fewest replicas meeting {}, replaying the workload "
               "itself: doubling from 1, then bisecting, up to {} (status `above-range`: "
               "no count up to it meets the SLO).\n\n",
               slo_text(results), e.at("capacity").at("max_replicas").dump());
  } else {
    fmt::print(out,
               "Searched: {}. The largest {} meeting {}, found by geometric bisection "
               "between {} and {}{} to a relative tolerance of {} (status `above-range`: "
               "the capacity is at least the upper end; `below-range`: not even the lower end "
               "meets the SLO).{}\n\n",
               search, search == "rate" ? "Poisson request rate" : "speedup of the trace's own timestamps",
               slo_text(results), e.at("capacity").at("rate_low").dump(), e.at("capacity").at("rate_high").dump(),
               search == "rate" ? " req/s" : "x", e.at("capacity").at("tolerance").dump(),
               search == "rate" ? "" : " Capacity in req/s: the sped-up trace's mean arrival rate.");
  }
  render_markdown(out, capacity_table(results));
}

void write_run_sections(std::ostream& out, const ResultSet& results) {
  const ordered_json& e = results.experiment;
  const std::vector<Row> rows = group_rows(results.runs);
  out << "## Throughput\n\n";
  out << "Throughput counts completed requests over the makespan (first arrival to last "
         "completion); total tokens/s counts prompt + output tokens, as the Anyscale benchmark "
         "does. Speedup is output tokens/s relative to the first policy of the same group.";
  if (replicas_column(results.runs)) {
    out << " Replicas: identical engines behind the router (`config.replicas`); throughput and "
           "latencies are the cluster's, over all its requests.";
  }
  if (any_prefix_hits(results.runs)) {
    out << " Prefix hit %: of the tokens admissions had to prefill, those found in the prefix "
           "cache and not computed (`prefix_cache.hit_rate`; readmissions after a preemption "
           "count too, so compare TTFT rather than hit rates across loads).";
  }
  out << "\n\n";
  render_markdown(out, throughput_table(results, rows));
  write_slo_section(out, results.runs);
  out << "## Latency\n\n";
  out << "e2e: arrival to last token. TTFT: arrival to first token. TPOT: (e2e − TTFT) / "
         "(output − 1) per request. TBT: every gap between consecutive tokens.\n\n";
  render_markdown(out, latency_table(rows));
  if (results.experiment.contains("seeds") && results.experiment.at("seeds").size() > 1) {
    write_differences_section(out, results, rows);
  }
  if (any_breakdown(results.runs)) write_breakdown_section(out, rows);
  if (any_pools(results.runs)) {
    out << "## Prefill/decode disaggregation\n\n"
           "Deployment: colocated replicas, or P prefill and D decode replicas (`pools`). TTFT is "
           "the prefill side's first token (as Splitwise and DistServe report it); TBT counts every "
           "gap, the hand-off gap (first token to the decode side's first token, which holds the "
           "transfer) included. Goodput per GPU: requests meeting every goodput threshold per "
           "second, over the GPUs provisioned (DistServe's figure of merit). Transfer: time on the "
           "link; link queue: waiting for the NICs; KV wait: waiting for decode memory "
           "(backpressure). Busy: a pool's replicas' mean computing time over the makespan.\n\n";
    render_markdown(out, disaggregation_table(rows));
  }
  if (e.contains("published")) write_published_section(out, e.at("published"), rows);
}

void write_figures_and_files(std::ostream& out, const fs::path& index, const ResultSet& results,
                             const std::string& figures_note) {
  out << "## Figures\n\n";
  if (!index.empty() && fs::exists(index)) {
    for (const auto& f : read_json_file<ordered_json>(index)) {
      fmt::print(out, "### {}\n\n![{}](figures/{})\n\n", f.at("title").get<std::string>(),
                 f.at("title").get<std::string>(), f.at("file").get<std::string>());
      if (f.contains("caption")) fmt::print(out, "{}\n\n", f.at("caption").get<std::string>());
    }
  }
  if (!figures_note.empty()) fmt::print(out, "{}\n\n", figures_note);

  out << "## Files\n\n"
         "- `results.csv`: one row per run; every column is a `summary.json` key by its JSON path\n"
         "- `runs/<run>/`: `summary.json`, `bench.json` (`vllm bench serve --save-result` keys), `requests.csv`, "
         "`tbt_quantiles.csv`, `kv_timeline.csv`\n";
  if (is_capacity(results)) out << "- `capacity.csv`: one row per capacity search (`capacity/*.json`)\n";
  out << "- figures: `python3 plots/make_figures.py <this folder>` redraws them from these files\n\n";
  if (!results.experiment_yaml.empty()) {
    fmt::print(out, "## Experiment file\n\n```yaml\n{}{}```\n", results.experiment_yaml,
               results.experiment_yaml.back() == '\n' ? "" : "\n");
  }
}

}  // namespace

void write_report(const fs::path& dir, const ResultSet& results, const std::string& figures_note) {
  auto out = open_for_write(dir / "report.md");
  render_report(out, results, figures_note, dir / "figures" / "figures.json");
}

void render_report(std::ostream& out, const ResultSet& results, const std::string& figures_note,
                   const fs::path& figures_index) {
  const ordered_json& e = results.experiment;
  fmt::print(out, "# {}\n\n", e.at("name").get<std::string>());
  if (!e.at("description").get<std::string>().empty())
    fmt::print(out, "{}\n\n", e.at("description").get<std::string>());
  write_setup(out, results);
  write_trust_section(out, results);
  if (is_capacity(results)) {
    write_capacity_sections(out, results);
  } else {
    write_run_sections(out, results);
  }
  write_figures_and_files(out, figures_index, results, figures_note);
}

namespace {

// The group column is noise on a terminal when every row has the same group.
void drop_single_group(Table& t) {
  if (t.rows.empty()) return;
  for (const auto& r : t.rows) {
    if (r[0] != t.rows[0][0]) return;
  }
  t.headers.erase(t.headers.begin());
  for (auto& r : t.rows) r.erase(r.begin());
}

}  // namespace

namespace {

// Puts `extra` (key, value) pairs right after the leaf `path` names, in its parent object, so
// that a CSV column "latency.ttft_s.p99.ci_lo" sits beside "latency.ttft_s.p99".
void insert_beside(ordered_json& row, const std::string& path,
                   const std::vector<std::pair<std::string, double>>& extra) {
  const size_t dot = path.rfind('.');
  const std::string leaf = path.substr(dot + 1);
  const auto parent_ptr = json_path_pointer(path.substr(0, dot));
  if (!row.contains(parent_ptr)) return;
  ordered_json& parent = row.at(parent_ptr);
  ordered_json rebuilt = ordered_json::object();
  for (auto& item : parent.items()) {
    rebuilt[item.key()] = std::move(item.value());
    if (item.key() == leaf) {
      for (const auto& [key, value] : extra) rebuilt[leaf + "." + key] = value;
    }
  }
  parent = std::move(rebuilt);
}

}  // namespace

void add_interval_columns(std::vector<ordered_json>& rows, const ResultSet& results) {
  if (!results.experiment.contains("seeds") || results.experiment.at("seeds").size() < 2) return;
  // Rows are copies of results.runs in the same order: group those, write into the copies.
  const std::vector<Row> groups = group_rows(results.runs);
  std::map<const ordered_json*, size_t> index;
  for (size_t i = 0; i < results.runs.size(); ++i) index[&results.runs[i]] = i;
  std::map<const Row*, const Row*> base_of;
  for (const auto& [base, row] : baseline_pairs(results, groups)) base_of[row] = base;
  for (const Row& g : groups) {
    for (const ConfidenceMetric& m : confidence_metrics()) {
      const Spread s = spread_of(g.runs, m.path, 1);
      if (s.n < 2) continue;
      std::vector<std::pair<std::string, double>> extra = {{"ci_lo", s.mean - s.half}, {"ci_hi", s.mean + s.half}};
      if (const auto it = base_of.find(&g); it != base_of.end()) {
        const Comparison c = compare_paired(*it->second, g, m.path);
        if (c.difference.difference.n >= 2) {
          const Interval& d = c.difference.difference;
          extra.insert(extra.end(),
                       {{"diff", d.mean}, {"diff_lo", d.lo}, {"diff_hi", d.hi}, {"diff_p", c.difference.p_value}});
        }
      }
      for (const ordered_json* run : g.runs) insert_beside(rows[index.at(run)], m.path, extra);
    }
  }
}

std::vector<std::pair<std::string, std::string>> failed_runs(const ResultSet& results) {
  std::vector<std::pair<std::string, std::string>> failed;
  for (const auto* list : {&results.runs, &results.capacities}) {
    for (const ordered_json& r : *list) {
      if (r.contains("error"))
        failed.emplace_back(string_at(r, "experiment", "run_name"), r.at("error").get<std::string>());
    }
  }
  return failed;
}

namespace {
void print_failures(std::ostream& out, const ResultSet& results) {
  for (const auto& [name, why] : failed_runs(results)) fmt::print(out, "FAILED {}: {}\n", name, why);
}
}  // namespace

void print_result_table(std::ostream& out, const ResultSet& results) {
  if (is_capacity(results)) {
    fmt::print(out, "capacity (searched: {}) under {}:\n", capacity_search(results), slo_text(results));
    Table t = capacity_table(results);
    drop_single_group(t);
    render_text(out, t);
    print_failures(out, results);
    return;
  }
  const std::vector<Row> rows = group_rows(results.runs);
  Table full = throughput_table(results, rows);
  const Table lat = latency_table(rows);
  // The terminal gets the headline columns only; report.md has them all. With several seeds
  // each cell holds an interval too, so fewer columns fit.
  const size_t seeds = results.experiment.contains("seeds") ? results.experiment.at("seeds").size() : 1;
  Table t;
  const std::vector<std::string> keep =
      seeds > 1 ? std::vector<std::string>{"group", "policy",    kSloHeader, kReplicasColumn.header, "done",
                                           "rej",   "out tok/s", "req/s",    kGoodputColumn.header}
                : std::vector<std::string>{"group",
                                           "policy",
                                           kSloHeader,
                                           kReplicasColumn.header,
                                           "done",
                                           "rej",
                                           "out tok/s",
                                           "total tok/s",
                                           "req/s",
                                           kGoodputColumn.header,
                                           "preempt",
                                           "bubble %",
                                           kPrefixHitColumn.header,
                                           kAcceptLengthColumn.header,
                                           kTokensPerStepColumn.header};
  auto pick = [](const Table& src, const std::vector<std::string>& names, Table& dst) {
    for (const auto& name : names) {
      const auto it = std::find(src.headers.begin(), src.headers.end(), name);
      if (it == src.headers.end()) continue;
      const size_t col = static_cast<size_t>(it - src.headers.begin());
      dst.headers.push_back(name);
      for (size_t r = 0; r < src.rows.size(); ++r) {
        if (dst.rows.size() <= r) dst.rows.emplace_back();
        dst.rows[r].push_back(src.rows[r][col]);
      }
    }
  };
  pick(full, keep, t);
  pick(lat, {"e2e p50 s", "e2e p99 s", "TTFT p99 s", "TBT p99 ms"}, t);
  std::vector<std::string> tail;  // the iteration-budget column, if any, and the speedup
  for (const auto& h : full.headers) {
    if (h.rfind("done in", 0) == 0 || h.rfind("speedup", 0) == 0) tail.push_back(h);
  }
  pick(full, tail, t);
  drop_single_group(t);
  render_text(out, t);
  if (seeds > 1) {
    fmt::print(out, "(mean ± half-width of the 95% interval over {} seeds)\n", seeds);
    print_differences(out, results, rows);
  }
  if (const std::string warning = engines_warning(results); !warning.empty()) fmt::print(out, "warning: {}\n", warning);
  for (const ordered_json* trust : distinct_trust(results)) fmt::print(out, "{}\n", trust_line(*trust));
  print_failures(out, results);
}

namespace {

// The figures of a results folder's files that the report reads as integers (counts, ids, seeds):
// batchsim writes each as a JSON integer, and reading a fraction or a number beyond the range of
// the integer as one is undefined behaviour. A double holds integers to 2^53 exactly (the
// replica count makes that round trip).
constexpr const char* kExperimentIntegers[] = {"iteration_budget", "units", "base.num_requests", "base.num_gpu_blocks"};
constexpr const char* kRunIntegers[] = {"experiment.run",         "experiment.capacity_probe", "experiment.seed",
                                        "config.replicas",        "config.prefill_replicas",   "config.decode_replicas",
                                        "config.max_concurrency", "config.client_connections"};

void check_integers(const ordered_json& j, std::span<const char* const> paths, const fs::path& file) {
  constexpr int64_t kMost = int64_t{1} << 53;
  for (const char* path : paths) {
    const auto ptr = json_path_pointer(path);
    if (!j.contains(ptr)) continue;
    const ordered_json& v = j.at(ptr);
    const bool in_range = v.is_number_unsigned()  ? v.get<uint64_t>() <= static_cast<uint64_t>(kMost)
                          : v.is_number_integer() ? v.get<int64_t>() >= -kMost && v.get<int64_t>() <= kMost
                                                  : false;
    if (!in_range) {
      throw UserError(
          fmt::format("{}: {} must be an integer of at most 2^53 in size, got {}", file.string(), path, v.dump()));
    }
  }
}

}  // namespace

ResultFiles result_files(const fs::path& dir) {
  if (!fs::exists(dir / "experiment.json")) {
    throw UserError(fmt::format("{}: not a batchsim compare results folder (no experiment.json)", dir.string()));
  }
  ResultFiles files;
  files.experiment = dir / "experiment.json";
  if (fs::is_directory(dir / "runs")) {
    for (const auto& entry : fs::directory_iterator(dir / "runs")) {
      if (fs::exists(entry.path() / "summary.json")) files.runs.push_back(entry.path() / "summary.json");
    }
  }
  if (fs::is_directory(dir / "capacity")) {
    for (const auto& entry : fs::directory_iterator(dir / "capacity")) {
      if (entry.path().extension() == ".json") files.capacities.push_back(entry.path());
    }
  }
  return files;
}

ordered_json read_result_file(const fs::path& file, ResultFileKind kind) {
  ordered_json j = read_json_file<ordered_json>(file);
  if (!j.is_object()) throw UserError(fmt::format("{}: expected a JSON object, got {}", file.string(), j.type_name()));
  if (kind == ResultFileKind::kExperiment) {
    check_integers(j, kExperimentIntegers, file);
    return j;
  }
  check_integers(j, kRunIntegers, file);
  if (kind == ResultFileKind::kRun) {
    // `merge` tells the runs of its folders apart by their names.
    const auto name = json_path_pointer("experiment.run_name");
    if (!j.contains(name) || !j.at(name).is_string()) {
      throw UserError(fmt::format("{}: experiment.run_name must be a string (the run's name)", file.string()));
    }
  }
  return j;
}

ResultSet load_result_set(const fs::path& dir) {
  const ResultFiles files = result_files(dir);
  ResultSet r;
  r.experiment = read_result_file(files.experiment, ResultFileKind::kExperiment);
  if (fs::exists(dir / "experiment.yaml")) r.experiment_yaml = read_text(dir / "experiment.yaml");
  for (const fs::path& f : files.runs) r.runs.push_back(read_result_file(f, ResultFileKind::kRun));
  for (const fs::path& f : files.capacities) r.capacities.push_back(read_result_file(f, ResultFileKind::kCapacity));
  sort_results(r);
  return r;
}

std::vector<std::pair<std::string, std::string>> policy_engines(const ResultSet& results) {
  // Each policy label's engines over its runs (an engine axis gives one several), in the
  // experiment's policy order.
  std::map<std::string, std::set<std::string>> by_label;
  for (const ordered_json& r : results.runs) {
    if (!r.contains("experiment") || !r.contains("config")) continue;
    by_label[r.at("experiment").value("policy", std::string())].insert(r.at("config").value("engine", std::string()));
  }
  std::vector<std::pair<std::string, std::string>> out;
  if (!results.experiment.contains("policies")) return out;
  for (const auto& p : results.experiment.at("policies")) {
    const std::string label = p.at("label").get<std::string>();
    const auto it = by_label.find(label);
    if (it != by_label.end()) out.emplace_back(label, fmt::format("{}", fmt::join(it->second, " / ")));
  }
  return out;
}

std::string engines_warning(const ResultSet& results) {
  const auto engines = policy_engines(results);
  std::set<std::string> distinct;
  for (const auto& [label, engine] : engines) distinct.insert(engine);
  if (distinct.size() < 2) return "";
  std::vector<std::string> parts;
  for (const auto& [label, engine] : engines) parts.push_back(fmt::format("{} on {}", label, engine));
  return fmt::format(
      "the policies run on different engines ({}), so their differences are partly the engines' CPU "
      "and launch costs, not scheduling alone; --engine E (engine: in the base) puts every policy "
      "on one",
      fmt::join(parts, ", "));
}

}  // namespace batchsim
