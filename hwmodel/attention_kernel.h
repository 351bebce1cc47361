// batchsim — the fitted parameters of attention kernels: one set per (phase, kernel, KV dtype).
//
// A GPU runs different attention kernels for different shapes, and they differ by more than a
// constant: vLLM 0.24 on Hopper runs FlashAttention-3 for head_dim <= 256 and FlashAttention-4
// above it, and FA3's FP8-KV path (e4m3 query and K/V, its own tile table) is no faster than
// its 16-bit one; on Blackwell vLLM runs FlashInfer's TRT-LLM kernels (and a Triton kernel for
// some FP8 caches). So a fitted profile carries a *regime* per kernel and KV-cache dtype and per
// phase, each a handful of constants on top of a structure computed from the kernel's published
// heuristics (roofline.h: tiles, K/V-block iterations, split-KV, bytes), plus one efficiency per
// head_dim measured, interpolated linearly in head_dim between them and held at the ends.
// The formulas are roofline.h's (prefill_attention_time_s, decode_attention_time_s); the fit is
// hwmodel/fit/fit_attention_kernels.h; the profile format hwmodel/README.md's
// (`attention_kernels`).
//
// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2) has its own few constants
// (MlaAttentionFit; its formulas are mla.h's).
//
// Invariants of a valid AttentionKernelFit (checked when a profile is read): head_dims strictly
// increasing and positive, one efficiency in (0, 1] per head_dim, times and rates >= 0,
// kv_dtype_bytes 1 or 2.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace batchsim {

// Whose tiles a prefill attention call is counted in (roofline.h, prefill_attention_work):
//   none     no tiles: FlashAttention-2's per-query-head count only (the flat `fa2` model);
//   fa3      FlashAttention-3's Hopper tile table (vllm-project/flash-attention hopper/
//            tile_size.h, tile_size_fwd_sm90) with PackGQA;
//   generic  a 128 x 128 tile (64 x 128 for at most 64 packed rows), for kernels whose tile
//            choice is not modelled (FlashAttention-4 on Hopper, FlashInfer / TRT-LLM and
//            Triton kernels on Blackwell): their constants are fitted on this structure.
enum class AttentionTiles : uint8_t { none, fa3, generic };
const char* attention_tiles_name(AttentionTiles tiles);  // "none", "fa3", "generic"
// The tiles a kernel of NVIDIA's tables (kernel_source) is costed by: fa3 for vLLM's
// FlashAttention-3 (and an unnamed kernel: the tables before kernels were named were FA3's),
// generic for every other.
AttentionTiles attention_tiles_for_kernel(std::string_view kernel);

struct AttentionKernelFit {
  std::string kernel;      // kernel_source in NVIDIA's tables, e.g. vllm_flash_attn_fa3
  bool prefill = false;    // phase: prefill (context) or decode (generation)
  int kv_dtype_bytes = 2;  // the KV cache's: 2 (16-bit) or 1 (FP8)
  AttentionTiles tiles = AttentionTiles::fa3;
  // One efficiency per measured head_dim (prefill: of an SM's share of peak_flops per K/V-block
  // iteration; decode: of hbm_bytes_per_s for the K/V read).
  std::vector<int> head_dims;
  std::vector<double> efficiency;

  double launch_s = 0;  // per call
  double exponent = 0;  // p of roofline_combine: prefill SM time vs HBM time; decode units vs K/V
  // Prefill.
  double per_seq_s = 0;              // per sequence of the variable-length call
  double per_tile_s = 0;             // per tile on its SM
  double kv_write_efficiency = 0;    // the KV-cache write, of hbm_bytes_per_s (0: not charged)
  double kv_write_per_token_s = 0;   // ... and per new token
  double kv_reread_bytes_per_s = 0;  // every tile's K/V-block loads, GPU-wide (L2, then HBM); 0: off
  // Decode.
  double per_unit_s = 0;           // per (sequence, KV head)
  double per_unit_head_dim_s = 0;  // ... and per element of head_dim
  double sm_bytes_per_s = 0;       // K/V one SM streams per block; 0: no wave term
  double combine_s = 0;            // the split-KV combine kernel, when the call splits
  double mma_efficiency = 0;       // a block's padded-tile MMA, of an SM's share of the peak; 0: off
  double window_s = 0;             // a call with an engaged sliding window ...
  double window_per_unit_s = 0;    // ... and per (sequence, KV head)
  double per_seq_dynamic_s = 0;    // per sequence while the call has <= 992 (FA4's scheduler)

  // The efficiency at `head_dim`: linear between the measured head_dims, held at the ends.
  double efficiency_at(int head_dim) const;
  bool operator==(const AttentionKernelFit&) const = default;
};

// The regime a call of `prefill` phase, `head_dim` and `kv_dtype_bytes` runs on, or null when
// `kernels` has none of that phase. Among the regimes of the phase, those of the same KV dtype
// first, then: one that measured this head_dim, one whose head_dims span it, the nearest span.
// Ties keep the list's order. (vLLM 0.24 on Hopper: FA3 up to head_dim 256, FA4 at 512; NVIDIA's
// B200 tables: the Triton kernel for the one FP8 head_dim it was measured at, 192.)
const AttentionKernelFit* find_attention_kernel(const std::vector<AttentionKernelFit>& kernels, bool prefill,
                                                int head_dim, int kv_dtype_bytes);

// A numeric key of an `attention_kernels` entry in a profile file: its name, the member, whether
// it is an efficiency ((0, 1], or [0, 1] when 0 turns it off) and which phase it belongs to.
struct AttentionKernelKey {
  const char* key;
  double AttentionKernelFit::*member;
  bool efficiency;
  bool zero_is_off;  // an efficiency that may be 0 (the term is then left out)
  bool prefill;      // the phase whose entries may carry it
};
const std::vector<AttentionKernelKey>& attention_kernel_keys();

// Multi-head latent attention (mla.h). Empty (all zero) when not fitted: the MLA functions then
// use the profile's flat attention parameters.
struct MlaAttentionFit {
  // Decode, absorbed (FlashMLA / FlashInfer MLA): launch + max(FLOPs / (peak x compute),
  // bytes / (HBM x memory)).
  double decode_launch_s = 0;
  double decode_compute_efficiency = 0;
  double decode_memory_efficiency = 0;
  // Prefill, un-absorbed MHA: launch + max(FLOPs / (peak x efficiency), bytes / (HBM x hbm_efficiency)).
  double prefill_launch_s = 0;
  double prefill_efficiency = 0;
  bool empty() const { return decode_compute_efficiency == 0 && prefill_efficiency == 0; }
  bool operator==(const MlaAttentionFit&) const = default;
};
// The keys of the `mla` block, as above (all apply to it; `prefill` unused).
struct MlaAttentionKey {
  const char* key;
  double MlaAttentionFit::*member;
  bool efficiency;
};
const std::vector<MlaAttentionKey>& mla_attention_keys();

}  // namespace batchsim
