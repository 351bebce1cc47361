#include "calibration/cuda_runtime_support.h"

#include <cublasLt.h>

#include <chrono>
#include <ctime>
#include <utility>

namespace batchsim::calibration {

void throw_cuda_error(const std::string& library, const std::string& message, const char* call, const char* file,
                      int line) {
  throw CudaError(library + " error: " + message + " in " + call + " (" + file + ":" + std::to_string(line) + ")");
}

MappedHostFlag::MappedHostFlag() {
  void* host = nullptr;
  BATCHSIM_CUDA_CHECK(cudaHostAlloc(&host, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
  host_ = static_cast<volatile int*>(host);
  *host_ = 0;
  void* device = nullptr;
  BATCHSIM_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0));
  device_ = static_cast<volatile int*>(device);
}

MappedHostFlag::~MappedHostFlag() { cudaFreeHost(const_cast<int*>(host_)); }

std::optional<std::string> cuda_device_unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
  }
  if (count == 0) return std::string("the CUDA driver reports 0 devices");
  return std::nullopt;
}

DeviceInfo query_device_info(int device) {
  cudaDeviceProp prop{};
  BATCHSIM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceInfo d;
  d.name = prop.name;
  d.compute_capability_major = prop.major;
  d.compute_capability_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  d.l2_cache_bytes = prop.l2CacheSize;
  d.memory_bus_width_bits = prop.memoryBusWidth;
  // CUDA 13 removed cudaDeviceProp::clockRate/memoryClockRate; the attributes remain. They are
  // only recorded, so a driver that refuses them leaves 0 rather than failing `info`/`measure`
  // (the error is not sticky; cudaGetLastError clears it).
  for (const auto& [attribute, value] :
       {std::pair{cudaDevAttrClockRate, &d.sm_clock_khz}, std::pair{cudaDevAttrMemoryClockRate, &d.memory_clock_khz}}) {
    if (cudaDeviceGetAttribute(value, attribute, device) != cudaSuccess) {
      *value = 0;
      cudaGetLastError();
    }
  }
  BATCHSIM_CUDA_CHECK(cudaDriverGetVersion(&d.driver_version));
  BATCHSIM_CUDA_CHECK(cudaRuntimeGetVersion(&d.runtime_version));
  d.cublaslt_version = static_cast<int64_t>(cublasLtGetVersion());
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  d.measured_at_utc = stamp;
  return d;
}

L2Flusher::L2Flusher(int device) {
  int l2_bytes = 0;
  BATCHSIM_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  buffer_ = DeviceBuffer<std::byte>(2 * static_cast<size_t>(l2_bytes));
}

void L2Flusher::flush(cudaStream_t stream) {
  if (buffer_.size() > 0) BATCHSIM_CUDA_CHECK(cudaMemsetAsync(buffer_.get(), 0, buffer_.bytes(), stream));
}

}  // namespace batchsim::calibration
