// batchsim — reader of Vidur-schema measurement CSVs (see measurements.h).
#include "hwmodel/fit/measurements.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "hwmodel/base/csv_table.h"
#include "hwmodel/base/error.h"

namespace batchsim {

namespace fs = std::filesystem;

const char* token_op_name(TokenOp op) {
  static constexpr const char* kNames[kNumTokenOps] = {
      "emb",         "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
      "mlp_up_proj", "mlp_act",         "mlp_down_proj", "add"};
  return kNames[static_cast<int>(op)];
}

ModelSpec MeasuredShape::as_model_spec() const {
  ModelSpec m;
  m.name = "measured";
  m.num_layers = 1;
  m.hidden_size = hidden_size;
  m.num_heads = num_heads;
  m.num_kv_heads = num_kv_heads;
  m.head_dim = hidden_size / num_heads;
  m.ffn_size = ffn_size;
  m.gated_mlp = gated_mlp;
  m.vocab_size = vocab_size;
  return m;
}

bool MeasuredShape::same_layer_shape(const ModelSpec& model) const {
  return model.hidden_size == hidden_size && model.num_heads == num_heads && model.num_kv_heads == num_kv_heads &&
         model.ffn_size == ffn_size && model.gated_mlp == gated_mlp;
}

ModelSpec AttentionRow::as_model_spec() const {
  ModelSpec m;
  m.name = source;
  m.num_layers = 1;
  m.hidden_size = hidden_size;
  m.num_heads = num_heads;
  m.num_kv_heads = num_kv_heads;
  m.head_dim = hidden_size / num_heads;
  return m;
}

namespace {

constexpr double kMs = 1e-3;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// "org/model" from .../compute/<device>/<org>/<model>/file.csv, else the parent folder name.
std::string source_of(const fs::path& file) {
  const fs::path dir = file.parent_path();
  const std::string model = dir.filename().string();
  const std::string org = dir.parent_path().filename().string();
  const std::string device_level = dir.parent_path().parent_path().parent_path().filename().string();
  if (device_level == "compute") return org + "/" + model;
  return model;
}

void read_token_ops(CsvTable& csv, const fs::path& file, Measurements& out) {
  const std::string model = source_of(file);
  while (csv.next()) {
    TokenOpRow row;
    row.model = model;
    row.shape.num_heads = static_cast<int>(csv.integer("n_head", 1, 1 << 20));
    row.shape.num_kv_heads = static_cast<int>(csv.integer("n_kv_head", 1, 1 << 20));
    row.shape.hidden_size = static_cast<int>(csv.integer("n_embd", 1, 1 << 24));
    row.shape.ffn_size = static_cast<int>(csv.integer("n_expanded_embd", 1, 1 << 26));
    row.shape.vocab_size = static_cast<int>(csv.integer("vocab_size", 1, 1 << 26));
    row.shape.gated_mlp = csv.boolean("use_gated_mlp");
    row.num_tokens = csv.integer("num_tokens", 1, int64_t{1} << 40);
    row.tp = static_cast<int>(csv.integer("num_tensor_parallel_workers", 1, 1 << 16));
    if (row.shape.num_heads <= 0 || row.shape.hidden_size <= 0 || row.num_tokens <= 0 || row.tp <= 0) {
      csv.fail("shape, num_tokens and tensor parallel workers must be positive");
    }
    for (int op = 0; op < kNumTokenOps; ++op) {
      const std::string column = fmt::format("time_stats.{}.median", token_op_name(static_cast<TokenOp>(op)));
      row.median_s[op] = csv.has(column) ? csv.number_or_nan(column) * kMs : kNaN;
    }
    out.token_ops.push_back(std::move(row));
  }
}

void read_attention(CsvTable& csv, const fs::path& file, Measurements& out) {
  const std::string source = source_of(file);
  const bool has_prefill = csv.has("time_stats.attn_prefill.median");
  const bool has_decode = csv.has("time_stats.attn_decode.median");
  while (csv.next()) {
    AttentionRow row;
    row.source = source;
    row.hidden_size = static_cast<int>(csv.integer("n_embd", 1, 1 << 24));
    row.num_heads = static_cast<int>(csv.integer("n_q_head", 1, 1 << 20));
    row.num_kv_heads = static_cast<int>(csv.integer("n_kv_head", 1, 1 << 20));
    row.tp = static_cast<int>(csv.integer("num_tensor_parallel_workers", 1, 1 << 16));
    row.is_prefill = csv.boolean("is_prefill");
    row.batch_size = csv.integer("batch_size", 0, int64_t{1} << 40);
    row.prefill_chunk_size = csv.integer("prefill_chunk_size", 0, int64_t{1} << 40);
    row.kv_cache_size = csv.integer("kv_cache_size", 0, int64_t{1} << 40);
    const char* column = row.is_prefill ? "time_stats.attn_prefill.median" : "time_stats.attn_decode.median";
    if (!(row.is_prefill ? has_prefill : has_decode)) continue;
    row.median_s = csv.number_or_nan(column) * kMs;
    if (std::isnan(row.median_s)) continue;
    if (row.num_heads <= 0 || row.num_kv_heads <= 0 || row.tp <= 0) {
      csv.fail("n_q_head, n_kv_head and num_tensor_parallel_workers must be positive");
    }
    out.attention.push_back(row);
  }
}

void read_all_reduce(CsvTable& csv, Measurements& out) {
  while (csv.next()) {
    AllReduceRow row;
    row.num_workers = static_cast<int>(csv.integer("num_workers", 1, 1 << 16));
    row.size_bytes = csv.number("size");
    row.median_s = csv.number("time_stats.all_reduce.median") * kMs;
    // Tensor parallelism runs within one node; rows spanning nodes measure the network.
    if (csv.has("devices_per_node") && csv.integer("devices_per_node", 1, 1 << 16) < row.num_workers) continue;
    out.all_reduce.push_back(row);
  }
}

void read_cpu_overheads(CsvTable& csv, Measurements& out) {
  while (csv.next()) {
    CpuOverheadRow row;
    row.model = csv.text("model_name");
    row.batch_size = csv.integer("batch_size", 0, int64_t{1} << 40);
    row.tp = static_cast<int>(csv.integer("tensor_parallel_degree", 1, 1 << 16));
    row.schedule_s = csv.number("schedule_median") * kMs;
    row.sampler_s = csv.number("sampler_e2e_median") * kMs;
    row.prepare_inputs_s = csv.number("prepare_inputs_e2e_median") * kMs;
    row.process_outputs_s = csv.number("process_model_outputs_median") * kMs;
    out.cpu_overheads.push_back(std::move(row));
  }
}

void read_file(const fs::path& file, Measurements& out) {
  CsvTable csv(file);
  if (csv.has("num_tokens") && csv.has("n_expanded_embd")) {
    read_token_ops(csv, file, out);
  } else if (csv.has("is_prefill") && csv.has("n_q_head")) {
    read_attention(csv, file, out);
  } else if (csv.has("time_stats.all_reduce.median")) {
    read_all_reduce(csv, out);
  } else if (csv.has("schedule_median") && csv.has("batch_size")) {
    read_cpu_overheads(csv, out);
  } else {
    out.files_skipped.push_back(file.string());
    return;
  }
  out.files_read.push_back(file.string());
}

void make_relative(std::vector<std::string>& paths, const fs::path& root) {
  for (std::string& p : paths) p = fs::path(p).lexically_relative(root).generic_string();
}

// A table is stored as NAME.csv or, gzip-compressed, as NAME.csv.gz; both read the same.
bool is_csv_file(const fs::path& file) {
  const std::string name = file.filename().string();
  return name.ends_with(".csv") || name.ends_with(".csv.gz");
}

// dir/NAME.csv or dir/NAME.csv.gz, whichever exists.
std::optional<fs::path> csv_file(const fs::path& dir, const std::string& name) {
  for (const char* extension : {".csv", ".csv.gz"}) {
    const fs::path file = dir / (name + extension);
    if (fs::is_regular_file(file)) return file;
  }
  return std::nullopt;
}

std::vector<fs::path> csv_files_under(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::exists(dir)) return files;
  if (fs::is_regular_file(dir)) return {dir};
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && is_csv_file(entry.path())) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());  // a fixed order: fits are reproducible
  return files;
}

std::vector<std::string> subdirectories(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The GPU folder of a file inside a Vidur-style tree: "a100" for .../compute/a100/org/m/mlp.csv.
std::string device_of_tree_file(const fs::path& file) {
  std::string previous;
  for (const fs::path& part : file.parent_path()) {
    if (previous == "compute") return part.string();
    previous = part.string();
  }
  return "";
}

}  // namespace

Measurements read_measurements(const fs::path& dir, std::string_view device) {
  if (fs::is_regular_file(dir)) {
    // One CSV, e.g. the mlp.csv of one model: read alone; its GPU is the tree folder it lies in.
    Measurements out;
    out.root = dir.parent_path().string();
    out.device = device.empty() ? device_of_tree_file(fs::absolute(dir)) : std::string(device);
    read_file(dir, out);
    make_relative(out.files_read, dir.parent_path());
    make_relative(out.files_skipped, dir.parent_path());
    if (out.files_read.empty()) {
      throw UserError(
          fmt::format("{}: not a measurement CSV (expected the header of Vidur's "
                      "mlp.csv, attention.csv, all_reduce.csv or cpu overheads)",
                      dir.string()));
    }
    return out;
  }
  if (!fs::is_directory(dir)) {
    throw UserError(fmt::format("{}: no such measurement directory or file", dir.string()));
  }
  Measurements out;
  out.root = dir.string();
  std::vector<fs::path> files;
  if (fs::is_directory(dir / "compute")) {
    const std::vector<std::string> devices = subdirectories(dir / "compute");
    std::string chosen(device);
    if (chosen.empty()) {
      if (devices.size() != 1) {
        throw UserError(fmt::format("{}: holds measurements of several GPUs ({}); name one (--device)", dir.string(),
                                    fmt::join(devices, ", ")));
      }
      chosen = devices.front();
    } else if (std::find(devices.begin(), devices.end(), chosen) == devices.end()) {
      throw UserError(
          fmt::format("{}: no measurements for GPU '{}' (have: {})", dir.string(), chosen, fmt::join(devices, ", ")));
    }
    out.device = chosen;
    files = csv_files_under(dir / "compute" / chosen);
    if (fs::is_directory(dir / "network")) {
      std::optional<fs::path> network;
      for (const std::string& name : subdirectories(dir / "network")) {
        if (name == chosen + "_dgx") network = dir / "network" / name;
      }
      for (const std::string& name : subdirectories(dir / "network")) {
        if (!network && name.rfind(chosen + "_", 0) == 0) network = dir / "network" / name;
      }
      if (network) {
        if (const auto all_reduce = csv_file(*network, "all_reduce")) files.push_back(*all_reduce);
      }
    }
    if (const auto cpu = csv_file(dir / "cpu_overheads", chosen)) files.push_back(*cpu);
  } else {
    files = csv_files_under(dir);
  }
  for (const fs::path& file : files) read_file(file, out);
  make_relative(out.files_read, dir);
  make_relative(out.files_skipped, dir);
  if (out.files_read.empty()) {
    throw UserError(
        fmt::format("{}: no measurement CSVs found (expected Vidur's mlp.csv, "
                    "attention.csv, all_reduce.csv or cpu overhead files)",
                    dir.string()));
  }
  return out;
}

}  // namespace batchsim
