// Kernel tables in aiconfigurator's layout: the reader on NVIDIA's H100 tables shipped here, the
// GEMM tables a profile carries (looked up by the cost model, written and read back beside the
// profile), and the held-out accuracy of a profile fitted on half of the shapes and scored on
// the other half. The accuracy figures are those hwmodel/README.md quotes; a change to the
// model or the fit that makes them worse fails here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <vector>

#include "hwmodel/base/error.h"
#include "hwmodel/fit/fit_kernel_tables.h"
#include "hwmodel/fit/kernel_tables.h"
#include "hwmodel/fit/kernel_validation.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/roofline.h"
#include <fmt/format.h>

#include "hwmodel_test_util.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::user_error_of;
using testing::write_text_file;

std::filesystem::path h100_dir() { return testing::measured_dir() / "aiconfigurator" / "h100_sxm"; }

const KernelTables& h100_tables() {
  static const KernelTables tables = read_kernel_tables(h100_dir(), "vllm");
  return tables;
}

// The fit on the training half of the shapes, scored on the other half by several tests.
const KernelFitResult& h100_training_fit() {
  static const KernelFitResult fit = fit_kernel_tables(h100_tables(), resolve_gpu("h100-sxm"), KernelRows::kTrain);
  return fit;
}

TEST(KernelTables, ReadsNvidiasH100TablesForVllm) {
  const KernelTables& t = h100_tables();
  EXPECT_EQ(t.system, "h100_sxm");
  EXPECT_EQ(t.framework, "vllm");
  // Row counts of the shipped files (hwmodel/measured/README.md).
  EXPECT_EQ(t.gemm.size(), 107188u);
  size_t prefill = 0;
  for (const auto& r : t.attention) prefill += r.prefill;
  EXPECT_EQ(prefill, 50830u);
  EXPECT_EQ(t.attention.size() - prefill, 62166u);
  EXPECT_EQ(t.moe.size(), 49862u);
  // NCCL's version is the one system.yaml names (2.27.3), not the newest folder.
  EXPECT_THAT(t.files_read, ::testing::Contains("comm/nccl/2.27.3/nccl_perf.csv.gz"));
  EXPECT_THAT(t.files_read, ::testing::Contains("comm/vllm/0.24.0/custom_allreduce_perf.csv.gz"));
  // Milliseconds became seconds: (n, k) = (4096, 4096), m = 1 in bf16 takes about 13 us.
  int found = 0;
  for (const auto& r : t.gemm) {
    if (r.dtype == "bfloat16" && r.m == 1 && r.n == 4096 && r.k == 4096) {
      EXPECT_NEAR(r.seconds, 13e-6, 3e-6);
      ++found;
    }
  }
  EXPECT_EQ(found, 1);
  EXPECT_TRUE(is_kernel_table_dir(h100_dir()));
  EXPECT_FALSE(is_kernel_table_dir(testing::measured_dir() / "vidur"));
}

TEST(KernelTables, BadFoldersAndRowsAreNamed) {
  EXPECT_THAT(user_error_of([] { read_kernel_tables(h100_dir(), "tensorflow-serving"); }),
              AllOf(HasSubstr("no kernel tables of framework 'tensorflow-serving'"), HasSubstr("has: vllm")));
  const auto dir = testing::scratch_dir("kernel_tables_bad");
  write_text_file(dir / "gemm" / "vllm" / "1.0", "gemm_perf.csv",
                  "framework,version,device,op_name,kernel_source,gemm_dtype,m,n,k,latency\n"
                  "VLLM,1.0,H100,gemm,cublas,bfloat16,1,4096,4096,0.013\n"
                  "VLLM,1.0,H100,gemm,cublas,bfloat16,1e30,4096,4096,0.013\n");
  EXPECT_THAT(user_error_of([&] { read_kernel_tables(dir, "vllm"); }),
              HasSubstr("gemm_perf.csv:3: column 'm': 1e30 is not a whole number"));
  write_text_file(dir / "gemm" / "vllm" / "1.0", "gemm_perf.csv",
                  "framework,version,device,op_name,kernel_source,gemm_dtype,m,n,k,latency\n"
                  "VLLM,1.0,H100,gemm,cublas,bfloat16,1,4096,4096,-1\n");
  EXPECT_THAT(user_error_of([&] { read_kernel_tables(dir, "vllm"); }),
              HasSubstr("gemm_perf.csv:2: column 'latency' must be > 0"));
}

// A profile names its GEMM tables; the cost model looks GEMMs up there and falls back to the
// roofline outside their span; saving writes the tables beside the profile and they read back.
TEST(KernelTables, AProfileCarriesGemmTablesThatTheCostModelUses) {
  const auto dir = testing::scratch_dir("kernel_tables_profile");
  std::vector<GemmPoint> points;
  for (int64_t m : {1, 64, 4096})
    for (int64_t n : {1024, 4096})
      for (int64_t k : {1024, 4096}) points.push_back({m, n, k, 1e-5 * static_cast<double>(m) / 64.0 + 2e-6});
  write_text_file(dir, "mine.gemm-bf16.txt", GemmTable::from_points("bf16", "test", points).to_text());
  write_text_file(dir, "mine.yaml", "base: h100-sxm\ngemm_tables: {bf16: mine.gemm-bf16.txt}\n");
  const HardwareProfile p = load_hardware_profile(dir / "mine.yaml");
  ASSERT_NE(p.gemm_table(WeightFormat::bf16), nullptr);
  EXPECT_EQ(p.gemm_table(WeightFormat::fp8), nullptr);  // no FP8 table: FP8 GEMMs use the roofline
  EXPECT_DOUBLE_EQ(gemm_time_s(p, GemmShape{4096, 4096}, 64, WeightFormat::bf16), 1e-5 + 2e-6);
  EXPECT_DOUBLE_EQ(gemm_time_s(p, GemmShape{4096, 4096}, 8192, WeightFormat::bf16),
                   gemm_roofline_time_s(p, GemmShape{4096, 4096}, 8192, WeightFormat::bf16));
  EXPECT_DOUBLE_EQ(gemm_time_s(p, GemmShape{4096, 4096}, 64, WeightFormat::fp8),
                   gemm_roofline_time_s(p, GemmShape{4096, 4096}, 64, WeightFormat::fp8));

  save_hardware_profile(p, dir / "copy.yaml");
  EXPECT_TRUE(std::filesystem::exists(dir / "copy.gemm-bf16.txt"));
  const HardwareProfile back = load_hardware_profile(dir / "copy.yaml");
  EXPECT_NEAR(gemm_time_s(back, GemmShape{3000, 2000}, 500, WeightFormat::bf16) /
                  gemm_time_s(p, GemmShape{3000, 2000}, 500, WeightFormat::bf16),
              1, 1e-4);

  write_text_file(dir, "broken.yaml", "base: h100-sxm\ngemm_tables: {bf16: missing.txt}\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(dir / "broken.yaml"); }),
              HasSubstr("missing.txt: no such GEMM table"));
  write_text_file(dir, "dtype.yaml", "base: h100-sxm\ngemm_tables: {int4: mine.gemm-bf16.txt}\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(dir / "dtype.yaml"); }),
              HasSubstr("'gemm_tables.int4' is unknown"));
}

// Fitted on half of the shapes, scored on the other half (fit_kernel_tables.h). The issue's
// targets where they are met, tighter where today's figures are well inside them (context
// attention: 6.4%, p90 13.5%, against a 10% target; hwmodel/README.md).
TEST(KernelTables, HeldOutAccuracyOnTheH100Tables) {
  const KernelTables& t = h100_tables();
  const KernelFitResult& fit = h100_training_fit();
  const KernelValidationReport r = score_kernel_tables(t, fit.profile, KernelRows::kHeldOut);
  const auto& gemm = r.operators.at("gemm");
  for (const char* part : {"bf16 n,k >= 1024", "fp8 n,k >= 1024"}) {
    SCOPED_TRACE(part);
    const ErrorStats& s = gemm.parts.at(part);
    EXPECT_GT(s.count, 9000);
    EXPECT_LE(s.mape_percent, 7.0);
    EXPECT_LE(s.p90_percent(), 15.0);
  }
  // Elsewhere no worse than the roofline alone (what the profiles had before tables).
  for (const char* dtype : {"bf16", "fp8"}) {
    for (const char* region : {">= 1024", "< 1024 (either)"}) {
      const std::string part = fmt::format("{} n,k {}", dtype, region);
      EXPECT_LT(gemm.parts.at(part).mape_percent, gemm.parts.at(part + ", roofline alone").mape_percent) << part;
    }
  }
  // Block-scaled FP8 is fitted and scored too (no row skipped): the per-tensor FP8 table scaled
  // per kernel, under the collector's per-call floor; the roofline alone misses that floor.
  EXPECT_TRUE(gemm.skipped.empty());
  for (const char* region : {">= 1024", "< 1024 (either)"}) {
    const std::string part = fmt::format("fp8-block n,k {}", region);
    EXPECT_GT(gemm.parts.at(part).count, 8000) << part;
    EXPECT_LE(gemm.parts.at(part).mape_percent, 12.0) << part;
    EXPECT_LT(gemm.parts.at(part).mape_percent, gemm.parts.at(part + ", roofline alone").mape_percent) << part;
  }
  // Attention over every row (every head_dim, window, KV dtype and kernel: attention_test.cpp
  // pins each regime); Llama-like heads (head_dim 128, full, 16-bit KV) as tight as before.
  EXPECT_LE(r.operators.at("generation_attention").stats.mape_percent, 10.0);
  EXPECT_LE(r.operators.at("context_attention").stats.mape_percent, 9.5);
  EXPECT_LE(r.operators.at("context_attention").stats.p90_percent(), 21.0);
  EXPECT_GT(r.operators.at("context_attention").stats.count, 24000);
  EXPECT_LE(
      r.operators.at("context_attention").parts.at("vllm_flash_attn_fa3 kv bf16, head_dim 128, full").mape_percent,
      7.0);
  EXPECT_LE(
      r.operators.at("context_attention").parts.at("vllm_flash_attn_fa3 kv bf16, head_dim 128, full").p90_percent(),
      14.5);
  EXPECT_EQ(fit.profile.prefill_attention_kernel, PrefillAttentionKernel::flash_attention_3);
  EXPECT_LE(r.operators.at("nccl_all_reduce").stats.mape_percent, 12.0);
  EXPECT_LE(r.operators.at("custom_all_reduce").stats.mape_percent, 12.0);
  EXPECT_GT(r.operators.at("moe").stats.count, 0);  // scored, not fitted
  // Every row is scored: none skipped, and on all rows the scored ones are the table.
  const KernelValidationReport all = score_kernel_tables(t, fit.profile, KernelRows::kAll);
  const KernelOperatorScore& context = all.operators.at("context_attention");
  EXPECT_TRUE(context.skipped.empty());
  EXPECT_EQ(context.stats.count, 50830);
  EXPECT_EQ(all.operators.at("generation_attention").stats.count, 62166);
}

// FlashAttention-3 packs a KV group's query heads into one tile; costed by FlashAttention-2's
// tiles (query tiles x query heads) the held-out error followed the group: median
// predicted/measured 0.93 at group 2, 1.10 at groups 32 and 48. By FA3's tiles every group's
// median was within 5% (0.99 to 1.05) when the fit saw only these heads (head_dim 128, full,
// 16-bit KV); the regime fitted on every head_dim and window (attention_kernel.h) leaves 0.97 to
// 1.02 for the GQA groups and 1.08 for MHA (group 1).
TEST(KernelTables, HeldOutPrefillIsUnbiasedInTheGqaGroup) {
  const KernelTables& t = h100_tables();
  const KernelFitResult& fit = h100_training_fit();
  const KernelSplit split(t);
  std::map<int64_t, std::vector<double>> ratios;  // group -> predicted / measured
  for (const KernelAttentionRow& r : t.attention) {
    if (!r.prefill || r.kv_cache_dtype == "fp8" || r.head_dim != 128 || r.window != 0) continue;
    if (!split.attention(r, KernelRows::kHeldOut)) continue;
    ratios[r.num_heads / r.num_kv_heads].push_back(predict_kernel_attention(fit.profile, r) / r.seconds);
  }
  EXPECT_EQ(ratios.size(), 10u);  // groups 1, 2, 3, 5, 6, 8, 12, 20, 32, 48 are held out
  for (auto& [group, x] : ratios) {
    std::sort(x.begin(), x.end());
    const double median = x[x.size() / 2];
    EXPECT_GT(median, 0.95) << "group " << group;
    EXPECT_LT(median, group == 1 ? 1.08 : 1.03) << "group " << group;
  }
}

// hwmodel/profiles/h100-sxm-fitted.yaml and its GEMM tables are what the fit makes of the
// shipped tables today (hwmodel/README.md has the command).
TEST(KernelTables, ShippedH100ProfileIsAFreshFit) {
  const HardwareProfile shipped = resolve_gpu("h100-sxm-fitted");
  const KernelFitResult fresh = fit_kernel_tables(h100_tables(), resolve_gpu("h100-sxm"), KernelRows::kAll);
  testing::expect_profiles_near(fresh.profile, shipped, 1e-6, false);
  // Its validation block is the held-out score of the same fit (`validate --profile-out`).
  const KernelValidationReport held_out =
      score_kernel_tables(h100_tables(), h100_training_fit().profile, KernelRows::kHeldOut);
  // (Its serving block is validate-serving's, checked against a fresh replay by
  // ValidateServing.FiguresOnNvidiasH100Measurements.)
  ProfileValidation kernels = shipped.validation;
  kernels.serving = {};
  EXPECT_EQ(kernels, profile_validation(held_out));
  EXPECT_EQ(shipped.validation.measured_on,
            "NVIDIA aiconfigurator kernel tables of h100_sxm (vllm 0.24.0, nccl 2.27.3)");
  EXPECT_TRUE(shipped.validation.held_out);
  EXPECT_EQ(shipped.validation.scored_on, "fitted on half the shapes, scored on the other half");
  ASSERT_EQ(shipped.validation.operators.size(), held_out.operators.size());
  for (const OperatorError& e : shipped.validation.operators) {
    const ErrorStats& s = held_out.operators.at(e.op).stats;
    EXPECT_EQ(e.count, s.count) << e.op;
    EXPECT_NEAR(e.mape_percent, s.mape_percent, 0.05) << e.op;
    EXPECT_NEAR(e.p90_percent, s.p90_percent(), 0.05) << e.op;
  }
  for (WeightFormat bytes : {WeightFormat::bf16, WeightFormat::fp8}) {
    ASSERT_NE(shipped.gemm_table(bytes), nullptr);
    const GemmTable& a = *shipped.gemm_table(bytes);
    const GemmTable& b = *fresh.profile.gemm_table(bytes);
    ASSERT_EQ(a.columns().size(), b.columns().size());
    for (size_t c = 0; c < a.columns().size(); c += 37) {
      for (size_t m = 0; m < a.m_grid().size(); ++m) {
        const double x = a.columns()[c].seconds[m], y = b.columns()[c].seconds[m];
        if (std::isnan(y))
          EXPECT_TRUE(std::isnan(x));
        else
          EXPECT_NEAR(x / y, 1.0, 1e-4);  // five significant digits in the file
      }
    }
  }
}

// hwmodel/profiles/b200-fitted.yaml is the fit of NVIDIA's B200 tables (vLLM 0.24), NVFP4 GEMMs
// included, with its held-out figures in its validation block: GEMM 10.4%, decode attention
// 9.3%, prefill 13.9% (FlashInfer's TensorRT-LLM kernels; the Triton one is the 30% misfit).
TEST(KernelTables, ShippedB200ProfileIsAFreshFitWithNvfp4Gemms) {
  const HardwareProfile shipped = resolve_gpu("b200-fitted");
  const KernelTables b200 = read_kernel_tables(testing::measured_dir() / "aiconfigurator" / "b200_sxm", "vllm");
  const KernelFitResult fresh = fit_kernel_tables(b200, resolve_gpu("b200"), KernelRows::kAll);
  testing::expect_profiles_near(fresh.profile, shipped, 1e-6, false);
  for (WeightFormat f : {WeightFormat::bf16, WeightFormat::fp8, WeightFormat::nvfp4}) {
    ASSERT_NE(shipped.gemm_table(f), nullptr) << weight_format_name(f);
    EXPECT_EQ(shipped.gemm_table(f)->format(), f);
  }
  // NVFP4 GEMMs run at the B200's FP4 rate where no table answers.
  EXPECT_DOUBLE_EQ(gemm_peak_flops(shipped, WeightFormat::nvfp4), 9000e12);
  const KernelValidationReport held_out = score_kernel_tables(
      b200, fit_kernel_tables(b200, resolve_gpu("b200"), KernelRows::kTrain).profile, KernelRows::kHeldOut);
  const auto& gemm = held_out.operators.at("gemm");
  EXPECT_LE(gemm.parts.at("nvfp4 n,k >= 1024").mape_percent, 8.0);
  EXPECT_LE(gemm.parts.at("bf16 n,k >= 1024").mape_percent, 5.0);
  EXPECT_LE(held_out.operators.at("generation_attention").stats.mape_percent, 10.0);
  EXPECT_LE(held_out.operators.at("context_attention").stats.mape_percent, 15.0);
  for (const OperatorError& e : shipped.validation.operators) {
    EXPECT_NEAR(e.mape_percent, held_out.operators.at(e.op).stats.mape_percent, 0.05) << e.op;
  }
}

}  // namespace

// Block FP8: a kernel's time is `scale` x the per-tensor FP8 GEMM of the shape, and the collector
// timed no call below the kernel's floor. The fit recovers both from rows made that way; the
// cost model charges the scale alone, `validate` the floor too.
TEST(KernelTables, BlockFp8IsTheFp8GemmScaledUnderACallFloor) {
  KernelTables t;
  t.system = "h100_sxm";
  t.framework = "vllm";
  const HardwareProfile base = resolve_gpu("h100-sxm");
  std::vector<std::pair<KernelGemmRow, double>> fp8_rows;
  for (int64_t m : {1, 8, 64, 512, 2048, 8192, 16384}) {
    for (int64_t n : {1024, 4096, 8192, 16384}) {
      for (int64_t k : {1024, 4096, 8192}) {
        KernelGemmRow r;
        r.m = m;
        r.n = n;
        r.k = k;
        r.dtype = "fp8";
        r.kernel = "cutlass";
        r.seconds = gemm_roofline_time_s(base, GemmShape{k, n}, m, WeightFormat::fp8);
        t.gemm.push_back(r);
        KernelGemmRow b = r;
        b.dtype = "fp8_block";
        b.kernel = "DeepGemm";
        b.seconds = std::max(80e-6, 0.9 * r.seconds);
        t.gemm.push_back(b);
      }
    }
  }
  const KernelFitResult fit = fit_kernel_tables(t, base, KernelRows::kAll);
  ASSERT_EQ(fit.profile.fp8_block_gemms.size(), 1u);
  const auto& f = fit.profile.fp8_block_gemms[0];
  EXPECT_EQ(f.kernel, "DeepGemm");
  EXPECT_EQ(f.rows, 84);
  EXPECT_NEAR(f.call_floor_s, 80e-6, 1e-9);
  EXPECT_NEAR(f.scale, 0.9, 0.02);
  EXPECT_DOUBLE_EQ(fit.profile.fp8_block_gemm_scale(), f.scale);
  // Serving: the scale alone, even where the floor is far above the kernel.
  const GemmShape small{1024, 1024};
  EXPECT_NEAR(gemm_time_s(fit.profile, small, 1, WeightFormat::fp8_block),
              f.scale * gemm_time_s(fit.profile, small, 1, WeightFormat::fp8), 1e-15);
  EXPECT_LT(gemm_time_s(fit.profile, small, 1, WeightFormat::fp8_block), 40e-6);
  // The collector's row: no less than the floor.
  KernelGemmRow row;
  row.m = 1;
  row.n = 1024;
  row.k = 1024;
  row.dtype = "fp8_block";
  row.kernel = "DeepGemm";
  EXPECT_DOUBLE_EQ(predict_kernel_gemm(fit.profile, row), f.call_floor_s);
  // Every row is scored, none skipped.
  const KernelValidationReport r = score_kernel_tables(t, fit.profile, KernelRows::kAll);
  EXPECT_TRUE(r.operators.at("gemm").skipped.empty());
  EXPECT_LT(r.operators.at("gemm").parts.at("fp8-block n,k >= 1024").mape_percent, 5.0);
  // A profile file carries the fits; a bad entry is named.
  const auto dir = testing::scratch_dir("block-fp8-profile");
  write_text_file(
      dir, "ok.yaml",
      "base: h100-sxm\nfp8_block_gemms:\n  - {kernel: DeepGemm, scale: 0.9, call_floor_s: 8.0e-5, rows: 84}\n");
  const HardwareProfile loaded = load_hardware_profile(dir / "ok.yaml");
  ASSERT_EQ(loaded.fp8_block_gemms.size(), 1u);
  EXPECT_DOUBLE_EQ(loaded.fp8_block_gemm_scale(), 0.9);
  EXPECT_DOUBLE_EQ(loaded.fp8_block_gemm("DeepGemm")->call_floor_s, 8.0e-5);
  write_text_file(dir, "bad.yaml",
                  "base: h100-sxm\nfp8_block_gemms:\n  - {kernel: DeepGemm, scale: -1, call_floor_s: 0, rows: 1}\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(dir / "bad.yaml"); }), HasSubstr("'fp8_block_gemms.scale'"));
  write_text_file(dir, "short.yaml", "base: h100-sxm\nfp8_block_gemms:\n  - {kernel: DeepGemm, scale: 1}\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(dir / "short.yaml"); }),
              HasSubstr("need kernel, scale, call_floor_s and rows"));
}

}  // namespace batchsim
