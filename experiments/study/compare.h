// batchsim — running an experiment: every planned run (or capacity search) on a pool of
// threads, each run's files, then results.csv, report.md and the figures.
//
// Results folder layout (README "Experiments"):
//   experiment.json        what the report needs to know about the experiment (no timestamps)
//   experiment.yaml        the experiment file as written (absent in `--policies` quick mode)
//   runs/<run>/            summary.json (with an `experiment` block), requests.csv,
//                          tbt_quantiles.csv, kv_timeline.csv[, iterations.csv]
//   capacity/<run>.json    capacity mode: the search result of one combination
//   slot_timeline/<policy>.csv  the batches of the small slot-timeline runs, slot by slot
//   results.csv, capacity.csv, report.md, figures/
//
// Same inputs give the same files byte for byte, whatever --jobs and --shard are: results are
// ordered by run index, and nothing depends on wall-clock time.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "experiments/study/experiment.h"
#include "experiments/study/report.h"

namespace batchsim {

struct CompareOptions {
  std::filesystem::path out;  // empty: run and print, write nothing
  int jobs = 1;
  int shard_index = 0;  // this process runs units i with i % shard_count == shard_index
  int shard_count = 1;
  bool plots = true;  // run plots/make_figures.py when a Python with matplotlib exists
};

// Parses "K/N" (0 <= K < N). Throws UserError naming --shard.
void parse_shard(const std::string& text, CompareOptions& options);

// Runs the experiment's share of work units; progress lines go to `progress`. When
// options.out is set, writes the folder described above. Returns what was run.
ResultSet run_experiment(const Experiment& experiment, const CompareOptions& options, std::ostream& progress);

// results.csv's rows: each run's summary.json, less its `trust` (report.md shows it once per
// GPU profile), in run order.
std::vector<nlohmann::ordered_json> results_table_rows(const ResultSet& results);

// Joins the results folders of shards into `out` (copying their run folders) and writes
// results.csv, report.md and figures there. Throws UserError when the folders hold different
// experiments or the same run twice, and, naming the file, when a file is not as batchsim writes
// it (read_result_file, experiments/study/report.h; or a figure the report reads is missing or
// of another type), before anything is written.
ResultSet merge_results(const std::vector<std::filesystem::path>& dirs, const std::filesystem::path& out, bool plots,
                        std::ostream& progress);

// Runs plots/make_figures.py on `dir` (when `plots` and a Python with matplotlib exist); returns
// "" or a note for the report saying why figures are missing and that `redraw` draws them.
std::string draw_figures(const std::filesystem::path& dir, bool plots, const std::string& redraw,
                         std::ostream& progress);

// A Python 3 that can import matplotlib: $BATCHSIM_PYTHON, /usr/bin/python3 (Debian's
// python3-matplotlib), then python3 on PATH. Empty when there is none.
std::string find_plot_python();

}  // namespace batchsim
