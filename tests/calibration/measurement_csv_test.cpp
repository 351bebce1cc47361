// Our measurement files must carry Vidur's columns, in Vidur's order and units, so that the
// reader and fit written for the published measurements (hwmodel/measured/vidur/) read
// ours unchanged. The published headers are read from the shipped tables, not copied here.
#include "calibration/measurement_csv.h"
#include "hwmodel/base/line_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "calibration/device_info.h"
#include "test_support.h"

namespace batchsim::calibration {
namespace {

std::vector<std::string> split_csv_line(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();  // some published files are CRLF
  std::vector<std::string> cells;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

std::vector<std::map<std::string, std::string>> read_csv(const std::filesystem::path& path,
                                                         std::vector<std::string>* header_out = nullptr) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = split_csv_line(line);
  if (header_out) *header_out = header;
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    const std::vector<std::string> cells = split_csv_line(line);
    EXPECT_EQ(cells.size(), header.size()) << line;
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < std::min(cells.size(), header.size()); ++i) row[header[i]] = cells[i];
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<std::string> read_header(const std::filesystem::path& path) {
  LineReader in(path);  // the published tables are stored gzip-compressed
  std::string line;
  EXPECT_TRUE(in.next(line)) << path;
  return split_csv_line(line);
}

// Every column of `published` that `keep` accepts appears in `ours`, in the same order.
template <class Keep>
void expect_ordered_subset(const std::vector<std::string>& published, const std::vector<std::string>& ours, Keep keep) {
  size_t pos = 0;
  int matched = 0;
  for (const std::string& col : published) {
    if (!keep(col)) continue;
    const auto it = std::find(ours.begin() + static_cast<int64_t>(pos), ours.end(), col);
    ASSERT_NE(it, ours.end()) << "missing or out of order: " << col;
    pos = static_cast<size_t>(it - ours.begin()) + 1;
    ++matched;
  }
  EXPECT_GT(matched, 5);
}

SampleSummary summary_from(double median_s) {
  return summarize(std::vector<double>{median_s * 0.9, median_s, median_s * 1.3, median_s * 1.01, median_s});
}

TEST(MlpCsv, CarriesVidurColumnsInOrderAndRoundTripsValues) {
  const std::filesystem::path published =
      testing::data_file(testing::measured_dir(), "vidur/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv");
  const std::vector<std::string> ours = MlpCsvWriter::header();
  // Vidur's columns for the operators we measure plus all shape columns. Norms, rope,
  // activation and embedding are not GEMMs and are not measured by calibration.
  expect_ordered_subset(read_header(published), ours, [](const std::string& c) {
    for (const char* op : {"attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"}) {
      if (c.find(std::string("time_stats.") + op + ".") == 0) return true;
    }
    return c.find("time_stats.") != 0;
  });

  const std::filesystem::path file = testing::scratch_dir("calibration_mlp_csv") / "mlp.csv";
  const CalibrationModel& model = find_calibration_model("llama-2-7b");
  MlpRow row{&model, 4096, 2, "bf16", TimerKind::kCupti, {}};
  row.ops[static_cast<size_t>(GemmOp::kQkv)] = summary_from(1.911e-3);
  row.ops[static_cast<size_t>(GemmOp::kMlpDown)] = summary_from(1.0 / 3.0 * 1e-3);
  {
    MlpCsvWriter writer(file);
    writer.write(row);
  }
  std::vector<std::string> header;
  const auto rows = read_csv(file, &header);
  EXPECT_EQ(header, ours);
  ASSERT_EQ(rows.size(), 1u);
  const auto& r = rows[0];
  // Milliseconds, one layer, one GPU; shortest round-trip formatting loses nothing.
  EXPECT_EQ(std::stod(r.at("time_stats.attn_pre_proj.median")), 1.911e-3 * 1e3);
  EXPECT_EQ(std::stod(r.at("time_stats.mlp_down_proj.median")), 1.0 / 3.0 * 1e-3 * 1e3);
  EXPECT_EQ(std::stod(r.at("time_stats.attn_pre_proj.max")), 1.3 * 1.911e-3 * 1e3);
  EXPECT_EQ(r.at("time_stats.attn_pre_proj.count"), "5");
  EXPECT_EQ(r.at("time_stats.attn_post_proj.median"), "");  // not measured: empty, as Vidur does
  EXPECT_EQ(r.at("n_head"), "32");
  EXPECT_EQ(r.at("n_kv_head"), "32");
  EXPECT_EQ(r.at("n_embd"), "4096");
  EXPECT_EQ(r.at("n_expanded_embd"), "11008");
  EXPECT_EQ(r.at("use_gated_mlp"), "True");
  EXPECT_EQ(r.at("num_tokens"), "4096");
  EXPECT_EQ(r.at("num_tensor_parallel_workers"), "2");
  EXPECT_EQ(r.at("dtype"), "bf16");
  EXPECT_EQ(r.at("profile_method"), "ProfileMethod.CUPTI");
}

TEST(AttentionCsv, CarriesVidurColumnsInOrderForDecodeAndPrefillRows) {
  const std::filesystem::path vidur = testing::measured_dir() / "vidur/compute/a100";
  const std::vector<std::string> ours = AttentionCsvWriter::header(AttentionFileKind::kVidur);
  expect_ordered_subset(
      read_header(testing::data_file(vidur, "meta-llama/Llama-2-7b-hf/attention_SUBSET_tp1_1810rows.csv")), ours,
      [](const std::string&) { return true; });
  // The complete profile also has reshape timings, which are not attention kernels.
  expect_ordered_subset(read_header(testing::data_file(vidur, "attention-70b-shape-tp2/attention.csv")), ours,
                        [](const std::string& c) { return c.find("reshape") == std::string::npos; });

  const std::filesystem::path file = testing::scratch_dir("calibration_attention_csv") / "attention.csv";
  const CalibrationModel& model = find_calibration_model("llama-3-8b");
  {
    AttentionCsvWriter writer(file, AttentionFileKind::kVidur);
    AttentionRow decode{&model,
                        1,
                        16,
                        16384,
                        8,
                        0,
                        1024,
                        1920,
                        8192,
                        false,
                        "batchsim_paged_v1",
                        1,
                        "bf16",
                        TimerKind::kCudaEvent,
                        summary_from(0.05e-3)};
    AttentionRow prefill{&model,
                         1,
                         16,
                         16384,
                         1,
                         512,
                         4096,
                         4608,
                         4608,
                         true,
                         "batchsim_prefill",
                         1,
                         "bf16",
                         TimerKind::kCupti,
                         summary_from(0.2e-3)};
    writer.write(decode);
    writer.write(prefill);
  }
  const auto rows = read_csv(file);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(std::stod(rows[0].at("time_stats.attn_decode.median")), 0.05);
  EXPECT_EQ(rows[0].at("time_stats.attn_prefill.median"), "");
  EXPECT_EQ(rows[0].at("is_prefill"), "False");
  EXPECT_EQ(rows[0].at("batch_size"), "8");
  EXPECT_EQ(rows[0].at("prefill_chunk_size"), "0");
  EXPECT_EQ(rows[0].at("kv_cache_size"), "1024");
  EXPECT_EQ(rows[0].at("kv_cache_size_max"), "1920");
  EXPECT_EQ(rows[0].at("n_q_head"), "32");
  EXPECT_EQ(rows[0].at("n_kv_head"), "8");
  EXPECT_EQ(rows[0].at("profile_method"), "ProfileMethod.CUDA_EVENT");
  EXPECT_EQ(rows[1].at("time_stats.attn_decode.median"), "");
  EXPECT_EQ(std::stod(rows[1].at("time_stats.attn_prefill.median")), 0.2);
  EXPECT_EQ(rows[1].at("is_prefill"), "True");
  EXPECT_EQ(rows[1].at("prefill_chunk_size"), "512");
  EXPECT_EQ(rows[1].at("kv_cache_size"), "4096");
}

TEST(AttentionCsv, MixedDecodeRowsNameTheirOwnOperator) {
  // A reader that knows only Vidur's attn_decode must not take mixed-length batches for
  // uniform ones: the mixed file has attn_decode_mixed and no attn_decode column.
  const std::vector<std::string> mixed = AttentionCsvWriter::header(AttentionFileKind::kMixedDecode);
  EXPECT_EQ(std::count(mixed.begin(), mixed.end(), "time_stats.attn_decode.median"), 0);
  EXPECT_EQ(std::count(mixed.begin(), mixed.end(), "time_stats.attn_decode_mixed.median"), 1);
  EXPECT_EQ(std::count(mixed.begin(), mixed.end(), "kv_cache_size_max"), 1);
  const std::filesystem::path file = testing::scratch_dir("calibration_mixed_csv") / "attention_mixed.csv";
  const CalibrationModel& model = find_calibration_model("llama-2-7b");
  AttentionCsvWriter writer(file, AttentionFileKind::kMixedDecode);
  AttentionRow prefill{&model,
                       1,
                       16,
                       16384,
                       1,
                       512,
                       0,
                       512,
                       512,
                       true,
                       "batchsim_prefill",
                       1,
                       "bf16",
                       TimerKind::kCupti,
                       summary_from(0.2e-3)};
  EXPECT_THROW(writer.write(prefill), std::logic_error);
}

TEST(MeasurementLayout, MirrorsVidursComputeGpuOrgModelFolders) {
  const CalibrationModel& model = find_calibration_model("llama-2-7b");
  EXPECT_EQ(model_measurement_dir("meas", device_slug("NVIDIA H200"), model).generic_string(),
            "meas/compute/h200/meta-llama/Llama-2-7b-hf");
  EXPECT_EQ(device_slug("NVIDIA A100-SXM4-80GB"), "a100-sxm4-80gb");
  EXPECT_EQ(device_slug("NVIDIA H100 80GB HBM3"), "h100-80gb-hbm3");
  EXPECT_EQ(device_slug("  "), "gpu");
}

TEST(BandwidthCsv, ReportsBytesPerSecondAtTheMedian) {
  const std::filesystem::path file = testing::scratch_dir("calibration_bandwidth_csv") / "bandwidth.csv";
  {
    BandwidthCsvWriter writer(file);
    writer.write({"copy", 2'000'000'000, TimerKind::kCupti, summary_from(0.5e-3)});
  }
  const auto rows = read_csv(file);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(std::stod(rows[0].at("bytes_per_s_median")), 4e12);
  EXPECT_EQ(std::stod(rows[0].at("time_stats.kernel.median")), 0.5);
}

TEST(CsvWriter, RefusesRowsOfTheWrongWidthOrNeedingQuotes) {
  const std::filesystem::path file = testing::scratch_dir("calibration_csv_writer") / "x.csv";
  CsvWriter csv(file, {"a", "b"});
  EXPECT_THROW(csv.write_row({"1"}), std::logic_error);
  EXPECT_THROW(csv.write_row({"1", "x,y"}), std::logic_error);
  EXPECT_NO_THROW(csv.write_row({"1", ""}));
}

TEST(DeviceInfo, JsonRoundTrip) {
  DeviceInfo d;
  d.name = "NVIDIA H200";
  d.compute_capability_major = 9;
  d.sm_count = 132;
  d.sm_clock_khz = 1980000;
  d.memory_clock_khz = 3201000;
  d.memory_bus_width_bits = 6144;
  d.memory_bytes = 150'000'000'000;
  d.l2_cache_bytes = 62'914'560;
  d.driver_version = 13000;
  d.runtime_version = 13000;
  d.cublaslt_version = 130100;
  d.cupti_api_version = 130001;
  d.timer = "cupti";
  d.measured_at_utc = "2026-11-29T10:00:00Z";
  // 2 transfers × 3.201 GHz × 768 bytes = 4.92 TB/s, the H200 datasheet's 4.8 TB/s class.
  EXPECT_NEAR(d.theoretical_hbm_bytes_per_s(), 4.917e12, 1e9);
  const std::filesystem::path file = testing::scratch_dir("calibration_device_json") / "device.json";
  write_device_info_json(d, file);
  const DeviceInfo back = read_device_info_json(file);
  EXPECT_EQ(back.name, d.name);
  EXPECT_EQ(back.sm_count, 132);
  EXPECT_EQ(back.memory_bytes, d.memory_bytes);
  EXPECT_EQ(back.cublaslt_version, 130100);
  EXPECT_EQ(back.timer, "cupti");
  EXPECT_THROW(read_device_info_json(file.parent_path() / "missing.json"), std::runtime_error);
}

}  // namespace
}  // namespace batchsim::calibration
