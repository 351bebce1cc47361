#include "experiments/study/compare.h"
#include "experiments/study/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "experiments/run/chrome_trace.h"
#include "experiments/run/output.h"
#include "experiments/run/runner.h"
#include "experiments/run/slo.h"
#include "hwmodel/base/error.h"

namespace batchsim {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

// ---- what the report needs to know about the experiment ----------------------------------

ordered_json policy_json(const PolicyVariant& p) {
  return {{"label", p.label}, {"policy", p.policy}, {"options", p.options}};
}

ordered_json experiment_json(const Experiment& e, int64_t units) {
  ordered_json j;
  j["name"] = e.name;
  j["description"] = e.description;
  j["file"] = e.file.filename().string();
  j["base"] = config_to_json(e.base);
  j["policies"] = ordered_json::array();
  for (const auto& p : e.policies) j["policies"].push_back(policy_json(p));
  j["axes"] = ordered_json::array();
  for (const auto& a : e.axes) {
    ordered_json values = ordered_json::array();
    // The run keys its values set ("rate" for the Poisson-rate shorthand), so the report's
    // setup names those parts as the axis's rather than showing base values no run used.
    std::set<std::string> sets;
    for (const auto& v : a.values) {
      values.push_back(v.label);
      if (v.rate) sets.insert("rate");
      for (const auto& kv : v.settings) {
        sets.insert(normalize_key(kv.first.as<std::string>()));
      }
    }
    j["axes"].push_back({{"name", a.name}, {"values", values}, {"sets", sets}});
  }
  j["seeds"] = e.seeds;
  j["units"] = units;
  if (e.published) {
    ordered_json ratios = ordered_json::array();
    for (const auto& [policy, group, ratio] : e.published->ratios) {
      ratios.push_back({{"policy", policy}, {"group", group}, {"ratio", ratio}});
    }
    j["published"] = {{"source", e.published->source},
                      {"metric", e.published->metric},
                      {"baseline", e.published->baseline},
                      {"ratios", ratios}};
    if (!e.published->baseline_values.empty()) {
      ordered_json values = ordered_json::object();
      for (const auto& [group, value] : e.published->baseline_values) values[group] = value;
      j["published"]["baseline_values"] = values;
    }
    if (!e.published->why.empty()) j["published"]["why"] = e.published->why;
  }
  j["iteration_budget"] = e.iteration_budget;
  if (e.capacity) {
    j["capacity"] = {{"slo", slo_bounds_json(e.capacity->slo)},  {"search", e.capacity->search},
                     {"max_replicas", e.capacity->max_replicas}, {"rate_low", e.capacity->rate_low},
                     {"rate_high", e.capacity->rate_high},       {"tolerance", e.capacity->tolerance},
                     {"max_probes", e.capacity->max_probes}};
  } else {
    j["capacity"] = nullptr;
  }
  if (e.slot_timeline) {
    ordered_json s = ordered_json::array();
    for (const auto& p : e.slot_timeline->policies) s.push_back(policy_json(p));
    j["slot_timeline"] = {{"policies", s}, {"base", config_to_json(e.slot_timeline->base)}};
  }
  return j;
}

ordered_json experiment_block(const Experiment& e, const PlannedRun& run) {
  ordered_json b;
  b["name"] = e.name;
  b["run"] = run.index;
  b["run_name"] = run.name;
  b["policy"] = run.policy_label;
  b["group"] = run.group;
  ordered_json axes = ordered_json::object();
  for (const auto& [axis, label] : run.axis_labels) axes[axis] = label;
  b["axes"] = axes;
  b["seed"] = run.seed;
  // What the seeds vary, for the report's intervals (only with several: one seed has none).
  if (e.seeds.size() > 1) b["seed_varies"] = seed_variation(run.config.workload);
  if (run.rate) b["rate"] = *run.rate;
  if (run.trace_speedup) b["trace_speedup"] = *run.trace_speedup;
  return b;
}

// ---- one run ------------------------------------------------------------------------------

// A workload built once for every combination whose spec is equal (all of it, seed included),
// or why it could not be built.
struct SharedWorkload {
  WorkloadSpec spec;
  std::shared_ptr<const BuiltWorkload> built;
  std::string error;
};

const SharedWorkload* find_workload(const std::vector<SharedWorkload>& workloads, const WorkloadSpec& spec) {
  const auto it =
      std::find_if(workloads.begin(), workloads.end(), [&](const SharedWorkload& w) { return w.spec == spec; });
  return it != workloads.end() ? &*it : nullptr;
}

// The TBT distribution as quantiles: the simulation keeps every inter-token gap only as
// weighted samples, and a CDF needs no more than this.
void write_tbt_quantiles(const SimulationResult& result, const fs::path& file) {
  auto out = open_for_write(file);
  out << "quantile,tbt_s\n";
  if (result.tbt_s.count() == 0) return;
  std::vector<double> qs;
  for (int i = 0; i <= 400; ++i) qs.push_back(i / 400.0);
  for (double q : {0.9925, 0.995, 0.9975, 0.999, 0.9995, 0.9999}) qs.push_back(q);
  std::sort(qs.begin(), qs.end());
  for (double q : qs) fmt::print(out, "{},{:.9g}\n", q, result.tbt_s.percentile(q));
}

// KV use over time, thinned to at most ~2000 points (each the peak of its stretch, so a
// short spike is not lost): enough for a figure, small enough for hundreds of runs.
void write_kv_timeline(const SimulationResult& result, const fs::path& file) {
  auto out = open_for_write(file);
  out << "time_s,kv_used_tokens,kv_allocated_tokens,running_requests\n";
  const auto& its = result.iterations;
  const size_t stride = std::max<size_t>(1, (its.size() + 1999) / 2000);
  for (size_t i = 0; i < its.size(); i += stride) {
    const IterationRecord* peak = &its[i];
    for (size_t k = i; k < std::min(its.size(), i + stride); ++k) {
      if (its[k].kv_allocated_tokens > peak->kv_allocated_tokens) peak = &its[k];
    }
    // KV is sampled while the iteration runs (after scheduling), so it belongs to its start.
    fmt::print(out, "{:.6f},{},{},{}\n", peak->start.seconds(), peak->kv_used_tokens, peak->kv_allocated_tokens,
               peak->num_requests);
  }
}

int64_t completed_within(const SimulationResult& result, int64_t iterations) {
  if (result.iterations.empty()) return 0;
  const size_t last = std::min<size_t>(result.iterations.size(), static_cast<size_t>(iterations)) - 1;
  const SimTime end = result.iterations[last].start + result.iterations[last].duration;
  int64_t n = 0;
  for (const RequestRecord& r : result.requests) n += r.completed() && r.finished <= end;
  return n;
}

struct RunDone {
  ordered_json summary;
  std::vector<std::string> warnings;
  double wall_s = 0;
};

RunDone execute(const Experiment& e, const PlannedRun& run, const BuiltWorkload& workload, const fs::path& runs_dir,
                std::optional<int> capacity_probe = std::nullopt) {
  RunHooks hooks;
  hooks.record_iterations = true;  // for kv_timeline.csv and the iteration budget
  if (const auto factory = e.policy_factories.find(run.config.policy); factory != e.policy_factories.end()) {
    hooks.make_policy = factory->second;
  }
  RunOutcome outcome = run_simulation(run.config, &workload, hooks);
  ordered_json block = experiment_block(e, run);
  if (capacity_probe) block["capacity_probe"] = *capacity_probe;
  if (e.iteration_budget > 0) {
    block["completed_within_budget"] = completed_within(outcome.result, e.iteration_budget);
  }
  RunDone done;
  done.summary["experiment"] = block;
  const ordered_json summary = summary_to_json(outcome);
  for (const auto& [k, v] : summary.items()) done.summary[k] = v;
  if (std::string w = rejection_warning(outcome.result); !w.empty()) done.warnings.push_back(std::move(w));
  done.wall_s = outcome.wall_s;
  if (!runs_dir.empty()) {
    const fs::path dir = runs_dir / run.name;
    write_run_outputs(outcome, dir, done.summary);
    write_tbt_quantiles(outcome.result, dir / "tbt_quantiles.csv");
    write_kv_timeline(outcome.result, dir / "kv_timeline.csv");
    // An experiment's chrome-trace is a file name (run_experiment checks): one trace per run.
    if (!run.config.chrome_trace.empty()) write_chrome_trace(outcome, dir / run.config.chrome_trace);
  }
  return done;
}

void write_text(const fs::path& file, const std::string& text) {
  auto out = open_for_write(file);
  out << text;
}

// A combination that cannot run (a model too large for the GPU, a TP degree the model does not
// divide by): its row says why, in place of figures, and the sweep goes on. The folder has a
// summary.json too, so that `merge` and the report see the failure as well.
ordered_json failed_run(const Experiment& e, const PlannedRun& run, const std::string& why, const fs::path& runs_dir) {
  ordered_json summary;
  summary["experiment"] = experiment_block(e, run);
  summary["config"] = config_to_json(run.config);
  summary["error"] = why;
  if (!runs_dir.empty()) write_text(runs_dir / run.name / "summary.json", summary.dump(2) + "\n");
  return summary;
}

// ---- the slot timeline ----------------------------------------------------------------------

struct LoggedIteration {
  int64_t index;
  SimTime start, end;
  std::vector<BatchItem> items;
  // Requests of earlier batches that hold no KV after this iteration although they were not in
  // it: preempted while this batch was scheduled (recompute or swap), or finished earlier and
  // released with their static batch, which the drawing tells apart by the finish time.
  std::vector<RequestId> lost_kv;
};

// Draws each batch as slots: a request takes the lowest free slot when it is first scheduled
// and frees it at its end of sequence, so a static batch shows its finished rows as idle
// slots until the whole batch ends, and continuous batching shows them refilled at once. A
// preempted request frees its slot too (one "preempted" cell), and takes the lowest free slot
// again when it is readmitted.
void write_slot_timeline(const Experiment& e, const fs::path& dir, std::ostream& progress) {
  const SlotTimelineSpec& spec = *e.slot_timeline;
  fs::create_directories(dir);
  const BuiltWorkload workload = build_workload(spec.base.workload);
  for (const auto& w : workload.warnings) fmt::print(progress, "batchsim: warning: slot timeline: {}\n", w);
  for (const PolicyVariant& p : spec.policies) {
    RunConfig config = spec.base;
    config.out.clear();
    config.iteration_log = false;
    config.chrome_trace.clear();
    config.chrome_trace_requests.reset();
    config.policy = p.policy;
    for (const auto& [k, v] : p.options) config.policy_opts[k] = v;
    std::vector<LoggedIteration> log;
    std::set<RequestId> holding;  // requests seen in a batch that still held KV after it
    RunHooks hooks;
    hooks.on_iteration = [&](const Batch& batch, const IterationRecord& it, const Policy& policy) {
      if (static_cast<int64_t>(log.size()) >= spec.max_iterations) return;
      // A cluster's timeline is its first replica's: slots are a replica's batch rows.
      if (it.replica != 0) return;
      LoggedIteration logged{it.index, it.start, it.start + it.duration, batch.items, {}};
      std::set<RequestId> in_batch;
      for (const BatchItem& item : batch.items) in_batch.insert(item.id);
      holding.insert(in_batch.begin(), in_batch.end());
      for (auto id = holding.begin(); id != holding.end();) {
        if (policy.kv_cache().holds(*id)) {
          ++id;
          continue;
        }
        if (!in_batch.count(*id)) logged.lost_kv.push_back(*id);
        id = holding.erase(id);
      }
      log.push_back(std::move(logged));
    };
    const RunOutcome outcome = run_simulation(config, &workload, hooks);
    if (const std::string w = rejection_warning(outcome.result); !w.empty()) {
      fmt::print(progress, "batchsim: warning: slot timeline {}: {}\n", p.label, w);
    }
    std::map<RequestId, int> slot_of;
    std::set<int> free_slots;
    int slots = 0;
    auto out = open_for_write(dir / (p.label + ".csv"));
    out << "iteration,start_s,end_s,slot,request,state\n";
    const auto row = [&](const LoggedIteration& it, int slot, RequestId id, const char* state) {
      fmt::print(out, "{},{:.6f},{:.6f},{},{},{}\n", it.index, it.start.seconds(), it.end.seconds(), slot, id, state);
    };
    const auto vacate = [&](RequestId id) {
      free_slots.insert(slot_of.at(id));
      slot_of.erase(id);
    };
    for (const LoggedIteration& it : log) {
      std::vector<RequestId> ended;
      for (const BatchItem& item : it.items) {
        auto [pos, inserted] = slot_of.try_emplace(item.id, 0);
        if (inserted) {
          if (free_slots.empty()) free_slots.insert(slots++);
          pos->second = *free_slots.begin();
          free_slots.erase(free_slots.begin());
        }
        const RequestRecord& r = outcome.result.requests[static_cast<size_t>(item.id)];
        const bool decode = item.new_tokens == 1 && item.context_before >= r.prompt_tokens;
        const bool eos = r.completed() && r.finished == it.end;
        if (eos) ended.push_back(item.id);
        row(it, pos->second, item.id, eos ? "end" : decode ? "decode" : "prefill");
      }
      for (RequestId id : it.lost_kv) {
        const RequestRecord& r = outcome.result.requests[static_cast<size_t>(id)];
        if (r.completed() && r.finished <= it.end) continue;  // released with its static batch
        if (!slot_of.count(id)) continue;
        row(it, slot_of.at(id), id, "preempted");
        vacate(id);
      }
      for (RequestId id : ended) vacate(id);
    }
  }
}

// ---- outputs ------------------------------------------------------------------------------

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

fs::path plots_dir() {
  const char* env = std::getenv("BATCHSIM_PLOTS_DIR");
  return env != nullptr ? fs::path(env) : fs::path(BATCHSIM_SOURCE_DIR) / "plots";
}

std::string make_figures(const fs::path& dir, bool plots, std::ostream& progress) {
  // Merging a folder into itself redraws the figures and rewrites this report with them.
  return draw_figures(dir, plots, "batchsim merge <this folder> --out <this folder>", progress);
}

}  // namespace

std::string draw_figures(const fs::path& dir, bool plots, const std::string& manual, std::ostream& progress) {
  const std::string script = fs::absolute(plots_dir() / "make_figures.py").string();
  if (!plots) return fmt::format("Figures were not drawn (--no-plots). Draw them into this report with `{}`.", manual);
  const std::string python = find_plot_python();
  if (python.empty()) {
    fmt::print(progress,
               "batchsim: note: no Python 3 with matplotlib found (install python3-matplotlib, "
               "or set BATCHSIM_PYTHON); figures skipped. Later: {}\n",
               manual);
    return fmt::format(
        "Figures were not drawn: no Python 3 with matplotlib was found. Install "
        "Debian's python3-matplotlib and run `{}`.",
        manual);
  }
  fs::create_directories(dir / "figures");
  const fs::path log = dir / "figures" / "make_figures.log";
  // Run from the results folder on ".", so that the log names the figures as the folder does
  // (figures/latency.png), not by a path of the machine that drew them.
  const std::string cmd = fmt::format("cd {} && {} {} . > {} 2>&1", shell_quote(dir.string()), shell_quote(python),
                                      shell_quote(script), shell_quote("figures/make_figures.log"));
  if (std::system(cmd.c_str()) != 0) {
    fmt::print(progress, "batchsim: warning: the figure script failed; see {}\n", log.string());
    return fmt::format("The figure script failed; see `figures/make_figures.log` and rerun `{}`.", manual);
  }
  return "";
}

std::vector<ordered_json> results_table_rows(const ResultSet& results) {
  // A run's `trust` is its GPU profile's, the same for every run on that GPU and three figures
  // per operator: report.md shows it once per profile and each summary.json keeps it, so
  // results.csv leaves it out rather than repeat dozens of columns on every row.
  std::vector<ordered_json> rows = results.runs;
  for (ordered_json& row : rows) row.erase("trust");
  add_interval_columns(rows, results);
  return rows;
}

namespace {

void write_summaries(const fs::path& dir, const ResultSet& results, bool plots, std::ostream& progress) {
  write_text(dir / "experiment.json", results.experiment.dump(2) + "\n");
  if (!results.experiment_yaml.empty()) write_text(dir / "experiment.yaml", results.experiment_yaml);
  write_flat_csv(dir / "results.csv", results_table_rows(results));
  if (!results.capacities.empty()) write_flat_csv(dir / "capacity.csv", results.capacities);
  write_report(dir, results, make_figures(dir, plots, progress));
}

// Clears what an earlier compare wrote into `dir`, so stale runs never mix into results.
void prepare_out_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UserError(fmt::format("--out {}: cannot create the directory: {}", dir.string(), ec.message()));
  for (const char* sub : {"runs", "capacity", "slot_timeline", "figures"}) fs::remove_all(dir / sub);
  for (const char* file : {"results.csv", "capacity.csv", "report.md", "experiment.json", "experiment.yaml"}) {
    fs::remove(dir / file);
  }
}

}  // namespace

void parse_shard(const std::string& text, CompareOptions& options) {
  const auto slash = text.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    size_t used = 0;
    const std::string k = text.substr(0, slash), n = text.substr(slash + 1);
    options.shard_index = std::stoi(k, &used);
    if (used != k.size()) throw std::invalid_argument("K");
    options.shard_count = std::stoi(n, &used);
    if (used != n.size()) throw std::invalid_argument("N");
  } catch (const std::exception&) {
    throw UserError(fmt::format("--shard \"{}\": expected K/N, e.g. 0/4 (shard K of N, K from 0)", text));
  }
  if (options.shard_count < 1 || options.shard_index < 0 || options.shard_index >= options.shard_count) {
    throw UserError(fmt::format("--shard {}: need 0 <= K < N", text));
  }
}

std::string find_plot_python() {
  static const std::string found = [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("BATCHSIM_PYTHON")) candidates.push_back(env);
    candidates.push_back("/usr/bin/python3");
    candidates.push_back("python3");
    for (const auto& py : candidates) {
      const std::string cmd = fmt::format("{} -c 'import matplotlib' > /dev/null 2>&1", shell_quote(py));
      if (std::system(cmd.c_str()) == 0) return py;
    }
    return std::string();
  }();
  return found;
}

namespace {

void check_chrome_trace(const Experiment& e, const CompareOptions& options) {
  const fs::path& trace = e.base.chrome_trace;
  if (trace.empty()) return;
  if (trace != trace.filename()) {
    throw UserError(
        fmt::format("chrome-trace {}: in an experiment give a file name: each run writes "
                    "its trace as runs/<run>/{}",
                    trace.string(), trace.filename().string()));
  }
  if (options.out.empty()) {
    throw UserError("chrome-trace: each run's trace goes into its folder under --out; give --out DIR");
  }
}

// One probe of a capacity search: the combination's run with the searched quantity set by the
// callback; whether it met the SLOs.
using ProbeWith = std::function<bool(const std::function<void(PlannedRun&)>&)>;

// What a capacity search found, for its capacity/<run>.json and its progress line.
struct CapacityFound {
  ordered_json capacity;
  std::string line;
};

// run_experiment's sweep over this shard's combinations: each one a run, or a capacity search
// over runs, on several threads at once. A combination writes only its own slots of
// run_summaries_ and capacities_; progress lines are serialised.
class Sweep {
 public:
  Sweep(const Experiment& e, const CompareOptions& options, std::ostream& progress,
        const std::vector<PlannedRun>& planned)
      : e_(e), options_(options), progress_(progress) {
    for (const PlannedRun& run : planned) {
      if (run.index % options.shard_count == options.shard_index) mine_.push_back(&run);
    }
    if (!options.out.empty()) {
      runs_dir_ = options.out / "runs";
      if (e.capacity) capacity_dir_ = options.out / "capacity";
    }
    run_summaries_.resize(mine_.size());
    capacities_.resize(mine_.size());
  }

  size_t size() const { return mine_.size(); }
  void share_workloads();
  void run_all(size_t planned);
  void collect(ResultSet& results);

 private:
  void report(const std::string& line, const std::vector<std::string>& warnings);
  void run_one(size_t i);
  void search_capacity(size_t i);
  CapacityFound search_replicas(const PlannedRun& run, const ProbeWith& probe_with, double& wall_s) const;
  CapacityFound search_rate(const PlannedRun& run, const ProbeWith& probe_with, double& wall_s) const;
  void record_failure(size_t i, const std::string& why);

  const Experiment& e_;
  const CompareOptions& options_;
  std::ostream& progress_;
  std::vector<const PlannedRun*> mine_;
  fs::path runs_dir_, capacity_dir_;
  std::vector<SharedWorkload> workloads_;
  std::vector<std::vector<ordered_json>> run_summaries_;
  std::vector<ordered_json> capacities_;
  std::mutex progress_mutex_;
  size_t finished_ = 0;
};

void Sweep::share_workloads() {
  // Every combination with the same workload spec (seed included) gets the very same request
  // sequence: built once here, shared read-only by the threads.
  // A workload that cannot be built fails the combinations that use it, not the sweep.
  if (e_.capacity) return;
  for (const PlannedRun* run : mine_) {
    if (find_workload(workloads_, run->config.workload) != nullptr) continue;
    SharedWorkload& w = workloads_.emplace_back();
    w.spec = run->config.workload;
    try {
      BuiltWorkload built = build_workload(w.spec);
      for (const auto& warning : built.warnings) fmt::print(progress_, "batchsim: warning: {}\n", warning);
      w.built = std::make_shared<const BuiltWorkload>(std::move(built));
    } catch (const UserError& why) {
      w.error = why.what();
    }
  }
}

void Sweep::report(const std::string& line, const std::vector<std::string>& warnings) {
  std::lock_guard<std::mutex> lock(progress_mutex_);
  const size_t n = ++finished_;
  fmt::print(progress_, "[{:>{}}/{}] {}\n", n, std::to_string(mine_.size()).size(), mine_.size(), line);
  for (size_t i = 0; i < std::min<size_t>(warnings.size(), 3); ++i) {
    fmt::print(progress_, "    warning: {}\n", warnings[i]);
  }
}

// One combination: a run, or a capacity search over runs.
void Sweep::run_one(size_t i) {
  if (e_.capacity) {
    search_capacity(i);
    return;
  }
  const PlannedRun& run = *mine_[i];
  const SharedWorkload& shared = *find_workload(workloads_, run.config.workload);
  if (!shared.error.empty()) throw UserError(shared.error);
  const BuiltWorkload& workload = *shared.built;
  RunDone done = execute(e_, run, workload, runs_dir_);
  const auto& s = done.summary;
  report(fmt::format("{}: {:.1f} output tok/s, e2e p50 {:.2f} s ({:.2f} s wall)", run.name,
                     s["throughput"]["output_tokens_per_s"].get<double>(), s["latency"]["e2e_s"]["p50"].get<double>(),
                     done.wall_s),
         done.warnings);
  run_summaries_[i].push_back(std::move(done.summary));
}

void Sweep::search_capacity(size_t i) {
  const PlannedRun& run = *mine_[i];
  double wall_s = 0;
  int probe_index = 0;
  std::vector<std::string> warnings;
  const CapacitySpec& spec = *e_.capacity;
  // The base workload of a replicas search is the same for every probe: built once.
  std::optional<BuiltWorkload> fixed;
  if (spec.search == "replicas") fixed = build_workload(run.config.workload);
  // One probe: the combination's run with the searched quantity set.
  auto probe_with = [&](const std::function<void(PlannedRun&)>& set) {
    PlannedRun probe = run;
    set(probe);
    probe.name = fmt::format("{}_q{:02d}", run.name, probe_index);
    BuiltWorkload built = fixed ? BuiltWorkload{} : build_workload(probe.config.workload);
    const BuiltWorkload& workload = fixed ? *fixed : built;
    // A sped-up trace's rate is its mean arrival rate: what the figures plot it against.
    if (spec.search == "trace-speedup") probe.rate = mean_arrival_rate(workload.requests);
    RunDone done = execute(e_, probe, workload, runs_dir_, probe_index);
    if (probe_index == 0) {
      // Every probe reads the same trace rows; say what was adjusted in them once.
      warnings = workload.warnings;
      warnings.insert(warnings.end(), done.warnings.begin(), done.warnings.end());
    }
    ++probe_index;
    wall_s += done.wall_s;
    const bool ok = evaluate_slo(done.summary, spec.slo).met;  // run --slo's verdict
    run_summaries_[i].push_back(std::move(done.summary));
    return ok;
  };
  CapacityFound found =
      spec.search == "replicas" ? search_replicas(run, probe_with, wall_s) : search_rate(run, probe_with, wall_s);
  ordered_json c;
  c["experiment"] = experiment_block(e_, run);
  c["capacity"] = std::move(found.capacity);
  if (!capacity_dir_.empty()) write_text(capacity_dir_ / (run.name + ".json"), c.dump(2) + "\n");
  capacities_[i] = std::move(c);
  report(found.line, warnings);
}

CapacityFound Sweep::search_replicas(const PlannedRun& run, const ProbeWith& probe_with, double& wall_s) const {
  const CapacitySpec& spec = *e_.capacity;
  const CountSearch found =
      find_fewest(spec.max_replicas, [&](int n) { return probe_with([&](PlannedRun& p) { p.config.replicas = n; }); });
  ordered_json counts = ordered_json::array(), met = ordered_json::array();
  for (const auto& p : found.probes) {
    counts.push_back(p.count);
    met.push_back(p.meets);
  }
  CapacityFound r;
  r.capacity = {{"searched", "replicas"},
                {"replicas", found.count},
                {"status", found.count > 0 ? "ok" : "above-range"},
                {"max_replicas", spec.max_replicas},
                {"probes", found.probes.size()},
                {"probe_replicas", counts},
                {"probe_met", met}};
  r.line = found.count > 0 ? fmt::format("{}: fewest replicas {}", run.name, found.count)
                           : fmt::format("{}: no replica count up to {} meets the SLO", run.name, spec.max_replicas);
  r.line += fmt::format(" ({} probes, {:.2f} s wall)", found.probes.size(), wall_s);
  return r;
}

CapacityFound Sweep::search_rate(const PlannedRun& run, const ProbeWith& probe_with, double& wall_s) const {
  const CapacitySpec& spec = *e_.capacity;
  const bool speedup = spec.search == "trace-speedup";
  const CapacityResult cap = find_capacity(spec, [&](double x) {
    return probe_with([&](PlannedRun& p) {
      if (speedup) {
        p.config.workload.trace_speedup = x;
        p.trace_speedup = x;
      } else {
        p.config = config_at_rate(run.config, x);
        p.rate = x;
      }
    });
  });
  ordered_json probes_x = ordered_json::array(), probes_met = ordered_json::array();
  for (const auto& p : cap.probes) {
    probes_x.push_back(p.rate);
    probes_met.push_back(p.meets);
  }
  CapacityFound r;
  ordered_json& c = r.capacity;
  c = {{"searched", spec.search}};
  if (speedup) {
    // In requests/s too, so that a trace's capacity reads like a rate search's: the mean
    // arrival rate of the trace replayed at the capacity's speedup.
    double rate = 0;
    if (cap.capacity_rps > 0) {
      WorkloadSpec w = run.config.workload;
      w.trace_speedup = cap.capacity_rps;
      rate = mean_arrival_rate(make_workload(w));
    }
    c["trace_speedup"] = cap.capacity_rps;
    c["rate_rps"] = rate;
  } else {
    c["rate_rps"] = cap.capacity_rps;
  }
  c["status"] = cap.status;
  c[speedup ? "bracket_low_speedup" : "bracket_low_rps"] = cap.bracket_low;
  c[speedup ? "bracket_high_speedup" : "bracket_high_rps"] = cap.bracket_high;
  c["probes"] = cap.probes.size();
  c[speedup ? "probe_speedups" : "probe_rates_rps"] = probes_x;
  c["probe_met"] = probes_met;
  r.line = speedup ? fmt::format("{}: capacity trace-speedup {:.3f} = {:.3f} req/s", run.name, cap.capacity_rps,
                                 c["rate_rps"].get<double>())
                   : fmt::format("{}: capacity {:.3f} req/s", run.name, cap.capacity_rps);
  r.line += fmt::format(" ({}, {} probes, {:.2f} s wall)", cap.status, cap.probes.size(), wall_s);
  return r;
}

// A combination that cannot run is reported in its row and the others go on.
void Sweep::record_failure(size_t i, const std::string& why) {
  const PlannedRun& run = *mine_[i];
  report(fmt::format("{}: FAILED: {}", run.name, why), {});
  if (!e_.capacity) {
    run_summaries_[i] = {failed_run(e_, run, why, runs_dir_)};
    return;
  }
  ordered_json c;
  c["experiment"] = experiment_block(e_, run);
  c["capacity"] = {{"status", "error"}};
  c["error"] = why;
  if (!capacity_dir_.empty()) write_text(capacity_dir_ / (run.name + ".json"), c.dump(2) + "\n");
  run_summaries_[i].clear();
  capacities_[i] = std::move(c);
}

void Sweep::run_all(size_t planned) {
  const int threads = threads_for(options_.jobs, mine_.size());
  fmt::print(progress_, "batchsim: {}: {} {} of {}{} on {} thread(s)\n", e_.name, mine_.size(),
             e_.capacity ? "capacity searches" : "runs", planned,
             options_.shard_count > 1 ? fmt::format(" (shard {}/{})", options_.shard_index, options_.shard_count) : "",
             threads);
  // A combination that cannot run is reported in its row and the others go on; anything else
  // is a bug, which stops the sweep (for_each_index rethrows it).
  for_each_index(mine_.size(), threads, [&](size_t i) {
    try {
      run_one(i);
    } catch (const UserError& why) {
      record_failure(i, why.what());
    }
  });
}

void Sweep::collect(ResultSet& results) {
  for (auto& v : run_summaries_) {
    for (auto& s : v) results.runs.push_back(std::move(s));
  }
  if (e_.capacity) results.capacities = std::move(capacities_);
}

}  // namespace

ResultSet run_experiment(const Experiment& e, const CompareOptions& options, std::ostream& progress) {
  check_chrome_trace(e, options);
  const std::vector<PlannedRun> planned = expand_runs(e);
  Sweep sweep(e, options, progress, planned);
  const bool write = !options.out.empty();
  if (write) {
    prepare_out_dir(options.out);
    fs::create_directories(options.out / "runs");
    if (e.capacity) fs::create_directories(options.out / "capacity");
  }
  sweep.share_workloads();
  ResultSet results;
  results.experiment = experiment_json(e, static_cast<int64_t>(planned.size()));
  results.experiment_yaml = e.source_text;
  sweep.run_all(planned.size());
  sweep.collect(results);
  sort_results(results);
  if (write) {
    if (e.slot_timeline && options.shard_index == 0) write_slot_timeline(e, options.out / "slot_timeline", progress);
    write_summaries(options.out, results, options.plots, progress);
  }
  return results;
}

namespace {

// Everything `batchsim merge` makes of `results` (report.md's text, the terminal table, the rows
// of results.csv and capacity.csv), made in memory and thrown away. Throws nlohmann's exceptions
// where a document lacks a figure these read or holds one of another type.
void render_everything(const ResultSet& results) {
  std::ostringstream sink;
  render_report(sink, results, "", {});
  print_result_table(sink, results);
  flat_table(results_table_rows(results));
  flat_table(results.capacities);
}

// Throws UserError naming the file of `dirs` that no report can be made of (each file alone, with
// its folder's experiment.json), or the folders when the files fail only together; nothing when
// `merged` renders.
void check_renders(const std::vector<fs::path>& dirs, const ResultSet& merged) {
  try {
    render_everything(merged);
    return;
  } catch (const nlohmann::json::exception& together) {
    auto alone = [](const fs::path& file, const ResultSet& set) {
      try {
        render_everything(set);
      } catch (const nlohmann::json::exception& e) {
        throw UserError(fmt::format("merge: {}: not as batchsim writes it: {}", file.string(), e.what()));
      }
    };
    for (const fs::path& dir : dirs) {
      const ResultFiles files = result_files(dir);
      ResultSet base;
      base.experiment = read_result_file(files.experiment, ResultFileKind::kExperiment);
      alone(files.experiment, base);
      for (const fs::path& f : files.runs) {
        ResultSet one = base;
        one.runs.push_back(read_result_file(f, ResultFileKind::kRun));
        alone(f, one);
      }
      for (const fs::path& f : files.capacities) {
        ResultSet one = base;
        one.capacities.push_back(read_result_file(f, ResultFileKind::kCapacity));
        alone(f, one);
      }
    }
    std::vector<std::string> names;
    for (const fs::path& dir : dirs) names.push_back(dir.string());
    throw UserError(
        fmt::format("merge: the results of {} do not read together: {}", fmt::join(names, ", "), together.what()));
  }
}

}  // namespace

ResultSet merge_results(const std::vector<fs::path>& dirs, const fs::path& out, bool plots, std::ostream& progress) {
  if (dirs.empty()) throw UserError("merge: give the results folders of the shards");
  ResultSet merged;
  std::set<std::string> seen_runs;
  std::vector<std::pair<fs::path, ResultSet>> parts;
  for (const fs::path& dir : dirs) parts.emplace_back(dir, load_result_set(dir));
  merged.experiment = parts.front().second.experiment;
  merged.experiment_yaml = parts.front().second.experiment_yaml;
  for (auto& [dir, part] : parts) {
    if (part.experiment != merged.experiment) {
      throw UserError(fmt::format("merge: {} holds a different experiment than {} (experiment.json differs)",
                                  dir.string(), dirs.front().string()));
    }
    for (auto& run : part.runs) {
      const std::string name = run.at("experiment").at("run_name").get<std::string>();
      if (!seen_runs.insert(name).second) {
        throw UserError(fmt::format("merge: run {} appears in more than one folder ({} is one)", name, dir.string()));
      }
      merged.runs.push_back(std::move(run));
    }
    for (auto& c : part.capacities) merged.capacities.push_back(std::move(c));
  }
  sort_results(merged);
  // Nothing is written before every file is known to make a report.
  check_renders(dirs, merged);

  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw UserError(fmt::format("--out {}: cannot create the directory: {}", out.string(), ec.message()));
  for (const auto& part : parts) {
    const fs::path& dir = part.first;
    // Bring run folders and the slot timeline over, unless merging into a source folder.
    if (fs::weakly_canonical(dir) == fs::weakly_canonical(out)) continue;
    for (const char* sub : {"runs", "capacity", "slot_timeline"}) {
      if (!fs::is_directory(dir / sub)) continue;
      fs::create_directories(out / sub);
      fs::copy(dir / sub, out / sub, fs::copy_options::recursive | fs::copy_options::overwrite_existing, ec);
      if (ec)
        throw UserError(
            fmt::format("merge: cannot copy {} into {}: {}", (dir / sub).string(), out.string(), ec.message()));
    }
  }
  fs::remove_all(out / "figures");
  write_summaries(out, merged, plots, progress);
  return merged;
}

}  // namespace batchsim
