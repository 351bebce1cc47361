// batchsim — capacity planning (`batchsim plan`, issue 14): for each candidate GPU and
// tensor-parallel degree, the fewest replicas that meet every SLO replaying the workload itself.
//
// The workload is built once — a trace at its --trace-speedup with its own timestamps and
// bursts, or the synthetic arrivals of `run` — and every probe replays that very request
// sequence through N replicas behind the run's router. With the workload fixed, more replicas
// never make the SLO figures worse, so find_fewest (experiment.h) doubles N from 1 and bisects:
// about 2 log2(answer) runs per candidate. Candidates run on `jobs` threads; what is written
// does not depend on `jobs` (wall times aside).
//
// Busy windows: an SLO met over a whole replay can hide its busiest minute (a p99 over an hour
// lets the 1% of requests that arrive in one burst wait as long as they like). So the answer of
// each candidate is also replayed with the workload compressed in time to its busiest window's
// arrival rate (`window_s` by arrival): if the answer does not meet the SLO at that rate, the
// window is busier than the capacity found, and the plan says which window it is and how many
// replicas sustaining it would take.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "experiments/experiment.h"
#include "experiments/run_config.h"

namespace batchsim {

struct PlanSpec {
  RunConfig base;                  // model, policy, router, workload; gpu, tp and replicas per candidate
  std::vector<std::string> gpus;   // built-in GPUs or profile files
  std::vector<int> tps;            // tensor-parallel degrees
  int max_replicas = 32;           // the most replicas tried per candidate
  SloBounds slo;
  std::map<std::string, double> price_per_hour;  // --price GPU=USD (per GPU and hour), over the profile's
  double window_s = 60;            // the busy-window width
  int jobs = 1;
};

// Arrivals in the busiest window of `window_s` seconds (its start at an arrival).
struct BusyWindow {
  double start_s = 0, end_s = 0;   // offsets from the first arrival
  int64_t arrivals = 0;
  double rate_rps = 0;             // arrivals / window_s
};
BusyWindow busiest_window(const Workload& requests, double window_s);

struct PlanProbe {
  int replicas = 0;
  bool meets = false;
  std::vector<double> values;      // the SLO figures, in PlanSpec::slo order
  double wall_s = 0;
};

struct PlanRow {
  std::string gpu;
  int tp = 1;
  // "ok"; "none": no replica count up to max_replicas meets the SLO; "error": the candidate
  // cannot run (a model too large for the GPU at this TP, a TP its heads do not divide by).
  std::string status;
  std::string error;
  int replicas = 0;                // the fewest meeting the SLO (0 unless ok)
  std::vector<double> values;      // the SLO figures at `replicas` (status none: at max_replicas)
  double price_per_hour = 0;       // per GPU; 0: unknown
  std::vector<PlanProbe> probes;   // by replica count
  // The busy window at the answer: whether the answer meets the SLO with the whole workload at
  // its rate and, when not, the fewest replicas that do (0: none up to max_replicas).
  bool busy_window_ok = true;
  bool busy_window_checked = false;
  int busy_window_replicas = 0;
  std::vector<double> busy_window_values;  // the SLO figures of the answer at the window's rate
  double wall_s = 0;
  int runs = 0;

  bool meets_slo() const { return status == "ok"; }
  int total_gpus() const { return replicas * tp; }
  double cost_per_hour() const { return price_per_hour * total_gpus(); }
};

struct PlanResult {
  PlanSpec spec;
  std::string workload;            // what was replayed (BuiltWorkload::description)
  int64_t requests = 0;
  double mean_rate_rps = 0;
  BusyWindow busiest;
  std::vector<PlanRow> rows;       // sorted: meeting rows first, by total GPUs (by cost when all are priced)
  std::vector<std::string> warnings;
};

// Runs the plan; progress lines go to `progress`. Throws UserError for bad input.
PlanResult run_plan(const PlanSpec& spec, std::ostream& progress);

// The terminal table and the warnings.
void print_plan(std::ostream& out, const PlanResult& plan);
// DIR/plan.csv, DIR/plan.json, DIR/report.md and DIR/figures/ (SLO figures vs replicas).
void write_plan(const PlanResult& plan, const std::filesystem::path& dir, bool plots, std::ostream& progress);

// "GPU=USD" of --price.
std::pair<std::string, double> parse_price(const std::string& text);

}  // namespace batchsim
