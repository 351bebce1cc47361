// batchsim — attention kernel regimes: selection, interpolation, profile keys (see attention_kernel.h).
#include "hwmodel/attention_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <tuple>

namespace batchsim {

const char* attention_tiles_name(AttentionTiles tiles) {
  switch (tiles) {
    case AttentionTiles::none:
      return "none";
    case AttentionTiles::fa3:
      return "fa3";
    case AttentionTiles::generic:
      return "generic";
  }
  return "none";
}

AttentionTiles attention_tiles_for_kernel(std::string_view kernel) {
  return kernel.empty() || kernel == "vllm_flash_attn_fa3" ? AttentionTiles::fa3 : AttentionTiles::generic;
}

double AttentionKernelFit::efficiency_at(int head_dim) const {
  if (efficiency.empty()) return 0;
  if (head_dim <= head_dims.front()) return efficiency.front();
  if (head_dim >= head_dims.back()) return efficiency.back();
  const auto hi = std::upper_bound(head_dims.begin(), head_dims.end(), head_dim);
  const size_t j = static_cast<size_t>(hi - head_dims.begin());
  const double x0 = head_dims[j - 1], x1 = head_dims[j];
  const double w = (head_dim - x0) / (x1 - x0);
  return efficiency[j - 1] + w * (efficiency[j] - efficiency[j - 1]);
}

const AttentionKernelFit* find_attention_kernel(const std::vector<AttentionKernelFit>& kernels, bool prefill,
                                                int head_dim, int kv_dtype_bytes) {
  // Rank: (other KV dtype, not measured at head_dim, outside the span, distance to the span).
  const AttentionKernelFit* best = nullptr;
  std::tuple<bool, bool, bool, int64_t> best_rank{true, true, true, std::numeric_limits<int64_t>::max()};
  for (const AttentionKernelFit& k : kernels) {
    if (k.prefill != prefill || k.head_dims.empty()) continue;
    const bool exact = std::find(k.head_dims.begin(), k.head_dims.end(), head_dim) != k.head_dims.end();
    const int lo = k.head_dims.front(), hi = k.head_dims.back();
    const bool inside = head_dim >= lo && head_dim <= hi;
    const int64_t distance = inside ? 0 : std::min(std::abs(head_dim - lo), std::abs(head_dim - hi));
    const std::tuple<bool, bool, bool, int64_t> rank{k.kv_dtype_bytes != kv_dtype_bytes, !exact, !inside, distance};
    if (best == nullptr || rank < best_rank) {
      best = &k;
      best_rank = rank;
    }
  }
  return best;
}

const std::vector<AttentionKernelKey>& attention_kernel_keys() {
  using F = AttentionKernelFit;
  static const std::vector<AttentionKernelKey> keys = {
      {"launch_s", &F::launch_s, false, false, true},
      {"exponent", &F::exponent, false, false, true},
      {"per_seq_s", &F::per_seq_s, false, false, true},
      {"per_tile_s", &F::per_tile_s, false, false, true},
      {"kv_write_efficiency", &F::kv_write_efficiency, true, true, true},
      {"kv_write_per_token_s", &F::kv_write_per_token_s, false, false, true},
      {"kv_reread_bytes_per_s", &F::kv_reread_bytes_per_s, false, false, true},
      {"launch_s", &F::launch_s, false, false, false},
      {"exponent", &F::exponent, false, false, false},
      {"per_unit_s", &F::per_unit_s, false, false, false},
      {"per_unit_head_dim_s", &F::per_unit_head_dim_s, false, false, false},
      {"sm_bytes_per_s", &F::sm_bytes_per_s, false, false, false},
      {"combine_s", &F::combine_s, false, false, false},
      {"mma_efficiency", &F::mma_efficiency, true, true, false},
      {"window_s", &F::window_s, false, false, false},
      {"window_per_unit_s", &F::window_per_unit_s, false, false, false},
      {"per_seq_dynamic_s", &F::per_seq_dynamic_s, false, false, false},
  };
  return keys;
}

const std::vector<MlaAttentionKey>& mla_attention_keys() {
  using F = MlaAttentionFit;
  static const std::vector<MlaAttentionKey> keys = {
      {"decode_launch_s", &F::decode_launch_s, false},
      {"decode_compute_efficiency", &F::decode_compute_efficiency, true},
      {"decode_memory_efficiency", &F::decode_memory_efficiency, true},
      {"prefill_launch_s", &F::prefill_launch_s, false},
      {"prefill_efficiency", &F::prefill_efficiency, true},
  };
  return keys;
}

}  // namespace batchsim
