#include "calibration/gemm_lt.h"

#include <stdexcept>

namespace batchsim::calibration {

std::string dtype_name(GemmDtype dtype) { return dtype == GemmDtype::kBf16 ? "bf16" : "fp16"; }

LtGemm::LtGemm(const CublasLtHandle& handle, GemmDtype dtype, int64_t m, int64_t n, int64_t k, int64_t groups)
    : handle_(handle.get()) {
  if (m < 1 || n < 1 || k < 1 || groups < 1) throw std::invalid_argument("GEMM sizes must be >= 1");
  const cudaDataType_t type = dtype == GemmDtype::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  cublasLtMatmulDesc_t op = nullptr;
  BATCHSIM_CUDA_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  op_.reset(op);
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  BATCHSIM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
  BATCHSIM_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
  const auto make_layout = [type, groups](Owned<cublasLtMatrixLayout_t>& owner, int64_t rows, int64_t cols) {
    cublasLtMatrixLayout_t layout = nullptr;
    BATCHSIM_CUDA_CHECK(
        cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), rows));
    owner.reset(layout);
    if (groups > 1) {
      const int32_t count = static_cast<int32_t>(groups);
      const int64_t stride = rows * cols;  // elements between consecutive matrices
      BATCHSIM_CUDA_CHECK(
          cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      BATCHSIM_CUDA_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                           sizeof stride));
    }
  };
  make_layout(a_, k, n);  // W as K×N, ld K (transposed by TRANSA)
  make_layout(b_, k, m);  // Xᵀ as K×M, ld K
  make_layout(c_, n, m);  // Yᵀ as N×M, ld N

  cublasLtMatmulPreference_t pref = nullptr;
  BATCHSIM_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, decltype(&cublasLtMatmulPreferenceDestroy)> pref_owner(
      pref, &cublasLtMatmulPreferenceDestroy);
  const size_t workspace = kGemmWorkspaceBytes;
  BATCHSIM_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                           sizeof workspace));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  BATCHSIM_CUDA_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, op_.get(), a_.get(), b_.get(), c_.get(), c_.get(), pref,
                                                     1, &result, &found));
  if (found == 0) {
    throw std::runtime_error("cuBLASLt has no algorithm for M=" + std::to_string(m) + " N=" + std::to_string(n) +
                             " K=" + std::to_string(k) +
                             (groups > 1 ? " x" + std::to_string(groups) + " groups " : " ") + dtype_name(dtype));
  }
  algo_ = result.algo;
}

void LtGemm::run(const void* x, const void* w, void* y, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream) const {
  const float alpha = 1.0f, beta = 0.0f;
  BATCHSIM_CUDA_CHECK(cublasLtMatmul(handle_, op_.get(), &alpha, w, a_.get(), x, b_.get(), &beta, y, c_.get(), y,
                                     c_.get(), &algo_, workspace, workspace_bytes, stream));
}

}  // namespace batchsim::calibration
