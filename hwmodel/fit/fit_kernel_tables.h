// batchsim — fitting a hardware profile on kernel tables (aiconfigurator layout, kernel_tables.h).
//
// What a profile takes from a GPU's kernel tables, and how:
//   - GEMM: the measured tables themselves (gemm_table.h), one per weight dtype the cost model
//     runs (bfloat16 rows -> the 16-bit table, fp8 rows -> the FP8 table; block-scaled fp8_block
//     rows are not modelled), and the roofline they fall back to outside their span fitted on
//     the 16-bit rows (fit_gemm_roofline);
//   - attention: every row, one regime per (kernel, KV dtype) and phase (`attention_kernels`,
//     attention_kernel.h; fit_attention_kernels.h): every head_dim, window and KV dtype. The
//     flat attention parameters (fit_attention_parameters) are fitted too, on the rows of
//     Llama-like heads (FlashAttention-3, head_dim 128, full causal attention, 16-bit KV cache),
//     prefill costed by FA3's tiles (prefill_attention_kernel fa3, roofline.h): what a call no
//     regime covers falls back to. The measured times include vLLM's KV-cache write (its own
//     kernel, a term of its own) and metadata (the launch floor and per-sequence time);
//   - all-reduce: latency + bandwidth per GPU count for NCCL (`allreduce`) and for the
//     framework's custom all-reduce under CUDA graphs (`custom_allreduce`).
//   - fused MoE: the constants of each kernel library's fused-MoE model (`moe_kernels`,
//     moe_kernel.h), fitted on the moe_perf rows that library ran (fit_moe.h), every row at the
//     expected loads of its routing (balanced or power law, the busiest EP rank; DeepSeek-V3's
//     rows at the loads the collector's routing gave its grouped top-k, collector_grouped_load).
// The rest of the profile (ceilings, memory, elementwise kernels, CPU costs) is the base's.
//
// Held-out scoring (`batchsim validate` on a kernel-table folder) fits on one half of the rows
// and scores the other, split by shape so that no held-out shape was seen:
//   GEMM: the (n, k) weight shapes, alternating on the grid (a checkerboard by grid index);
//   attention: the head configurations (heads, KV heads), alternating in sorted order;
//   all-reduce: the message sizes of each GPU count, alternating;
//   fused MoE: the shape groups (hidden, inter, top-k, experts, moe_tp, moe_ep, dtype: 616 in the
//     H100 table), alternating in sorted order, so that a held-out group's neighbours in TP or
//     EP degree were fitted on but the group itself, all its token counts and routings, was not.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hwmodel/fit/kernel_tables.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"

namespace batchsim {

// Which rows a fit or a score uses: all of them, or one side of the held-out split above.
enum class KernelRows { kAll, kTrain, kHeldOut };

// Whether a row is on the `rows` side of the split; tables are needed to place a GEMM's (n, k)
// and an attention row's head configuration on the grid.
class KernelSplit {
 public:
  explicit KernelSplit(const KernelTables& tables);
  bool gemm(const KernelGemmRow& r, KernelRows rows) const;
  bool attention(const KernelAttentionRow& r, KernelRows rows) const;
  bool collective(const KernelCollectiveRow& r, KernelRows rows) const;
  bool moe(const KernelMoeRow& r, KernelRows rows) const;

 private:
  std::vector<int64_t> gemm_n_, gemm_k_;
  std::vector<std::pair<int64_t, int64_t>> head_configs_;
  std::vector<std::tuple<std::string, int, int64_t>> message_sizes_;
  std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, std::string>> moe_groups_;
};

// Why a row cannot be expressed by the cost model (or is outside what the fit is for), or ""
// when it can. The fit and the score use the same rules, and the score counts each reason.
std::string gemm_row_skip_reason(const KernelGemmRow& r);
std::string attention_row_skip_reason(const KernelAttentionRow& r);
std::string collective_row_skip_reason(const KernelCollectiveRow& r);

// Weight bytes of a GEMM row's dtype: 2 (bfloat16) or 1 (fp8); and the profile table it goes
// to, "bf16" or "fp8" (GemmTable::dtype).
WeightFormat gemm_row_format(const KernelGemmRow& r);
std::string gemm_row_table_dtype(const KernelGemmRow& r);
// The ModelSpec of one layer with an attention row's per-GPU heads (tp 1) and KV dtype.
ModelSpec attention_row_model(const KernelAttentionRow& r);
// The cost model's time for a row under `gpu`.
double predict_kernel_attention(const HardwareProfile& gpu, const KernelAttentionRow& r);
double predict_kernel_gemm(const HardwareProfile& gpu, const KernelGemmRow& r);
double predict_kernel_collective(const HardwareProfile& gpu, const KernelCollectiveRow& r);

struct KernelFitResult {
  HardwareProfile profile;
  std::vector<std::string> notes;
};
// Fits `base` on the `rows` side (kAll or kTrain) of `tables`. The profile is named
// "<base.name>-fitted" (the caller may rename it); its source and provenance say what it was
// fitted on.
KernelFitResult fit_kernel_tables(const KernelTables& tables, const HardwareProfile& base,
                                  KernelRows rows = KernelRows::kAll);

}  // namespace batchsim
