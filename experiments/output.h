// batchsim — run outputs: summary.json, requests.csv, iterations.csv and terminal tables.
//
// summary.json keys are a stable, documented interface (README "Outputs"): scripts in plots/
// and users' notebooks read them. Add keys; never rename one.
#pragma once

#include <filesystem>
#include <fstream>
#include <iosfwd>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/runner.h"

namespace batchsim {

nlohmann::ordered_json config_to_json(const RunConfig& config);
nlohmann::ordered_json summary_to_json(const RunOutcome& outcome);

// Writes summary.json, requests.csv and (when iterations were recorded) iterations.csv into
// `dir`, creating it. Throws UserError when the directory cannot be written.
void write_run_outputs(const RunOutcome& outcome, const std::filesystem::path& dir);
// The same, with the summary.json content given (an experiment adds its own block to
// summary_to_json's); iterations.csv only when `outcome.config.iteration_log`.
void write_run_outputs(const RunOutcome& outcome, const std::filesystem::path& dir,
                       const nlohmann::ordered_json& summary);

// Opens `path` for writing (binary: the same bytes on every platform), creating its folder.
// Throws UserError naming the file when it cannot be written.
std::ofstream open_for_write(const std::filesystem::path& path);

// A short table: one row per run, headline figures as columns.
void print_comparison_table(std::ostream& out, const std::vector<const RunOutcome*>& runs);

}  // namespace batchsim
