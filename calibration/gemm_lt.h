// batchsim calibration — one transformer-layer GEMM through cuBLASLt.
//
// Row-major Y[M,N] = X[M,K]·W[N,K]ᵀ (activations times a Linear layer's weight, as PyTorch
// stores it) is, in cuBLASLt's column-major terms, Yᵀ(N×M) = op_T(W)·Xᵀ with A = W viewed as
// K×N (ld K, TRANSA = T), B = Xᵀ as K×M (ld K), C = Yᵀ as N×M (ld N). FP32 accumulation
// (CUBLAS_COMPUTE_32F) with BF16 or FP16 inputs and outputs, as inference engines run them.
// The algorithm is cuBLASLt's top-1 heuristic for a 32 MiB workspace (cuBLAS's documented
// Hopper workspace; pytorch PR #120925), which is what frameworks pick too.
// A batched GEMM (`groups` > 1: MLA's absorbed per-head projections) is one strided-batched
// call: group g reads X + g·M·K and W + g·N·K and writes Y + g·M·N (CUBLASLT_MATRIX_LAYOUT_
// BATCH_COUNT and _STRIDED_BATCH_OFFSET on every layout), as torch.bmm runs it.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "calibration/cuda_runtime_support.h"

namespace batchsim::calibration {

enum class GemmDtype { kBf16, kFp16 };
std::string dtype_name(GemmDtype dtype);  // "bf16" | "fp16"

inline constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

class CublasLtHandle {
 public:
  CublasLtHandle() { BATCHSIM_CUDA_CHECK(cublasLtCreate(&handle_)); }
  ~CublasLtHandle() { cublasLtDestroy(handle_); }
  CublasLtHandle(const CublasLtHandle&) = delete;
  CublasLtHandle& operator=(const CublasLtHandle&) = delete;
  cublasLtHandle_t get() const { return handle_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

// A planned GEMM of fixed shape and dtype: descriptors and the chosen algorithm.
class LtGemm {
 public:
  LtGemm(const CublasLtHandle& handle, GemmDtype dtype, int64_t m, int64_t n, int64_t k, int64_t groups = 1);

  // x: [groups][m][k], w: [groups][n][k], y: [groups][m][n], all row-major, 2-byte elements.
  void run(const void* x, const void* w, void* y, void* workspace, size_t workspace_bytes, cudaStream_t stream) const;

 private:
  template <class Handle>
  using Owned = std::unique_ptr<std::remove_pointer_t<Handle>, cublasStatus_t (*)(Handle)>;

  cublasLtHandle_t handle_;
  Owned<cublasLtMatmulDesc_t> op_{nullptr, &cublasLtMatmulDescDestroy};
  Owned<cublasLtMatrixLayout_t> a_{nullptr, &cublasLtMatrixLayoutDestroy};
  Owned<cublasLtMatrixLayout_t> b_{nullptr, &cublasLtMatrixLayoutDestroy};
  Owned<cublasLtMatrixLayout_t> c_{nullptr, &cublasLtMatrixLayoutDestroy};
  cublasLtMatmulAlgo_t algo_{};
};

}  // namespace batchsim::calibration
