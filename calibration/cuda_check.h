// batchsim calibration — one checking macro for every CUDA runtime, cuBLAS(Lt) and CUPTI call.
//
// BATCHSIM_CUDA_CHECK(call) evaluates the call once and throws CudaError (with the call's
// text, file:line and the library's own error string) unless it returned success. Overloads of
// check_status pick the right "success" and message for each library, so there is one macro
// for all of them (as nvbench's NVBENCH_CUDA_CALL wraps every call in one place).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cupti.h>

#include <stdexcept>
#include <string>

namespace batchsim::calibration {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(const std::string& library, const std::string& message, const char* call,
                                   const char* file, int line);

inline void check_status(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    throw_cuda_error("CUDA", std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status), call, file,
                     line);
  }
}

inline void check_status(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw_cuda_error("cuBLAS", cublasLtGetStatusString(status), call, file, line);
  }
}

inline void check_status(CUptiResult status, const char* call, const char* file, int line) {
  if (status != CUPTI_SUCCESS) {
    const char* text = nullptr;
    cuptiGetResultString(status, &text);
    throw_cuda_error("CUPTI", text != nullptr ? text : "unknown CUPTI error", call, file, line);
  }
}

}  // namespace batchsim::calibration

#define BATCHSIM_CUDA_CHECK(call) ::batchsim::calibration::check_status((call), #call, __FILE__, __LINE__)
