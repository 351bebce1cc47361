// batchsim calibration — a model's GEMM shapes, handed from the CPU side to the GPU side.
//
// batchsim-calibrate builds with the standard library and CUDA alone (CMakeLists.txt), so it
// cannot read Hugging Face configs or know the model families that hwmodel knows (MLA,
// routed and shared experts, dense layers of MoE models, gpt-oss's windows). The `batchsim`
// CLI can: `batchsim calibrate shapes --model M --tp N [--ep N ...] --out FILE`
// (experiments/cli/calibrate_shapes.cpp) writes the per-GPU GEMMs that the cost model times for
// any model `batchsim run --model` accepts, at one parallel layout, using hwmodel's own shape
// functions (hwmodel/roofline.h: layer_gemm_shapes, mla_gemm_shapes, moe_gemm_shapes,
// lm_head_shape); `batchsim-calibrate measure --shapes FILE` times exactly those. The file is
// the contract between the two; a test (tests/calibration/shape_file_test.cpp) writes one with
// the CLI and reads it back here.
//
// Format: CSV with a header line; lines starting with '#' are comments. Columns (by name, any
// order; unknown ones are ignored so the writer may add more):
//   model         the model's name as batchsim names it ("deepseek-v3")          required
//   hf_id         its Hugging Face id, the measurement sub-folder ("deepseek-ai/DeepSeek-V3");
//                 empty for a model read from a config.json (the name is used)   optional
//   tp, dp, ep, moe_tp   the parallel layout the shapes are per GPU of (default 1)
//   op            which GEMM (below)                                               required
//   k, n          Y[M, N] = X[M, K] W[K, N] on one GPU                             required, > 0
//   groups        a batched GEMM of this many independent (K, N) matrices, each over the
//                 same M rows (MLA's absorbed uk / uv: one per head on the GPU); default 1
//   layers        how many layers of one forward pass run this GEMM (1 for the LM head)
//   weight_format the model's format for these weights (bf16, fp8, fp8_block, mxfp4, ...);
//                 batchsim-calibrate times 16-bit GEMMs whatever it says
// Ops: attn_pre_proj (QKV; MLA: the fused query and latent down-projection), attn_post_proj,
// mla_q_b_proj, mla_kv_b_proj, mla_uk, mla_uv, mlp_up_proj / mlp_down_proj (a dense MLP: a
// dense model's, or the dense layers' of an MoE model), moe_router, expert_up_proj /
// expert_down_proj (one routed expert: gate+up and down, at the experts' own split),
// shared_expert_up_proj / shared_expert_down_proj, lm_head. Any other name is read as is.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace batchsim::calibration {

struct ShapeFileGemm {
  std::string model;
  std::string hf_id;
  int tp = 1, dp = 1, ep = 1, moe_tp = 1;
  std::string op;
  int64_t k = 0;
  int64_t n = 0;
  int64_t groups = 1;
  int layers = 0;
  std::string weight_format;

  // The measurement sub-folder: hf_id, else the model's name.
  const std::string& folder() const { return hf_id.empty() ? model : hf_id; }
};

// Reads a shape file. Throws std::invalid_argument naming the file (and line) for a missing
// file, a missing required column, a malformed or non-positive number, or a file without rows.
std::vector<ShapeFileGemm> read_shape_file(const std::filesystem::path& path);

// One GEMM to time, and every row of the file it stands for: rows with the same (k, n, groups)
// share one measurement (MLA's uk and a down-projection may coincide; TP 1 QKV and O often do).
struct DistinctGemm {
  int64_t k = 0, n = 0, groups = 1;
  std::vector<ShapeFileGemm> rows;
};
// The distinct shapes of one model's rows (rows of other models are left out), in the order
// they first appear.
std::vector<DistinctGemm> distinct_gemms(const std::vector<ShapeFileGemm>& gemms, const std::string& model);
// The models of a file, in the order they first appear.
std::vector<std::string> shape_file_models(const std::vector<ShapeFileGemm>& gemms);

}  // namespace batchsim::calibration
