// batchsim calibration — RAII owners for CUDA resources, device discovery, L2 flushing.
//
// Every device allocation, stream, event and pinned host buffer is owned by one object that
// frees it in its destructor; copies are deleted and moves transfer ownership (nvbench's
// cuda_stream / device buffers follow the same rule). Host-only code: compiled by g++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "calibration/cuda_check.h"
#include "calibration/device_info.h"

namespace batchsim::calibration {

// A typed device allocation of `count` elements (uninitialised).
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count > 0) BATCHSIM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }

  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

  // Setup-time upload, complete on return. cudaMemcpy from pageable memory may return before
  // the DMA lands, and it does not order against our non-blocking streams, hence the sync.
  void copy_from_host(const T* host, size_t count) {
    BATCHSIM_CUDA_CHECK(cudaMemcpy(ptr_, host, count * sizeof(T), cudaMemcpyHostToDevice));
    BATCHSIM_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void copy_to_host(T* host, size_t count) const {
    BATCHSIM_CUDA_CHECK(cudaMemcpy(host, ptr_, count * sizeof(T), cudaMemcpyDeviceToHost));
  }

 private:
  void reset() noexcept {
    if (ptr_ != nullptr) cudaFree(ptr_);  // no throw from a destructor
    ptr_ = nullptr;
    count_ = 0;
  }
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

class CudaStream {
 public:
  CudaStream() { BATCHSIM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~CudaStream() { cudaStreamDestroy(stream_); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const { BATCHSIM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

class CudaEvent {
 public:
  CudaEvent() { BATCHSIM_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~CudaEvent() { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Page-locked host memory mapped into the device address space (for the blocking kernel's
// release flag, which the host writes while the kernel spins on it).
class MappedHostFlag {
 public:
  MappedHostFlag();
  ~MappedHostFlag();
  MappedHostFlag(const MappedHostFlag&) = delete;
  MappedHostFlag& operator=(const MappedHostFlag&) = delete;
  void set(int value) { *host_ = value; }
  volatile int* device_ptr() const { return device_; }

 private:
  volatile int* host_ = nullptr;
  volatile int* device_ = nullptr;
};

// Why no CUDA device can be used (no driver, no GPU, …), or nullopt when device 0 is usable.
std::optional<std::string> cuda_device_unavailable_reason();
// Device record for `device` (names, SM count, clocks, memory, versions). `timer` and
// `cupti_api_version` are left for the caller.
DeviceInfo query_device_info(int device);

// Evicts the L2 cache before a cold sample by writing a buffer twice its size, the way
// nvbench's l2flush.cuh does (cudaMemsetAsync over a cudaDevAttrL2CacheSize-sized buffer).
class L2Flusher {
 public:
  explicit L2Flusher(int device);
  void flush(cudaStream_t stream);

 private:
  DeviceBuffer<std::byte> buffer_;
};

}  // namespace batchsim::calibration
