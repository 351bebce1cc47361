// batchsim — kernel tables measured per GPU and serving framework, in NVIDIA aiconfigurator's
// layout.
//
// NVIDIA publishes, per system, the times of the kernels a serving framework runs
// (ai-dynamo/aiconfigurator, `systems/data/<system>/`; shipped here for the H100 SXM under
// hwmodel/measured/aiconfigurator/, Apache-2.0). A system folder holds
//   <family>/<framework>/<version>/<table>.csv[.gz]
// with families `gemm` (gemm_perf), `attention` (context_attention_perf,
// generation_attention_perf), `comm` (nccl/<version>/nccl_perf and <framework>/<version>/
// custom_allreduce_perf) and `moe` (moe_perf); `latency` is always milliseconds (stored here in
// seconds). read_kernel_tables picks one framework (vllm, sglang, trtllm), its newest version of
// each family unless one is named, and NCCL's version from system.yaml (misc.nccl_version) or the
// newest. Rows are kept as measured; which of them the cost model can express is decided by the
// fit and by `batchsim validate` (hwmodel/kernel_fit.h), which count and name what they skip.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace batchsim {

struct KernelGemmRow {
  std::string dtype;   // bfloat16, fp8 (per-tensor scaled), fp8_block, ...
  std::string kernel;  // kernel_source, e.g. torch.nn.functional.linear
  int64_t m = 0, n = 0, k = 0;
  double seconds = 0;
};

// Context (prefill) attention: batch sequences of isl tokens each, no cached prefix; or
// generation (decode): batch sequences of one query over `context` cached tokens (`step`).
struct KernelAttentionRow {
  bool prefill = false;
  int64_t batch = 0;
  int64_t isl = 0;                                        // prefill: tokens per sequence
  int64_t context = 0;                                    // decode: tokens already in the KV cache
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;  // per GPU, after tensor parallelism
  std::string attn_dtype, kv_cache_dtype, kernel;
  int64_t window = 0;  // 0 = full causal attention
  double seconds = 0;
};

struct KernelCollectiveRow {
  std::string implementation;  // "nccl", or the framework's custom all-reduce ("vllm_graph", ...)
  std::string op;              // all_reduce, all_gather, reduce_scatter, alltoall
  std::string dtype;           // half, int8, bfloat16
  int num_gpus = 0;
  int64_t elements = 0;  // message size in elements per rank
  double bytes = 0;      // elements x element size
  double seconds = 0;
};

struct KernelMoeRow {
  std::string dtype, distribution, kernel;
  int64_t tokens = 0, hidden = 0, inter = 0, topk = 0, experts = 0, tp = 0, ep = 0;
  double seconds = 0;
};

struct KernelTables {
  std::string root;                     // the system folder
  std::string system;                   // its name, e.g. "h100_sxm"
  std::string framework;                // vllm, sglang, trtllm
  std::vector<std::string> files_read;  // relative to root
  std::vector<KernelGemmRow> gemm;
  std::vector<KernelAttentionRow> attention;
  std::vector<KernelCollectiveRow> collectives;
  std::vector<KernelMoeRow> moe;
};

// Whether `dir` is laid out as an aiconfigurator system folder (it has a family folder with a
// framework/version/table below it).
bool is_kernel_table_dir(const std::filesystem::path& dir);
// Reads the tables of `framework` under `dir`. Throws UserError naming the folder when it has
// none for that framework (listing the frameworks it has), and the file and line for a malformed
// row.
KernelTables read_kernel_tables(const std::filesystem::path& dir, std::string_view framework);

}  // namespace batchsim
