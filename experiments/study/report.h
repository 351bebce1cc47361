// batchsim — an experiment's result set and what is made from it: results.csv, capacity.csv,
// report.md and the terminal table.
//
// Everything here reads only JSON documents that are also on disk (each run's summary.json,
// capacity/*.json, experiment.json), so `batchsim merge` rebuilds from shard folders exactly
// what an unsharded `batchsim compare` writes. results.csv columns are the summary.json leaves
// named by their JSON path (`throughput.output_tokens_per_s`, `latency.ttft_s.p99`, ...), so
// one name means one figure in every file.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace batchsim {

struct ResultSet {
  nlohmann::ordered_json experiment;               // experiment.json
  std::string experiment_yaml;                     // the experiment file as written ("" in quick mode)
  std::vector<nlohmann::ordered_json> runs;        // summary.json of every run, in run order
  std::vector<nlohmann::ordered_json> capacities;  // capacity mode: one per searched combination
};

// Sorts runs by (experiment.run, experiment.capacity_probe) and capacities by experiment.run.
void sort_results(ResultSet& results);

// Leaves of a JSON object as (dotted path, leaf): objects are walked, anything else (number,
// string, bool, null, array) is a leaf. Pointers into `j`.
std::vector<std::pair<std::string, const nlohmann::ordered_json*>> json_leaves(const nlohmann::ordered_json& j);
// Leaves of a JSON object as (dotted path, CSV cell text). Numbers keep nlohmann's
// round-trip text, so a value read back from the CSV is the value in summary.json.
std::vector<std::pair<std::string, std::string>> flatten_json(const nlohmann::ordered_json& j);
// One row per document; columns are the union of their paths, each new path placed after the
// path that precedes it in its document (so optional keys stay beside their siblings). `cells`
// holds each row's leaf per column, null where the row has none; pointers into `rows`.
struct FlatTable {
  std::vector<std::string> columns;
  std::vector<std::vector<const nlohmann::ordered_json*>> cells;
};
FlatTable flat_table(const std::vector<nlohmann::ordered_json>& rows);
// flat_table(rows) as CSV, each leaf as flatten_json writes it.
void write_flat_csv(const std::filesystem::path& file, const std::vector<nlohmann::ordered_json>& rows);

// report.md in `dir`: setup, how far to trust these figures (each GPU profile's `trust` once),
// comparison tables (mean and min–max over seeds, speedup vs the
// first policy), capacity table, figures listed in figures/figures.json, the experiment file.
// `figures_note` explains missing figures (e.g. no matplotlib) and is printed when not empty.
void write_report(const std::filesystem::path& dir, const ResultSet& results, const std::string& figures_note);
// report.md's text, to `out`; `figures_index` is the figures.json it lists (empty: none).
void render_report(std::ostream& out, const ResultSet& results, const std::string& figures_note,
                   const std::filesystem::path& figures_index);

// (policy label, its engine) of every policy that ran, in the experiment's order; a policy that
// ran on several (an engine axis) has them joined by " / ".
std::vector<std::pair<std::string, std::string>> policy_engines(const ResultSet& results);
// A warning when the policies ran on different engines (their differences are then partly the
// engines'), "" when they share one.
std::string engines_warning(const ResultSet& results);

// results.csv's intervals, with several seeds (nothing with one): beside each figure of
// confidence_metrics() (experiments/run/confidence.h), `<figure>.ci_lo` and `.ci_hi`, its
// combination's 95% interval over the seeds; and on the rows of every policy but the first,
// `.diff`, `.diff_lo`, `.diff_hi` and `.diff_p`: the paired difference against the first policy
// of the same group (policy minus first, seed by seed) with its interval and p-value. `rows`
// are results.runs, copied in their order.
void add_interval_columns(std::vector<nlohmann::ordered_json>& rows, const ResultSet& results);

// The terminal version of the comparison (and capacity) table, each GPU profile's trust line,
// then one line per failed run.
void print_result_table(std::ostream& out, const ResultSet& results);

// (run name, why) of every run or capacity search that could not run (its summary carries
// "error"), in run order.
std::vector<std::pair<std::string, std::string>> failed_runs(const ResultSet& results);

// The files of a results folder that load_result_set reads: experiment.json, then every
// runs/*/summary.json and capacity/*.json in directory order. Throws UserError naming the folder
// when it is not one.
struct ResultFiles {
  std::filesystem::path experiment;
  std::vector<std::filesystem::path> runs, capacities;
};
ResultFiles result_files(const std::filesystem::path& dir);

// One of those files, read as the report reads it. Throws UserError naming the file, and the
// field where one is at fault, for what batchsim never writes: invalid JSON, a document that is
// not an object, a count, id or seed that is not an integer (of at most 2^53), a run without its
// name (experiment.run_name, a string). The report reads more figures than these; what it finds
// missing or of another type throws nlohmann's exceptions, which merge_results turns into
// UserError naming the file (experiments/study/compare.h).
enum class ResultFileKind { kExperiment, kRun, kCapacity };
nlohmann::ordered_json read_result_file(const std::filesystem::path& file, ResultFileKind kind);

// Reads experiment.json, experiment.yaml, runs/*/summary.json and capacity/*.json of a results
// folder, each by read_result_file. Throws UserError naming the folder when it is not one.
ResultSet load_result_set(const std::filesystem::path& dir);

}  // namespace batchsim
