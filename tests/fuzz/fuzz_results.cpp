// libFuzzer harness: the reader of batchsim's own results folders, `batchsim merge DIR... --out
// MERGED` (load_result_set and merge_results, experiments/study/compare.h), then the terminal
// table the command prints (print_result_table). The input is the folder's JSON files one after
// another, separated by NUL bytes: experiment.json, runs/r0/summary.json to runs/r3/summary.json,
// capacity/c0.json and capacity/c1.json (fewer parts or an empty part: no such file). Seeds:
// tests/fuzz/seeds/results (a quick compare's folder, a sweep's over two seeds with an SLO and a
// capacity search's, each so joined).
#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/study/compare.h"
#include "experiments/study/report.h"
#include "fuzz_input.h"
#include "hwmodel/base/error.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path root = batchsim::fuzz::as_file(data, 0, "unused").parent_path() / "results";
  fs::remove_all(root);
  const fs::path shard = root / "shard";
  const std::vector<fs::path> files = {"experiment.json",      "runs/r0/summary.json", "runs/r1/summary.json",
                                       "runs/r2/summary.json", "runs/r3/summary.json", "capacity/c0.json",
                                       "capacity/c1.json"};
  const std::string text(reinterpret_cast<const char*>(data), size);
  size_t begin = 0;
  for (size_t part = 0; part < files.size() && begin <= text.size(); ++part) {
    const size_t end = std::min(text.find('\0', begin), text.size());
    if (end > begin) batchsim::fuzz::write_file(shard / files[part], text.substr(begin, end - begin));
    begin = end + 1;
  }
  try {
    std::ostringstream progress, table;
    const batchsim::ResultSet merged = batchsim::merge_results({shard}, root / "merged", false, progress);
    batchsim::print_result_table(table, merged);
    // What a merge promises: the merged folder holds its report and results.csv.
    if (!fs::exists(root / "merged" / "report.md") || !fs::exists(root / "merged" / "results.csv")) __builtin_trap();
  } catch (const batchsim::UserError&) {
  }
  return 0;
}
