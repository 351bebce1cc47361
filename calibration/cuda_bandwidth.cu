// Streaming kernels for achievable HBM bandwidth, and nvbench's blocking kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "calibration/cuda_check.h"
#include "calibration/cuda_kernels.h"

namespace batchsim::calibration {
namespace {

constexpr int kStreamThreads = 256;
constexpr int kStreamBlocksPerSm = 8;  // 2048 resident threads per SM on sm_80/sm_90

__global__ void stream_read_kernel(const uint4* __restrict__ src, size_t count, unsigned* sink) {
  unsigned folded = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(src + i);  // streaming load: evict-first, no L1 allocation
    folded ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (folded == 0x9e3779b9u) sink[0] = folded;  // data-dependent store keeps every load live
}

__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    __stcs(dst + i, __ldcs(src + i));
  }
}

__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void blocking_kernel(volatile int* flag, unsigned long long timeout_ns) {
  const unsigned long long start = global_timer_ns();
  while (*flag == 0) {
    if (global_timer_ns() - start > timeout_ns) break;  // never hang if the host forgets
  }
}

// A cheap integer hash (lowbias32, Chris Wellons' hash-prospector) turned into [-1, 1).
__device__ __forceinline__ float hash_to_unit(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void fill_random_16bit_kernel(unsigned short* dst, size_t count, bool bf16, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float v = hash_to_unit(static_cast<uint32_t>(i) * 0x9e3779b9u ^ seed ^ static_cast<uint32_t>(i >> 32));
    dst[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16(v)) : __half_as_ushort(__float2half(v));
  }
}

void require_16_byte_multiple(size_t bytes) {
  if (bytes == 0 || bytes % 16 != 0) throw std::invalid_argument("stream kernels need a positive multiple of 16 bytes");
}

}  // namespace

void launch_stream_read(const void* src, size_t bytes, unsigned* sink, int sm_count, cudaStream_t stream) {
  require_16_byte_multiple(bytes);
  stream_read_kernel<<<sm_count * kStreamBlocksPerSm, kStreamThreads, 0, stream>>>(static_cast<const uint4*>(src),
                                                                                   bytes / 16, sink);
  BATCHSIM_CUDA_CHECK(cudaGetLastError());
}

void launch_copy(const void* src, void* dst, size_t bytes, int sm_count, cudaStream_t stream) {
  require_16_byte_multiple(bytes);
  copy_kernel<<<sm_count * kStreamBlocksPerSm, kStreamThreads, 0, stream>>>(static_cast<const uint4*>(src),
                                                                            static_cast<uint4*>(dst), bytes / 16);
  BATCHSIM_CUDA_CHECK(cudaGetLastError());
}

void launch_fill_random_16bit(void* dst, size_t count, bool bf16, uint32_t seed, cudaStream_t stream) {
  if (count == 0) return;
  const size_t blocks = std::min<size_t>((count + kStreamThreads - 1) / kStreamThreads, 65536);
  fill_random_16bit_kernel<<<static_cast<unsigned>(blocks), kStreamThreads, 0, stream>>>(
      static_cast<unsigned short*>(dst), count, bf16, seed);
  BATCHSIM_CUDA_CHECK(cudaGetLastError());
}

void launch_blocking_kernel(volatile int* flag, int timeout_ms, cudaStream_t stream) {
  blocking_kernel<<<1, 1, 0, stream>>>(flag, static_cast<unsigned long long>(timeout_ms) * 1000000ull);
  BATCHSIM_CUDA_CHECK(cudaGetLastError());
}

// nvcc defines __CUDA_ARCH_LIST__ in host and device passes alike: "800,900" for sm_80 and
// sm_90 (CUDA 11.5 and later).
#define BATCHSIM_STRINGIFY_LIST(...) #__VA_ARGS__
#define BATCHSIM_STRINGIFY(...) BATCHSIM_STRINGIFY_LIST(__VA_ARGS__)

const char* compiled_cuda_architectures() {
#ifdef __CUDA_ARCH_LIST__
  static const std::string text = [] {
    const std::string list = BATCHSIM_STRINGIFY(__CUDA_ARCH_LIST__);  // "800,900"
    std::string out;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t comma = std::min(list.find(',', start), list.size());
      const int arch = std::stoi(list.substr(start, comma - start));  // 900 = 9.0
      out += (out.empty() ? "sm_" : ", sm_") + std::to_string(arch / 10);
      start = comma + 1;
    }
    return out;
  }();
  return text.c_str();
#else
  return "unknown (nvcc older than 11.5)";
#endif
}

std::string kernel_image_problem() {
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, copy_kernel);
  if (status == cudaSuccess) return "";
  cudaGetLastError();  // not sticky; clear it for whatever runs next
  return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
}

}  // namespace batchsim::calibration
