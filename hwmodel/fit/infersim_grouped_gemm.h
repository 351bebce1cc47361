// batchsim — InferSim's H800 grouped-GEMM measurements and the fused-MoE model's GEMM part on them.
//
// alibaba/InferSim (`bench_data/`, Apache-2.0; shipped under hwmodel/measured/infersim/, see
// hwmodel/measured/README.md) timed DeepSeek-V3's routed experts on one H800 (the H100's export
// variant: same SMs and HBM3) with DeepGEMM's FP8 block-scaled grouped GEMMs: 256 experts, top-8,
// hidden 7168, expert intermediate 2048, for 1-256 GPUs of expert parallelism, every local expert
// given the same `tokens_per_expert` rows. The up (gate + up) and down GEMMs are timed alone: no
// routing, activation or combine. So what is scored against them is the GEMM part of the
// fused-MoE model (moe_kernel.h): per_expert x touched + roofline_combine(W / weight_bytes_per_s,
// FL / flops_per_s, p), with every local expert touched and its rows padded to DeepGEMM's M
// alignment of 128. DeepGEMM is no kernel of vLLM 0.24's on Hopper; the constants scored are those
// of another library's fit (issue 43's prototype: FlashInfer CUTLASS block FP8, its closest), a
// transfer, never a fit on these rows. They are scored apart from `validate`, per phase.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "hwmodel/fit/validation.h"
#include "hwmodel/moe_kernel.h"

namespace batchsim {

struct GroupedGemmRow {
  bool prefill = false;  // the prefill/ or decode/ table
  int64_t experts = 0, gpus = 0, local_experts = 0, top_k = 0, hidden = 0, intermediate = 0;
  int64_t tokens_per_gpu = 0;     // seq_len_per_gpu (prefill) or batch_size_per_gpu (decode)
  int64_t tokens_per_expert = 0;  // rows of every local expert
  double up_s = 0, down_s = 0;    // the gate+up and the down GEMM
  double seconds() const { return up_s + down_s; }
};

// `dir` holds prefill/data.csv and decode/data.csv (InferSim's bench_data/.../grouped_gemm);
// times there are microseconds. UserError naming the file and line for a malformed row.
std::vector<GroupedGemmRow> read_infersim_grouped_gemm(const std::filesystem::path& dir);

// The model's GEMM part for a row under `fit` (above).
double grouped_gemm_part_s(const MoeKernelFit& fit, const GroupedGemmRow& row);

struct GroupedGemmScore {
  ErrorStats prefill, decode;
};
GroupedGemmScore score_infersim_grouped_gemm(const std::vector<GroupedGemmRow>& rows, const MoeKernelFit& fit);

}  // namespace batchsim
