// batchsim — reading InferSim's MLA tables (see mla_tables.h).
#include "hwmodel/fit/mla_tables.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>

#include "hwmodel/base/csv_table.h"
#include "hwmodel/base/error.h"

namespace batchsim {

namespace fs = std::filesystem;

namespace {

constexpr double kMicroseconds = 1e-6;

// "<a>-<b>-<c>.csv" -> {a, b, c}; nullopt for any other name.
std::optional<std::array<int64_t, 3>> shape_of(const fs::path& file) {
  if (file.extension() != ".csv") return std::nullopt;
  const std::string stem = file.stem().string();
  std::array<int64_t, 3> v{};
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t end = i < 2 ? stem.find('-', pos) : stem.size();
    if (end == std::string::npos || end == pos || end - pos > 6) return std::nullopt;
    const std::string part = stem.substr(pos, end - pos);
    if (!std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
    v[static_cast<size_t>(i)] = std::stoll(part);
    if (v[static_cast<size_t>(i)] <= 0) return std::nullopt;
    pos = end + 1;
  }
  return v;
}

std::vector<fs::path> tables_in(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && shape_of(entry.path())) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

bool holds_tables(const fs::path& dir) {
  return fs::absolute(dir).filename() == "mla" &&
         (!tables_in(dir / "decode").empty() || !tables_in(dir / "prefill").empty());
}

// The `mla` folder, as the caller spelled it (a profile's provenance names it so).
fs::path mla_root(const fs::path& dir) {
  fs::path d = dir.lexically_normal();
  if (d.filename().empty()) d = d.parent_path();  // a trailing slash
  return holds_tables(d) ? d : d / "mla";
}

}  // namespace

bool is_mla_table_dir(const fs::path& dir) { return holds_tables(mla_root(dir)); }

MlaTables read_mla_tables(const fs::path& dir) {
  const fs::path root = mla_root(dir);
  if (!holds_tables(root)) {
    throw UserError(
        fmt::format("{}: no InferSim MLA tables (mla/decode/<heads>-<kv_lora_rank>-<rope>.csv or "
                    "mla/prefill/<heads>-<nope>-<rope>.csv)",
                    dir.string()));
  }
  MlaTables t;
  t.root = root.string();
  t.device = fs::absolute(root).parent_path().filename().string();
  for (const fs::path& file : tables_in(root / "decode")) {
    const auto shape = *shape_of(file);
    CsvTable csv(file);
    while (csv.next()) {
      MlaDecodeRow r;
      r.heads = shape[0];
      r.kv_lora_rank = shape[1];
      r.qk_rope_head_dim = shape[2];
      r.kv_dtype = csv.text("kv_dtype");
      if (r.kv_dtype != "bf16" && r.kv_dtype != "fp16" && r.kv_dtype != "fp8") {
        csv.fail(fmt::format("column 'kv_dtype': '{}' is not bf16, fp16 or fp8", r.kv_dtype));
      }
      r.batch = csv.integer("batch_size", 1, int64_t{1} << 24);
      r.kv_len = csv.integer("kv_len", 1, int64_t{1} << 30);
      r.seconds = csv.number("latency_us") * kMicroseconds;
      if (!(r.seconds > 0)) csv.fail("column 'latency_us' must be > 0");
      t.decode.push_back(std::move(r));
    }
    t.files_read.push_back(fs::relative(file, root).generic_string());
  }
  for (const fs::path& file : tables_in(root / "prefill")) {
    const auto shape = *shape_of(file);
    CsvTable csv(file);
    while (csv.next()) {
      MlaPrefillRow r;
      r.heads = shape[0];
      r.qk_nope_head_dim = shape[1];
      r.qk_rope_head_dim = shape[2];
      r.seq_len = csv.integer("seq_len", 1, int64_t{1} << 30);
      r.seconds = csv.number("latency_us") * kMicroseconds;
      if (!(r.seconds > 0)) csv.fail("column 'latency_us' must be > 0");
      t.prefill.push_back(r);
    }
    t.files_read.push_back(fs::relative(file, root).generic_string());
  }
  if (t.decode.empty() && t.prefill.empty())
    throw UserError(fmt::format("{}: the MLA tables hold no rows", root.string()));
  return t;
}

}  // namespace batchsim
