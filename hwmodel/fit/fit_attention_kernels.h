// batchsim — fitting the attention-kernel regimes of a profile (attention_kernel.h) on the
// attention rows of NVIDIA's kernel tables (kernel_tables.h).
//
// Every attention row is fitted and scored: head_dim 64 to 512, sliding windows, 16-bit and FP8
// KV caches, every kernel (vLLM's FlashAttention-3 and -4 on Hopper; FlashInfer's TRT-LLM
// kernels and the Triton kernel on Blackwell). The rows are grouped into regimes by
// (kernel_source, kv_cache_dtype) and phase; a context (prefill) row of one-token prompts is a
// decode (it times as one: NVIDIA's isl = 1 context rows and step = 1 generation rows agree
// within 1% per kernel and KV dtype), so it joins its kernel's decode regime. Per regime the
// constants of roofline.h's formulas (attention_kernel_prefill_time_s,
// attention_kernel_decode_time_s) are fitted by Levenberg–Marquardt on log(predicted /
// measured) over the rows of the `rows` side, positive constants in log space and efficiencies
// in logit space (bounded by 1), from two starts (corner exponent 1.5 and 4), the lower cost
// kept: the recipe of fit_attention_parameters (fit_profile.h). Constants no row of the regime
// can see are left at 0 (off): the window terms without an engaged window among its rows, the
// padded-tile MMA outside FA3's tile table, the per-sequence scheduling cost outside FA4.
// The structure (tiles, iterations, splits, bytes) of each row is computed once.
#pragma once

#include <string>
#include <vector>

#include "hwmodel/fit/fit_kernel_tables.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/roofline.h"

namespace batchsim {

// The work of one attention row as the cost model sums it: `batch` sequences of `isl` new
// tokens in one call (prefill, counting the tiles of `tiles`), or `batch` decodes of
// context + 1 keys, with the row's window.
OperatorWork kernel_row_attention_work(const KernelAttentionRow& r, AttentionTiles tiles);

// Whether a row is costed as a decode: a generation row, or a context row of one-token prompts.
bool kernel_row_is_decode(const KernelAttentionRow& r);

// Fits one regime per (phase, kernel, KV dtype) on the rows of `rows` that
// attention_row_skip_reason accepts, under `base`'s ceilings (peak FLOP/s, HBM bandwidth and
// its hbm_efficiency, SM count). Regimes in the order (kernel, KV dtype, prefill before decode);
// a regime without rows on that side is left out (its rows then take the nearest regime,
// find_attention_kernel), and said so in `notes`, which also get one line per regime.
std::vector<AttentionKernelFit> fit_attention_kernels(const KernelTables& tables, const KernelSplit& split,
                                                      KernelRows rows, const HardwareProfile& base,
                                                      std::vector<std::string>& notes);

}  // namespace batchsim
