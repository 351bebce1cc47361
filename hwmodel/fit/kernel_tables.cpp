// batchsim — reading aiconfigurator-layout kernel tables (see kernel_tables.h).
#include "hwmodel/fit/kernel_tables.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <optional>
#include <set>

#include "hwmodel/base/csv_table.h"
#include "hwmodel/base/error.h"

namespace batchsim {

namespace fs = std::filesystem;

namespace {

constexpr double kMs = 1e-3;
constexpr const char* kFamilies[] = {"gemm", "attention", "comm", "moe"};
constexpr int64_t kMaxSize = int64_t{1} << 40;

std::vector<std::string> subfolders(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// "0.24.0" < "0.5.1.post1" < "2.29.2": numeric parts compared as numbers.
bool version_less(const std::string& a, const std::string& b) {
  auto parts = [](const std::string& v) {
    std::vector<std::pair<long, std::string>> out;
    size_t pos = 0;
    while (pos <= v.size()) {
      const size_t dot = v.find('.', pos);
      const std::string part = v.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
      long number = -1;
      if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit) && part.size() < 10)
        number = std::stol(part);
      out.emplace_back(number, part);
      if (dot == std::string::npos) break;
      pos = dot + 1;
    }
    return out;
  };
  return parts(a) < parts(b);
}

std::optional<fs::path> newest_version(const fs::path& dir, const std::string& wanted = "") {
  std::vector<std::string> versions = subfolders(dir);
  if (versions.empty()) return std::nullopt;
  if (!wanted.empty()) {
    if (std::find(versions.begin(), versions.end(), wanted) == versions.end()) return std::nullopt;
    return dir / wanted;
  }
  return dir / *std::max_element(versions.begin(), versions.end(), version_less);
}

std::optional<fs::path> table_file(const fs::path& dir, const std::string& name) {
  for (const char* ext : {".csv", ".csv.gz"}) {
    if (fs::is_regular_file(dir / (name + ext))) return dir / (name + ext);
  }
  return std::nullopt;
}

double bytes_per_element(const std::string& dtype, const CsvTable& csv) {
  if (dtype == "half" || dtype == "bfloat16" || dtype == "float16" || dtype == "fp16" || dtype == "bf16") return 2;
  if (dtype == "int8" || dtype == "fp8") return 1;
  if (dtype == "float32" || dtype == "float") return 4;
  csv.fail(fmt::format("unknown dtype '{}'", dtype));
}

void read_gemm(const fs::path& file, KernelTables& out) {
  CsvTable csv(file);
  while (csv.next()) {
    KernelGemmRow r;
    r.dtype = csv.text("gemm_dtype");
    r.kernel = csv.has("kernel_source") ? csv.text("kernel_source") : "";
    r.m = csv.integer("m", 1, kMaxSize);
    r.n = csv.integer("n", 1, kMaxSize);
    r.k = csv.integer("k", 1, kMaxSize);
    r.seconds = csv.number("latency") * kMs;
    if (!(r.seconds > 0)) csv.fail("column 'latency' must be > 0");
    out.gemm.push_back(std::move(r));
  }
}

void read_attention(const fs::path& file, bool prefill, KernelTables& out) {
  CsvTable csv(file);
  while (csv.next()) {
    KernelAttentionRow r;
    r.prefill = prefill;
    r.batch = csv.integer("batch_size", 1, kMaxSize);
    r.isl = csv.integer("isl", 1, kMaxSize);
    const int64_t step = csv.integer("step", 0, kMaxSize);
    r.context = prefill ? 0 : step;
    r.num_heads = csv.integer("num_heads", 1, 1 << 20);
    r.num_kv_heads = csv.integer("num_key_value_heads", 1, 1 << 20);
    r.head_dim = csv.integer("head_dim", 1, 1 << 20);
    r.attn_dtype = csv.text("attn_dtype");
    r.kv_cache_dtype = csv.text("kv_cache_dtype");
    r.kernel = csv.has("kernel_source") ? csv.text("kernel_source") : "";
    r.window = csv.has("window_size") ? csv.integer("window_size", 0, kMaxSize) : 0;
    if (csv.has("beam_width") && csv.integer("beam_width", 1, 1 << 20) != 1) continue;  // beam search: not served here
    r.seconds = csv.number("latency") * kMs;
    if (!(r.seconds > 0)) csv.fail("column 'latency' must be > 0");
    out.attention.push_back(std::move(r));
  }
}

void read_collectives(const fs::path& file, const std::string& implementation, KernelTables& out) {
  CsvTable csv(file);
  const bool custom = csv.has("allreduce_dtype");
  while (csv.next()) {
    KernelCollectiveRow r;
    r.implementation = custom ? csv.text("backend") : implementation;
    r.op = custom ? "all_reduce" : csv.text("op_name");
    r.dtype = csv.text(custom ? "allreduce_dtype" : "nccl_dtype");
    r.num_gpus = static_cast<int>(csv.integer("num_gpus", 1, 1 << 16));
    r.elements = csv.integer("message_size", 1, kMaxSize);
    r.bytes = static_cast<double>(r.elements) * bytes_per_element(r.dtype, csv);
    r.seconds = csv.number("latency") * kMs;
    if (!(r.seconds > 0)) csv.fail("column 'latency' must be > 0");
    out.collectives.push_back(std::move(r));
  }
}

void read_moe(const fs::path& file, KernelTables& out) {
  CsvTable csv(file);
  while (csv.next()) {
    KernelMoeRow r;
    r.dtype = csv.text("moe_dtype");
    r.distribution = csv.text("distribution");
    r.kernel = csv.has("kernel_source") ? csv.text("kernel_source") : "";
    r.tokens = csv.integer("num_tokens", 1, kMaxSize);
    r.hidden = csv.integer("hidden_size", 1, kMaxSize);
    r.inter = csv.integer("inter_size", 1, kMaxSize);
    r.topk = csv.integer("topk", 1, 1 << 16);
    r.experts = csv.integer("num_experts", 1, 1 << 20);
    r.tp = csv.integer("moe_tp_size", 1, 1 << 16);
    r.ep = csv.integer("moe_ep_size", 1, 1 << 16);
    r.seconds = csv.number("latency") * kMs;
    if (!(r.seconds > 0)) csv.fail("column 'latency' must be > 0");
    out.moe.push_back(std::move(r));
  }
}

// NCCL's version as the system file names it (misc.nccl_version), or "" to take the newest.
std::string system_nccl_version(const fs::path& dir) {
  const fs::path file = dir / "system.yaml";
  if (!fs::is_regular_file(file)) return "";
  try {
    const YAML::Node root = YAML::LoadFile(file.string());
    if (root["misc"] && root["misc"]["nccl_version"] && root["misc"]["nccl_version"].IsScalar()) {
      return root["misc"]["nccl_version"].Scalar();
    }
  } catch (const YAML::Exception& e) {
    throw UserError(fmt::format("{}:{}: not valid YAML: {}", file.string(), e.mark.line + 1, e.msg));
  }
  return "";
}

}  // namespace

bool is_kernel_table_dir(const fs::path& dir) {
  for (const char* family : kFamilies) {
    for (const std::string& framework : subfolders(dir / family)) {
      if (!subfolders(dir / family / framework).empty()) return true;
    }
  }
  return false;
}

KernelTables read_kernel_tables(const fs::path& dir, std::string_view framework) {
  if (!fs::is_directory(dir)) throw UserError(fmt::format("{}: no such kernel-table folder", dir.string()));
  KernelTables out;
  out.root = dir.string();
  out.system = fs::absolute(dir).lexically_normal().filename().string();
  if (out.system.empty()) out.system = fs::absolute(dir).lexically_normal().parent_path().filename().string();
  out.framework = std::string(framework);
  const std::string fw(framework);
  std::set<std::string> frameworks;
  for (const char* family : {"gemm", "attention", "moe"}) {
    for (const std::string& f : subfolders(dir / family)) frameworks.insert(f);
  }
  auto note = [&](const fs::path& file) { out.files_read.push_back(fs::relative(file, dir).generic_string()); };
  if (const auto v = newest_version(dir / "gemm" / fw)) {
    if (const auto f = table_file(*v, "gemm_perf")) {
      read_gemm(*f, out);
      note(*f);
    }
  }
  if (const auto v = newest_version(dir / "attention" / fw)) {
    for (const auto& [name, prefill] :
         {std::pair<const char*, bool>{"context_attention_perf", true}, {"generation_attention_perf", false}}) {
      if (const auto f = table_file(*v, name)) {
        read_attention(*f, prefill, out);
        note(*f);
      }
    }
  }
  if (const auto v = newest_version(dir / "moe" / fw)) {
    if (const auto f = table_file(*v, "moe_perf")) {
      read_moe(*f, out);
      note(*f);
    }
  }
  if (const auto v = newest_version(dir / "comm" / fw)) {
    if (const auto f = table_file(*v, "custom_allreduce_perf")) {
      read_collectives(*f, fw, out);
      note(*f);
    }
  }
  const std::string nccl = system_nccl_version(dir);
  const auto nccl_dir = newest_version(dir / "comm" / "nccl", nccl);
  if (const auto v = nccl_dir ? nccl_dir : newest_version(dir / "comm" / "nccl")) {
    if (const auto f = table_file(*v, "nccl_perf")) {
      read_collectives(*f, "nccl", out);
      note(*f);
    }
  }
  if (out.gemm.empty() && out.attention.empty() && out.moe.empty()) {
    throw UserError(
        fmt::format("{}: no kernel tables of framework '{}' (this folder has: {})", dir.string(), framework,
                    frameworks.empty() ? std::string("none") : fmt::format("{}", fmt::join(frameworks, ", "))));
  }
  return out;
}

}  // namespace batchsim
