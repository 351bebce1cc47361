// LLMServingSim's per-layer GPU profile as fit measurements (hwmodel/fit/llmservingsim_profile.h,
// issue 44 item 1): the reader on the shipped RTX 4090 profile, its GPU folder names mapping to
// datasheets, the shipped rtx-4090-fitted being what a fresh `calibrate fit` of those files gives,
// with its held-out errors, and bad input refused by name.
#include <cmath>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli_run.h"
#include "hwmodel/base/error.h"
#include "hwmodel/fit/fit_profile.h"
#include "hwmodel/fit/llmservingsim_profile.h"
#include "hwmodel/fit/validation.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/hwmodel_test_util.h"
#include "test_support.h"

namespace batchsim {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path profiler_dir() { return testing::measured_dir() / "llmservingsim" / "profiler"; }

TEST(LlmServingSimProfile, ReadsTheShippedRtx4090Profile) {
  ASSERT_TRUE(is_llmservingsim_profile(profiler_dir()));
  EXPECT_FALSE(is_llmservingsim_profile(testing::measured_dir() / "vidur"));
  const Measurements m = read_llmservingsim_profile(profiler_dir());
  EXPECT_EQ(m.device, "RTX4090");
  // 152 token counts of dense.csv, each a row with every mapped op.
  ASSERT_EQ(m.token_ops.size(), 152u);
  const TokenOpRow& one = m.token_ops.front();
  EXPECT_EQ(one.num_tokens, 1);
  EXPECT_EQ(one.model, "meta-llama/Llama-3.1-8B");
  EXPECT_EQ(one.shape.hidden_size, 4096);
  EXPECT_EQ(one.shape.num_kv_heads, 8);
  EXPECT_DOUBLE_EQ(one.median_s[static_cast<int>(TokenOp::attn_pre_proj)], 54.898e-6);  // dense.csv: qkv_proj,1,54.898
  // One RMSNorm kernel, called twice per layer; the residual add is fused into it.
  EXPECT_EQ(one.median_s[static_cast<int>(TokenOp::input_layernorm)],
            one.median_s[static_cast<int>(TokenOp::post_attention_layernorm)]);
  EXPECT_TRUE(std::isnan(one.median_s[static_cast<int>(TokenOp::add)]));
  // Pure prefill and decode attention rows; the mixed ones are left out and said.
  int64_t prefill = 0, decode = 0;
  for (const AttentionRow& r : m.attention) (r.is_prefill ? prefill : decode)++;
  EXPECT_GT(prefill, 50);
  EXPECT_GT(decode, 50);
  EXPECT_LT(prefill + decode, 8643);
  bool mixed_said = false;
  for (const std::string& s : m.files_skipped)
    mixed_said = mixed_said || s.find("mixed prefill+decode rows") != std::string::npos;
  EXPECT_TRUE(mixed_said);
  EXPECT_EQ(m.cpu_overheads.size(), 40u);  // the sampler, per sequences
}

TEST(LlmServingSimProfile, GpuFolderNamesMapToDatasheets) {
  EXPECT_EQ(datasheet_gpu_for_device("RTX4090"), "rtx-4090");
  EXPECT_EQ(datasheet_gpu_for_device("RTXPRO6000"), "rtx-pro-6000");
  EXPECT_EQ(datasheet_gpu_for_device("H100"), "h100-sxm");
  EXPECT_EQ(datasheet_gpu_for_device("A100"), "a100-80gb");
  EXPECT_EQ(datasheet_gpu_for_device("L40S"), "l40s");
  EXPECT_EQ(datasheet_gpu_for_device("h100-80gb-hbm3"), "h100-sxm");  // batchsim-calibrate's names still map
  // A folder of a GPU nobody wrote a datasheet for: the error names --base-gpu.
  const fs::path dir = testing::scratch_dir("unknown_gpu");
  fs::copy(profiler_dir(), dir / "profiler", fs::copy_options::recursive);
  fs::rename(dir / "profiler/perf/RTX4090", dir / "profiler/perf/MI300X");
  EXPECT_THAT(
      testing::cli_error_of({"calibrate", "fit", (dir / "profiler").string(), "--out", (dir / "p.yaml").string()}),
      HasSubstr("--base-gpu is required: device 'MI300X'"));
}

TEST(LlmServingSimProfile, ShippedRtx4090ProfileIsAFreshFitWithHeldOutErrors) {
  const fs::path out = testing::scratch_dir("fit") / "rtx-4090-fitted.yaml";
  std::string text;
  ASSERT_EQ(testing::run_cli({"calibrate", "fit", profiler_dir().string(), "--out", out.string()}, &text), 0) << text;
  const HardwareProfile fresh = load_hardware_profile(out);
  const HardwareProfile shipped = resolve_gpu("rtx-4090-fitted");
  testing::expect_profiles_near(fresh, shipped, 1e-6, false);
  EXPECT_TRUE(shipped.validation.held_out);
  EXPECT_THAT(shipped.validation.scored_on, HasSubstr("fitted on every other shape"));
  ASSERT_FALSE(shipped.validation.operators.empty());
  EXPECT_EQ(shipped.validation.operators.front().op, "iteration");
  EXPECT_LT(shipped.validation.operators.front().mape_percent, 5.0);  // one layer's ops, held-out shapes
  EXPECT_EQ(shipped.memory_bytes, int64_t{24080} << 20);
}

TEST(LlmServingSimProfile, HoldoutAlternatesShapesWithinEachKind) {
  const Measurements m = read_llmservingsim_profile(profiler_dir());
  const Measurements h = holdout_by_shape(m);
  size_t held = 0;
  for (const TokenOpRow& r : h.token_ops) held += r.model.ends_with("(held-out shapes)");
  EXPECT_EQ(held, m.token_ops.size() / 2);
  size_t held_prefill = 0, prefill = 0;
  for (const AttentionRow& r : h.attention) {
    prefill += r.is_prefill;
    held_prefill += r.is_prefill && r.source.ends_with("(held-out shapes)");
  }
  EXPECT_EQ(held_prefill, prefill / 2);
}

TEST(LlmServingSimProfile, BadInputIsRefusedByName) {
  const fs::path dir = testing::scratch_dir("bad_profile");
  const fs::path model = dir / "perf/RTX4090/org/Unknown-1B/bf16";
  fs::create_directories(model / "tp1");
  std::ofstream(model / "meta.yaml") << "profiler_version: 1.0.0\nmodel: org/Unknown-1B\n";
  std::ofstream(model / "tp1/dense.csv") << "layer,tokens,time_us\nqkv_proj,1,5\n";
  EXPECT_THAT(testing::user_error_of([&] { read_llmservingsim_profile(dir); }),
              HasSubstr("model 'org/Unknown-1B': its layer shape is not known here"));
  std::ofstream(model / "meta.yaml") << "profiler_version: 1.0.0\nmodel: meta-llama/Llama-3.1-8B\n";
  std::ofstream(model / "tp1/dense.csv") << "layer,tokens,time_us\nqkv_proj,x,5\n";
  EXPECT_THAT(testing::user_error_of([&] { read_llmservingsim_profile(dir); }), HasSubstr("dense.csv:2"));
  fs::create_directories(dir / "perf/H100/org/m/bf16/tp1");
  std::ofstream(dir / "perf/H100/org/m/bf16/meta.yaml") << "model: meta-llama/Llama-3.1-8B\n";
  EXPECT_THAT(testing::user_error_of([&] { read_llmservingsim_profile(dir); }),
              HasSubstr("holds profiles of several GPUs (H100, RTX4090); name one (--device)"));
}

}  // namespace
}  // namespace batchsim
