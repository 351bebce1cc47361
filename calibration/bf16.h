// batchsim calibration — host-side bfloat16 conversion.
//
// The CUDA kernels read BF16 K/V/Q; the CPU reference computes in float on the same values, so
// `--check` rounds its random inputs to BF16 on the host first and both sides see identical
// data. Round-to-nearest-even on the upper 16 bits of an IEEE float is what __float2bfloat16
// does (CUDA Math API, "bfloat16 precision conversion"); NaN stays a quiet NaN.
#pragma once

#include <bit>
#include <cstdint>

namespace batchsim::calibration {

inline uint16_t float_to_bf16_bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  }
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

inline float bf16_bits_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

inline float round_to_bf16(float value) { return bf16_bits_to_float(float_to_bf16_bits(value)); }

}  // namespace batchsim::calibration
