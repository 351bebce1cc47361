// batchsim — the formats GEMM weights are stored in.
#pragma once

#include <cstdint>
#include <string_view>

namespace batchsim {

// How a GEMM's weights are stored, which sets the bytes they take in memory and stream per
// step, and which tensor-core rate multiplies them (roofline.h, gemm_peak_flops).
//   bf16       16-bit (bfloat16 or float16) weights: 2 bytes.
//   fp8        FP8 e4m3 with one scale per tensor or channel (vLLM --quantization fp8): 1 byte.
//   fp8_block  FP8 e4m3 with one FP32 scale per 128 x 128 block (DeepSeek-V3's
//              weight_block_size [128, 128], README_WEIGHTS.md): 1 + 4 / 16384 bytes.
//   mxfp4      OCP MX FP4: 4-bit e2m1 values with one E8M0 scale per 32 (gpt-oss's experts;
//              vLLM quantization/mxfp4.py): 0.5 + 1/32 bytes. Dequantised to 16-bit on Hopper,
//              native on Blackwell.
//   nvfp4      NVIDIA FP4: 4-bit values with one FP8 scale per 16 (vLLM modelopt.py,
//              group_size 16): 0.5 + 1/16 bytes. Native on Blackwell.
enum class WeightFormat : uint8_t { bf16, fp8, fp8_block, mxfp4, nvfp4 };
inline constexpr int kNumWeightFormats = 5;
// Bytes per weight, scales included.
double weight_format_bytes(WeightFormat format);
// "bf16", "fp8", "fp8-block", "mxfp4", "nvfp4".
std::string_view weight_format_name(WeightFormat format);
// The format a name means: the names above, plus bfloat16/fp16/float16/half (bf16), fp8_e4m3
// (fp8), fp8_block (fp8-block); `option` names the option or file in the UserError otherwise.
WeightFormat parse_weight_format(std::string_view text, std::string_view option);
// Whether a format stores 8 bits or fewer per weight (FP8 and FP4 tensor-core paths).
inline bool is_low_precision(WeightFormat f) { return f != WeightFormat::bf16; }

}  // namespace batchsim
