#include "experiments/study/plan.h"
#include "experiments/study/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <ostream>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "experiments/run/output.h"
#include "experiments/run/runner.h"
#include "experiments/study/compare.h"
#include "experiments/study/report.h"
#include "experiments/study/text_table.h"
#include "hwmodel/base/error.h"
#include "hwmodel/engine_profile.h"
#include "hwmodel/hardware_profile.h"

namespace batchsim {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

std::string slo_label(const std::string& path) {
  const std::string prefix = "latency.";
  if (path.rfind(prefix, 0) != 0) return path;
  std::string rest = path.substr(prefix.size());  // "ttft_s.p99"
  const size_t dot = rest.find('.');
  if (dot == std::string::npos) return path;
  std::string metric = rest.substr(0, dot);
  if (metric.size() > 2 && metric.substr(metric.size() - 2) == "_s") metric.resize(metric.size() - 2);
  return metric + " " + rest.substr(dot + 1);
}

// Seconds shown in the unit a reader thinks in: ms below a second.
std::string seconds_text(double s) {
  if (!std::isfinite(s)) return "-";
  return std::abs(s) < 1 ? fmt::format("{:.1f} ms", s * 1e3) : fmt::format("{:.2f} s", s);
}

// How far a figure is under (+) or over (-) its bound, in percent of the bound.
double margin_percent(double value, double bound) {
  return bound > 0 ? 100.0 * (bound - value) / bound : (value <= 0 ? 0.0 : -INFINITY);
}

std::string margin_text(double value, double bound) {
  const double m = margin_percent(value, bound);
  if (!std::isfinite(m)) return "over";
  return m >= 0 ? fmt::format("{:.0f}% under", m) : fmt::format("{:.0f}% over", -m);
}

std::vector<double> slo_values(const ordered_json& summary, const SloBounds& slo) {
  std::vector<double> v;
  for (const auto& [path, bound] : slo) v.push_back(summary.at(json_path_pointer(path)).get<double>());
  return v;
}

// The workload compressed in time by `factor` about its first arrival: the same requests at
// `factor` times the rate.
BuiltWorkload compressed(const BuiltWorkload& w, double factor) {
  BuiltWorkload c = w;
  if (c.requests.empty()) return c;
  const SimTime first = c.requests.front().arrival;
  for (Request& r : c.requests) {
    r.arrival = first + SimTime::from_seconds((r.arrival - first).seconds() / factor);
  }
  return c;
}

// "what the SLOs missed by": "latency.ttft_s.p99 3.10 s > 2.00 s (55% over)".
std::string misses_text(const SloBounds& slo, const std::vector<double>& values) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < slo.size() && i < values.size(); ++i) {
    if (values[i] <= slo[i].second) continue;
    parts.push_back(fmt::format("{} {} > {} ({})", slo_label(slo[i].first), seconds_text(values[i]),
                                seconds_text(slo[i].second), margin_text(values[i], slo[i].second)));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

void check_gpus(const std::vector<std::string>& gpus, const std::string& option, std::vector<std::string>& known) {
  std::set<std::string> seen;
  for (const std::string& g : gpus) {
    if (!seen.insert(g).second) throw UserError(fmt::format("{}: '{}' is listed twice", option, g));
    try {
      resolve_gpu(g);
    } catch (const UserError& e) {
      throw UserError(fmt::format("{} {}: {}", option, g, e.what()));
    }
    if (std::find(known.begin(), known.end(), g) == known.end()) known.push_back(g);
  }
}

void check_tps(const std::vector<int>& tps, const std::string& option) {
  for (int tp : tps) {
    if (tp < 1) throw UserError(fmt::format("{} {}: a tensor-parallel degree must be >= 1", option, tp));
  }
}

void check_spec(const PlanSpec& spec) {
  if (spec.gpus.empty()) throw UserError("--gpu: give at least one GPU (built-in name or profile file)");
  if (spec.tps.empty()) throw UserError("--tp: give at least one tensor-parallel degree, e.g. --tp 1,2");
  check_tps(spec.tps, "--tp");
  std::vector<std::string> known;  // every candidate GPU, for --price
  check_gpus(spec.gpus, "--gpu", known);
  if (spec.disaggregated) {
    check_gpus(spec.prefill_gpus, "--prefill-gpu", known);
    check_gpus(spec.decode_gpus, "--decode-gpu", known);
    check_tps(spec.prefill_tps, "--prefill-tp");
    check_tps(spec.decode_tps, "--decode-tp");
  } else if (!spec.prefill_gpus.empty() || !spec.decode_gpus.empty() || !spec.prefill_tps.empty() ||
             !spec.decode_tps.empty() || has_pool_settings(spec.base)) {
    // Pool settings with only colocated candidates would be ignored: say so instead.
    throw UserError("--prefill-*/--decode-* options: add --disaggregated for plan to search prefill/decode splits");
  }
  if (spec.max_replicas < 1) throw UserError(fmt::format("--max-replicas {}: must be >= 1", spec.max_replicas));
  if (spec.slo.empty() && spec.base.goodput.empty()) {
    throw UserError(
        "--slo: give at least one bound, e.g. --slo ttft_p99=2s,tbt_p99=100ms (or goodput thresholds, "
        "--goodput ttft:MS tpot:MS, with --attainment)");
  }
  if (!(spec.attainment > 0 && spec.attainment <= 1)) {
    throw UserError(
        fmt::format("--attainment {:g}: the percentage of requests that must meet the goodput "
                    "thresholds, in (0, 100]",
                    100 * spec.attainment));
  }
  for (const auto& [gpu, price] : spec.price_per_hour) {
    if (std::find(known.begin(), known.end(), gpu) == known.end()) {
      throw UserError(fmt::format("--price {}={}: '{}' is not one of the --gpu candidates ({})", gpu, price, gpu,
                                  fmt::join(known, ", ")));
    }
  }
  if (!(spec.window_s > 0)) throw UserError(fmt::format("--window {}: must be > 0 seconds", spec.window_s));
  if (spec.jobs < 1) throw UserError("--jobs: must be >= 1");
}

// "3" replicas, or a split "3P+1D".
std::string replicas_text(const PlanRow& row, int p, int d) {
  return row.disaggregated ? fmt::format("{}P+{}D", p, d) : std::to_string(p);
}
std::string replicas_text(const PlanRow& row) { return replicas_text(row, row.replicas, row.decode_replicas); }

// The (prefill GPU, decode GPU) pairs of the disaggregated candidates: each --gpu with itself,
// or every --prefill-gpu with every --decode-gpu (either list defaulting to --gpu).
std::vector<std::pair<std::string, std::string>> pool_gpu_pairs(const PlanSpec& spec) {
  std::vector<std::pair<std::string, std::string>> pairs;
  if (spec.prefill_gpus.empty() && spec.decode_gpus.empty()) {
    for (const std::string& g : spec.gpus) pairs.emplace_back(g, g);
    return pairs;
  }
  for (const std::string& pg : spec.prefill_gpus.empty() ? spec.gpus : spec.prefill_gpus) {
    for (const std::string& dg : spec.decode_gpus.empty() ? spec.gpus : spec.decode_gpus) pairs.emplace_back(pg, dg);
  }
  return pairs;
}

// Busy windows within this much of the mean rate are not bursts worth a replay of their own.
constexpr double kBusyFactorThreshold = 1.1;

}  // namespace

std::pair<std::string, double> parse_price(const std::string& text) {
  const size_t eq = text.rfind('=');
  double usd = -1;
  if (eq != std::string::npos && eq > 0) {
    try {
      size_t used = 0;
      usd = std::stod(text.substr(eq + 1), &used);
      if (used != text.size() - eq - 1) usd = -1;
    } catch (const std::exception&) {
      usd = -1;
    }
  }
  if (!(usd >= 0 && std::isfinite(usd))) {
    throw UserError(fmt::format("--price {}: expected GPU=USD per GPU-hour, e.g. h100-sxm=2.50", text));
  }
  return {text.substr(0, eq), usd};
}

BusyWindow busiest_window(const Workload& requests, double window_s) {
  BusyWindow best;
  if (requests.empty()) return best;
  const SimTime first = requests.front().arrival;
  const SimTime width = SimTime::from_seconds(window_s);
  size_t j = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    j = std::max(j, i);
    while (j < requests.size() && requests[j].arrival < requests[i].arrival + width) ++j;
    const auto n = static_cast<int64_t>(j - i);
    if (n > best.arrivals) {
      best.arrivals = n;
      best.start_s = (requests[i].arrival - first).seconds();
      best.end_s = best.start_s + window_s;
    }
  }
  best.rate_rps = static_cast<double>(best.arrivals) / window_s;
  return best;
}

std::string PlanRow::name() const {
  if (!disaggregated && (dp > 1 || ep > 1)) return fmt::format("{} {}", gpu, ParallelLayout{tp, dp, ep}.text());
  if (!disaggregated) return fmt::format("{} tp {}", gpu, tp);
  return fmt::format("{} tp {} + {} tp {}", gpu, tp, decode_gpu, decode_tp);
}

SplitSearch find_cheapest_split(int max_n, double prefill_cost, double decode_cost,
                                const std::function<SplitProbe(int, int)>& probe) {
  SplitSearch r;
  std::map<std::pair<int, int>, SplitProbe> seen;
  auto at = [&](int p, int d) -> const SplitProbe& {
    auto it = seen.find({p, d});
    if (it == seen.end()) {
      it = seen.emplace(std::pair{p, d}, probe(p, d)).first;
      ++r.probes;
    }
    return it->second;
  };
  max_n = std::max(1, max_n);
  // Lower bounds: no split with fewer prefill replicas than p_min meets even with every decode
  // replica allowed, and likewise d_min.
  const int p_min = find_fewest(max_n, [&](int p) { return at(p, max_n).meets; }).count;
  if (p_min == 0) return r;
  const int d_min = find_fewest(max_n, [&](int d) { return at(max_n, d).meets; }).count;
  const auto cost = [&](int p, int d) { return p * prefill_cost + d * decode_cost; };
  // Costs are sums of a few products: equal ones may differ in their last bits.
  const auto cheaper = [](double a, double b) { return a < b - 1e-9 * std::max(1.0, std::abs(b)); };
  bool found = false;
  double best_cost = 0, best_headroom = 0;
  int d_hi = max_n;  // the fewest decode replicas the previous P needed: D never grows with P
  for (int p = p_min; p <= max_n; ++p) {
    if (found && cheaper(best_cost, cost(p, d_min))) break;  // P alone now costs more than the best
    int d_cap = d_hi;
    if (found) {
      // Only splits at most as costly as the best are of interest (ties compare by headroom).
      const double room = (best_cost - p * prefill_cost) / decode_cost;
      d_cap = std::min(d_hi, static_cast<int>(std::floor(room + 1e-9)));
    }
    if (d_cap < d_min) continue;
    // meets(p, d_min - 1) is false (it fails even with max_n prefill replicas). The lower bound
    // itself first: once the prefill pool is large enough, it is the answer in one probe.
    int fail = d_min, pass = d_min;
    if (!at(p, d_min).meets) {
      if (d_cap == d_min || !at(p, d_cap).meets) continue;
      pass = d_cap;
    }
    while (pass - fail > 1) {
      const int mid = fail + (pass - fail) / 2;
      if (at(p, mid).meets)
        pass = mid;
      else
        fail = mid;
    }
    d_hi = pass;
    const double c = cost(p, pass);
    const double headroom = at(p, pass).headroom;
    if (!found || cheaper(c, best_cost) || (!cheaper(best_cost, c) && headroom > best_headroom)) {
      found = true;
      best_cost = c;
      best_headroom = headroom;
      r.prefill = p;
      r.decode = pass;
    }
  }
  return r;
}

namespace {

// One replay's verdict: the SLO figures, the attainment, whether both hold and by how much.
struct Judged {
  bool meets = false;
  std::vector<double> values;
  double attainment = 0;
  double headroom = 0;
  double output_tokens_per_s = 0;
};

// run_plan's search: the candidates (GPU x TP x DP x EP, and prefill/decode pools), each one's
// fewest replicas or cheapest split, its busiest window and its goodput, then the warnings and
// the engine sensitivity of the recommended answer. plan_one runs on several threads at once,
// one row each: it reads the planner and writes only its row.
class Planner {
 public:
  Planner(const PlanSpec& spec, PlanResult& plan) : spec_(spec), plan_(plan) {}

  void prepare_workloads();
  void add_candidates();
  void plan_rows(std::ostream& progress);
  void sort_rows();
  void warn_rows();
  void engine_sensitivity();
  void add_trust();

 private:
  double price_of(const std::string& gpu) const;
  void add_colocated_candidates();
  void add_disaggregated_candidates();
  // The run of one candidate at P replicas (colocated) or a P:D split.
  RunConfig config_for(const PlanRow& row, int p, int d) const;
  Judged judge(PlanRow& row, std::string& rejection, const BuiltWorkload& workload, int p, int d) const;
  void plan_one(PlanRow& row, std::string& rejection) const;
  void search_busy_window(PlanRow& row, double cost_p, double cost_d, std::string& rejection) const;
  void search_goodput(PlanRow& row, std::string& rejection) const;
  std::string busy_window_warning(const PlanRow& r) const;

  const PlanSpec& spec_;
  PlanResult& plan_;
  RunConfig base_;
  RunConfig colocated_base_;  // without the pools' settings, which are the disaggregated ones'
  bool with_goodput_ = false;
  BuiltWorkload built_;
  double busy_factor_ = 1;
  std::optional<BuiltWorkload> busy_;  // the whole workload at the busiest window's rate
  std::vector<std::string> rejections_;
};

void Planner::prepare_workloads() {
  base_ = spec_.base;
  base_.out.clear();
  base_.iteration_log = false;
  colocated_base_ = base_;
  colocated_base_.prefill = {};
  colocated_base_.decode = {};
  colocated_base_.decode_router.clear();
  validate(colocated_base_);
  with_goodput_ = !base_.goodput.empty();
  built_ = build_workload(base_.workload);
  plan_.warnings = built_.warnings;
  plan_.workload = built_.description;
  plan_.requests = static_cast<int64_t>(built_.requests.size());
  plan_.mean_rate_rps = mean_arrival_rate(built_.requests);
  plan_.busiest = busiest_window(built_.requests, spec_.window_s);
  const double span_s =
      built_.requests.empty() ? 0 : (built_.requests.back().arrival - built_.requests.front().arrival).seconds();
  // The whole workload at the busiest window's rate, when that window is notably busier than
  // the mean and shorter than the workload.
  busy_factor_ = plan_.mean_rate_rps > 0 ? plan_.busiest.rate_rps / plan_.mean_rate_rps : 1;
  plan_.closed_loop = base_.max_concurrency > 0;
  if (!plan_.closed_loop && span_s > spec_.window_s && busy_factor_ > kBusyFactorThreshold) {
    busy_ = compressed(built_, busy_factor_);
  }
}

double Planner::price_of(const std::string& gpu) const {
  const auto price = spec_.price_per_hour.find(gpu);
  return price != spec_.price_per_hour.end() ? price->second : resolve_gpu(gpu).price_per_hour;
}

void Planner::add_candidates() {
  add_colocated_candidates();
  if (spec_.disaggregated) add_disaggregated_candidates();
  rejections_.assign(plan_.rows.size(), std::string());
}

void Planner::add_colocated_candidates() {
  // Every tp x dp x ep the model can run (check_layout); the others are named once.
  const ModelSpec planned_model = resolve_run_model(base_);
  std::map<std::string, int> layouts_skipped;
  for (const std::string& gpu : spec_.gpus) {
    for (int tp : spec_.tps) {
      for (int dp : spec_.dps) {
        for (int ep : spec_.eps) {
          try {
            check_layout(planned_model, ParallelLayout{tp, dp, ep});
          } catch (const UserError& e) {
            ++layouts_skipped[e.what()];
            continue;
          }
          PlanRow row;
          row.gpu = gpu;
          row.tp = tp;
          row.dp = dp;
          row.ep = ep;
          row.price_per_hour = price_of(gpu);
          plan_.rows.push_back(std::move(row));
        }
      }
    }
  }
  for (const auto& [why, n] : layouts_skipped) {
    plan_.warnings.push_back(fmt::format("{} layout(s) not planned: {}", n, why));
  }
  if (plan_.rows.empty() && !spec_.disaggregated) {
    throw UserError(fmt::format("plan: no --tp x --dp x --ep layout can run model '{}'", planned_model.name));
  }
}

void Planner::add_disaggregated_candidates() {
  // Pool settings that no candidate could run (a policy that cannot serve its role, an unknown
  // engine) are refused once, before any candidate runs.
  RunConfig one_each = base_;
  one_each.prefill_replicas = one_each.decode_replicas = 1;
  validate(one_each);
  check_run_pools(one_each);
  const auto& tps_p = spec_.prefill_tps.empty() ? spec_.tps : spec_.prefill_tps;
  const auto& tps_d = spec_.decode_tps.empty() ? spec_.tps : spec_.decode_tps;
  for (const auto& [pg, dg] : pool_gpu_pairs(spec_)) {
    for (int tp_p : tps_p) {
      for (int tp_d : tps_d) {
        PlanRow row;
        row.disaggregated = true;
        row.gpu = pg;
        row.tp = tp_p;
        row.price_per_hour = price_of(pg);
        row.decode_gpu = dg;
        row.decode_tp = tp_d;
        row.decode_price_per_hour = price_of(dg);
        plan_.rows.push_back(std::move(row));
      }
    }
  }
}

RunConfig Planner::config_for(const PlanRow& row, int p, int d) const {
  RunConfig c = row.disaggregated ? base_ : colocated_base_;
  if (!row.engine.empty()) c.engine = row.engine;
  c.gpu = row.gpu;
  c.tp = row.tp;
  c.dp = row.dp;
  c.ep = row.ep;
  if (row.disaggregated) {
    c.prefill_replicas = p;
    c.decode_replicas = d;
    c.prefill.gpu = row.gpu;
    c.prefill.tp = row.tp;
    c.decode.gpu = row.decode_gpu;
    c.decode.tp = row.decode_tp;
  } else {
    c.replicas = p;
  }
  return c;
}

Judged Planner::judge(PlanRow& row, std::string& rejection, const BuiltWorkload& workload, int p, int d) const {
  const RunOutcome outcome = run_simulation(config_for(row, p, d), &workload);
  ++row.runs;
  if (rejection.empty()) rejection = rejection_warning(outcome.result);
  const ordered_json summary = summary_to_json(outcome);
  Judged j;
  j.output_tokens_per_s = summary.at("throughput").at("output_tokens_per_s").get<double>();
  j.values = slo_values(summary, spec_.slo);
  j.meets = evaluate_slo(summary, spec_.slo).met;  // run --slo's verdict
  j.headroom = INFINITY;
  for (size_t i = 0; i < spec_.slo.size(); ++i)
    j.headroom = std::min(j.headroom, margin_percent(j.values[i], spec_.slo[i].second));
  if (with_goodput_) {
    j.attainment = summary.at("goodput").at("fraction").get<double>();
    j.meets = j.meets && j.attainment >= spec_.attainment;
    j.headroom = std::min(j.headroom, 100 * (j.attainment - spec_.attainment) / spec_.attainment);
  }
  return j;
}

void Planner::plan_one(PlanRow& row, std::string& rejection) const {
  const auto start = std::chrono::steady_clock::now();
  std::map<std::pair<int, int>, PlanProbe> probes;
  auto probe = [&](int p, int d) {
    PlanProbe pr;
    pr.replicas = p;
    pr.decode_replicas = d;
    const auto t0 = std::chrono::steady_clock::now();
    const Judged j = judge(row, rejection, built_, p, d);
    pr.meets = j.meets;
    pr.values = j.values;
    pr.attainment = j.attainment;
    pr.output_tokens_per_s = j.output_tokens_per_s;
    pr.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    probes[{p, d}] = pr;
    return SplitProbe{j.meets, j.headroom};
  };
  // A split's cost is its GPUs, or its dollars when both pools are priced.
  const double cost_p = row.replica_gpus() * (row.priced() ? row.price_per_hour : 1);
  const double cost_d = row.decode_tp * (row.priced() ? row.decode_price_per_hour : 1);
  if (row.disaggregated) {
    const SplitSearch found = find_cheapest_split(spec_.max_replicas, cost_p, cost_d, probe);
    row.replicas = found.prefill;
    row.decode_replicas = found.decode;
  } else {
    row.replicas = find_fewest(spec_.max_replicas, [&](int n) { return probe(n, 0).meets; }).count;
  }
  row.status = row.replicas > 0 ? "ok" : "none";
  const auto& answer = row.replicas > 0 ? probes.at({row.replicas, row.decode_replicas})
                                        : probes.at({spec_.max_replicas, row.disaggregated ? spec_.max_replicas : 0});
  row.values = answer.values;
  row.attainment = answer.attainment;
  row.output_tokens_per_s = answer.output_tokens_per_s;
  for (auto& [n, p] : probes) row.probes.push_back(std::move(p));
  if (row.meets_slo() && busy_) search_busy_window(row, cost_p, cost_d, rejection);
  if (row.meets_slo() && with_goodput_) search_goodput(row, rejection);
  row.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Planner::search_busy_window(PlanRow& row, double cost_p, double cost_d, std::string& rejection) const {
  row.busy_window_checked = true;
  const Judged at_busy = judge(row, rejection, *busy_, row.replicas, row.decode_replicas);
  row.busy_window_values = at_busy.values;
  row.busy_window_ok = at_busy.meets;
  if (row.busy_window_ok) {
    row.busy_window_replicas = row.replicas;
    row.busy_window_decode_replicas = row.decode_replicas;
  } else if (row.disaggregated) {
    const SplitSearch sustained = find_cheapest_split(spec_.max_replicas, cost_p, cost_d, [&](int p, int d) {
      const Judged j = judge(row, rejection, *busy_, p, d);
      return SplitProbe{j.meets, j.headroom};
    });
    row.busy_window_replicas = sustained.prefill;
    row.busy_window_decode_replicas = sustained.decode;
  } else if (row.replicas < spec_.max_replicas) {
    row.busy_window_replicas =
        find_fewest(
            spec_.max_replicas, [&](int n) { return judge(row, rejection, *busy_, n, 0).meets; }, row.replicas + 1)
            .count;
  }
}

void Planner::search_goodput(PlanRow& row, std::string& rejection) const {
  // DistServe's per-GPU goodput (OSDI'24 section 2.2): the highest rate at which the answer
  // still serves `attainment` of the requests within the TTFT and TPOT thresholds, found by
  // the capacity search over the trace's speedup: the same requests, arrivals compressed.
  CapacitySpec search;
  search.rate_low = spec_.goodput_speedup_low;
  search.rate_high = spec_.goodput_speedup_high;
  PlanGoodput g;
  const CapacityResult cap = find_capacity(search, [&](double factor) {
    const double attained =
        judge(row, rejection, compressed(built_, factor), row.replicas, row.decode_replicas).attainment;
    g.probes.emplace_back(factor, attained);
    return attained >= spec_.attainment;
  });
  g.status = cap.status;
  g.speedup = cap.capacity_rps;
  g.bracket_low = cap.bracket_low;
  g.bracket_high = cap.bracket_high;
  g.rate_rps = g.speedup > 0 ? mean_arrival_rate(compressed(built_, g.speedup).requests) : 0;
  g.per_gpu_rps = g.rate_rps / row.total_gpus();
  row.goodput = std::move(g);
}

void Planner::plan_rows(std::ostream& progress) {
  std::mutex mutex;
  size_t finished = 0;
  const int threads = threads_for(spec_.jobs, plan_.rows.size());
  fmt::print(progress, "batchsim plan: {} candidates ({}), {} requests ({}), on {} thread(s)\n", plan_.rows.size(),
             spec_.disaggregated ? "GPU x TP, colocated and prefill/decode" : "GPU x TP", plan_.requests,
             plan_.workload, threads);
  for_each_index(plan_.rows.size(), threads, [&](size_t i) {
    PlanRow& row = plan_.rows[i];
    try {
      plan_one(row, rejections_[i]);
    } catch (const UserError& why) {  // this candidate cannot run; the others go on
      row.status = "error";
      row.error = why.what();
      row.replicas = row.decode_replicas = 0;
    }
    std::lock_guard<std::mutex> lock(mutex);
    const std::string what =
        row.status == "ok"     ? fmt::format("{} replicas ({} GPUs)", replicas_text(row), row.total_gpus())
        : row.status == "none" ? fmt::format("no {} up to {} meets the SLOs",
                                             row.disaggregated ? "split" : "replica count", spec_.max_replicas)
                               : "FAILED: " + row.error;
    fmt::print(progress, "[{}/{}] {}: {} ({} runs, {:.2f} s wall)\n", ++finished, plan_.rows.size(), row.name(), what,
               row.runs, row.wall_s);
  });
  for (size_t i = 0; i < plan_.rows.size(); ++i) {
    if (!rejections_[i].empty()) {
      plan_.warnings.push_back(fmt::format("{}: {}", plan_.rows[i].name(), rejections_[i]));
    }
  }
}

void Planner::sort_rows() {
  // Meeting rows first; among them by total GPUs, or by cost when every one has a price.
  const bool all_priced =
      std::all_of(plan_.rows.begin(), plan_.rows.end(), [](const PlanRow& r) { return !r.meets_slo() || r.priced(); });
  std::stable_sort(plan_.rows.begin(), plan_.rows.end(), [&](const PlanRow& a, const PlanRow& b) {
    if (a.meets_slo() != b.meets_slo()) return a.meets_slo();
    if (!a.meets_slo()) return false;
    if (all_priced && a.cost_per_hour() != b.cost_per_hour()) return a.cost_per_hour() < b.cost_per_hour();
    if (a.total_gpus() != b.total_gpus()) return a.total_gpus() < b.total_gpus();
    return a.busy_window_ok && !b.busy_window_ok;  // at a tie, the one that sustains the busiest window
  });
}

std::string Planner::busy_window_warning(const PlanRow& r) const {
  const int gpus = r.gpus_at(r.busy_window_replicas, r.busy_window_decode_replicas);
  const std::string needs =
      r.busy_window_replicas > 0
          ? fmt::format("sustaining it takes {} replicas ({} GPUs)",
                        replicas_text(r, r.busy_window_replicas, r.busy_window_decode_replicas), gpus)
          : fmt::format("no {} up to {} sustains it", r.disaggregated ? "split" : "replica count", spec_.max_replicas);
  return fmt::format(
      "{}: the busiest {:g} s window ({:.0f}-{:.0f} s after the first arrival: {} requests, {:.1f} req/s, "
      "{:.1f}x the mean {:.2f} req/s) is busier than the {} replica(s) found sustain: with the whole workload "
      "at its rate, {}; {}",
      r.name(), spec_.window_s, plan_.busiest.start_s, plan_.busiest.end_s, plan_.busiest.arrivals,
      plan_.busiest.rate_rps, busy_factor_, plan_.mean_rate_rps, replicas_text(r),
      misses_text(spec_.slo, r.busy_window_values), needs);
}

void Planner::warn_rows() {
  for (const PlanRow& r : plan_.rows) {
    const std::string who = r.name();
    const std::string most =
        r.disaggregated ? fmt::format("{0}P+{0}D", spec_.max_replicas) : std::to_string(spec_.max_replicas);
    if (r.status == "none") {
      std::string misses = misses_text(spec_.slo, r.values);
      if (with_goodput_ && r.attainment < spec_.attainment) {
        misses += fmt::format("{}attainment {:.1f}% < {:g}%", misses.empty() ? "" : ", ", 100 * r.attainment,
                              100 * spec_.attainment);
      }
      plan_.warnings.push_back(fmt::format("{}: no {} up to {} meets the SLOs; at {}: {}", who,
                                           r.disaggregated ? "split" : "replica count", spec_.max_replicas, most,
                                           misses));
    } else if (r.status == "error") {
      plan_.warnings.push_back(fmt::format("{}: cannot run: {}", who, r.error));
    } else if (!r.busy_window_ok) {
      plan_.warnings.push_back(busy_window_warning(r));
    }
  }
}

void Planner::engine_sensitivity() {
  // How the recommended answer moves with the engine's costs: its candidate planned again on each
  // built-in profile of the same engine family.
  const PlanRecommendation rec = recommend(plan_);
  if (rec.row == nullptr) return;
  const std::string plan_engine = run_engine_name(config_for(*rec.row, 1, 1));
  const std::string family = resolve_engine(plan_engine).family;
  std::vector<std::string> engines = {plan_engine};
  for (const EngineProfile& e : builtin_engines()) {
    if (e.family == family && e.name != plan_engine) engines.push_back(e.name);
  }
  for (const std::string& engine : engines) {
    EngineSensitivity s;
    s.engine = engine;
    s.plan_engine = engine == plan_engine;
    PlanRow alt;
    if (s.plan_engine) {
      alt = *rec.row;
    } else {
      alt.disaggregated = rec.row->disaggregated;
      alt.gpu = rec.row->gpu;
      alt.tp = rec.row->tp;
      alt.dp = rec.row->dp;
      alt.ep = rec.row->ep;
      alt.price_per_hour = rec.row->price_per_hour;
      alt.decode_gpu = rec.row->decode_gpu;
      alt.decode_tp = rec.row->decode_tp;
      alt.decode_price_per_hour = rec.row->decode_price_per_hour;
      alt.engine = engine;
      std::string ignored;
      try {
        plan_one(alt, ignored);
      } catch (const UserError& why) {
        alt.status = "error";
      }
    }
    s.status = alt.status;
    if (const auto count = criterion_count(alt, spec_.recommend == "busiest-window")) {
      std::tie(s.replicas, s.decode_replicas) = *count;
      s.gpus = alt.gpus_at(s.replicas, s.decode_replicas);
      s.cost_per_hour = alt.priced() ? alt.cost_at(s.replicas, s.decode_replicas) : 0;
    } else if (s.status == "ok") {
      s.status = "none";  // meets the whole workload, but nothing up to --max-replicas sustains its busiest window
    }
    plan_.engines.push_back(s);
  }
}

void Planner::add_trust() {
  // A datasheet or transferred profile says it was never measured.
  for (const auto* list : {&spec_.gpus, &spec_.prefill_gpus, &spec_.decode_gpus}) {
    for (const std::string& gpu : *list) {
      if (!plan_.trust.contains(gpu)) plan_.trust[gpu] = trust_json(resolve_gpu(gpu));
    }
  }
}

}  // namespace

PlanResult run_plan(const PlanSpec& spec, std::ostream& progress) {
  check_spec(spec);
  PlanResult plan;
  plan.spec = spec;
  Planner planner(spec, plan);
  planner.prepare_workloads();
  planner.add_candidates();
  planner.plan_rows(progress);
  planner.sort_rows();
  planner.warn_rows();
  planner.engine_sensitivity();
  planner.add_trust();
  return plan;
}

namespace {

// "ttft <= 1000 ms, tpot <= 50 ms".
std::string thresholds_text(const GoodputSpec& thresholds) {
  std::vector<std::string> parts;
  const ordered_json j = goodput_json(Goodput{}, thresholds);  // named: a range-for keeps only items() alive
  for (const auto& [key, ms] : j.at("thresholds_ms").items()) {
    parts.push_back(fmt::format("{} <= {:g} ms", key, ms.get<double>()));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// What set the load: the arrivals' mean and busiest window, or the closed-loop clients (or
// sessions).
std::string offered_load_text(const PlanResult& plan) {
  const RunConfig& base = plan.spec.base;
  const WorkloadSpec& w = base.workload;
  if (plan.closed_loop && (!w.session_turns.empty() || w.trace_sessions)) {
    return fmt::format(
        "closed loop: {} sessions at a time, each started when one's last turn ends, each turn sent {} the "
        "answer before it{}",
        base.max_concurrency, w.think_time.empty() ? "when" : fmt::format("a think time ({} s) after", w.think_time),
        w.trace_sessions ? " (or at its recorded offset from its session's start, if later)" : "");
  }
  if (plan.closed_loop) {
    return fmt::format(
        "closed loop: {} clients, each sending its next request {} its last one ends", base.max_concurrency,
        base.workload.think_time.empty() ? "when" : fmt::format("a think time ({} s) after", base.workload.think_time));
  }
  return fmt::format("mean {:.2f} req/s; busiest {:g} s window {:.0f}-{:.0f} s: {:.1f} req/s", plan.mean_rate_rps,
                     plan.spec.window_s, plan.busiest.start_s, plan.busiest.end_s, plan.busiest.rate_rps);
}

// "2.41 req/s (x3.10)": per-GPU goodput and the factor on the replayed rate it was found at.
std::string goodput_text(const PlanGoodput& g) {
  if (g.status == "below-range") return fmt::format("< {:.3g}x rate", g.bracket_high);
  return fmt::format("{}{:.2f} req/s (x{:.2f})", g.status == "above-range" ? ">= " : "", g.per_gpu_rps, g.speedup);
}

}  // namespace

std::optional<std::pair<int, int>> criterion_count(const PlanRow& r, bool busiest_window) {
  if (!r.meets_slo()) return std::nullopt;
  if (busiest_window && r.busy_window_checked && !r.busy_window_ok) {
    if (r.busy_window_replicas == 0) return std::nullopt;  // nothing up to --max-replicas sustains the window
    return std::pair{r.busy_window_replicas, r.busy_window_decode_replicas};
  }
  return std::pair{r.replicas, r.decode_replicas};
}

PlanRecommendation recommend(const PlanResult& plan) {
  const PlanSpec& spec = plan.spec;
  const bool busy = spec.recommend == "busiest-window";
  const bool all_priced =
      std::all_of(plan.rows.begin(), plan.rows.end(), [](const PlanRow& r) { return !r.meets_slo() || r.priced(); });
  PlanRecommendation best;
  best.condition =
      plan.closed_loop ? "every SLO over the whole workload (closed-loop clients set the load: no window is busier)"
      : busy ? fmt::format("every SLO over the whole workload and in its busiest {:g} s window", spec.window_s)
             : "every SLO over the whole workload (--recommend whole-workload: its busiest window not "
               "required)";
  best.criterion = fmt::format("the {} deployment meeting {}",
                               all_priced ? "cheapest ($/hour)" : "smallest (fewest GPUs)", best.condition);
  double best_key = 0;
  for (const PlanRow& r : plan.rows) {
    const auto count = criterion_count(r, busy);
    if (!count) continue;
    const auto [p, d] = *count;
    const int gpus = r.gpus_at(p, d);
    const double cost = r.cost_at(p, d);
    const double key = all_priced ? cost : gpus;
    if (best.row == nullptr || key < best_key) {
      best.row = &r;
      best.replicas = p;
      best.decode_replicas = d;
      best.gpus = gpus;
      best.cost_per_hour = all_priced ? cost : 0;
      best_key = key;
    }
  }
  return best;
}

namespace {

// "2 x h100-sxm tp 8 (16 GPUs, $96.00/hour)" or "1P+2D h100-sxm tp 1 / a100-80gb tp 2 (...)".
std::string recommendation_text(const PlanRecommendation& rec) {
  const PlanRow& r = *rec.row;
  const std::string layout =
      r.dp > 1 || r.ep > 1 ? fmt::format("TP {} x DP {}, EP {}", r.tp, r.dp, r.ep) : fmt::format("tp {}", r.tp);
  const std::string what = r.disaggregated ? fmt::format("{}P+{}D: {} tp {} prefill, {} tp {} decode", rec.replicas,
                                                         rec.decode_replicas, r.gpu, r.tp, r.decode_gpu, r.decode_tp)
                                           : fmt::format("{} x {} {}", rec.replicas, r.gpu, layout);
  return fmt::format("{} ({} GPUs{})", what, rec.gpus,
                     rec.cost_per_hour > 0 ? fmt::format(", ${:.2f}/hour", rec.cost_per_hour) : "");
}

}  // namespace

namespace {

// Which of print_plan's optional columns a plan shows.
struct PlanColumns {
  bool priced = false;        // some candidate has a price: $/hour and $/M output tokens
  bool with_goodput = false;  // --goodput: attainment and goodput per GPU
  bool layouts = false;       // a mixture of experts' layouts: DP and EP
  size_t left_aligned = 2;    // the text columns (deployment, gpu)

  explicit PlanColumns(const PlanResult& plan)
      : priced(std::any_of(plan.rows.begin(), plan.rows.end(), [](const PlanRow& r) { return r.price_per_hour > 0; })),
        with_goodput(!plan.spec.base.goodput.empty()),
        layouts(std::any_of(plan.rows.begin(), plan.rows.end(), [](const PlanRow& r) { return r.dp > 1 || r.ep > 1; })),
        left_aligned(plan.spec.disaggregated ? 3 : 2) {}
};

std::vector<std::string> plan_headers(const PlanResult& plan, const PlanColumns& columns) {
  const PlanSpec& spec = plan.spec;
  // A disaggregated row reads "h100-sxm / a100-80gb", "1 / 2", "3P+1D": prefill / decode.
  std::vector<std::string> headers;
  if (spec.disaggregated) headers.push_back("deployment");
  headers.insert(headers.end(), {"gpu", "tp"});
  if (columns.layouts) headers.insert(headers.end(), {"dp", "ep"});
  headers.insert(headers.end(), {"replicas", "GPUs"});
  if (columns.priced) headers.insert(headers.end(), {"$/hour", "$/M out tok"});
  headers.push_back("out tok/s/GPU");
  for (const auto& [path, bound] : spec.slo)
    headers.push_back(fmt::format("{} (<= {})", slo_label(path), seconds_text(bound)));
  if (columns.with_goodput) {
    headers.push_back(fmt::format("attainment (>= {:g}%)", 100 * spec.attainment));
    headers.push_back(fmt::format("goodput/GPU ({:g}%)", 100 * spec.attainment));
  }
  if (!plan.closed_loop) headers.push_back("busiest window");  // (closed-loop clients set their own load)
  headers.push_back("runs");
  headers.push_back("wall");
  return headers;
}

// The cells after the layout's of a candidate that ran: replicas, GPUs, prices, throughput, the
// SLO figures, goodput and the busiest window.
void add_outcome_cells(std::vector<std::string>& cells, const PlanResult& plan, const PlanRow& r,
                       const PlanColumns& columns, const std::string& most) {
  const PlanSpec& spec = plan.spec;
  cells.push_back(r.meets_slo() ? replicas_text(r) : most);
  cells.push_back(r.meets_slo() ? std::to_string(r.total_gpus()) : "-");
  if (columns.priced) {
    const bool shown = r.priced() && r.meets_slo();
    cells.push_back(shown ? fmt::format("{:.2f}", r.cost_per_hour()) : "-");
    cells.push_back(shown && r.output_tokens_per_s > 0 ? fmt::format("{:.3f}", r.usd_per_million_output_tokens())
                                                       : "-");
  }
  cells.push_back(r.meets_slo() ? fmt::format("{:.0f}", r.tokens_per_s_per_gpu()) : "-");
  for (size_t i = 0; i < spec.slo.size(); ++i) {
    cells.push_back(fmt::format("{} ({})", seconds_text(r.values[i]), margin_text(r.values[i], spec.slo[i].second)));
  }
  if (columns.with_goodput) {
    cells.push_back(fmt::format("{:.1f}%", 100 * r.attainment));
    cells.push_back(r.goodput ? goodput_text(*r.goodput) : "-");
  }
  if (!plan.closed_loop) {
    cells.push_back(!r.busy_window_checked       ? (r.meets_slo() ? "not a burst" : "-")
                    : r.busy_window_ok           ? "sustained"
                    : r.busy_window_replicas > 0 ? fmt::format("needs {}", replicas_text(r, r.busy_window_replicas,
                                                                                         r.busy_window_decode_replicas))
                                                 : "needs " + most);
  }
}

std::vector<std::string> plan_cells(const PlanResult& plan, const PlanRow& r, const PlanColumns& columns) {
  const PlanSpec& spec = plan.spec;
  std::vector<std::string> cells;
  if (spec.disaggregated) cells.push_back(r.disaggregated ? "prefill/decode" : "colocated");
  if (!r.disaggregated) {
    cells.insert(cells.end(), {r.gpu, std::to_string(r.tp)});
  } else {
    cells.push_back(r.gpu == r.decode_gpu ? r.gpu : fmt::format("{} / {}", r.gpu, r.decode_gpu));
    cells.push_back(fmt::format("{} / {}", r.tp, r.decode_tp));
  }
  if (columns.layouts) {
    cells.push_back(r.disaggregated ? "-" : std::to_string(r.dp));
    cells.push_back(r.disaggregated ? "-" : std::to_string(r.ep));
  }
  const std::string most =
      r.disaggregated ? fmt::format("> {0}P+{0}D", spec.max_replicas) : fmt::format("> {}", spec.max_replicas);
  if (r.status == "error") {
    // "cannot run" in the busiest-window column, or in the replicas' where it has none.
    cells.insert(cells.end(), {plan.closed_loop ? "cannot run" : "-", "-"});
    if (columns.priced) cells.insert(cells.end(), {"-", "-"});
    cells.push_back("-");
    for (size_t i = 0; i < spec.slo.size() + (columns.with_goodput ? 2 : 0); ++i) cells.push_back("-");
    if (!plan.closed_loop) cells.push_back("cannot run");
  } else {
    add_outcome_cells(cells, plan, r, columns, most);
  }
  cells.push_back(std::to_string(r.runs));
  cells.push_back(fmt::format("{:.1f} s", r.wall_s));
  return cells;
}

void print_recommendation(std::ostream& out, const PlanResult& plan) {
  const PlanRecommendation rec = recommend(plan);
  if (rec.row == nullptr) {
    fmt::print(out, "recommendation: none: no deployment up to --max-replicas meets {}\n", rec.condition);
    return;
  }
  fmt::print(out, "recommendation: {}: {}\n", recommendation_text(rec), rec.criterion);
  if (plan.engines.size() > 1) {
    std::vector<std::string> parts;
    for (const EngineSensitivity& s : plan.engines) {
      parts.push_back(fmt::format("{}{} {}", s.engine, s.plan_engine ? " (planned)" : "",
                                  s.status == "ok"      ? fmt::format("{} GPUs", s.gpus)
                                  : s.status == "error" ? std::string("cannot run")
                                                        : fmt::format("> {} replicas", plan.spec.max_replicas)));
    }
    fmt::print(out, "on the engine's other profiles the same deployment needs: {}\n", fmt::join(parts, ", "));
  }
}

}  // namespace

void print_plan(std::ostream& out, const PlanResult& plan) {
  const PlanColumns columns(plan);
  std::vector<std::vector<std::string>> rows;
  for (const PlanRow& r : plan.rows) rows.push_back(plan_cells(plan, r, columns));
  fmt::print(out, "plan: {} on {} requests ({}), {}\n", plan.spec.base.model, plan.requests, plan.workload,
             offered_load_text(plan));
  render_text_table(out, plan_headers(plan, columns), rows, columns.left_aligned);
  print_recommendation(out, plan);
  for (const auto& [gpu, trust] : plan.trust.items()) fmt::print(out, "{}\n", trust_line(trust));
  for (const std::string& w : plan.warnings) fmt::print(out, "warning: {}\n", w);
}

namespace {

// pareto.csv: every probe of every candidate, its GPUs, $/hour (empty unpriced) and SLO figures,
// and whether it is on the Pareto front: no other probe has a lower-or-equal cost (dollars when
// every probe is priced, else GPUs) and lower-or-equal figures, one of them strictly lower.
void write_pareto(const PlanResult& plan, const fs::path& file) {
  struct Point {
    const PlanRow* row;
    const PlanProbe* probe;
    double cost;
  };
  std::vector<Point> points;
  bool all_priced = true;
  for (const PlanRow& r : plan.rows) {
    for (const PlanProbe& p : r.probes) {
      points.push_back({&r, &p, 0});
      all_priced = all_priced && r.priced();
    }
  }
  for (Point& pt : points) {
    pt.cost = all_priced ? pt.row->cost_at(pt.probe->replicas, pt.probe->decode_replicas)
                         : pt.row->gpus_at(pt.probe->replicas, pt.probe->decode_replicas);
  }
  auto dominates = [](const Point& a, const Point& b) {
    bool strict = a.cost < b.cost;
    if (a.cost > b.cost) return false;
    for (size_t i = 0; i < a.probe->values.size(); ++i) {
      if (a.probe->values[i] > b.probe->values[i]) return false;
      strict = strict || a.probe->values[i] < b.probe->values[i];
    }
    return strict;
  };
  std::vector<ordered_json> rows;
  for (const Point& pt : points) {
    const PlanRow& r = *pt.row;
    const PlanProbe& p = *pt.probe;
    ordered_json row;
    row["deployment"] = r.name();
    row["gpu"] = r.gpu;
    row["tp"] = r.tp;
    row["dp"] = r.dp;
    row["ep"] = r.ep;
    row["replicas"] = p.replicas;
    row["decode_replicas"] = p.decode_replicas;
    row["gpus"] = r.gpus_at(p.replicas, p.decode_replicas);
    row["cost_per_hour"] = r.priced() ? ordered_json(r.cost_at(p.replicas, p.decode_replicas)) : ordered_json();
    for (size_t i = 0; i < plan.spec.slo.size() && i < p.values.size(); ++i) row[plan.spec.slo[i].first] = p.values[i];
    const int gpus = r.gpus_at(p.replicas, p.decode_replicas);
    row["output_tokens_per_s_per_gpu"] = gpus > 0 ? p.output_tokens_per_s / gpus : 0;
    row["meets_slo"] = p.meets;
    row["pareto"] = std::none_of(points.begin(), points.end(), [&](const Point& o) { return dominates(o, pt); });
    rows.push_back(std::move(row));
  }
  write_flat_csv(file, rows);
}

// report.md's trust section: each GPU profile's validation, and how the recommended answer moves
// on the engine family's other profiles.
void write_trust_section(std::ostream& out, const PlanResult& plan) {
  out << "## How far to trust this answer\n\n";
  for (const auto& [gpu, trust] : plan.trust.items()) fmt::print(out, "- {}\n", trust_line(trust));
  if (plan.engines.size() > 1) {
    out << "\nThe recommended deployment planned again on every profile of its engine (the same scheduler with "
           "other CPU and residual costs, `batchsim list engines`), at the recommendation's criterion: the spread "
           "is what the engine's costs alone may move the answer.\n\n| engine | replicas | GPUs | $/hour "
           "|\n|:--|--:|--:|--:|\n";
    for (const EngineSensitivity& s : plan.engines) {
      const bool ok = s.status == "ok";
      fmt::print(out, "| `{}`{} | {} | {} | {} |\n", s.engine, s.plan_engine ? " (planned)" : "",
                 ok                    ? (s.decode_replicas > 0 ? fmt::format("{}P+{}D", s.replicas, s.decode_replicas)
                                                                : std::to_string(s.replicas))
                 : s.status == "error" ? std::string("cannot run")
                                       : fmt::format("> {}", plan.spec.max_replicas),
                 ok ? std::to_string(s.gpus) : "-",
                 ok && s.cost_per_hour > 0 ? fmt::format("{:.2f}", s.cost_per_hour) : "-");
    }
  }
  out << "\n";
}

}  // namespace

namespace {

// plan.csv's row of a candidate (plan.json's before its probes).
ordered_json plan_row_json(const PlanSpec& spec, const PlanRow& r, bool with_goodput) {
  ordered_json row;
  // With --disaggregated every row says what it is; a disaggregated one's gpu and tp are its
  // prefill pool's, replicas the split's P + D.
  if (spec.disaggregated) row["deployment"] = r.disaggregated ? "disaggregated" : "colocated";
  row["gpu"] = r.gpu;
  row["tp"] = r.tp;
  if (spec.dps != std::vector<int>{1} || spec.eps != std::vector<int>{1}) {
    row["dp"] = r.dp;
    row["ep"] = r.ep;
  }
  row["replicas"] = r.replicas + r.decode_replicas;
  if (spec.disaggregated) {
    row["prefill_replicas"] = r.disaggregated ? r.replicas : 0;
    row["decode_replicas"] = r.decode_replicas;
    row["decode_gpu"] = r.decode_gpu;
    row["decode_tp"] = r.decode_tp;
    row["decode_price_per_hour"] = r.decode_price_per_hour > 0 ? ordered_json(r.decode_price_per_hour) : ordered_json();
  }
  row["total_gpus"] = r.total_gpus();
  row["meets_slo"] = r.meets_slo();
  row["status"] = r.status;
  // Unknown prices are empty (null), not $0: a free GPU is not what the plan knows.
  row["price_per_hour"] = r.price_per_hour > 0 ? ordered_json(r.price_per_hour) : ordered_json();
  row["cost_per_hour"] = r.priced() ? ordered_json(r.cost_per_hour()) : ordered_json();
  row["output_tokens_per_s"] = r.output_tokens_per_s;
  row["output_tokens_per_s_per_gpu"] = r.tokens_per_s_per_gpu();
  row["usd_per_million_output_tokens"] =
      r.priced() && r.output_tokens_per_s > 0 ? ordered_json(r.usd_per_million_output_tokens()) : ordered_json();
  ordered_json slo = ordered_json::object();
  for (size_t i = 0; i < spec.slo.size() && i < r.values.size(); ++i) {
    slo[spec.slo[i].first] = {{"value", r.values[i]},
                              {"margin_percent", margin_percent(r.values[i], spec.slo[i].second)}};
  }
  row["slo"] = slo;
  if (with_goodput) {
    row["attainment"] = r.attainment;
    // DistServe's per-GPU goodput (OSDI'24 section 2.2) of the answer; null when there is none.
    ordered_json g = nullptr;
    if (r.goodput) {
      g = {{"status", r.goodput->status},
           {"speedup", r.goodput->speedup},
           {"rate_rps", r.goodput->rate_rps},
           {"per_gpu_rps", r.goodput->per_gpu_rps},
           {"bracket_low_speedup", r.goodput->bracket_low},
           {"bracket_high_speedup", r.goodput->bracket_high}};
    }
    row["goodput"] = g;
  }
  row["busy_window_checked"] = r.busy_window_checked;
  row["busy_window_sustained"] = r.busy_window_ok;
  row["busy_window_replicas"] = r.busy_window_replicas;
  if (spec.disaggregated) row["busy_window_decode_replicas"] = r.busy_window_decode_replicas;
  row["runs"] = r.runs;
  row["wall_s"] = r.wall_s;
  row["error"] = r.error;
  return row;
}

// plan.json's additions to a candidate's row: every probe, and the goodput search's.
void add_probes_json(ordered_json& row, const PlanRow& r, bool with_goodput) {
  ordered_json probes = ordered_json::array();
  for (const PlanProbe& p : r.probes) {
    ordered_json probe = {{"replicas", p.replicas}};
    if (r.disaggregated) probe["decode_replicas"] = p.decode_replicas;
    probe["gpus"] = r.gpus_at(p.replicas, p.decode_replicas);
    probe["output_tokens_per_s"] = p.output_tokens_per_s;
    probe["meets"] = p.meets;
    probe["values"] = p.values;
    if (with_goodput) probe["attainment"] = p.attainment;
    probes.push_back(std::move(probe));
  }
  row["probes"] = probes;
  if (r.goodput) {
    ordered_json gp = ordered_json::array();
    for (const auto& [speedup, attained] : r.goodput->probes)
      gp.push_back({{"speedup", speedup}, {"attainment", attained}});
    row["goodput"]["probes"] = gp;
  }
}

// plan.json's account of what was planned: SLOs, base run, candidates, workload, window.
ordered_json plan_spec_json(const PlanResult& plan, bool with_goodput) {
  const PlanSpec& spec = plan.spec;
  ordered_json j;
  ordered_json slo = ordered_json::object();
  for (const auto& [path, bound] : spec.slo) slo[path] = bound;
  j["slo"] = slo;
  // The base's own GPU and layout did not run (the plan's gpus, tps, dps and eps did), nor its
  // replica count (the plan searched it): left out rather than echoed.
  ordered_json base = config_to_json(spec.base);
  for (const char* key : {"gpu", "tp", "dp", "ep", "moe_tp", "replicas"}) base.erase(key);
  j["base"] = base;
  j["gpus"] = spec.gpus;
  j["tps"] = spec.tps;
  if (spec.dps != std::vector<int>{1}) j["dps"] = spec.dps;
  if (spec.eps != std::vector<int>{1}) j["eps"] = spec.eps;
  if (spec.disaggregated) {
    ordered_json pairs = ordered_json::array();
    for (const auto& [pg, dg] : pool_gpu_pairs(spec)) pairs.push_back({{"prefill", pg}, {"decode", dg}});
    j["disaggregated"] = {{"gpu_pairs", pairs},
                          {"prefill_tps", spec.prefill_tps.empty() ? spec.tps : spec.prefill_tps},
                          {"decode_tps", spec.decode_tps.empty() ? spec.tps : spec.decode_tps}};
  }
  if (with_goodput) {
    j["goodput"] = {{"attainment", spec.attainment},
                    {"thresholds_ms", goodput_json(Goodput{}, spec.base.goodput).at("thresholds_ms")},
                    {"speedup_low", spec.goodput_speedup_low},
                    {"speedup_high", spec.goodput_speedup_high}};
  }
  j["max_replicas"] = spec.max_replicas;
  j["workload"] = {{"description", plan.workload}, {"requests", plan.requests}, {"mean_rate_rps", plan.mean_rate_rps}};
  j["closed_loop"] = plan.closed_loop ? ordered_json{{"clients", spec.base.max_concurrency},
                                                     {"think_time", spec.base.workload.think_time}}
                                      : ordered_json(nullptr);
  // With sessions, the clients are sessions at a time (a key only then: older files stay as they were).
  if (plan.closed_loop && (!spec.base.workload.session_turns.empty() || spec.base.workload.trace_sessions)) {
    j["closed_loop"]["sessions"] = true;
  }
  j["busiest_window"] = {{"window_s", spec.window_s},
                         {"start_s", plan.busiest.start_s},
                         {"end_s", plan.busiest.end_s},
                         {"arrivals", plan.busiest.arrivals},
                         {"rate_rps", plan.busiest.rate_rps}};
  return j;
}

ordered_json recommendation_json(const PlanResult& plan) {
  const PlanSpec& spec = plan.spec;
  const PlanRecommendation rec = recommend(plan);
  ordered_json recommendation = {{"criterion", rec.criterion}, {"mode", spec.recommend}};
  if (rec.row != nullptr) {
    recommendation["gpu"] = rec.row->gpu;
    recommendation["tp"] = rec.row->tp;
    recommendation["dp"] = rec.row->dp;
    recommendation["ep"] = rec.row->ep;
    recommendation["replicas"] = rec.replicas;
    if (rec.row->disaggregated) {
      recommendation["decode_gpu"] = rec.row->decode_gpu;
      recommendation["decode_tp"] = rec.row->decode_tp;
      recommendation["decode_replicas"] = rec.decode_replicas;
    }
    recommendation["gpus"] = rec.gpus;
    recommendation["cost_per_hour"] = rec.cost_per_hour > 0 ? ordered_json(rec.cost_per_hour) : ordered_json();
    recommendation["text"] = recommendation_text(rec);
    const PlanRow& r = *rec.row;
    const auto probe = std::find_if(r.probes.begin(), r.probes.end(), [&](const PlanProbe& p) {
      return p.replicas == rec.replicas && p.decode_replicas == rec.decode_replicas;
    });
    // Served throughput at the recommended count (the answer's when that count was not probed:
    // more replicas serve the same replayed workload).
    const double tps = probe != r.probes.end() ? probe->output_tokens_per_s : r.output_tokens_per_s;
    recommendation["output_tokens_per_s_per_gpu"] = rec.gpus > 0 ? tps / rec.gpus : 0;
    recommendation["usd_per_million_output_tokens"] =
        rec.cost_per_hour > 0 && tps > 0 ? ordered_json(rec.cost_per_hour / (tps * 3600) * 1e6) : ordered_json();
  } else {
    recommendation["text"] = nullptr;
  }
  return recommendation;
}

ordered_json engine_sensitivity_json(const PlanResult& plan) {
  ordered_json engines = ordered_json::array();
  for (const EngineSensitivity& s : plan.engines) {
    engines.push_back({{"engine", s.engine},
                       {"planned", s.plan_engine},
                       {"status", s.status},
                       {"replicas", s.replicas},
                       {"decode_replicas", s.decode_replicas},
                       {"gpus", s.gpus},
                       {"cost_per_hour", s.cost_per_hour > 0 ? ordered_json(s.cost_per_hour) : ordered_json()}});
  }
  return engines;
}

void write_plan_report(const PlanResult& plan, const fs::path& dir, bool with_goodput, const std::string& note) {
  const PlanSpec& spec = plan.spec;
  auto out = open_for_write(dir / "report.md");
  std::vector<std::string> bounds;
  for (const auto& [path, bound] : spec.slo) bounds.push_back(fmt::format("`{}` <= {}", path, seconds_text(bound)));
  if (with_goodput) {
    bounds.push_back(
        fmt::format("{:g}% of the requests within {}", 100 * spec.attainment, thresholds_text(spec.base.goodput)));
  }
  fmt::print(out, "# Capacity plan: {}\n\n", spec.base.model);
  fmt::print(out,
             "How many replicas of {} (each `tp` GPUs, policy `{}`, router `{}`) on {} at TP {} keep {}? "
             "Each count was judged by replaying the workload itself: {} requests ({}), {}.\n\n",
             spec.base.model, spec.base.policy, spec.base.router, fmt::join(spec.gpus, ", "), fmt::join(spec.tps, ", "),
             fmt::join(bounds, " and "), plan.requests, plan.workload,
             plan.closed_loop ? offered_load_text(plan)
                              : fmt::format("mean {:.2f} req/s; its busiest {:g} s window ({:.0f}-{:.0f} s after the "
                                            "first arrival) has {} requests, {:.1f} req/s",
                                            plan.mean_rate_rps, spec.window_s, plan.busiest.start_s, plan.busiest.end_s,
                                            plan.busiest.arrivals, plan.busiest.rate_rps));
  out << "```text\n";
  print_plan(out, plan);
  out << "```\n\n";
  out << "`replicas`: the fewest that meet every SLO (doubling from 1, then bisecting; `> N`: none up to "
         "`--max-replicas` does). Each SLO column shows the figure at that count and how far under (or over) "
         "its bound it is. `busiest window`: whether that count still meets the SLOs with the whole workload "
         "compressed to the busiest window's rate (`needs N`: it does not, N replicas would; `not a burst`: no "
         "window is more than 10% busier than the mean; with closed-loop clients there is none, since they "
         "send only as fast as their requests finish).\n\n";
  if (spec.disaggregated) {
    out << "`prefill/decode` rows split the GPUs into a prefill pool and a decode pool (`gpu` and `tp` read "
           "prefill / decode); `replicas` is the split (`3P+1D`: 3 prefill and 1 decode replicas) with the fewest GPUs "
           "(the lowest cost when both "
           "pools are priced) that meets every SLO, found by replay: the fewest prefill replicas with a full "
           "decode pool and the fewest decode replicas with a full prefill pool bound the search, then each "
           "prefill count gets the fewest decode replicas by bisection (ties: the split with the most headroom).\n\n";
  }
  if (with_goodput) {
    fmt::print(out,
               "`attainment`: the share of requests that completed within the goodput thresholds ({}) at the "
               "replayed rate; every answer must reach {:g}%. `goodput/GPU`: DistServe's per-GPU goodput "
               "(Zhong et al., OSDI'24, section 2.2): the highest arrival rate at which the answer still serves "
               "{:g}% of the requests within the thresholds, divided by its GPUs, found by bisecting the factor "
               "(`xF`) by which the replayed arrivals are compressed, between {:g} and {:g}.\n\n",
               thresholds_text(spec.base.goodput), 100 * spec.attainment, 100 * spec.attainment,
               spec.goodput_speedup_low, spec.goodput_speedup_high);
  }
  if (note.empty() && fs::exists(dir / "figures" / "plan_slo.png")) {
    out << "## SLO figures vs GPUs\n\n![SLO figures vs GPUs](figures/plan_slo.png)\n\n"
           "Every probe of every candidate against the GPUs it takes (colocated: lines; prefill/decode splits: "
           "points); the dashed lines are the SLO bounds, the answers ringed.\n\n";
  } else if (!note.empty()) {
    fmt::print(out, "{}\n\n", note);
  }
  write_trust_section(out, plan);
  out << "Files: `plan.csv` (one row per GPU and TP), `plan.json` (the same with every probe), `pareto.csv` "
         "(every probe's GPUs, cost and SLO figures; `pareto` marks those no other probe beats on all of them).\n";
}

}  // namespace

void write_plan(const PlanResult& plan, const fs::path& dir, bool plots, std::ostream& progress) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UserError(fmt::format("--out {}: cannot create the directory: {}", dir.string(), ec.message()));
  fs::remove_all(dir / "figures");
  const PlanSpec& spec = plan.spec;
  const bool with_goodput = !spec.base.goodput.empty();
  std::vector<ordered_json> csv_rows;
  ordered_json rows = ordered_json::array();
  for (const PlanRow& r : plan.rows) {
    ordered_json row = plan_row_json(spec, r, with_goodput);
    csv_rows.push_back(row);
    add_probes_json(row, r, with_goodput);
    rows.push_back(std::move(row));
  }
  write_flat_csv(dir / "plan.csv", csv_rows);
  ordered_json j = plan_spec_json(plan, with_goodput);
  j["rows"] = rows;
  j["trust"] = plan.trust;
  j["recommendation"] = recommendation_json(plan);
  j["engine_sensitivity"] = engine_sensitivity_json(plan);
  write_pareto(plan, dir / "pareto.csv");
  j["warnings"] = plan.warnings;
  {
    auto out = open_for_write(dir / "plan.json");
    out << j.dump(2) << "\n";
  }
  const std::string note =
      draw_figures(dir, plots, fmt::format("python3 plots/make_figures.py {}", dir.string()), progress);
  write_plan_report(plan, dir, with_goodput, note);
}

}  // namespace batchsim
