// Helpers shared by the hwmodel test files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <ostream>
#include <string>

#include "hwmodel/base/error.h"
#include "hwmodel/hardware_profile.h"
#include "test_support.h"

namespace batchsim {
// GoogleTest prints a validation block as its YAML, not as bytes.
inline void PrintTo(const ProfileValidation& v, std::ostream* os) {
  HardwareProfile p;
  p.validation = v;
  const std::string yaml = hardware_profile_yaml(p);
  *os << yaml.substr(0, yaml.find("\nmemory_bytes"));
}
inline void PrintTo(const OperatorError& e, std::ostream* os) {
  *os << e.op << " {mape " << e.mape_percent << ", p90 " << e.p90_percent << ", count " << e.count << "}";
}
}  // namespace batchsim

namespace batchsim::testing {

// A profile with round numbers so that times can be worked out by hand.
inline HardwareProfile round_profile() {
  HardwareProfile p;
  p.name = "round";
  p.peak_flops = 100e12;
  p.hbm_bytes_per_s = 1e12;
  p.memory_bytes = int64_t{80} << 30;
  p.interconnect_bytes_per_s = 100e9;
  p.interconnect_latency_s = 10e-6;
  p.gemm_eta_max = 0.5;
  p.gemm_m_half = 0;
  p.hbm_efficiency = 1.0;
  p.prefill_attention_efficiency = 0.25;
  p.prefill_attention_causal_efficiency = 0.125;
  p.decode_attention_efficiency = 0.5;
  p.decode_attention_per_seq_s = 0;
  p.kernel_launch_s = 0;
  for (auto& k : p.elementwise) k = {1.0, 0.0};
  return p;
}

// Every field of two profiles equal within a relative tolerance (names and sources exactly
// when `compare_text`).
inline void expect_profiles_near(const HardwareProfile& a, const HardwareProfile& b, double rel_tol,
                                 bool compare_text = true) {
  auto near = [rel_tol](double x, double y, const char* what) {
    EXPECT_NEAR(x, y, rel_tol * std::max(std::abs(x), std::abs(y))) << what;
  };
  if (compare_text) {
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.source, b.source);
    EXPECT_EQ(a.provenance, b.provenance);
    EXPECT_EQ(a.validation, b.validation);  // figures to 0.1%, kept exactly
  }
  EXPECT_EQ(a.memory_bytes, b.memory_bytes);
  near(a.peak_flops, b.peak_flops, "peak_flops");
  near(a.peak_fp8_flops, b.peak_fp8_flops, "peak_fp8_flops");
  near(a.hbm_bytes_per_s, b.hbm_bytes_per_s, "hbm_bytes_per_s");
  near(a.interconnect_bytes_per_s, b.interconnect_bytes_per_s, "interconnect_bytes_per_s");
  near(a.interconnect_latency_s, b.interconnect_latency_s, "interconnect_latency_s");
  near(a.pcie_bytes_per_s, b.pcie_bytes_per_s, "pcie_bytes_per_s");
  near(a.price_per_hour, b.price_per_hour, "price_per_hour");
  near(a.disk_bytes_per_s, b.disk_bytes_per_s, "disk_bytes_per_s");
  near(a.gemm_eta_max, b.gemm_eta_max, "gemm_eta_max");
  near(a.gemm_m_half, b.gemm_m_half, "gemm_m_half");
  near(a.gemm_roofline_exponent, b.gemm_roofline_exponent, "gemm_roofline_exponent");
  near(a.hbm_efficiency, b.hbm_efficiency, "hbm_efficiency");
  near(a.prefill_attention_efficiency, b.prefill_attention_efficiency, "prefill_attention_efficiency");
  near(a.prefill_attention_causal_efficiency, b.prefill_attention_causal_efficiency,
       "prefill_attention_causal_efficiency");
  near(a.decode_attention_efficiency, b.decode_attention_efficiency, "decode_attention_efficiency");
  near(a.decode_attention_per_seq_s, b.decode_attention_per_seq_s, "decode_attention_per_seq_s");
  near(a.kernel_launch_s, b.kernel_launch_s, "kernel_launch_s");
  near(a.attention_launch_s, b.attention_launch_s, "attention_launch_s");
  near(a.prefill_attention_per_head_token_s, b.prefill_attention_per_head_token_s,
       "prefill_attention_per_head_token_s");
  near(a.decode_attention_per_seq_kv_head_s, b.decode_attention_per_seq_kv_head_s,
       "decode_attention_per_seq_kv_head_s");
  near(a.decode_attention_roofline_exponent, b.decode_attention_roofline_exponent,
       "decode_attention_roofline_exponent");
  near(a.sm_count, b.sm_count, "sm_count");
  near(a.decode_attention_sm_bytes_per_s, b.decode_attention_sm_bytes_per_s, "decode_attention_sm_bytes_per_s");
  near(a.prefill_attention_sm_bytes_per_s, b.prefill_attention_sm_bytes_per_s, "prefill_attention_sm_bytes_per_s");
  near(a.prefill_attention_roofline_exponent, b.prefill_attention_roofline_exponent,
       "prefill_attention_roofline_exponent");
  near(a.prefill_attention_per_seq_s, b.prefill_attention_per_seq_s, "prefill_attention_per_seq_s");
  EXPECT_EQ(a.prefill_attention_kernel, b.prefill_attention_kernel);
  near(a.prefill_attention_per_tile_s, b.prefill_attention_per_tile_s, "prefill_attention_per_tile_s");
  near(a.attention_kv_write_efficiency, b.attention_kv_write_efficiency, "attention_kv_write_efficiency");
  near(a.attention_kv_write_per_token_s, b.attention_kv_write_per_token_s, "attention_kv_write_per_token_s");
  for (int i = 0; i < kNumElementwiseOps; ++i) {
    near(a.elementwise[i].efficiency, b.elementwise[i].efficiency, elementwise_op_name(static_cast<ElementwiseOp>(i)));
    near(a.elementwise[i].launch_s, b.elementwise[i].launch_s, elementwise_op_name(static_cast<ElementwiseOp>(i)));
  }
  using Fits = std::vector<AllReduceFit> HardwareProfile::*;
  for (const Fits fits : {Fits{&HardwareProfile::allreduce}, Fits{&HardwareProfile::custom_allreduce}}) {
    const auto& x = a.*fits;
    const auto& y = b.*fits;
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i].tp, y[i].tp);
      near(x[i].latency_s, y[i].latency_s, "allreduce latency_s");
      near(x[i].bytes_per_s, y[i].bytes_per_s, "allreduce bytes_per_s");
    }
  }
  EXPECT_EQ(a.gemm_table(WeightFormat::bf16) == nullptr, b.gemm_table(WeightFormat::bf16) == nullptr);
  EXPECT_EQ(a.gemm_table(WeightFormat::fp8) == nullptr, b.gemm_table(WeightFormat::fp8) == nullptr);
  ASSERT_EQ(a.fp8_block_gemms.size(), b.fp8_block_gemms.size());
  for (size_t i = 0; i < a.fp8_block_gemms.size(); ++i) {
    EXPECT_EQ(a.fp8_block_gemms[i].kernel, b.fp8_block_gemms[i].kernel);
    EXPECT_EQ(a.fp8_block_gemms[i].rows, b.fp8_block_gemms[i].rows);
    near(a.fp8_block_gemms[i].scale, b.fp8_block_gemms[i].scale, "fp8_block_gemms scale");
    near(a.fp8_block_gemms[i].call_floor_s, b.fp8_block_gemms[i].call_floor_s, "fp8_block_gemms call_floor_s");
  }
}

}  // namespace batchsim::testing
