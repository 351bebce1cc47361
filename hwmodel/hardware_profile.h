// batchsim — hardware profiles: what a GPU can do, and how close real kernels get to it.
//
// A profile is the datasheet ceilings (peak dense FLOP/s, HBM bytes/s, memory, interconnect,
// PCIe) plus the efficiency parameters the roofline cost model applies to them. Built-in
// datasheet GPUs are profiles with default efficiencies; `load_hardware_profile` reads a
// YAML/JSON file (format documented in hwmodel/README.md), which is what calibration/ writes.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hwmodel/attention_kernel.h"
#include "hwmodel/gemm_table.h"
#include "hwmodel/moe_kernel.h"
#include "hwmodel/weight_format.h"

namespace batchsim {

// The memory-bound operators of a layer besides attention (see roofline.h, ElementwiseOp).
enum class ElementwiseOp : int { norm = 0, rope, activation, residual_add, embedding };
inline constexpr int kNumElementwiseOps = 5;
const char* elementwise_op_name(ElementwiseOp op);  // "norm", "rope", ...

// A streaming kernel: launch + bytes / (hbm_bytes_per_s * efficiency).
struct StreamingKernel {
  double efficiency = 0.8;  // of hbm_bytes_per_s
  double launch_s = 0;
};

// One all-reduce over `tp` GPUs: latency + wire bytes / bytes_per_s, where wire bytes are the
// ring's 2 (tp-1)/tp of the message (see allreduce_time_s in roofline.h).
struct AllReduceFit {
  int tp = 0;
  double latency_s = 0;
  double bytes_per_s = 0;
};

// How far a fitted profile's predictions are from measured times: what a reader needs to know
// to trust a run on it (summary.json's `trust`, the report's "how far to trust these figures").
// Written by `batchsim validate --profile-out` and `batchsim calibrate fit` from the scores they
// compute (validation.h, kernel_validation.h); empty in datasheet profiles, which were never
// compared with a measurement.
struct OperatorError {
  std::string op;           // the operator's name in the validation report ("gemm", "attn_decode")
  double mape_percent = 0;  // mean |predicted / measured - 1| x 100 over the rows, to 0.1
  double p90_percent = 0;   // its 90th percentile (nearest rank), to 0.1
  int64_t count = 0;        // rows scored
  bool operator==(const OperatorError&) const = default;
};

// End to end: a profile's predictions of measured serving benchmarks, per serving engine
// (`batchsim validate-serving --profile-out`, experiments/fidelity/validate_serving.h). Serving results
// are never fitted on, so these are always out of sample.
struct ServingError {
  std::string backend;           // the benchmarks' serving engine ("vllm", "sglang", "trtllm")
  double ttft_mape_percent = 0;  // mean |predicted / measured - 1| x 100 of the mean TTFT, to 0.1
  double tpot_mape_percent = 0;  // the same of the mean TPOT
  // The median of predicted / measured over the runs, to 0.01: the error's sign, which the MAPE
  // hides (below 1: predicted short). 0: not recorded (a profile written before they were).
  double ttft_median_ratio = 0, tpot_median_ratio = 0;
  int64_t count = 0;  // benchmark runs replayed
  bool operator==(const ServingError&) const = default;
};

struct ServingValidation {
  std::string measured_on;  // one line: the benchmarks and how they were replayed
  std::vector<ServingError> backends;
  bool empty() const { return backends.empty(); }
  bool operator==(const ServingValidation&) const = default;
};

struct ProfileValidation {
  std::string measured_on;  // one line: the measurements scored against (tables, GPU, framework)
  bool held_out = false;    // scored on rows the fit did not see (else on the rows it was fitted on)
  std::string scored_on;    // one line: which rows, e.g. "fitted on half the shapes, scored on the other half"
  std::vector<OperatorError> operators;  // in the report's order; empty: not validated
  ServingValidation serving;             // optional: end-to-end figures
  bool empty() const { return operators.empty(); }
  bool operator==(const ProfileValidation&) const = default;
};

// Which kernel's tiling prefill attention is costed by (roofline.h, prefill_attention_time_s):
// FlashAttention-2's (64-token query tiles per query head, the per-SM K/V bound) or
// FlashAttention-3's on Hopper (packed-GQA tiles of kBlockM rows over kBlockN-key blocks).
enum class PrefillAttentionKernel { flash_attention_2, flash_attention_3 };
const char* prefill_attention_kernel_name(PrefillAttentionKernel kernel);  // "fa2", "fa3"

struct HardwareProfile {
  std::string name;
  std::string source;      // one line: "datasheet", or what a fitted profile was fitted from
  std::string provenance;  // fitted profiles: the measurement files read and the fit's notes
  // Fitted profiles: their error against measurements (above). Not inherited through a file's
  // `base`: a profile that changes its base's values is not what was scored.
  ProfileValidation validation;
  // A profile moved onto another GPU's datasheet ceilings (`calibrate transfer`,
  // fit/transfer_profile.h): the fitted profile it came from. Its validation is empty, since
  // the source's figures were measured on another GPU; runs state the transfer instead.
  std::string transferred_from;
  // The software whose kernels the fit's measurements timed ("vllm 0.24.0", "sarathi-serve
  // (Vidur's profiling, 2024)"): a profile is a GPU and the kernels it was measured with. A run
  // whose engine is another framework is told so (summary.json's trust.kernels_note). Empty:
  // not recorded (datasheets, profiles written before it).
  std::string kernels;
  double peak_flops = 0;  // dense BF16/FP16 FLOP/s of one GPU
  // Dense FP8 tensor-core FLOP/s of one GPU; 0 = no FP8 tensor cores (A100, A40), where FP8
  // weights are dequantised and multiplied at peak_flops (see gemm_peak_flops in roofline.h).
  double peak_fp8_flops = 0;
  // Dense FP4 tensor-core FLOP/s (Blackwell's MXFP4 / NVFP4); 0 = none (Hopper and older), where
  // FP4 weights are dequantised and multiplied at peak_flops.
  double peak_fp4_flops = 0;
  double hbm_bytes_per_s = 0;           // HBM bandwidth of one GPU
  int64_t memory_bytes = 0;             // HBM capacity of one GPU
  double interconnect_bytes_per_s = 0;  // per-GPU NVLink (or PCIe) bandwidth for collectives
  double interconnect_latency_s = 0;    // fixed cost of one collective
  double pcie_bytes_per_s = 0;          // host<->device, used by swap preemption
  // What one GPU's share of the node's local NVMe reads per second (KV offload's disk tier,
  // --kv-offload ...,disk=GIB); 0: unknown, and a disk tier is refused.
  double disk_bytes_per_s = 0;
  // GPUs that share one NVLink domain (a node: 8 on HGX H100/H200/B200), and what each GPU sends
  // to GPUs of other nodes per direction (its RDMA NIC: 400 Gb/s InfiniBand per H100, 800 Gb/s
  // per B200) with the latency of one such exchange. A collective or all-to-all over more GPUs
  // than one node pays this link for the traffic that leaves the node.
  double gpus_per_node = 8;
  double internode_bytes_per_s = 0;
  double internode_latency_s = 0;
  // gpus_per_node as a count of at least one: a group of more GPUs spans nodes.
  int node_gpus() const { return std::max(1, static_cast<int>(gpus_per_node)); }
  // Optional: USD per GPU-hour (a cloud list price, or what a purchase amortises to), which
  // `batchsim plan` ranks candidates by; 0: unknown. Datasheet profiles carry none.
  double price_per_hour = 0;

  // Efficiency parameters of the roofline (see roofline.h for how each is used).
  // GEMM: achieved FLOP/s = peak_flops * gemm_eta_max * M / (M + gemm_m_half).
  double gemm_eta_max = 0.7;
  double gemm_m_half = 0;
  // How the GEMM's compute and weight-streaming times combine: (t_c^p + t_m^p)^(1/p). 0 means
  // the hard roofline max(t_c, t_m); fitted values (~1.5) round the corner where real kernels
  // are slower than either roof alone.
  double gemm_roofline_exponent = 0;
  double hbm_efficiency = 0.8;                // achieved/datasheet bandwidth for streaming reads
  double prefill_attention_efficiency = 0.5;  // of peak_flops, queries against prior context
  double decode_attention_efficiency = 0.7;   // of hbm_bytes_per_s
  double decode_attention_per_seq_s = 0;      // additive, per sequence and layer
  // Per GEMM launch (incl. the LM head): the GPU-side floor of a kernel as CUPTI times it. What
  // the serving software adds (CPU work, host launch time) is an engine's (engine_profile.h).
  double kernel_launch_s = 0;

  // Prefill attention within the chunk's own causal triangle, of peak_flops.
  double prefill_attention_causal_efficiency = 0.5;
  // Attention beyond the roofline (fitted; zero in datasheet profiles).
  double attention_launch_s = 0;  // per attention kernel call, per layer
  // Prefill: per query token and query head held by the GPU (the diagonal tiles, softmax
  // rescaling and per-tile setup that the FLOP count misses).
  double prefill_attention_per_head_token_s = 0;
  // Prefill: per sequence (chunk) of the variable-length call: its metadata and the per-sequence
  // part of the KV-cache write (kernel-table fits; Vidur's rows are one sequence each, so 0 there).
  double prefill_attention_per_seq_s = 0;
  // Decode: per (sequence, KV head held by the GPU) work unit, combined with the KV read time
  // as (t_units^p + t_kv^p)^(1/p) with p = decode_attention_roofline_exponent (0: max).
  double decode_attention_per_seq_kv_head_s = 0;
  double decode_attention_roofline_exponent = 0;
  // Decode waves (roofline.h, decode_attention_time_s): the GPU's SM count (datasheet) and the
  // K/V bytes per second one SM streams (fitted; 0 leaves the wave term out).
  double sm_count = 0;
  double decode_attention_sm_bytes_per_s = 0;
  // Prefill: the same per-SM K/V bound for query tiles (roofline.h, prefill_attention_time_s)
  // and the exponent combining it with the FLOP time (0: max).
  double prefill_attention_sm_bytes_per_s = 0;
  double prefill_attention_roofline_exponent = 0;
  PrefillAttentionKernel prefill_attention_kernel = PrefillAttentionKernel::flash_attention_2;
  // FlashAttention-3 prefill: the fixed time of one tile on its SM (loading Q, the first K/V
  // pages, writing O).
  double prefill_attention_per_tile_s = 0;
  // Writing the new tokens' K and V into the KV cache, of hbm_bytes_per_s; 0: not charged (the
  // measurements fitted time it apart or not at all, as Vidur's attn_prefill does).
  double attention_kv_write_efficiency = 0;
  // ... and per new token (the cache write runs one thread block per token).
  double attention_kv_write_per_token_s = 0;
  // Attention by kernel regime (attention_kernel.h): one fitted set per (phase, kernel, KV dtype),
  // which replaces the flat attention parameters above for the calls it covers (any head_dim,
  // window and KV dtype; roofline.h). Empty: the flat parameters cost every call. Needs sm_count.
  std::vector<AttentionKernelFit> attention_kernels;
  // Multi-head latent attention (mla.h); empty: costed with the flat parameters.
  MlaAttentionFit mla;

  // Norms, rotary embedding, MLP activation, residual add, embedding lookup.
  std::array<StreamingKernel, kNumElementwiseOps> elementwise{};

  // All-reduce fits per tensor-parallel degree; degrees not listed use interconnect_*.
  std::vector<AllReduceFit> allreduce;
  // The same for a serving framework's own all-reduce kernel (vLLM's custom all-reduce over
  // NVLink peer memory, vllm/distributed/device_communicators/custom_all_reduce.py), which an
  // engine uses instead of NCCL for small messages: latency + message bytes / bytes_per_s (it
  // moves each rank's whole message, not a ring's share). Empty: not measured.
  std::vector<AllReduceFit> custom_allreduce;

  // Block-scaled FP8 GEMMs (fp8_block weights: DeepSeek-V3's 128 x 128 scales), one fit per kernel
  // library vLLM picks (DeepGEMM, CUTLASS, FlashInfer): its time is `scale` x the per-tensor FP8
  // GEMM's of the same shape, and NVIDIA's collector times every call at no less than
  // `call_floor_s` (0.06-0.17 ms at every m, what a call costs outside CUDA graphs: the
  // per-token-group quantisation and the launches, host-bound). The cost model charges the scale
  // alone (engines run decode under CUDA graphs); `validate` scores the rows with the floor.
  // Fitted by fit_kernel_tables on NVIDIA's fp8_block rows; empty: block FP8 costs as FP8.
  struct BlockFp8GemmFit {
    std::string kernel;
    double scale = 1;
    double call_floor_s = 0;
    int64_t rows = 0;  // training rows: the kernel with the most is the one serving costs use
  };
  std::vector<BlockFp8GemmFit> fp8_block_gemms;
  // The serving scale: that of the kernel with the most rows, 1 without a fit.
  double fp8_block_gemm_scale() const;
  // The fit of `kernel`, or null.
  const BlockFp8GemmFit* fp8_block_gemm(std::string_view kernel) const;

  // The fused-MoE kernels' fitted constants, one per kernel library (moe_kernel.h; fitted by
  // hwmodel/fit/fit_moe.h). A kernel without one is costed by its roofline (moe_kernel_roofline).
  std::vector<MoeKernelFit> moe_kernels;

  // Measured GEMM times (gemm_table.h) by the weights' format, looked up before the GEMM
  // roofline (roofline.h, gemm_time_s); null: none. Shared: profiles are copied freely. In a
  // profile file: `gemm_tables: {bf16: FILE, fp8: FILE, nvfp4: FILE}`, files beside the profile.
  std::array<std::shared_ptr<const GemmTableSource>, kNumWeightFormats> gemm_tables{};
  std::shared_ptr<const GemmTableSource>& gemm_table_source(WeightFormat format) {
    return gemm_tables[static_cast<size_t>(format)];
  }
  bool has_gemm_tables() const {
    for (const auto& t : gemm_tables) {
      if (t) return true;
    }
    return false;
  }
  // The table for weights of `format`, or null. Block-scaled FP8 weights without a table of their
  // own read the per-tensor fp8 one, times fp8_block_gemm_scale() (roofline.cpp, gemm_time_s):
  // NVIDIA's block-FP8 rows carry a per-call floor of 0.06-0.17 ms that the kernels do not have
  // under CUDA graphs (fp8_block_gemms), so no table is built from them.
  const GemmTable* gemm_table(WeightFormat format) const {
    const auto& own = gemm_tables[static_cast<size_t>(format)];
    if (own) return &own->table();
    const auto& fp8 = gemm_tables[static_cast<size_t>(WeightFormat::fp8)];
    return format == WeightFormat::fp8_block && fp8 ? &fp8->table() : nullptr;
  }
};

// The datasheet GPUs, then the fitted profiles shipped in hwmodel/profiles/ (compiled in).
const std::vector<HardwareProfile>& builtin_gpus();
// A built-in GPU by name, or a profile file (YAML or JSON) when `name_or_path` names a file.
HardwareProfile resolve_gpu(std::string_view name_or_path);
HardwareProfile load_hardware_profile(const std::filesystem::path& path);
// Writes the profile and, beside it, its GEMM tables as <stem>.gemm-<dtype>.txt.
void save_hardware_profile(const HardwareProfile& profile, const std::filesystem::path& path);
// The profile as the YAML text save_hardware_profile writes (key order of hwmodel/README.md).
std::string hardware_profile_yaml(const HardwareProfile& profile);

// What a transfer loses, as this project measured it held out: fitted on one GPU of Vidur's
// measurements, moved to the other's datasheet, scored on every row of the other
// (TransferProfile.HeldOutA100AndA40 in tests/hwmodel/transfer_test.cpp recomputes these and
// fails when they drift by 0.1; hwmodel/README.md, "Held out"). The only pair of GPUs with the
// same kernels measured on both; a transfer to another pair is not measured at all.
struct MeasuredTransfer {
  const char* direction;          // "A100 -> A40"
  double gemm_mape_percent;       // the four layer GEMMs, pooled
  double iteration_mape_percent;  // whole iterations
};
inline constexpr MeasuredTransfer kMeasuredTransfers[] = {{"A100 -> A40", 9.4, 9.4}, {"A40 -> A100", 8.7, 9.2}};

// A transferred profile's trust (`calibrate transfer`, fit/transfer_profile.h), in one line: where
// it came from, that this GPU was never measured, and what transfers lose by the figures above.
std::string measured_transfer_error(const HardwareProfile& transferred);

}  // namespace batchsim
