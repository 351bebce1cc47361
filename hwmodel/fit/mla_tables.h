// batchsim — InferSim's measured MLA attention tables (alibaba/InferSim `bench_data/<gpu>/mla/`;
// shipped for the H800 in hwmodel/measured/infersim/h800/mla/, Apache-2.0).
//
// A folder `mla/` holds
//   decode/<heads>-<kv_lora_rank>-<qk_rope_head_dim>.csv   dtype, kv_dtype, batch_size, kv_len,
//                                                        latency_us, mfu
//   prefill/<heads>-<qk_nope_head_dim>-<qk_rope_head_dim>.csv   dtype, seq_len, latency_us, mfu
// Times are microseconds (stored here in seconds); `mfu` is InferSim's own figure and is not
// read. What the rows time (InferSim @ f2293da, kernel_benchmark/): decode is FlashInfer's
// BatchMLAPagedAttentionWrapper (backend "auto", its Hopper MLA kernel, page size 1) on the
// absorbed MQA over the latent, NOT FlashMLA although the data's README says so (InferSim's
// FlashMLA scripts are the DSA ones); prefill is sgl_kernel's flash_attn_varlen_func (FA3),
// causal, one sequence, qk width nope + rope, v width nope (DeepSeek-V3: 192 and 128). Both are
// timed with torch.utils.benchmark around the Python call, without CUDA graphs, so their fixed
// cost (~20 us) is a launch from Python, not the kernel's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace batchsim {

struct MlaDecodeRow {
  int64_t heads = 0, kv_lora_rank = 0, qk_rope_head_dim = 0;  // from the file name
  std::string kv_dtype;                                       // bf16, fp8
  int64_t batch = 0;
  int64_t kv_len = 0;  // keys per sequence
  double seconds = 0;
};

struct MlaPrefillRow {
  int64_t heads = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0;  // from the file name
  int64_t seq_len = 0;                                            // one sequence of that many tokens, no cached prefix
  double seconds = 0;
};

struct MlaTables {
  std::string root;                     // the `mla` folder
  std::string device;                   // the folder above it, e.g. "h800"
  std::vector<std::string> files_read;  // relative to root
  std::vector<MlaDecodeRow> decode;
  std::vector<MlaPrefillRow> prefill;
};

// Whether `dir` is such a folder: named `mla` with a decode/ or prefill/ table named
// <a>-<b>-<c>.csv, or holding one as `mla/`.
bool is_mla_table_dir(const std::filesystem::path& dir);
// Reads every table of the folder (or of its `mla/`), in file-name order. Throws UserError
// naming the file and line for a malformed row, and the folder when it has no table.
MlaTables read_mla_tables(const std::filesystem::path& dir);

}  // namespace batchsim
