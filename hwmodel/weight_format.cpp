// batchsim — weight formats (see weight_format.h).
#include "hwmodel/weight_format.h"

#include <fmt/format.h>

#include "hwmodel/base/error.h"

namespace batchsim {

double weight_format_bytes(WeightFormat format) {
  switch (format) {
    case WeightFormat::bf16:
      return 2.0;
    case WeightFormat::fp8:
      return 1.0;
    case WeightFormat::fp8_block:
      return 1.0 + 4.0 / (128.0 * 128.0);
    case WeightFormat::mxfp4:
      return 0.5 + 1.0 / 32.0;
    case WeightFormat::nvfp4:
      return 0.5 + 1.0 / 16.0;
  }
  return 2.0;
}

std::string_view weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::bf16:
      return "bf16";
    case WeightFormat::fp8:
      return "fp8";
    case WeightFormat::fp8_block:
      return "fp8-block";
    case WeightFormat::mxfp4:
      return "mxfp4";
    case WeightFormat::nvfp4:
      return "nvfp4";
  }
  return "bf16";
}

WeightFormat parse_weight_format(std::string_view text, std::string_view option) {
  for (const char* name : {"bf16", "bfloat16", "fp16", "float16", "half"}) {
    if (text == name) return WeightFormat::bf16;
  }
  if (text == "fp8" || text == "fp8_e4m3") return WeightFormat::fp8;
  if (text == "fp8-block" || text == "fp8_block") return WeightFormat::fp8_block;
  if (text == "mxfp4") return WeightFormat::mxfp4;
  if (text == "nvfp4") return WeightFormat::nvfp4;
  throw UserError(
      fmt::format("{}: unknown weight format '{}' (bf16, fp16, fp8, fp8-block, mxfp4, nvfp4)", option, text));
}

}  // namespace batchsim
