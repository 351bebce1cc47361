#include "calibration/measurement_csv.h"

#include <charconv>
#include <stdexcept>

namespace batchsim::calibration {
namespace {

constexpr std::string_view kVidurStats[] = {"min", "max", "mean", "median", "std"};
constexpr std::string_view kExtraStats[] = {"p10", "p90", "count"};

void append_stat_columns(std::vector<std::string>& header, std::string_view op,
                         std::span<const std::string_view> stats) {
  for (std::string_view stat : stats) {
    header.push_back("time_stats." + std::string(op) + "." + std::string(stat));
  }
}

constexpr double kMsPerS = 1e3;

std::string py_bool(bool value) { return value ? "True" : "False"; }

std::string_view decode_op_name(AttentionFileKind kind) {
  return kind == AttentionFileKind::kVidur ? "attn_decode" : "attn_decode_mixed";
}

}  // namespace

std::string_view profile_method_name(TimerKind timer) {
  return timer == TimerKind::kCupti ? "ProfileMethod.CUPTI" : "ProfileMethod.CUDA_EVENT";
}

std::filesystem::path model_measurement_dir(const std::filesystem::path& dir, const std::string& gpu_slug,
                                            const CalibrationModel& model) {
  return dir / "compute" / gpu_slug / model.hf_id;
}

std::filesystem::path model_measurement_dir(const std::filesystem::path& dir, const std::string& gpu_slug,
                                            const ShapeFileGemm& model) {
  return dir / "compute" / gpu_slug / model.folder();
}

CsvWriter::CsvWriter(const std::filesystem::path& path, std::vector<std::string> header)
    : path_(path), header_(std::move(header)) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  out_.open(path, std::ios::out | std::ios::trunc);
  if (!out_) throw std::runtime_error("cannot write " + path.string());
  write_row(header_);
}

void CsvWriter::write_row(const std::vector<std::string>& cells) {
  if (cells.size() != header_.size()) {
    throw std::logic_error(path_.string() + ": row has " + std::to_string(cells.size()) + " cells, header has " +
                           std::to_string(header_.size()));
  }
  for (size_t i = 0; i < cells.size(); ++i) {
    // None of our cells may contain a separator: names are ours, numbers are numbers.
    if (cells[i].find_first_of(",\"\n") != std::string::npos) {
      throw std::logic_error(path_.string() + ": cell needs quoting: " + cells[i]);
    }
    out_ << (i ? "," : "") << cells[i];
  }
  out_ << '\n';
  out_.flush();
  if (!out_) throw std::runtime_error("write failed: " + path_.string());
}

std::string format_number(double value) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, result.ptr);
}

void append_vidur_time_stats(std::vector<std::string>& cells, const std::optional<SampleSummary>& s) {
  if (!s) {
    cells.insert(cells.end(), std::size(kVidurStats), "");
    return;
  }
  for (double v : {s->min_s, s->max_s, s->mean_s, s->median_s, s->std_s}) cells.push_back(format_number(v * kMsPerS));
}

void append_extra_time_stats(std::vector<std::string>& cells, const std::optional<SampleSummary>& s) {
  if (!s) {
    cells.insert(cells.end(), std::size(kExtraStats), "");
    return;
  }
  cells.push_back(format_number(s->p10_s * kMsPerS));
  cells.push_back(format_number(s->p90_s * kMsPerS));
  cells.push_back(std::to_string(s->count));
}

// --- mlp.csv -------------------------------------------------------------------------------

std::vector<std::string> MlpCsvWriter::header() {
  std::vector<std::string> h;
  for (GemmOp op : {GemmOp::kQkv, GemmOp::kAttnOut, GemmOp::kMlpUp, GemmOp::kMlpDown}) {
    append_stat_columns(h, vidur_op_name(op), kVidurStats);
  }
  for (const char* c : {"n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp", "num_tokens",
                        "num_tensor_parallel_workers"}) {
    h.emplace_back(c);
  }
  append_stat_columns(h, vidur_op_name(GemmOp::kLmHead), kVidurStats);
  for (GemmOp op : kAllGemmOps) append_stat_columns(h, vidur_op_name(op), kExtraStats);
  h.emplace_back("dtype");
  h.emplace_back("profile_method");
  return h;
}

MlpCsvWriter::MlpCsvWriter(const std::filesystem::path& path) : csv_(path, header()) {}

void MlpCsvWriter::write(const MlpRow& row) {
  if (row.model == nullptr) throw std::logic_error("mlp row without a model");
  const CalibrationModel& m = *row.model;
  std::vector<std::string> cells;
  for (GemmOp op : {GemmOp::kQkv, GemmOp::kAttnOut, GemmOp::kMlpUp, GemmOp::kMlpDown}) {
    append_vidur_time_stats(cells, row.ops[static_cast<size_t>(op)]);
  }
  for (int v : {m.num_heads, m.num_kv_heads, m.hidden_size, m.ffn_size, m.vocab_size}) {
    cells.push_back(std::to_string(v));
  }
  cells.push_back(py_bool(m.gated_mlp));
  cells.push_back(std::to_string(row.num_tokens));
  cells.push_back(std::to_string(row.tensor_parallel));
  append_vidur_time_stats(cells, row.ops[static_cast<size_t>(GemmOp::kLmHead)]);
  for (GemmOp op : kAllGemmOps) append_extra_time_stats(cells, row.ops[static_cast<size_t>(op)]);
  cells.push_back(row.dtype);
  cells.emplace_back(profile_method_name(row.timer));
  csv_.write_row(cells);
}

// --- attention.csv -------------------------------------------------------------------------

std::vector<std::string> AttentionCsvWriter::header(AttentionFileKind kind) {
  std::vector<std::string> h;
  append_stat_columns(h, decode_op_name(kind), kVidurStats);
  append_stat_columns(h, "attn_prefill", kVidurStats);
  for (const char* c :
       {"n_embd", "n_q_head", "n_kv_head", "block_size", "num_tensor_parallel_workers", "max_model_len", "batch_size",
        "prefill_chunk_size", "kv_cache_size", "is_prefill", "attention_backend", "profile_method"}) {
    h.emplace_back(c);
  }
  append_stat_columns(h, decode_op_name(kind), kExtraStats);
  append_stat_columns(h, "attn_prefill", kExtraStats);
  for (const char* c : {"kv_cache_size_max", "kv_cache_size_sum", "num_partitions", "dtype"}) h.emplace_back(c);
  return h;
}

AttentionCsvWriter::AttentionCsvWriter(const std::filesystem::path& path, AttentionFileKind kind)
    : kind_(kind), csv_(path, header(kind)) {}

void AttentionCsvWriter::write(const AttentionRow& row) {
  if (row.model == nullptr) throw std::logic_error("attention row without a model");
  if (kind_ == AttentionFileKind::kMixedDecode && row.is_prefill) {
    throw std::logic_error("prefill row written to the mixed-decode attention file");
  }
  const CalibrationModel& m = *row.model;
  const std::optional<SampleSummary> decode = row.is_prefill ? std::nullopt : std::optional(row.stats);
  const std::optional<SampleSummary> prefill = row.is_prefill ? std::optional(row.stats) : std::nullopt;
  std::vector<std::string> cells;
  append_vidur_time_stats(cells, decode);
  append_vidur_time_stats(cells, prefill);
  for (int v : {m.hidden_size, m.num_heads, m.num_kv_heads, row.block_size_tokens, row.tensor_parallel,
                row.max_model_len_tokens, row.batch_size, row.prefill_chunk_size_tokens, row.kv_cache_size_tokens}) {
    cells.push_back(std::to_string(v));
  }
  cells.push_back(py_bool(row.is_prefill));
  cells.push_back(row.attention_backend);
  cells.emplace_back(profile_method_name(row.timer));
  append_extra_time_stats(cells, decode);
  append_extra_time_stats(cells, prefill);
  cells.push_back(std::to_string(row.kv_cache_size_max_tokens));
  cells.push_back(std::to_string(row.kv_cache_size_sum_tokens));
  cells.push_back(std::to_string(row.num_partitions));
  cells.push_back(row.dtype);
  csv_.write_row(cells);
}

// --- gemm.csv ------------------------------------------------------------------------------

std::vector<std::string> GemmCsvWriter::header() {
  std::vector<std::string> h{"model",         "op",   "m", "n", "k", "groups", "tp", "dp", "ep", "moe_tp", "layers",
                             "weight_format", "dtype"};
  append_stat_columns(h, "gemm", kVidurStats);
  append_stat_columns(h, "gemm", kExtraStats);
  h.emplace_back("profile_method");
  return h;
}

GemmCsvWriter::GemmCsvWriter(const std::filesystem::path& path) : csv_(path, header()) {}

void GemmCsvWriter::write(const GemmRow& row) {
  if (row.gemm == nullptr) throw std::logic_error("gemm row without a shape");
  const ShapeFileGemm& g = *row.gemm;
  std::vector<std::string> cells{g.model, g.op};
  for (int64_t v :
       {row.m, g.n, g.k, g.groups, int64_t{g.tp}, int64_t{g.dp}, int64_t{g.ep}, int64_t{g.moe_tp}, int64_t{g.layers}}) {
    cells.push_back(std::to_string(v));
  }
  cells.push_back(g.weight_format);
  cells.push_back(row.dtype);
  append_vidur_time_stats(cells, row.stats);
  append_extra_time_stats(cells, row.stats);
  cells.emplace_back(profile_method_name(row.timer));
  csv_.write_row(cells);
}

// --- bandwidth.csv -------------------------------------------------------------------------

std::vector<std::string> BandwidthCsvWriter::header() {
  std::vector<std::string> h{"kernel", "bytes"};
  append_stat_columns(h, "kernel", kVidurStats);
  append_stat_columns(h, "kernel", kExtraStats);
  h.emplace_back("bytes_per_s_median");
  h.emplace_back("profile_method");
  return h;
}

BandwidthCsvWriter::BandwidthCsvWriter(const std::filesystem::path& path) : csv_(path, header()) {}

void BandwidthCsvWriter::write(const BandwidthRow& row) {
  std::vector<std::string> cells{row.kernel, std::to_string(row.bytes_moved)};
  append_vidur_time_stats(cells, row.stats);
  append_extra_time_stats(cells, row.stats);
  cells.push_back(format_number(static_cast<double>(row.bytes_moved) / row.stats.median_s));
  cells.emplace_back(profile_method_name(row.timer));
  csv_.write_row(cells);
}

}  // namespace batchsim::calibration
