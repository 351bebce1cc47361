// Built-in datasheet GPUs and the profile file format.
#include "hwmodel/hardware_profile.h"

#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hwmodel/base/error.h"
#include "hwmodel_test_util.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::user_error_of;
using testing::write_text_file;

TEST(HardwareProfile, BuiltinsCarryTheDatasheetCeilings) {
  struct Expected {
    const char* name;
    double tflops;
    double hbm_gb_per_s;
    double memory_gb_at_least;
  };
  // Issue 2, item 5 (dense BF16 datasheet figures).
  const Expected expected[] = {{"a100-40gb", 312, 1555, 40},
                               {"a100-80gb", 312, 2039, 80},
                               {"h100-sxm", 989, 3350, 80},
                               {"h200", 989, 4800, 141},
                               {"l40s", 362, 864, 48}};
  for (const auto& e : expected) {
    const HardwareProfile g = resolve_gpu(e.name);
    EXPECT_EQ(g.name, e.name);
    EXPECT_DOUBLE_EQ(g.peak_flops, e.tflops * 1e12) << e.name;
    EXPECT_DOUBLE_EQ(g.hbm_bytes_per_s, e.hbm_gb_per_s * 1e9) << e.name;
    EXPECT_GE(static_cast<double>(g.memory_bytes), e.memory_gb_at_least * 1e9) << e.name;
    EXPECT_LT(static_cast<double>(g.memory_bytes), (e.memory_gb_at_least + 10) * 1e9) << e.name;
    EXPECT_GT(g.pcie_bytes_per_s, 0) << e.name;
    EXPECT_GT(g.interconnect_bytes_per_s, 0) << e.name;
    EXPECT_EQ(g.source, "datasheet");
  }
  // Only NVLink GPUs have a link faster than PCIe.
  EXPECT_GT(resolve_gpu("h100-sxm").interconnect_bytes_per_s, resolve_gpu("l40s").interconnect_bytes_per_s);
}

// Dense FP8 tensor-core peaks (datasheets' "with sparsity" figures halved); Ampere has none.
TEST(HardwareProfile, BuiltinsCarryTheFp8PeakWhereTheGpuHasOne) {
  EXPECT_DOUBLE_EQ(resolve_gpu("h100-sxm").peak_fp8_flops, 1979e12);
  EXPECT_DOUBLE_EQ(resolve_gpu("h200").peak_fp8_flops, 1979e12);
  EXPECT_DOUBLE_EQ(resolve_gpu("l40s").peak_fp8_flops, 733e12);
  for (const char* ampere : {"a100-40gb", "a100-80gb", "a40", "a100-80gb-fitted", "a40-fitted"}) {
    EXPECT_EQ(resolve_gpu(ampere).peak_fp8_flops, 0) << ampere;
  }
  // A profile file sets it like any ceiling, and inherits it from its base.
  const auto dir = testing::scratch_dir("profile_fp8");
  EXPECT_DOUBLE_EQ(load_hardware_profile(write_text_file(dir, "h.yaml", "base: h100-sxm\n")).peak_fp8_flops, 1979e12);
  EXPECT_DOUBLE_EQ(
      load_hardware_profile(write_text_file(dir, "a.yaml", "base: a100-80gb\npeak_fp8_flops: 1e15\n")).peak_fp8_flops,
      1e15);
}

HardwareProfile odd_profile() {
  HardwareProfile p;
  p.name = "test-gpu";
  p.source = "fitted from: somewhere, with: colons";
  p.peak_flops = 123.456789e12;
  p.peak_fp8_flops = 246.913579e12;
  p.hbm_bytes_per_s = 1.23456789e12;
  p.memory_bytes = 12345678901;
  p.interconnect_bytes_per_s = 1.5e11;
  p.interconnect_latency_s = 7.25e-6;
  p.pcie_bytes_per_s = 2.5e10;
  p.price_per_hour = 3.125;
  p.gemm_eta_max = 0.8123;
  p.gemm_m_half = 37.5;
  p.hbm_efficiency = 0.777;
  p.prefill_attention_efficiency = 0.4321;
  p.decode_attention_efficiency = 0.6543;
  p.decode_attention_per_seq_s = 1.1e-7;
  p.kernel_launch_s = 3.3e-6;
  p.gemm_roofline_exponent = 1.55;
  p.prefill_attention_causal_efficiency = 0.2345;
  p.attention_launch_s = 6.5e-6;
  p.prefill_attention_per_head_token_s = 4.9e-9;
  p.decode_attention_per_seq_kv_head_s = 4.4e-8;
  p.decode_attention_roofline_exponent = 1.15;
  p.sm_count = 77;
  p.prefill_attention_kernel = PrefillAttentionKernel::flash_attention_3;
  p.prefill_attention_per_tile_s = 1.7e-6;
  p.attention_kv_write_efficiency = 0.61;
  p.attention_kv_write_per_token_s = 6.1e-10;
  for (int i = 0; i < kNumElementwiseOps; ++i) p.elementwise[i] = {0.5 + 0.01 * i, 1e-6 * (i + 1)};
  p.allreduce = {{2, 9e-6, 1.7e11}, {8, 3.1e-5, 2.2e11}};
  p.validation = {"tables: of 'somewhere' #1",
                  true,
                  "half: the shapes",
                  {{"gemm", 6.5, 12.9, 35816}, {"op: with a colon", 0.1, 100.3, 1}, {"attn", 0, 1234.5, 7}},
                  {"benchmarks: of #2", {{"vllm", 30.3, 10.5, 0.72, 0.92, 93}, {"z-engine", 0, 1000.1, 0, 0, 1}}}};
  return p;
}

// Round trips keep every bit: 17 significant digits.
void expect_same(const HardwareProfile& a, const HardwareProfile& b) { testing::expect_profiles_near(a, b, 0.0); }

TEST(HardwareProfile, YamlRoundTripKeepsEveryField) {
  const auto dir = testing::scratch_dir("profile_roundtrip");
  const HardwareProfile p = odd_profile();
  save_hardware_profile(p, dir / "p.yaml");
  expect_same(load_hardware_profile(dir / "p.yaml"), p);
  // resolve_gpu takes the path too.
  expect_same(resolve_gpu((dir / "p.yaml").string()), p);
}

TEST(HardwareProfile, MultiLineSourceRoundTrips) {
  const auto dir = testing::scratch_dir("profile_source");
  HardwareProfile p = odd_profile();
  p.source = "fitted on llama-2-7b\nfrom: a.csv, b.csv\n";
  p.provenance = "fitted from:\n  a.csv\n  b: c.csv";
  save_hardware_profile(p, dir / "p.yaml");
  EXPECT_EQ(load_hardware_profile(dir / "p.yaml").source, p.source);
  EXPECT_EQ(load_hardware_profile(dir / "p.yaml").provenance, p.provenance);
}

// The validation block reads back as written, operators in their order, and is written for a
// reader: each figure as its shortest text, not 17 digits.
TEST(HardwareProfile, ValidationBlockRoundTrips) {
  const auto dir = testing::scratch_dir("profile_validation");
  const HardwareProfile p = odd_profile();
  save_hardware_profile(p, dir / "p.yaml");
  const HardwareProfile back = load_hardware_profile(dir / "p.yaml");
  EXPECT_EQ(back.validation, p.validation);
  ASSERT_EQ(back.validation.operators.size(), 3u);
  EXPECT_EQ(back.validation.operators[1].op, "op: with a colon");
  const std::string text = hardware_profile_yaml(p);
  EXPECT_THAT(text, HasSubstr("\nvalidation:\n"));
  EXPECT_THAT(text, HasSubstr("gemm: {mape: 6.5, p90: 12.9, count: 35816}"));
  EXPECT_THAT(text, HasSubstr("vllm: {ttft_mape: 30.3, tpot_mape: 10.5, ttft_median_ratio: 0.72, "
                              "tpot_median_ratio: 0.92, count: 93}"));
  EXPECT_THAT(text, HasSubstr("z-engine: {ttft_mape: 0, tpot_mape: 1000.1, count: 1}"));  // none recorded: none written
  ASSERT_EQ(back.validation.serving.backends.size(), 2u);
  EXPECT_EQ(back.validation.serving.backends[1].backend, "z-engine");
  // Datasheet profiles have none, and write none.
  EXPECT_TRUE(resolve_gpu("h100-sxm").validation.empty());
  EXPECT_THAT(hardware_profile_yaml(resolve_gpu("h100-sxm")), Not(HasSubstr("validation")));
}

TEST(HardwareProfile, BadValidationBlocksNameTheKey) {
  const auto dir = testing::scratch_dir("profile_bad_validation");
  const std::string good_op = "gemm: {mape: 6.5, p90: 12.9, count: 100}";
  // A block with `replace` in place of the operators line, or `extra` added.
  auto block = [&](const std::string& extra, const std::string& operators = "") {
    return "base: h100-sxm\nvalidation:\n  measured_on: my tables\n  held_out: true\n  scored_on: half\n" + extra +
           "  operators:\n    " + (operators.empty() ? good_op : operators) + "\n";
  };
  auto error_of = [&](const std::string& text) {
    return user_error_of([&] { load_hardware_profile(write_text_file(dir, "v.yaml", text)); });
  };
  EXPECT_EQ(load_hardware_profile(write_text_file(dir, "ok.yaml", block(""))).validation.operators.at(0),
            (OperatorError{"gemm", 6.5, 12.9, 100}));
  EXPECT_THAT(error_of(block("  mape: 3\n")), AllOf(HasSubstr("v.yaml:6"), HasSubstr("'validation.mape' is unknown")));
  EXPECT_THAT(error_of(block("", "gemm: {mape: 1, p90: 2, rows: 3}")),
              HasSubstr("'validation.operators.gemm.rows' is unknown (mape, p90, count)"));
  EXPECT_THAT(error_of(block("", "gemm: {mape: 1, count: 3}")),
              HasSubstr("'validation.operators.gemm' needs mape, p90 and count"));
  EXPECT_THAT(error_of(block("", "gemm: {mape: -1, p90: 2, count: 3}")),
              AllOf(HasSubstr("'validation.operators.gemm.mape'"), HasSubstr("finite number")));
  EXPECT_THAT(error_of(block("", "gemm: {mape: 1, p90: 2, count: 2.5}")),
              HasSubstr("'validation.operators.gemm.count' must be a whole number"));
  EXPECT_THAT(error_of(block("", "gemm: {mape: 1, p90: 2, count: 0}")),
              HasSubstr("'validation.operators.gemm.count' must be a whole number from 1"));
  EXPECT_THAT(error_of(block("", "{gemm: {mape: 1, p90: 2, count: 3}, gemm: {mape: 1, p90: 2, count: 3}}")),
              HasSubstr("'validation.operators.gemm' is given twice"));
  EXPECT_THAT(error_of(block("", "gemm: 6.5")), HasSubstr("'validation.operators.gemm' must be a map"));
  // The serving block: every key required, each backend's three figures.
  const std::string serving = "  serving:\n    measured_on: my benchmarks\n    backends:\n      ";
  EXPECT_EQ(load_hardware_profile(
                write_text_file(dir, "s.yaml", block(serving + "vllm: {ttft_mape: 3, tpot_mape: 4, count: 5}\n")))
                .validation.serving.backends.at(0),
            (ServingError{"vllm", 3, 4, 0, 0, 5}));
  // The median ratios are optional (a profile written before them has none).
  EXPECT_EQ(load_hardware_profile(
                write_text_file(dir, "r.yaml",
                                block(serving + "vllm: {ttft_mape: 3, tpot_mape: 4, ttft_median_ratio: 0.74, "
                                                "tpot_median_ratio: 1.03, count: 5}\n")))
                .validation.serving.backends.at(0),
            (ServingError{"vllm", 3, 4, 0.74, 1.03, 5}));
  EXPECT_THAT(error_of(block(serving + "vllm: {ttft_mape: 3, tpot_mape: 4, ttft_median_ratio: 0, count: 5}\n")),
              HasSubstr("'validation.serving.backends.vllm.ttft_median_ratio' must be > 0"));
  EXPECT_THAT(error_of(block(serving + "vllm: {ttft_mape: 3, count: 5}\n")),
              HasSubstr("'validation.serving.backends.vllm' needs ttft_mape, tpot_mape and count"));
  EXPECT_THAT(error_of(block(serving + "vllm: {ttft_mape: 3, tpot_mape: 4, count: 5, p90: 1}\n")),
              HasSubstr("'validation.serving.backends.vllm.p90' is unknown"));
  EXPECT_THAT(error_of(block("  serving:\n    backends: {vllm: {ttft_mape: 3, tpot_mape: 4, count: 5}}\n")),
              HasSubstr("'validation.serving.measured_on' is required"));
  EXPECT_THAT(error_of(block("  serving: [1]\n")), HasSubstr("'validation.serving' must be a map"));
  EXPECT_THAT(error_of("base: h100-sxm\nvalidation: [1, 2]\n"), HasSubstr("'validation' must be a map"));
  EXPECT_THAT(error_of("base: h100-sxm\nvalidation:\n  measured_on: x\n  held_out: maybe\n"),
              HasSubstr("'validation.held_out' must be true or false"));
  EXPECT_THAT(error_of("base: h100-sxm\nvalidation:\n  measured_on: \"two\\nlines\"\n"),
              HasSubstr("'validation.measured_on' must be one line of text"));
  // Every key is required: a figure never stands without what it was measured on.
  EXPECT_THAT(
      error_of("base: h100-sxm\nvalidation:\n  held_out: true\n  scored_on: half\n  operators: {" + good_op + "}\n"),
      AllOf(HasSubstr("v.yaml:3"), HasSubstr("'validation.measured_on' is required")));
  EXPECT_THAT(error_of("base: h100-sxm\nvalidation:\n  measured_on: x\n  held_out: true\n  scored_on: half\n"),
              HasSubstr("'validation.operators' is required"));
  EXPECT_THAT(error_of(block("", "{}")), HasSubstr("'validation.operators' must be a map of operator names"));
}

// A profile built on a fitted one through `base` changes what was scored: its figures are its
// own block's, never the base's.
TEST(HardwareProfile, ValidationIsNotInheritedFromTheBase) {
  const auto dir = testing::scratch_dir("profile_validation_base");
  ASSERT_FALSE(resolve_gpu("h100-sxm-fitted").validation.empty());
  const HardwareProfile derived =
      load_hardware_profile(write_text_file(dir, "d.yaml", "base: h100-sxm-fitted\nhbm_bytes_per_s: 4.8e12\n"));
  EXPECT_TRUE(derived.validation.empty());
  EXPECT_NE(derived.gemm_table(WeightFormat::bf16), nullptr);  // the rest of the base is still there
}

TEST(HardwareProfile, BadAllReduceEntriesAreUserErrors) {
  const auto dir = testing::scratch_dir("profile_allreduce");
  const auto bad_key = write_text_file(dir, "ar.yaml", "base: a100-80gb\nallreduce:\n  - {tp: 2, latency: 1e-5}\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(bad_key); }),
              AllOf(HasSubstr("ar.yaml"), HasSubstr("allreduce.latency")));
  const auto no_bw = write_text_file(dir, "bw.yaml", "base: a100-80gb\nallreduce: [{tp: 4}]\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(no_bw); }),
              AllOf(HasSubstr("bw.yaml"), HasSubstr("bytes_per_s")));
}

// resolve_gpu parses only the shipped profile it is asked for, the one whose file's stem is the
// name (hardware_profile.cpp): that is the catalogue's answer only while names are unique, and
// the profile parsed alone must equal the catalogue's, field for field.
TEST(HardwareProfile, ResolvingOneGpuGivesTheCataloguesProfile) {
  std::set<std::string> names;
  for (const HardwareProfile& g : builtin_gpus()) {
    EXPECT_TRUE(names.insert(g.name).second) << "two built-in GPUs are named " << g.name;
    EXPECT_EQ(hardware_profile_yaml(resolve_gpu(g.name)), hardware_profile_yaml(g)) << g.name;
  }
  EXPECT_GE(names.size(), 3u);
}

TEST(HardwareProfile, BuiltinsRoundTrip) {
  const auto dir = testing::scratch_dir("profile_builtins");
  for (const auto& g : builtin_gpus()) {
    save_hardware_profile(g, dir / (g.name + ".yaml"));
    expect_same(load_hardware_profile(dir / (g.name + ".yaml")), g);
  }
}

TEST(HardwareProfile, ReadsJsonAndInheritsFromBase) {
  const auto dir = testing::scratch_dir("profile_json");
  const auto path = write_text_file(dir, "slow-h100.json",
                                    R"({"base": "h100-sxm", "gemm_eta_max": 0.5,
                                   "hbm_bytes_per_s": 3.0e12})");
  const HardwareProfile p = load_hardware_profile(path);
  const HardwareProfile h100 = resolve_gpu("h100-sxm");
  EXPECT_EQ(p.name, "slow-h100");  // no name key: the file names it
  EXPECT_DOUBLE_EQ(p.gemm_eta_max, 0.5);
  EXPECT_DOUBLE_EQ(p.hbm_bytes_per_s, 3.0e12);
  EXPECT_DOUBLE_EQ(p.peak_flops, h100.peak_flops);
  EXPECT_EQ(p.memory_bytes, h100.memory_bytes);
}

TEST(HardwareProfile, BadFilesNameTheFileAndKey) {
  const auto dir = testing::scratch_dir("profile_errors");
  const auto unknown = write_text_file(dir, "typo.yaml", "base: a100-80gb\ngemm_eta_maks: 0.5\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(unknown); }),
              AllOf(HasSubstr("typo.yaml"), HasSubstr("gemm_eta_maks"), HasSubstr("unknown key")));

  const auto not_number = write_text_file(dir, "nan.yaml", "base: a100-80gb\npeak_flops: fast\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(not_number); }),
              AllOf(HasSubstr("nan.yaml"), HasSubstr("peak_flops"), HasSubstr("number")));

  const auto bad_eta = write_text_file(dir, "eta.yaml", "base: a100-80gb\nhbm_efficiency: 1.5\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(bad_eta); }),
              AllOf(HasSubstr("eta.yaml"), HasSubstr("hbm_efficiency"), HasSubstr("(0, 1]")));

  const auto no_peak = write_text_file(dir, "empty.yaml", "name: nothing\nmemory_bytes: 1e9\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(no_peak); }),
              AllOf(HasSubstr("empty.yaml"), HasSubstr("peak_flops")));

  const auto bad_base = write_text_file(dir, "base.yaml", "base: b300\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(bad_base); }),
              AllOf(HasSubstr("base.yaml"), HasSubstr("b300"), HasSubstr("a100-80gb")));

  const auto kernel = write_text_file(dir, "fa4.yaml", "base: h100-sxm\nprefill_attention_kernel: fa4\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(kernel); }),
              AllOf(HasSubstr("fa4.yaml"), HasSubstr("prefill_attention_kernel"), HasSubstr("fa2"), HasSubstr("fa3")));
  const auto no_sms = write_text_file(dir, "sms.yaml", "base: h100-sxm\nsm_count: 0\nprefill_attention_kernel: fa3\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(no_sms); }),
              AllOf(HasSubstr("sms.yaml"), HasSubstr("prefill_attention_kernel"), HasSubstr("sm_count")));
  const auto write = write_text_file(dir, "write.yaml", "base: h100-sxm\nattention_kv_write_efficiency: 2\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(write); }),
              AllOf(HasSubstr("write.yaml"), HasSubstr("attention_kv_write_efficiency"), HasSubstr("[0, 1]")));

  const auto broken = write_text_file(dir, "broken.yaml", "peak_flops: [1, 2\n");
  EXPECT_THAT(user_error_of([&] { load_hardware_profile(broken); }), HasSubstr("broken.yaml"));
}

TEST(HardwareProfile, UnknownNameListsKnownGpus) {
  EXPECT_THAT(user_error_of([] { resolve_gpu("tpu-v9"); }),
              AllOf(HasSubstr("tpu-v9"), HasSubstr("a100-40gb"), HasSubstr("h200"), HasSubstr("l40s")));
}

}  // namespace
}  // namespace batchsim
