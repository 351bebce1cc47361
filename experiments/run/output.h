// batchsim — run outputs: summary.json, requests.csv, iterations.csv and terminal tables.
//
// summary.json keys are a stable, documented interface (README "Outputs"): scripts in plots/
// and users' notebooks read them. Add keys; never rename one.
#pragma once

#include <filesystem>
#include <fstream>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/run/csv_buffer.h"
#include "experiments/run/runner.h"

namespace batchsim {

// "latency.ttft_s.p99" -> the JSON pointer "/latency/ttft_s/p99": results.csv columns, SLO keys
// and report columns all name summary.json figures by such dotted paths.
nlohmann::ordered_json::json_pointer json_path_pointer(const std::string& dotted_path);

nlohmann::ordered_json config_to_json(const RunConfig& config);
// GPUs the run provisions: replicas x tp, or both pools' replicas x their tp (summary.json's
// `gpus`, the divisor of goodput per GPU).
int64_t run_gpus(const RunConfig& config);
nlohmann::ordered_json summary_to_json(const RunOutcome& outcome);

// summary.json's `trust`: how far to trust a run's figures, from its GPU profile's validation
// block (hardware_profile.h). {profile, source, validated: true, measured_on, held_out,
// scored_on, operators: {NAME: {mape, p90, count}}} (percent), or {profile, source,
// validated: false, reason} for a profile that records none (a datasheet GPU).
// With the run's `engine`: `kernels` (HardwareProfile::kernels) and, when the engine is of another
// framework than the kernels the profile timed, `kernels_note` saying so.
nlohmann::ordered_json trust_json(const HardwareProfile& gpu, const std::string& engine = "");
// That block in one terminal line: "trust: h100-sxm-fitted, held-out MAPE on NVIDIA
// aiconfigurator kernel tables of h100_sxm (vllm 0.24.0, nccl 2.27.3): context_attention 11.5%,
// ..." or "trust: a100-80gb not validated: <reason>". Made from the JSON, so that the report
// (which reads summary.json files) and `batchsim run` say the same.
std::string trust_line(const nlohmann::ordered_json& trust);

// summary.json's `latency_breakdown`: per part {mean, p99, share, share_of_p99_requests}
// (seconds, and fractions of the completed / p99 requests' e2e time), `p99_requests` and the
// one-line `diagnosis` (experiments/run/latency_diagnosis.h).
nlohmann::ordered_json latency_breakdown_json(const RunOutcome& outcome);
// The run's diagnosis line (latency_diagnosis() of its summary and policy).
std::string run_diagnosis(const RunOutcome& outcome);
// The p99 requests' shares on one terminal line: "latency breakdown of the p99 requests (3,
// e2e >= 41.20s): queueing 61.9%, prefill 1.2%, ...".
std::string latency_breakdown_line(const Summary& summary);

// Writes summary.json, requests.csv and (when iterations were recorded) iterations.csv into
// `dir`, creating it. Throws UserError when the directory cannot be written.
void write_run_outputs(const RunOutcome& outcome, const std::filesystem::path& dir);
// The same, with the summary.json content given (an experiment adds its own block to
// summary_to_json's); iterations.csv only when `outcome.config.iteration_log`.
void write_run_outputs(const RunOutcome& outcome, const std::filesystem::path& dir,
                       const nlohmann::ordered_json& summary);

// A streaming run's requests.csv, written a row at a time as requests settle (so in settle
// order, not by id: sorted by id the rows are the exact run's). Created, with its header, in
// `dir` at construction (UserError naming --out when it cannot be).
class RequestsCsvWriter {
 public:
  RequestsCsvWriter(const std::filesystem::path& dir, bool cluster);
  void add(const RequestRecord& r);
  // Writes out what is buffered; UserError naming the file when it could not be written.
  void finish();

 private:
  std::filesystem::path path_;
  std::ofstream out_;
  CsvBuffer csv_{out_};
  bool cluster_;
};

// "finished", "rejected", ...: requests.csv's `state`.
const char* request_state_name(RequestState state);

// Opens `path` for writing (binary: the same bytes on every platform), creating its folder.
// Throws UserError naming `option` and the file when it cannot be written.
std::ofstream open_for_write(const std::filesystem::path& path, std::string_view option = "--out");

// A short table: one row per run, headline figures as columns.
void print_comparison_table(std::ostream& out, const std::vector<const RunOutcome*>& runs);
// One row per priority class of a run (Summary::priority_classes); nothing when it has none.
void print_priority_classes(std::ostream& out, const Summary& summary);

}  // namespace batchsim
