#include "experiments/plan.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <ostream>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "experiments/compare.h"
#include "experiments/output.h"
#include "experiments/report.h"
#include "experiments/runner.h"
#include "hwmodel/error.h"
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

void check_spec(const PlanSpec& spec) {
  if (spec.gpus.empty()) throw UserError("--gpu: give at least one GPU (built-in name or profile file)");
  if (spec.tps.empty()) throw UserError("--tp: give at least one tensor-parallel degree, e.g. --tp 1,2");
  for (int tp : spec.tps) {
    if (tp < 1) throw UserError(fmt::format("--tp {}: a tensor-parallel degree must be >= 1", tp));
  }
  std::set<std::string> seen;
  for (const std::string& g : spec.gpus) {
    if (!seen.insert(g).second) throw UserError(fmt::format("--gpu: '{}' is listed twice", g));
    try {
      resolve_gpu(g);
    } catch (const UserError& e) {
      throw UserError(fmt::format("--gpu {}: {}", g, e.what()));
    }
  }
  if (spec.max_replicas < 1) throw UserError(fmt::format("--max-replicas {}: must be >= 1", spec.max_replicas));
  if (spec.slo.empty()) {
    throw UserError("--slo: give at least one bound, e.g. --slo ttft_p99=2s,tbt_p99=100ms");
  }
  for (const auto& [gpu, price] : spec.price_per_hour) {
    if (!seen.count(gpu)) {
      throw UserError(fmt::format("--price {}={}: '{}' is not one of the --gpu candidates ({})", gpu, price,
                                  gpu, fmt::join(spec.gpus, ", ")));
    }
  }
  if (!(spec.window_s > 0)) throw UserError(fmt::format("--window {}: must be > 0 seconds", spec.window_s));
  if (spec.jobs < 1) throw UserError("--jobs: must be >= 1");
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

PlanResult run_plan(const PlanSpec& spec, std::ostream& progress) {
  check_spec(spec);
  PlanResult plan;
  plan.spec = spec;
  RunConfig base = spec.base;
  base.out.clear();
  base.iteration_log = false;
  validate(base);
  const BuiltWorkload built = build_workload(base.workload);
  plan.warnings = built.warnings;
  plan.workload = built.description;
  plan.requests = static_cast<int64_t>(built.requests.size());
  plan.mean_rate_rps = mean_arrival_rate(built.requests);
  plan.busiest = busiest_window(built.requests, spec.window_s);
  const double span_s =
      built.requests.empty() ? 0 : (built.requests.back().arrival - built.requests.front().arrival).seconds();
  // The whole workload at the busiest window's rate, when that window is notably busier than
  // the mean and shorter than the workload.
  const double busy_factor = plan.mean_rate_rps > 0 ? plan.busiest.rate_rps / plan.mean_rate_rps : 1;
  std::optional<BuiltWorkload> busy;
  if (span_s > spec.window_s && busy_factor > kBusyFactorThreshold) busy = compressed(built, busy_factor);

  for (const std::string& gpu : spec.gpus) {
    for (int tp : spec.tps) {
      PlanRow row;
      row.gpu = gpu;
      row.tp = tp;
      const auto price = spec.price_per_hour.find(gpu);
      row.price_per_hour = price != spec.price_per_hour.end() ? price->second : resolve_gpu(gpu).price_per_hour;
      plan.rows.push_back(std::move(row));
    }
  }

  std::mutex mutex;
  std::atomic<size_t> next{0};
  size_t finished = 0;
  std::exception_ptr error;
  std::vector<std::string> rejections(plan.rows.size());
  auto plan_one = [&](PlanRow& row, std::string& rejection) {
    const auto start = std::chrono::steady_clock::now();
    std::map<int, PlanProbe> probes;
    auto probe = [&](const BuiltWorkload& workload, int n, std::vector<double>* values) {
      RunConfig c = base;
      c.gpu = row.gpu;
      c.tp = row.tp;
      c.replicas = n;
      const RunOutcome outcome = run_simulation(c, &workload);
      ++row.runs;
      if (rejection.empty()) rejection = rejection_warning(outcome.result);
      const ordered_json summary = summary_to_json(outcome);
      *values = slo_values(summary, spec.slo);
      return meets_slo(summary, spec.slo);
    };
    const CountSearch found = find_fewest(spec.max_replicas, [&](int n) {
      PlanProbe p;
      p.replicas = n;
      const auto t0 = std::chrono::steady_clock::now();
      p.meets = probe(built, n, &p.values);
      p.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const bool ok = p.meets;
      probes[n] = std::move(p);
      return ok;
    });
    row.replicas = found.count;
    row.status = found.count > 0 ? "ok" : "none";
    row.values = probes.at(found.count > 0 ? found.count : spec.max_replicas).values;
    for (auto& [n, p] : probes) row.probes.push_back(std::move(p));
    if (row.meets_slo() && busy) {
      row.busy_window_checked = true;
      std::map<int, std::vector<double>> busy_values;
      const CountSearch sustained = find_fewest(spec.max_replicas, [&](int n) {
        return probe(*busy, n, &busy_values[n]);
      }, row.replicas);
      row.busy_window_values = busy_values.at(row.replicas);
      row.busy_window_ok = sustained.count == row.replicas;
      row.busy_window_replicas = sustained.count;
    }
    row.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto work = [&] {
    for (size_t i = next++; i < plan.rows.size(); i = next++) {
      PlanRow& row = plan.rows[i];
      try {
        plan_one(row, rejections[i]);
      } catch (const UserError& why) {  // this candidate cannot run; the others go on
        row.status = "error";
        row.error = why.what();
        row.replicas = 0;
      } catch (...) {  // a bug, not bad input
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
        next = plan.rows.size();
        return;
      }
      std::lock_guard<std::mutex> lock(mutex);
      const std::string what =
          row.status == "ok"     ? fmt::format("{} replicas ({} GPUs)", row.replicas, row.total_gpus())
          : row.status == "none" ? fmt::format("no replica count up to {} meets the SLOs", spec.max_replicas)
                                 : "FAILED: " + row.error;
      fmt::print(progress, "[{}/{}] {} tp {}: {} ({} runs, {:.2f} s wall)\n", ++finished, plan.rows.size(),
                 row.gpu, row.tp, what, row.runs, row.wall_s);
    }
  };
  const int threads = std::max(1, std::min<int>(spec.jobs, static_cast<int>(plan.rows.size())));
  fmt::print(progress, "batchsim plan: {} candidates (GPU x TP), {} requests ({}), on {} thread(s)\n",
             plan.rows.size(), plan.requests, plan.workload, threads);
  {
    std::vector<std::jthread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
  }
  if (error) std::rethrow_exception(error);

  for (size_t i = 0; i < plan.rows.size(); ++i) {
    if (!rejections[i].empty()) {
      plan.warnings.push_back(fmt::format("{} tp {}: {}", plan.rows[i].gpu, plan.rows[i].tp, rejections[i]));
    }
  }
  // Meeting rows first; among them by total GPUs, or by cost when every one has a price.
  const bool all_priced = std::all_of(plan.rows.begin(), plan.rows.end(), [](const PlanRow& r) {
    return !r.meets_slo() || r.price_per_hour > 0;
  });
  std::stable_sort(plan.rows.begin(), plan.rows.end(), [&](const PlanRow& a, const PlanRow& b) {
    if (a.meets_slo() != b.meets_slo()) return a.meets_slo();
    if (!a.meets_slo()) return false;
    if (all_priced && a.cost_per_hour() != b.cost_per_hour()) return a.cost_per_hour() < b.cost_per_hour();
    if (a.total_gpus() != b.total_gpus()) return a.total_gpus() < b.total_gpus();
    return a.busy_window_ok && !b.busy_window_ok;  // at a tie, the one that sustains the busiest window
  });
  for (const PlanRow& r : plan.rows) {
    const std::string who = fmt::format("{} tp {}", r.gpu, r.tp);
    if (r.status == "none") {
      plan.warnings.push_back(fmt::format("{}: no replica count up to {} meets the SLOs; at {} replicas: {}", who,
                                          spec.max_replicas, spec.max_replicas, misses_text(spec.slo, r.values)));
    } else if (r.status == "error") {
      plan.warnings.push_back(fmt::format("{}: cannot run: {}", who, r.error));
    } else if (!r.busy_window_ok) {
      const std::string needs =
          r.busy_window_replicas > 0
              ? fmt::format("sustaining it takes {} replicas ({} GPUs)", r.busy_window_replicas,
                            r.busy_window_replicas * r.tp)
              : fmt::format("no replica count up to {} sustains it", spec.max_replicas);
      plan.warnings.push_back(fmt::format(
          "{}: the busiest {:g} s window ({:.0f}-{:.0f} s after the first arrival: {} requests, {:.1f} req/s, "
          "{:.1f}x the mean {:.2f} req/s) is busier than the {} replica(s) found sustain: with the whole workload "
          "at its rate, {}; {}",
          who, spec.window_s, plan.busiest.start_s, plan.busiest.end_s, plan.busiest.arrivals,
          plan.busiest.rate_rps, busy_factor, plan.mean_rate_rps, r.replicas,
          misses_text(spec.slo, r.busy_window_values), needs));
    }
  }
  return plan;
}

void print_plan(std::ostream& out, const PlanResult& plan) {
  const bool priced = std::any_of(plan.rows.begin(), plan.rows.end(), [](const PlanRow& r) { return r.price_per_hour > 0; });
  std::vector<std::string> headers = {"gpu", "tp", "replicas", "GPUs"};
  if (priced) headers.push_back("$/hour");
  for (const auto& [path, bound] : plan.spec.slo) headers.push_back(fmt::format("{} (<= {})", slo_label(path), seconds_text(bound)));
  headers.push_back("busiest window");
  headers.push_back("runs");
  headers.push_back("wall");
  std::vector<std::vector<std::string>> rows;
  for (const PlanRow& r : plan.rows) {
    std::vector<std::string> cells = {r.gpu, std::to_string(r.tp)};
    if (r.status == "error") {
      cells.insert(cells.end(), {"-", "-"});
      if (priced) cells.push_back("-");
      for (size_t i = 0; i < plan.spec.slo.size(); ++i) cells.push_back("-");
      cells.push_back("cannot run");
    } else {
      cells.push_back(r.meets_slo() ? std::to_string(r.replicas) : fmt::format("> {}", plan.spec.max_replicas));
      cells.push_back(r.meets_slo() ? std::to_string(r.total_gpus()) : "-");
      if (priced) cells.push_back(r.price_per_hour > 0 && r.meets_slo() ? fmt::format("{:.2f}", r.cost_per_hour()) : "-");
      for (size_t i = 0; i < plan.spec.slo.size(); ++i) {
        cells.push_back(fmt::format("{} ({})", seconds_text(r.values[i]), margin_text(r.values[i], plan.spec.slo[i].second)));
      }
      cells.push_back(!r.busy_window_checked ? (r.meets_slo() ? "not a burst" : "-")
                      : r.busy_window_ok     ? "sustained"
                      : r.busy_window_replicas > 0 ? fmt::format("needs {}", r.busy_window_replicas)
                                                   : fmt::format("needs > {}", plan.spec.max_replicas));
    }
    cells.push_back(std::to_string(r.runs));
    cells.push_back(fmt::format("{:.1f} s", r.wall_s));
    rows.push_back(std::move(cells));
  }
  std::vector<size_t> width(headers.size());
  for (size_t i = 0; i < headers.size(); ++i) {
    width[i] = headers[i].size();
    for (const auto& r : rows) width[i] = std::max(width[i], r[i].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t i = 0; i < cells.size(); ++i) {
      s += i < 2 ? fmt::format("{:<{}}  ", cells[i], width[i]) : fmt::format("{:>{}}  ", cells[i], width[i]);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    fmt::print(out, "{}\n", s);
  };
  fmt::print(out, "plan: {} on {} requests ({}), mean {:.2f} req/s; busiest {:g} s window {:.0f}-{:.0f} s: {:.1f} req/s\n",
             plan.spec.base.model, plan.requests, plan.workload, plan.mean_rate_rps, plan.spec.window_s,
             plan.busiest.start_s, plan.busiest.end_s, plan.busiest.rate_rps);
  line(headers);
  for (const auto& r : rows) line(r);
  for (const std::string& w : plan.warnings) fmt::print(out, "warning: {}\n", w);
}

void write_plan(const PlanResult& plan, const fs::path& dir, bool plots, std::ostream& progress) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UserError(fmt::format("--out {}: cannot create the directory: {}", dir.string(), ec.message()));
  fs::remove_all(dir / "figures");
  const PlanSpec& spec = plan.spec;
  std::vector<ordered_json> csv_rows;
  ordered_json rows = ordered_json::array();
  for (const PlanRow& r : plan.rows) {
    ordered_json row;
    row["gpu"] = r.gpu;
    row["tp"] = r.tp;
    row["replicas"] = r.replicas;
    row["total_gpus"] = r.total_gpus();
    row["meets_slo"] = r.meets_slo();
    row["status"] = r.status;
    row["price_per_hour"] = r.price_per_hour;
    row["cost_per_hour"] = r.cost_per_hour();
    ordered_json slo = ordered_json::object();
    for (size_t i = 0; i < spec.slo.size() && i < r.values.size(); ++i) {
      slo[spec.slo[i].first] = {{"value", r.values[i]},
                                {"margin_percent", margin_percent(r.values[i], spec.slo[i].second)}};
    }
    row["slo"] = slo;
    row["busy_window_checked"] = r.busy_window_checked;
    row["busy_window_sustained"] = r.busy_window_ok;
    row["busy_window_replicas"] = r.busy_window_replicas;
    row["runs"] = r.runs;
    row["wall_s"] = r.wall_s;
    row["error"] = r.error;
    csv_rows.push_back(row);
    ordered_json probes = ordered_json::array();
    for (const PlanProbe& p : r.probes) probes.push_back({{"replicas", p.replicas}, {"meets", p.meets}, {"values", p.values}});
    row["probes"] = probes;
    rows.push_back(std::move(row));
  }
  write_flat_csv(dir / "plan.csv", csv_rows);
  ordered_json j;
  ordered_json slo = ordered_json::object();
  for (const auto& [path, bound] : spec.slo) slo[path] = bound;
  j["slo"] = slo;
  j["base"] = config_to_json(spec.base);
  j["gpus"] = spec.gpus;
  j["tps"] = spec.tps;
  j["max_replicas"] = spec.max_replicas;
  j["workload"] = {{"description", plan.workload}, {"requests", plan.requests}, {"mean_rate_rps", plan.mean_rate_rps}};
  j["busiest_window"] = {{"window_s", spec.window_s},     {"start_s", plan.busiest.start_s},
                         {"end_s", plan.busiest.end_s},   {"arrivals", plan.busiest.arrivals},
                         {"rate_rps", plan.busiest.rate_rps}};
  j["rows"] = rows;
  j["warnings"] = plan.warnings;
  {
    auto out = open_for_write(dir / "plan.json");
    out << j.dump(2) << "\n";
  }
  const std::string note = draw_figures(dir, plots, fmt::format("python3 plots/make_figures.py {}", dir.string()), progress);
  auto out = open_for_write(dir / "report.md");
  std::vector<std::string> bounds;
  for (const auto& [path, bound] : spec.slo) bounds.push_back(fmt::format("`{}` <= {}", path, seconds_text(bound)));
  fmt::print(out, "# Capacity plan: {}\n\n", spec.base.model);
  fmt::print(out, "How many replicas of {} (each `tp` GPUs, policy `{}`, router `{}`) on {} at TP {} keep {}? "
                  "Each count was judged by replaying the workload itself: {} requests ({}), mean {:.2f} req/s; "
                  "its busiest {:g} s window ({:.0f}-{:.0f} s after the first arrival) has {} requests, {:.1f} req/s.\n\n",
             spec.base.model, spec.base.policy, spec.base.router, fmt::join(spec.gpus, ", "), fmt::join(spec.tps, ", "),
             fmt::join(bounds, " and "), plan.requests, plan.workload, plan.mean_rate_rps, spec.window_s,
             plan.busiest.start_s, plan.busiest.end_s, plan.busiest.arrivals, plan.busiest.rate_rps);
  out << "```text\n";
  print_plan(out, plan);
  out << "```\n\n";
  out << "`replicas`: the fewest that meet every SLO (doubling from 1, then bisecting; `> N`: none up to "
         "`--max-replicas` does). Each SLO column shows the figure at that count and how far under (or over) "
         "its bound it is. `busiest window`: whether that count still meets the SLOs with the whole workload "
         "compressed to the busiest window's rate (`needs N`: it does not, N replicas would; `not a burst`: no "
         "window is more than 10% busier than the mean).\n\n";
  if (note.empty() && fs::exists(dir / "figures" / "plan_slo.png")) {
    out << "## SLO figures vs replicas\n\n![SLO figures vs replicas](figures/plan_slo.png)\n\n"
           "Every probed count of every candidate; the dashed lines are the SLO bounds.\n\n";
  } else if (!note.empty()) {
    fmt::print(out, "{}\n\n", note);
  }
  out << "Files: `plan.csv` (one row per GPU and TP), `plan.json` (the same with every probe).\n";
}

}  // namespace batchsim
