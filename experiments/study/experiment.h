// batchsim — experiment files: a base run configuration plus the axes to vary.
//
// An experiment file (experiments/data/*.yaml, schema in experiments/README.md) names a base
// configuration (the keys of `batchsim run --config`), a list of policy variants (a preset plus
// its own options and a label), ordered axes whose values patch the base (a run key such as
// `model`, `tp`, `output-len`, the `rate` shorthand for Poisson arrivals, or a mapping of several
// keys with per-policy options), and seeds. Expansion is the cartesian product
//     axes (in file order, the first varying slowest) × seeds × policies (fastest)
// so the runs of one workload sit next to each other and the first policy is the baseline of
// its group. Optional parts: `capacity` (a bisection over the request rate for the largest rate
// that meets latency SLOs), `slot-timeline` (small extra runs whose batches are drawn slot by
// slot) and `iteration-budget`.
//
// Invariants: labels of policies are unique; every planned run's config passed validate() and
// make_policy() when parse_experiment returned; run indices are 0..n-1 in expansion order and
// do not depend on sharding or on --jobs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <tuple>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "experiments/run/run_config.h"
#include "sim/policy.h"

namespace batchsim {

struct PolicyVariant {
  std::string label;   // unique within the experiment; the name reports and plots use
  std::string policy;  // a registered policy or preset
  std::map<std::string, std::string> options;
};

struct AxisValue {
  std::string label;
  YAML::Node settings;         // a mapping of run keys (may be empty)
  std::optional<double> rate;  // the `rate` shorthand: Poisson (or gamma) arrivals at RATE/s
  // Options for some policies only, by policy label: e.g. hf-static's batch size tied to CAP.
  std::map<std::string, std::map<std::string, std::string>> per_policy;
};

struct Axis {
  std::string name;
  std::vector<AxisValue> values;
};

// A capacity search (see find_capacity and find_fewest): what it varies, over which range.
struct CapacitySpec {
  SloBounds slo;
  // What the search varies (`search:` in the file):
  //   "rate"           the largest Poisson (or gamma) rate meeting the SLO (lengths from the
  //                    base, or from its trace at Poisson arrivals);
  //   "trace-speedup"  the largest trace-speedup meeting the SLO: the base's trace replayed
  //                    with its own timestamps (its bursts) divided by the probed factor;
  //   "replicas"       the fewest replicas meeting the SLO, replaying the base workload as is.
  std::string search = "rate";
  // The searched range: requests/s for "rate" (rate-low, rate-high), speedup factors for
  // "trace-speedup" (speedup-low, speedup-high); find_capacity bisects either.
  double rate_low = 0.1;
  double rate_high = 64;
  int max_replicas = 64;    // "replicas": the most it tries (max-replicas)
  double tolerance = 0.02;  // stop when high/low <= 1 + tolerance
  int max_probes = 14;
};

struct SlotTimelineSpec {
  RunConfig base;  // the experiment base with the slot-timeline patch
  std::vector<PolicyVariant> policies;
  int64_t max_iterations = 400;  // columns drawn
};

// Figures a paper or a blog published for the same workload, to compare with (the report's
// "Against the published figures"): ratios of one summary.json figure, each policy over the
// baseline policy in the same group.
struct PublishedSpec {
  std::string source;    // citation, one line
  std::string metric;    // summary.json path, e.g. "throughput.total_tokens_per_s"
  std::string baseline;  // a policy label
  // (policy label, group as runs name it e.g. "cap=1536", published ratio)
  std::vector<std::tuple<std::string, std::string, double>> ratios;
  // The baseline's own published value of the metric per group, where the source gives it: the
  // report sets the simulated baseline beside it (a ratio's gap is often the baseline's).
  std::vector<std::pair<std::string, double>> baseline_values;
  std::string why;  // why the simulated ratios differ, with where its figures come from
};

struct Experiment {
  std::filesystem::path file;  // where it was read from (relative paths resolve against it)
  std::string source_text;     // the file as written, copied to the results folder
  std::string name;
  std::string description;
  RunConfig base;
  std::vector<PolicyVariant> policies;
  std::vector<Axis> axes;
  std::vector<uint64_t> seeds;
  std::optional<CapacitySpec> capacity;
  std::optional<SlotTimelineSpec> slot_timeline;
  std::optional<PublishedSpec> published;
  // Policies built by code rather than by a registered name (a Python Policy class), by the
  // name their runs carry: each run of one calls its factory (RunHooks::make_policy) and runs
  // on engine `vllm` unless the base names one.
  std::map<std::string, std::function<std::unique_ptr<Policy>()>> policy_factories;
  int64_t iteration_budget = 0;  // > 0: count requests completed within this many iterations
  // Refuse to expand beyond this many runs (capacity mode: searches); `max-runs:` in the file,
  // or `compare --max-runs N`. The product of a few long axes is easily billions of runs, and
  // expanding them eagerly would only exhaust memory.
  int64_t max_runs = kDefaultMaxRuns;
  static constexpr int64_t kDefaultMaxRuns = 100'000;
};

// Runs an experiment expands to (policies x seeds x the product of its axes' lengths), counted
// without expanding; saturates at INT64_MAX.
int64_t count_runs(const Experiment& experiment);

// One combination of axis values, seed and policy.
struct PlannedRun {
  int64_t index = 0;  // position in the expansion
  std::string name;   // folder name under runs/, e.g. "0007_vllm-v0_cap-512_s0"
  RunConfig config;
  std::string policy_label;
  std::vector<std::pair<std::string, std::string>> axis_labels;  // (axis, value label)
  uint64_t seed = 0;
  std::optional<double> rate;
  std::optional<double> trace_speedup;  // a capacity probe over trace-speedup
  std::string group;                    // the axis labels joined ("cap=512"): runs compared side by side
};

// Reads and checks an experiment file. Throws UserError naming the file, line and key path
// (e.g. "axes.cap[2].per-policy.tgi") for anything malformed.
// `adjust_base`, when given, edits the base after the file's `base` is read and before anything
// is expanded or checked: the CLI applies run flags there (`--num-requests 200` shortens a run).
// `max_runs` > 0 replaces the file's `max-runs` (the CLI's --max-runs).
Experiment parse_experiment(const std::filesystem::path& file, const std::function<void(RunConfig&)>& adjust_base = {},
                            int64_t max_runs = 0);
// The same from YAML text (`file` only names it in messages and anchors relative paths).
Experiment parse_experiment_text(const std::string& text, const std::filesystem::path& file,
                                 const std::function<void(RunConfig&)>& adjust_base = {}, int64_t max_runs = 0);

// The quick mode `batchsim compare --policies a,b,c`: one base configuration, one policy axis.
Experiment experiment_from_policies(
    const RunConfig& base, const std::vector<std::string>& policies,
    std::map<std::string, std::function<std::unique_ptr<Policy>()>> policy_factories = {});

// Every run of the experiment, in expansion order. For a capacity experiment these are the
// combinations whose rate is searched (their `rate` is unset).
std::vector<PlannedRun> expand_runs(const Experiment& experiment);

// Mean arrival rate of a workload in requests/s: (n - 1) requests over first to last arrival
// (0 with fewer than two requests or no time between them).
double mean_arrival_rate(const Workload& requests);

// The config of `run` at request rate `rate` (Poisson, or gamma with the base's CV).
RunConfig config_at_rate(const RunConfig& config, double rate);

struct CapacityProbe {
  double rate = 0;
  bool meets = false;
};
struct CapacityResult {
  double capacity_rps = 0;  // the largest probed rate that met the SLO (0 if none did)
  // "ok": bracketed within the tolerance; "above-range": even rate_high met it (capacity is at
  // least that); "below-range": even rate_low failed; "max-probes": the probe budget ran out
  // before the bracket narrowed to the tolerance.
  std::string status;
  double bracket_low = 0, bracket_high = 0;
  std::vector<CapacityProbe> probes;
};
// Largest rate in [rate_low, rate_high] for which `meets(rate)` holds, assuming it is monotone
// (true below some rate, false above). Bisects geometrically, because capacities of different
// policies differ by orders of magnitude and a relative tolerance is what a report quotes.
CapacityResult find_capacity(const CapacitySpec& spec, const std::function<bool(double)>& meets);

struct CountProbe {
  int count = 0;
  bool meets = false;
};
struct CountSearch {
  int count = 0;                   // the fewest that met it; 0: none up to the maximum did
  std::vector<CountProbe> probes;  // in probe order
};
// The smallest n in [first, max_n] for which `meets(n)` holds, assuming it is monotone (false
// below some n, true from there on) and false at first - 1: doubles from `first` until it holds
// (or max_n fails), then bisects between the last failure and the first success, so about
// 2 log2(answer / first) probes. Used for replica counts (`batchsim plan`, capacity search
// "replicas"): with the workload fixed, more replicas never make the SLO figures worse.
CountSearch find_fewest(int max_n, const std::function<bool(int)>& meets, int first = 1);

}  // namespace batchsim
