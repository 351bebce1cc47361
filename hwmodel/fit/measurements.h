// batchsim — operator timings measured on a real GPU, in Vidur's CSV schema.
//
// The fit (hwmodel/fit/) and `batchsim validate` work on these; calibration/ writes its own
// measurements in the same schema so that both reuse this reader. Files are recognised by their
// header, not their name (Vidur, microsoft/vidur data/profiling/, MIT licence):
//   - token-level operators (`mlp.csv`): `time_stats.<op>.median` in ms per call for ONE layer
//     on ONE GPU, vs `num_tokens` and `num_tensor_parallel_workers`, with the model's shape in
//     `n_head, n_kv_head, n_embd, n_expanded_embd, vocab_size, use_gated_mlp`;
//   - attention (`attention*.csv`): `time_stats.attn_prefill.median` (is_prefill=True:
//     `prefill_chunk_size` tokens after `kv_cache_size` of context) and
//     `time_stats.attn_decode.median` (`batch_size` sequences of `kv_cache_size` context), with
//     `n_embd, n_q_head, n_kv_head, num_tensor_parallel_workers` (heads of the whole model);
//   - collectives (`all_reduce.csv`): `time_stats.all_reduce.median` vs `size` bytes and
//     `num_workers`, `devices_per_node`;
//   - CPU overheads (`cpu_overheads/<gpu>.csv`): per-iteration `schedule_median,
//     sampler_e2e_median, prepare_inputs_e2e_median, process_model_outputs_median` (ms) vs
//     `batch_size`, `model_name`, `tensor_parallel_degree`.
// Times are stored in seconds. Rows whose median is empty (the operator was not timed for
// that row) are kept with NaN for that operator.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "hwmodel/model_spec.h"

namespace batchsim {

// Vidur's token-level operators, in the order of one layer's forward pass
// (vidur/profiling/mlp/mlp_impl.py).
enum class TokenOp : int {
  emb = 0,
  input_layernorm,
  attn_pre_proj,  // the QKV GEMM
  attn_rope,
  attn_post_proj,  // the O GEMM
  post_attention_layernorm,
  mlp_up_proj,  // up, or gate+up when gated
  mlp_act,
  mlp_down_proj,
  add,  // residual add
};
inline constexpr int kNumTokenOps = 10;
const char* token_op_name(TokenOp op);  // Vidur's column name, e.g. "attn_pre_proj"

// The shape columns every token-level row carries; a ModelSpec without layers, vocabulary or
// context (which a per-layer timing does not depend on).
struct MeasuredShape {
  int num_heads = 0;
  int num_kv_heads = 0;
  int hidden_size = 0;
  int ffn_size = 0;
  int vocab_size = 0;
  bool gated_mlp = false;
  ModelSpec as_model_spec() const;  // one layer, head_dim = hidden / heads, dtype 2 bytes
  bool same_layer_shape(const ModelSpec& model) const;
};

struct TokenOpRow {
  std::string model;  // where the row came from, e.g. "meta-llama/Llama-2-7b-hf"
  MeasuredShape shape;
  int64_t num_tokens = 0;
  int tp = 1;
  std::array<double, kNumTokenOps> median_s{};  // NaN where not measured
};

struct AttentionRow {
  std::string source;  // e.g. "meta-llama/Llama-2-7b-hf" or "attention-70b-shape-tp2"
  int hidden_size = 0;
  int num_heads = 0;  // query heads of the whole model
  int num_kv_heads = 0;
  int tp = 1;
  bool is_prefill = false;
  int64_t batch_size = 0;          // decode: sequences
  int64_t prefill_chunk_size = 0;  // prefill: new tokens
  int64_t kv_cache_size = 0;       // context already cached (decode: per sequence)
  double median_s = 0;
  ModelSpec as_model_spec() const;
};

struct AllReduceRow {
  int num_workers = 0;
  double size_bytes = 0;
  double median_s = 0;
};

struct CpuOverheadRow {
  std::string model;  // model_name column, e.g. "meta-llama/Llama-2-7b-hf"
  int64_t batch_size = 0;
  int tp = 1;
  double schedule_s = 0;
  double sampler_s = 0;
  double prepare_inputs_s = 0;
  double process_outputs_s = 0;
  // What one iteration costs the CPU outside the model's kernels. Vidur's own predictor adds the
  // same four (vidur/execution_time_predictor/base_execution_time_predictor.py); its Ray
  // communication time is specific to Sarathi's Ray workers and left out.
  double total_s() const { return schedule_s + sampler_s + prepare_inputs_s + process_outputs_s; }
};

struct Measurements {
  std::string root;     // the directory read
  std::string device;   // the GPU picked in a Vidur tree ("a100"), else empty
  std::string kernels;  // whose kernels were timed, when the layout says ("vllm 0.19.0"); else empty
  std::vector<TokenOpRow> token_ops;
  std::vector<AttentionRow> attention;
  std::vector<AllReduceRow> all_reduce;  // single-node rows only (what tensor parallelism uses)
  std::vector<CpuOverheadRow> cpu_overheads;
  std::vector<std::string> files_read;     // paths relative to root, for provenance
  std::vector<std::string> files_skipped;  // CSVs with a header of none of the kinds above
};

// Reads a measurement directory. Two layouts:
//  - Vidur's tree (`compute/<device>/...`, `network/<device>_*/`, `cpu_overheads/<device>.csv`):
//    `device` (e.g. "a100") picks one GPU's files; for the network it prefers `<device>_dgx`
//    (all GPUs of a node on NVSwitch, what tensor parallelism runs on) over other topologies.
//    An empty `device` is allowed only when the tree holds one device.
//  - Anything else: every CSV under `dir`, recursively (what calibration/ writes).
//  - A single CSV file: that file alone; `device` defaults to the folder after `compute/` in
//    its path (calibration's compute/<gpu>/<org>/<model>/mlp.csv), else stays empty.
// Throws UserError naming the file and line for malformed rows, or a missing directory.
Measurements read_measurements(const std::filesystem::path& dir, std::string_view device = "");

}  // namespace batchsim
