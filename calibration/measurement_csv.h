// batchsim calibration — the measurement directory and its CSV files.
//
// The files follow Vidur's profiling schema (microsoft/vidur, data/profiling/compute/<gpu>/
// <org>/<model>/{mlp,attention}.csv; copies in hwmodel/measured/vidur/), so one reader and
// one fit (hwmodel/fit/measurements.h, hwmodel/fit/) serve our own measurements and the published
// ones. A measurement directory mirrors Vidur's data/profiling/ root:
//
//   DIR/device.json                              the GPU and software measured on (device_info.h)
//   DIR/bandwidth.csv                            streaming read / copy kernels (ours; not Vidur)
//   DIR/compute/<gpu>/<hf_id>/mlp.csv            BF16 GEMMs of one layer + LM head
//   DIR/compute/<gpu>/<hf_id>/mlp_fp16.csv       the same in FP16 (Vidur's own data is FP16)
//   DIR/compute/<gpu>/<hf_id>/attention.csv      decode (uniform contexts) and prefill attention
//   DIR/compute/<gpu>/<hf_id>/attention_mixed.csv  decode with mixed context lengths per batch
//   DIR/compute/<gpu>/<hf_id>/gemm.csv           GEMMs of a shape file (shape_file.h): any
//                                                model's own shapes, experts and MLA included
//   DIR/compute/<gpu>/<hf_id>/gemm_fp16.csv      the same in FP16
//
// <gpu> is device_slug() of the device name ("h200"), <hf_id> the model's Hugging Face id
// ("meta-llama/Llama-2-7b-hf"), as in Vidur.
//
// Every file starts with Vidur's columns, in Vidur's order and units — times in milliseconds
// for ONE layer on ONE GPU as time_stats.<op>.{min,max,mean,median,std} (std is the population
// one), booleans as True/False, model shapes of the whole model plus
// num_tensor_parallel_workers — and appends columns of our own after them: the LM head
// (time_stats.lm_head.*), p10/p90 and sample counts (time_stats.<op>.{p10,p90,count}), dtype,
// and for attention the largest and summed context (kv_cache_size_max, kv_cache_size_sum) and
// the number of decode partitions.
// Mixed-length decode batches are a different operator for the fit — the batch waits for its
// longest sequence — so attention_mixed.csv names it attn_decode_mixed (kv_cache_size is the
// rounded mean there): a reader that only knows Vidur's attn_decode skips those rows instead
// of mistaking them for uniform batches.
// gemm.csv is ours alone (Vidur has no such file; hwmodel's reader lists it among the files it
// skips): one row per (op, M), the shape in m, n, k, groups, the layout it is per GPU of, and
// time_stats.gemm.* — one GEMM (or one batched call of `groups` GEMMs) on one GPU. Its
// (m, n, k, median) are the points of a measured GEMM table (hwmodel/gemm_table.h).
// Rows are flushed as written, so a run cut short by a time limit keeps what it measured.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "calibration/sample_stats.h"
#include "calibration/shape_file.h"
#include "calibration/shape_grid.h"

namespace batchsim::calibration {

// Vidur's ProfileMethod-style tag for how the times were taken.
enum class TimerKind { kCupti, kCudaEvent };
std::string_view profile_method_name(TimerKind timer);  // "ProfileMethod.CUPTI", …

std::filesystem::path model_measurement_dir(const std::filesystem::path& dir, const std::string& gpu_slug,
                                            const CalibrationModel& model);
// The same for a shape file's model (its hf_id, else its name).
std::filesystem::path model_measurement_dir(const std::filesystem::path& dir, const std::string& gpu_slug,
                                            const ShapeFileGemm& model);

// A CSV file with a fixed header; each row must have one cell per column.
class CsvWriter {
 public:
  CsvWriter(const std::filesystem::path& path, std::vector<std::string> header);
  void write_row(const std::vector<std::string>& cells);
  const std::vector<std::string>& header() const { return header_; }

 private:
  std::filesystem::path path_;
  std::vector<std::string> header_;
  std::ofstream out_;
};

// Shortest text that reads back to the same double (std::to_chars).
std::string format_number(double value);
// time_stats.<op>.{min,max,mean,median,std} of `s` in milliseconds, or empty cells.
void append_vidur_time_stats(std::vector<std::string>& cells, const std::optional<SampleSummary>& s);
void append_extra_time_stats(std::vector<std::string>& cells, const std::optional<SampleSummary>& s);

// One row of mlp.csv: all GEMMs of a layer at one (num_tokens, tp).
struct MlpRow {
  const CalibrationModel* model = nullptr;
  int num_tokens = 0;
  int tensor_parallel = 1;
  std::string dtype;  // "bf16" | "fp16"
  TimerKind timer = TimerKind::kCupti;
  std::array<std::optional<SampleSummary>, std::size(kAllGemmOps)> ops;  // indexed by GemmOp
};

class MlpCsvWriter {
 public:
  explicit MlpCsvWriter(const std::filesystem::path& path);
  void write(const MlpRow& row);
  static std::vector<std::string> header();

 private:
  CsvWriter csv_;
};

// One row of attention.csv / attention_mixed.csv.
struct AttentionRow {
  const CalibrationModel* model = nullptr;
  int tensor_parallel = 1;
  int block_size_tokens = 16;
  int max_model_len_tokens = 0;
  int batch_size = 0;
  int prefill_chunk_size_tokens = 0;  // 0 for decode
  int kv_cache_size_tokens = 0;       // decode: context per sequence (mean if mixed); prefill: prior
  int kv_cache_size_max_tokens = 0;
  int64_t kv_cache_size_sum_tokens = 0;
  bool is_prefill = false;
  std::string attention_backend;  // which of our kernels ran
  int num_partitions = 1;
  std::string dtype;
  TimerKind timer = TimerKind::kCupti;
  SampleSummary stats;
};

enum class AttentionFileKind { kVidur, kMixedDecode };

class AttentionCsvWriter {
 public:
  AttentionCsvWriter(const std::filesystem::path& path, AttentionFileKind kind);
  void write(const AttentionRow& row);
  static std::vector<std::string> header(AttentionFileKind kind);

 private:
  AttentionFileKind kind_;
  CsvWriter csv_;
};

// One row of gemm.csv: one op of a shape file at one M.
struct GemmRow {
  const ShapeFileGemm* gemm = nullptr;
  int64_t m = 0;
  std::string dtype;  // what was timed: "bf16" | "fp16"
  TimerKind timer = TimerKind::kCupti;
  SampleSummary stats;
};

class GemmCsvWriter {
 public:
  explicit GemmCsvWriter(const std::filesystem::path& path);
  void write(const GemmRow& row);
  static std::vector<std::string> header();

 private:
  CsvWriter csv_;
};

struct BandwidthRow {
  std::string kernel;       // "stream_read" | "copy"
  int64_t bytes_moved = 0;  // read + written by one launch
  TimerKind timer = TimerKind::kCupti;
  SampleSummary stats;
};

class BandwidthCsvWriter {
 public:
  explicit BandwidthCsvWriter(const std::filesystem::path& path);
  void write(const BandwidthRow& row);
  static std::vector<std::string> header();

 private:
  CsvWriter csv_;
};

}  // namespace batchsim::calibration
