// batchsim calibration — what a measurement was taken on.
//
// Filled from cudaGetDeviceProperties / cudaDeviceGetAttribute and the library version calls
// by batchsim-calibrate, written as DIR/device.json next to the CSVs, and read back by
// whoever fits a profile (the profile records where its numbers came from). Host-only, so the
// format is tested without a GPU.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace batchsim::calibration {

struct DeviceInfo {
  std::string name;  // cudaDeviceProp::name, e.g. "NVIDIA H200"
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int sm_count = 0;
  int sm_clock_khz = 0;      // peak SM clock (cudaDevAttrClockRate)
  int memory_clock_khz = 0;  // peak memory clock (cudaDevAttrMemoryClockRate)
  int memory_bus_width_bits = 0;
  int64_t memory_bytes = 0;  // total global memory
  int64_t l2_cache_bytes = 0;
  int driver_version = 0;        // cudaDriverGetVersion, e.g. 13000
  int runtime_version = 0;       // cudaRuntimeGetVersion
  int64_t cublaslt_version = 0;  // cublasLtGetVersion, e.g. 130100
  int cupti_api_version = 0;     // cuptiGetVersion; 0 when CUPTI is not used
  std::string timer;             // "cupti" | "cuda_event"
  std::string measured_at_utc;   // ISO 8601

  // DDR: two transfers per memory clock (the usual datasheet formula; HBM3e on H200 gives
  // ≈ 4.8 TB/s with its 6144-bit bus).
  double theoretical_hbm_bytes_per_s() const { return 2.0 * memory_clock_khz * 1e3 * (memory_bus_width_bits / 8.0); }
};

// The GPU's folder name in a measurement directory, as Vidur names its device folders
// (compute/a100/, compute/a40/): the device name in lower case without the "NVIDIA " prefix,
// runs of other characters turned into single '-'. "NVIDIA H200" -> "h200",
// "NVIDIA A100-SXM4-80GB" -> "a100-sxm4-80gb".
std::string device_slug(const std::string& device_name);

void write_device_info_json(const DeviceInfo& info, const std::filesystem::path& path);
// Throws std::runtime_error naming the file on a missing file or field.
DeviceInfo read_device_info_json(const std::filesystem::path& path);

}  // namespace batchsim::calibration
