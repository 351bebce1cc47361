// Multi-head latent attention (mla.h): decode absorbed (all heads on the one latent, padded to the
// kernels' 64-head tile) and prefill un-absorbed, by hand; tensor parallelism divides the heads,
// never the latent; InferSim's H800 tables read, fitted and scored held out (the figures
// hwmodel/README.md quotes, pinned); the shipped profile's `mla` block as a fresh fit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>

#include "hwmodel/fit/fit_mla.h"
#include "hwmodel/fit/mla_tables.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/mla.h"
#include "hwmodel_test_util.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::HasSubstr;
using testing::user_error_of;
using testing::write_text_file;

std::filesystem::path infersim_mla_dir() { return testing::measured_dir() / "infersim" / "h800" / "mla"; }

TEST(Mla, DecodeWorkByHandAndTheLatentIsNotSplitByTp) {
  const ModelSpec v3 = resolve_model("deepseek-v3");  // 128 heads, latent 512 + RoPE 64, nope 128, v 128
  ASSERT_TRUE(v3.is_mla());
  // Two sequences of 1,000 keys. TP 1: 128 heads, a multiple of the 64-row tile.
  const OperatorWork tp1 = mla_decode_attention_work(v3, 1, 2, 2000);
  EXPECT_DOUBLE_EQ(tp1.flops, 2.0 * 128 * (576 + 512) * 2000);
  EXPECT_DOUBLE_EQ(tp1.bytes, 2000.0 * 1152 + 2.0 * 128 * (576 + 512) * 2);
  // TP 8: 16 heads per GPU, padded to one 64-row tile; the latent is read whole on every GPU.
  const OperatorWork tp8 = mla_decode_attention_work(v3, 8, 2, 2000);
  EXPECT_DOUBLE_EQ(tp8.flops, 2.0 * 64 * (576 + 512) * 2000);
  EXPECT_DOUBLE_EQ(tp8.bytes - 2.0 * 16 * (576 + 512) * 2, tp1.bytes - 2.0 * 128 * (576 + 512) * 2);
  // TP 2 (64 heads): no padding, half TP 1's FLOPs; the latent bytes again the same.
  EXPECT_DOUBLE_EQ(mla_decode_attention_work(v3, 2, 2, 2000).flops, tp1.flops / 2);
  // An FP8 cache in FlashMLA's layout: 512 e4m3 + 4 float32 scales + 64 bf16 RoPE = 656 bytes.
  ModelSpec fp8 = v3;
  fp8.kv_dtype_bytes = 1;
  EXPECT_DOUBLE_EQ(mla_decode_attention_work(fp8, 1, 2, 2000).bytes, 2000.0 * 656 + 2.0 * 128 * (576 + 512) * 2);
  EXPECT_THROW(mla_decode_attention_work(resolve_model("llama-3-8b"), 1, 1, 10), std::logic_error);
}

TEST(Mla, PrefillWorkByHand) {
  const ModelSpec v3 = resolve_model("deepseek-v3");
  // 100 new tokens after 50 cached: 100 x 50 + 5,050 pairs, QK^T over 192 and PV over 128.
  const OperatorWork w = mla_prefill_attention_work(v3, 1, 100, 50);
  EXPECT_DOUBLE_EQ(w.flops, 2.0 * 128 * (192 + 128) * 10050);
  EXPECT_DOUBLE_EQ(w.bytes, (100.0 + 150) * 128 * (192 + 128) * 2);
  EXPECT_DOUBLE_EQ(mla_prefill_attention_work(v3, 8, 100, 50).flops, w.flops / 8);  // heads split by tp
  // Chunks of one call add up.
  OperatorWork two = w;
  two += mla_prefill_attention_work(v3, 1, 10, 0);
  EXPECT_DOUBLE_EQ(two.flops, w.flops + 2.0 * 128 * 320 * 55);
}

TEST(Mla, TimesAreTheRooflineOfTheMlaBlock) {
  HardwareProfile gpu = resolve_gpu("h100-sxm");
  gpu.mla = {20e-6, 0.5, 0.75, 50e-6, 0.6};
  const ModelSpec v3 = resolve_model("deepseek-v3");
  const OperatorWork d = mla_decode_attention_work(v3, 1, 128, 128 * 4096);
  EXPECT_DOUBLE_EQ(mla_decode_attention_time_s(gpu, d),
                   20e-6 + std::max(d.flops / (989e12 * 0.5), d.bytes / (3.35e12 * 0.75)));
  const OperatorWork p = mla_prefill_attention_work(v3, 1, 4096, 0);
  EXPECT_DOUBLE_EQ(mla_prefill_attention_time_s(gpu, p), 50e-6 + p.flops / (989e12 * 0.6));
  EXPECT_EQ(mla_prefill_attention_time_s(gpu, OperatorWork{}), 0);
  // Without an mla block: the flat attention parameters in the same formulas.
  const HardwareProfile flat = resolve_gpu("h100-sxm");
  EXPECT_DOUBLE_EQ(mla_decode_attention_time_s(flat, d),
                   flat.attention_launch_s + std::max(d.flops / (989e12 * flat.prefill_attention_efficiency),
                                                      d.bytes / (3.35e12 * flat.decode_attention_efficiency)));
}

TEST(Mla, ReadsInferSimsTables) {
  const MlaTables t = read_mla_tables(infersim_mla_dir());
  EXPECT_EQ(t.device, "h800");
  EXPECT_EQ(t.decode.size(), 41u);
  EXPECT_EQ(t.prefill.size(), 5u);
  EXPECT_THAT(t.files_read, ::testing::ElementsAre("decode/128-512-64.csv", "prefill/128-128-64.csv"));
  EXPECT_EQ(t.decode[0].heads, 128);
  EXPECT_EQ(t.decode[0].kv_lora_rank, 512);
  EXPECT_EQ(t.decode[0].qk_rope_head_dim, 64);
  EXPECT_NEAR(t.decode[0].seconds, 20.91e-6, 1e-12);  // batch 1, kv_len 1024
  EXPECT_TRUE(is_mla_table_dir(infersim_mla_dir()));
  EXPECT_TRUE(is_mla_table_dir(infersim_mla_dir().parent_path()));  // the GPU's folder holding mla/
  EXPECT_FALSE(is_mla_table_dir(testing::measured_dir() / "aiconfigurator" / "h100_sxm"));

  const auto dir = testing::scratch_dir("mla_bad") / "mla";
  write_text_file(dir / "decode", "128-512-64.csv",
                  "dtype,kv_dtype,batch_size,kv_len,latency_us,mfu\nbf16,int4,1,1024,20.9,0.01\n");
  EXPECT_THAT(user_error_of([&] { read_mla_tables(dir); }),
              HasSubstr("128-512-64.csv:2: column 'kv_dtype': 'int4' is not bf16, fp16 or fp8"));
  write_text_file(dir / "decode", "128-512-64.csv",
                  "dtype,kv_dtype,batch_size,kv_len,latency_us,mfu\nbf16,bf16,1,1024,-3,0.01\n");
  EXPECT_THAT(user_error_of([&] { read_mla_tables(dir); }), HasSubstr("column 'latency_us' must be > 0"));
  EXPECT_THAT(user_error_of([&] { read_mla_tables(testing::scratch_dir("mla_none")); }),
              HasSubstr("no InferSim MLA tables"));
}

// Held out as fit_mla.h says: every fifth decode row, one kv_len or one batch size at a time
// (refit per fold), and the longest prompt. The prototype's figures
// (/tmp/moe-work/attn-fit/REPORT.md, Part 1): 5.9 / 6.3 / 8.2% and -8.1%.
TEST(Mla, HeldOutOnInferSimsH800Tables) {
  const MlaTables t = read_mla_tables(infersim_mla_dir());
  const MlaValidationReport r = validate_mla(t, resolve_gpu("h100-sxm"));
  EXPECT_EQ(r.decode.count, 8);
  EXPECT_EQ(r.decode_fitted.count, 33);
  EXPECT_LE(r.decode.mape_percent, 6.5);
  EXPECT_EQ(r.decode_leave_one_kv_len_out.count, 41);
  EXPECT_LE(r.decode_leave_one_kv_len_out.mape_percent, 7.0);
  EXPECT_LE(r.decode_leave_one_batch_out.mape_percent, 9.0);
  EXPECT_EQ(r.prefill.count, 1);  // seq_len 32,768: thin evidence, one row
  EXPECT_LE(r.prefill.mape_percent, 10.0);
  EXPECT_LE(r.prefill_fitted.mape_percent, 3.0);
  // The constants: a launch from Python (~20 us, no CUDA graph), compute and memory roofs.
  EXPECT_NEAR(r.scored.decode_launch_s, 20.5e-6, 1e-6);
  EXPECT_NEAR(r.scored.decode_compute_efficiency, 0.55, 0.02);
  EXPECT_NEAR(r.scored.decode_memory_efficiency, 0.75, 0.02);
  EXPECT_NEAR(r.scored.prefill_efficiency, 0.63, 0.02);
}

// With 128 heads (DP attention or TP 1) MLA decode is compute-bound; from TP 2 on (64 heads or
// fewer, padded to 64) it is memory-bound, and the latent is read whole on every GPU: decode
// per GPU shrinks by about a tenth from TP 1 to TP 8, not eightfold.
TEST(Mla, ShippedProfileDecodesByTheLatentNotTheHeads) {
  const HardwareProfile gpu = resolve_gpu("h100-sxm-fitted");
  ASSERT_FALSE(gpu.mla.empty());
  const ModelSpec v3 = resolve_model("deepseek-v3");
  const double tp1 = mla_decode_attention_time_s(gpu, mla_decode_attention_work(v3, 1, 128, 128 * 4096));
  const double tp8 = mla_decode_attention_time_s(gpu, mla_decode_attention_work(v3, 8, 128, 128 * 4096));
  EXPECT_GT(tp8 / tp1, 0.85);
  EXPECT_LT(tp8 / tp1, 0.95);
  // The block is a fresh fit of the shipped tables on the shipped profile (hwmodel/README.md).
  const MlaAttentionFit fresh = fit_mla(read_mla_tables(infersim_mla_dir()), gpu, KernelRows::kAll);
  EXPECT_NEAR(gpu.mla.decode_launch_s, fresh.decode_launch_s, 1e-6 * fresh.decode_launch_s);
  EXPECT_NEAR(gpu.mla.decode_compute_efficiency, fresh.decode_compute_efficiency, 1e-6);
  EXPECT_NEAR(gpu.mla.decode_memory_efficiency, fresh.decode_memory_efficiency, 1e-6);
  EXPECT_NEAR(gpu.mla.prefill_launch_s, fresh.prefill_launch_s, 1e-6 * fresh.prefill_launch_s);
  EXPECT_NEAR(gpu.mla.prefill_efficiency, fresh.prefill_efficiency, 1e-6);
  EXPECT_THAT(gpu.provenance, HasSubstr("FlashInfer's MLA kernel"));
}

}  // namespace
}  // namespace batchsim
