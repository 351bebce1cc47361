// A measurement directory written by calibration/ must be read by hwmodel's Vidur reader —
// the one `batchsim validate` and the fit use — with the right numbers in the right places.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "calibration/device_info.h"
#include "calibration/measurement_csv.h"
#include "hwmodel/fit/measurements.h"
#include "test_support.h"

namespace batchsim::calibration {
namespace {

SampleSummary constant_samples(double seconds) { return summarize(std::vector<double>(5, seconds)); }

TEST(HwmodelReader, ReadsACalibrationDirectory) {
  const std::filesystem::path dir = testing::scratch_dir("calibration_reader");
  const std::string gpu = device_slug("NVIDIA H200");
  const CalibrationModel& model = find_calibration_model("llama-2-7b");
  const std::filesystem::path model_dir = model_measurement_dir(dir, gpu, model);
  {
    MlpCsvWriter mlp(model_dir / "mlp.csv");
    for (int m : {1, 64, 4096}) {
      MlpRow row{&model, m, 1, "bf16", TimerKind::kCupti, {}};
      for (GemmOp op : kAllGemmOps) {
        row.ops[static_cast<size_t>(op)] = constant_samples(1e-6 * m * (1 + static_cast<int>(op)));
      }
      mlp.write(row);
    }
    AttentionCsvWriter attention(model_dir / "attention.csv", AttentionFileKind::kVidur);
    AttentionCsvWriter mixed(model_dir / "attention_mixed.csv", AttentionFileKind::kMixedDecode);
    calibration::AttentionRow decode{&model,
                                     1,
                                     16,
                                     16384,
                                     8,
                                     0,
                                     1024,
                                     1024,
                                     8192,
                                     false,
                                     "batchsim_paged_v1",
                                     1,
                                     "bf16",
                                     TimerKind::kCupti,
                                     constant_samples(40e-6)};
    attention.write(decode);
    calibration::AttentionRow prefill{&model,
                                      1,
                                      16,
                                      16384,
                                      1,
                                      512,
                                      2048,
                                      2560,
                                      2560,
                                      true,
                                      "batchsim_prefill_tiled",
                                      1,
                                      "bf16",
                                      TimerKind::kCupti,
                                      constant_samples(300e-6)};
    attention.write(prefill);
    calibration::AttentionRow uneven = decode;
    uneven.kv_cache_size_max_tokens = 1920;
    uneven.stats = constant_samples(55e-6);
    mixed.write(uneven);
    BandwidthCsvWriter bandwidth(dir / "bandwidth.csv");
    bandwidth.write({"copy", 1 << 30, TimerKind::kCupti, constant_samples(0.5e-3)});
  }

  const Measurements m = read_measurements(dir);
  EXPECT_EQ(m.device, "h200");  // the compute/<gpu>/ level, as in Vidur's tree
  ASSERT_EQ(m.token_ops.size(), 3u);
  const TokenOpRow& row = m.token_ops[1];
  EXPECT_EQ(row.num_tokens, 64);
  EXPECT_EQ(row.tp, 1);
  EXPECT_EQ(row.shape.num_heads, 32);
  EXPECT_EQ(row.shape.ffn_size, 11008);
  EXPECT_TRUE(row.shape.gated_mlp);
  EXPECT_NEAR(row.median_s[static_cast<int>(TokenOp::attn_pre_proj)], 64e-6, 1e-15);
  EXPECT_NEAR(row.median_s[static_cast<int>(TokenOp::attn_post_proj)], 2 * 64e-6, 1e-15);
  EXPECT_NEAR(row.median_s[static_cast<int>(TokenOp::mlp_up_proj)], 3 * 64e-6, 1e-15);
  EXPECT_NEAR(row.median_s[static_cast<int>(TokenOp::mlp_down_proj)], 4 * 64e-6, 1e-15);
  EXPECT_TRUE(std::isnan(row.median_s[static_cast<int>(TokenOp::input_layernorm)]));  // not a GEMM

  // Uniform decode and prefill are read; the mixed-length batch is not taken for a uniform one.
  ASSERT_EQ(m.attention.size(), 2u);
  const auto decode_it =
      std::find_if(m.attention.begin(), m.attention.end(), [](const auto& a) { return !a.is_prefill; });
  ASSERT_NE(decode_it, m.attention.end());
  EXPECT_EQ(decode_it->batch_size, 8);
  EXPECT_EQ(decode_it->kv_cache_size, 1024);
  EXPECT_NEAR(decode_it->median_s, 40e-6, 1e-15);
  const auto prefill_it =
      std::find_if(m.attention.begin(), m.attention.end(), [](const auto& a) { return a.is_prefill; });
  ASSERT_NE(prefill_it, m.attention.end());
  EXPECT_EQ(prefill_it->prefill_chunk_size, 512);
  EXPECT_EQ(prefill_it->kv_cache_size, 2048);
  EXPECT_NEAR(prefill_it->median_s, 300e-6, 1e-15);
}

}  // namespace
}  // namespace batchsim::calibration
