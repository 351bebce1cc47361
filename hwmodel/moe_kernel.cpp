// batchsim — the fused-MoE kernel (see moe_kernel.h).
#include "hwmodel/moe_kernel.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "hwmodel/base/random.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/roofline.h"

namespace batchsim {

namespace {

constexpr std::array<std::string_view, kNumMoeKernels> kKernelNames = {
    "bf16_triton", "fp8_flashinfer_cutlass", "fp8_block_triton", "fp8_block_flashinfer_cutlass", "mxfp4_oai_triton",
    "w4a16_marlin"};

// The output writes (OUT) are counted over rows padded to 64 for every kernel: the finest tile
// that follows them (fitted with the prototype's 16/32/64/128 candidates).
constexpr int kOutTileRows = 64;

// Random splits of the experts over the ranks that expected_moe_load averages over, and their
// fixed seed (the same for every call: the splits do not change with T, so loads are smooth in T).
constexpr int kPowerLawSplits = 32;
constexpr uint64_t kPowerLawSeed = 0x6d6f655f6c6f6164;  // "moe_load"

int tile_index(int tile_rows) {
  for (size_t i = 0; i < kMoeTileRows.size(); ++i) {
    if (kMoeTileRows[i] == tile_rows) return static_cast<int>(i);
  }
  throw std::invalid_argument("MoeRankLoad: no padded rows for a tile of " + std::to_string(tile_rows));
}

double ceil_to(double rows, int tile) { return std::ceil(rows / tile) * tile; }

// ---- balanced routing ----

MoeRankLoad balanced_load(const FusedMoeCall& c) {
  MoeRankLoad load;
  const int64_t rows = c.tokens * c.top_k;
  const int64_t local_experts = c.experts / c.ep;
  load.routed_rows = static_cast<double>(rows);
  if (rows >= c.experts) {
    // Every expert gets q or q + 1 rows, r of them q + 1; a rank holds its share of each.
    const int64_t q = rows / c.experts;
    const int64_t r = rows - q * c.experts;
    const double extra = static_cast<double>(r) / static_cast<double>(c.experts);
    load.local_rows = static_cast<double>(rows) / static_cast<double>(c.ep);
    load.touched_experts = static_cast<double>(local_experts);
    for (size_t i = 0; i < kMoeTileRows.size(); ++i) {
      const int b = kMoeTileRows[i];
      const double lo = ceil_to(static_cast<double>(q), b), hi = ceil_to(static_cast<double>(q + 1), b);
      load.local_padded_rows[i] = static_cast<double>(local_experts) * ((1 - extra) * lo + extra * hi);
      load.all_padded_rows[i] = static_cast<double>(c.experts - r) * lo + static_cast<double>(r) * hi;
    }
  } else {
    // T k distinct experts of one row, spread evenly over the experts (balanced_logits strides by
    // ceil(E / k), so a token's k experts land in different ranks): the busiest rank gets
    // ceil(T k / ep) of them.
    const int64_t touched = std::min(local_experts, (rows + c.ep - 1) / c.ep);
    load.local_rows = load.touched_experts = static_cast<double>(touched);
    for (size_t i = 0; i < kMoeTileRows.size(); ++i) {
      load.local_padded_rows[i] = static_cast<double>(touched * kMoeTileRows[i]);
      load.all_padded_rows[i] = static_cast<double>(rows * kMoeTileRows[i]);
    }
  }
  return load;
}

// ---- power-law routing (aiconfigurator collector/helper.py @095f58a) ----

// The inverse CDF of x^-alpha on [x_min, x_max] (sample_power_law, helper.py l.1070); the limit
// alpha -> 1 is log-uniform.
class PowerLawQuantile {
 public:
  PowerLawQuantile(double alpha, double x_min, double x_max)
      : a_(1 - alpha), x_min_(x_min), ratio_(x_max / x_min), lo_(std::pow(x_min, a_)), hi_(std::pow(x_max, a_)) {}
  double operator()(double u) const {
    if (std::abs(a_) < 1e-9) return x_min_ * std::pow(ratio_, u);
    return std::pow((hi_ - lo_) * u + lo_, 1 / a_);
  }

 private:
  double a_, x_min_, ratio_, lo_, hi_;
};

// `units` times "add one to the least-loaded entry below cap" on an ascending multiset of
// entries <= cap; the result is the same multiset, kept ascending. O(n). Returns the units that
// found no room (every entry at cap).
int64_t fill_up(std::vector<int64_t>::iterator first, std::vector<int64_t>::iterator last, int64_t units, int64_t cap) {
  const int64_t n = last - first;
  if (units <= 0 || n == 0) return std::max<int64_t>(units, 0);
  // The lowest m entries end at a common level: find the largest m whose raise to first[m] fits.
  int64_t m = 1, level = first[0], cost = 0;
  while (m < n) {
    const int64_t next = std::min(first[m], cap);
    const int64_t step = (next - level) * m;
    if (cost + step > units) break;
    cost += step;
    level = next;
    ++m;
  }
  const int64_t left = units - cost, room = (cap - level) * m;
  if (left >= room) {  // only when m == n: everything fills up
    std::fill(first, last, cap);
    return left - room;
  }
  // left < (first[m] - level) m, so the raised entries stay at or below first[m].
  const int64_t each = left / m, extra = left - each * m;
  for (int64_t i = 0; i < m; ++i) first[i] = level + each + (i >= m - extra ? 1 : 0);
  return 0;
}

// `units` times "take one from the most-loaded entry above zero" on an ascending multiset. O(n).
void fill_down(std::vector<int64_t>::iterator first, std::vector<int64_t>::iterator last, int64_t units) {
  const int64_t n = last - first;
  if (units <= 0 || n == 0) return;
  // The highest m entries end at a common level, as in fill_up from below.
  int64_t m = 1, level = first[n - 1], cost = 0;
  while (m < n) {
    const int64_t next = first[n - 1 - m];
    const int64_t step = (level - next) * m;
    if (cost + step > units) break;
    cost += step;
    level = next;
    ++m;
  }
  const int64_t left = units - cost;
  if (left >= level * m) {  // everything empties (the collector stops there)
    std::fill(first + (n - m), last, 0);
    return;
  }
  const int64_t each = left / m, extra = left - each * m;
  for (int64_t i = 0; i < m; ++i) first[n - m + i] = level - each - (i < extra ? 1 : 0);
}

// _round_robin_adjust_per_rank at the rank level: one unit per rank in rank order, skipping
// ranks without room, until `total` units are placed. `room` and `out` have one entry per rank.
void round_robin(const std::vector<int64_t>& room, int64_t total, std::vector<int64_t>& out) {
  std::fill(out.begin(), out.end(), 0);
  const size_t ranks = room.size();
  while (total > 0) {
    int64_t valid = 0, least = 0;
    for (size_t r = 0; r < ranks; ++r) {
      const int64_t free = room[r] - out[r];
      if (free > 0) least = valid++ == 0 ? free : std::min(least, free);
    }
    if (valid == 0) return;
    const int64_t rounds = std::min(total / valid, least);
    if (rounds > 0) {
      for (size_t r = 0; r < ranks; ++r) {
        if (room[r] - out[r] > 0) out[r] += rounds;
      }
      total -= rounds * valid;
    } else {
      for (size_t r = 0; r < ranks && total > 0; ++r) {
        if (room[r] - out[r] > 0) {
          ++out[r];
          --total;
        }
      }
    }
  }
}

// A set of experts' rows, experts touched, and rows padded to each tile B of kMoeTileRows
// (sum of ceil(n / B) B), in one pass over their loads n >= 0. The sums are integers, so they
// are the same in any order, and a caller scales them once: the weights are 1 and
// 1 / kPowerLawSplits, powers of two, so the result is the same to the bit as adding each
// entry's scaled value; but a 256-expert layer no longer spends a third of its time in
// per-entry divisions by a tile not known at compile time.
struct LoadSums {
  int64_t rows = 0, touched = 0;
  std::array<int64_t, kMoeTileRows.size()> padded{};
};

template <size_t... I>
LoadSums load_sums_tiles(const std::vector<int64_t>& loads, std::index_sequence<I...>) {
  static_assert(((std::has_single_bit(static_cast<unsigned>(kMoeTileRows[I]))) && ...), "tiles must be powers of two");
  LoadSums sums;
  for (const int64_t n : loads) {
    sums.rows += n;
    sums.touched += n > 0;
    ((sums.padded[I] += (n + kMoeTileRows[I] - 1) & ~int64_t{kMoeTileRows[I] - 1}), ...);
  }
  return sums;
}

LoadSums load_sums(const std::vector<int64_t>& loads) {
  return load_sums_tiles(loads, std::make_index_sequence<kMoeTileRows.size()>{});
}

// padded += weight x the sums' padded rows, tile by tile.
void add_padded(const LoadSums& sums, double weight, std::array<double, 4>& padded) {
  for (size_t i = 0; i < kMoeTileRows.size(); ++i) padded[i] += weight * static_cast<double>(sums.padded[i]);
}

struct PowerLawScratch {
  std::vector<double> weights;
  std::vector<int64_t> counts, global, local, rank_rows, room, first_alloc, second_alloc;
};

// The fixed random splits of E experts over ep ranks: kPowerLawSplits blocks of E expert
// indices, rank r's E / ep members at [r E / ep, (r + 1) E / ep) of its block, ascending (so
// that their loads, gathered from the ascending quantile loads, come out ascending). They
// depend on E and ep only, so they are made once per thread and kept (a few kB per shape).
const std::vector<uint32_t>& power_law_splits(int64_t experts, int64_t ep) {
  thread_local std::map<std::pair<int64_t, int64_t>, std::vector<uint32_t>> made;
  std::vector<uint32_t>& splits = made[{experts, ep}];
  if (!splits.empty()) return splits;
  const int64_t local = experts / ep;
  splits.resize(static_cast<size_t>(kPowerLawSplits * experts));
  Rng rng(kPowerLawSeed);
  for (int split = 0; split < kPowerLawSplits; ++split) {
    const auto order = splits.begin() + split * experts;
    std::iota(order, order + experts, 0u);
    for (int64_t i = experts - 1; i > 0; --i) {  // Fisher-Yates
      std::swap(order[i], order[static_cast<int64_t>(sample_below(rng, static_cast<uint64_t>(i + 1)))]);
    }
    for (int64_t r = 0; r < ep; ++r) std::sort(order + r * local, order + (r + 1) * local);
  }
  return splits;
}

// One random split of the experts (`order`: rank r's experts at [r E / ep, (r + 1) E / ep)):
// each rank's rows, the overflow and the rounding residue placed one row per rank in turn
// (l.1380-1415), and the busiest rank's expert loads, the ones measured (l.1424), into s.local.
void busiest_rank_of_split(PowerLawScratch& s, const uint32_t* order, int64_t ep, int64_t local_experts, int64_t tokens,
                           int64_t total, int64_t overflow, int64_t residue) {
  // Every rank's rows but the last's gathered; the last holds what the others do not (the
  // sums are integers, so exactly).
  int64_t others = 0;
  for (int64_t r = 0; r < ep; ++r) {
    int64_t sum_r = total - others;
    if (r + 1 < ep) {
      sum_r = 0;
      for (int64_t j = 0; j < local_experts; ++j) sum_r += s.counts[order[r * local_experts + j]];
      others += sum_r;
    }
    s.rank_rows[static_cast<size_t>(r)] = sum_r;
    s.room[static_cast<size_t>(r)] = local_experts * tokens - sum_r;
  }
  // The overflow, then the residue, one row per rank in turn (l.1380-1415).
  round_robin(s.room, overflow, s.first_alloc);
  if (residue >= 0) {
    for (int64_t r = 0; r < ep; ++r) s.room[static_cast<size_t>(r)] -= s.first_alloc[static_cast<size_t>(r)];
    round_robin(s.room, residue, s.second_alloc);
  } else {
    for (int64_t r = 0; r < ep; ++r) {
      s.room[static_cast<size_t>(r)] = s.rank_rows[static_cast<size_t>(r)] + s.first_alloc[static_cast<size_t>(r)];
    }
    round_robin(s.room, -residue, s.second_alloc);
    for (int64_t& a : s.second_alloc) a = -a;
  }
  // The busiest rank.
  int64_t busiest = 0, most = -1;
  for (int64_t r = 0; r < ep; ++r) {
    const size_t i = static_cast<size_t>(r);
    const int64_t n = s.rank_rows[i] + s.first_alloc[i] + s.second_alloc[i];
    if (n > most) {
      most = n;
      busiest = r;
    }
  }
  for (int64_t j = 0; j < local_experts; ++j) {
    s.local[static_cast<size_t>(j)] = s.counts[order[busiest * local_experts + j]];  // ascending
  }
  const size_t b = static_cast<size_t>(busiest);
  fill_up(s.local.begin(), s.local.end(), s.first_alloc[b], tokens);
  if (s.second_alloc[b] > 0) fill_up(s.local.begin(), s.local.end(), s.second_alloc[b], tokens);
  if (s.second_alloc[b] < 0) fill_down(s.local.begin(), s.local.end(), -s.second_alloc[b]);
}

MoeRankLoad power_law_load(const FusedMoeCall& c) {
  thread_local PowerLawScratch s;
  const int64_t experts = c.experts, ep = c.ep, local_experts = experts / ep;
  const int64_t tokens = c.tokens, rows = c.tokens * c.top_k;
  MoeRankLoad load;
  load.routed_rows = static_cast<double>(rows);

  // The E per-expert weights: the sampler's stratified quantiles, ascending (l.1363-1366).
  const bool many = rows > experts;
  const double x_min = many ? 1.0 : 0.01, x_max = many ? 0.8 * static_cast<double>(tokens) : 2.0;
  s.weights.resize(static_cast<size_t>(experts));
  s.counts.resize(static_cast<size_t>(experts));
  const PowerLawQuantile quantile(c.routing.alpha, x_min, std::max(x_max, x_min));
  double sum = 0;
  for (int64_t i = 0; i < experts; ++i) {
    sum += s.weights[static_cast<size_t>(i)] = quantile((static_cast<double>(i) + 0.5) / static_cast<double>(experts));
  }
  // Scaled to T k rows and rounded half to even as torch.round does (l.1371), capped at T (l.1375-1377).
  int64_t overflow = 0, total = 0;
  for (int64_t i = 0; i < experts; ++i) {
    const double x = s.weights[static_cast<size_t>(i)];
    int64_t n = static_cast<int64_t>(std::nearbyint(x / sum * static_cast<double>(rows)));
    if (n > tokens) {
      overflow += n - tokens;
      n = tokens;
    }
    s.counts[static_cast<size_t>(i)] = n;
    total += n;
  }
  const int64_t residue = rows - total - overflow;  // what rounding left over (or took too much)

  // Every expert of the layer: the overflow and the residue re-placed over all experts at once
  // (the collector does it rank by rank; over a random split the two agree within 1-2%).
  s.global = s.counts;
  fill_up(s.global.begin(), s.global.end(), overflow, tokens);
  if (residue > 0) fill_up(s.global.begin(), s.global.end(), residue, tokens);
  if (residue < 0) fill_down(s.global.begin(), s.global.end(), -residue);
  const LoadSums all = load_sums(s.global);
  add_padded(all, 1.0, load.all_padded_rows);

  if (ep == 1) {
    load.local_rows = static_cast<double>(rows);
    load.touched_experts = static_cast<double>(all.touched);
    load.local_padded_rows = load.all_padded_rows;
    return load;
  }

  // Under EP: the busiest rank of a random split of the experts, averaged over fixed splits.
  s.rank_rows.resize(static_cast<size_t>(ep));
  s.room.resize(static_cast<size_t>(ep));
  s.first_alloc.resize(static_cast<size_t>(ep));
  s.second_alloc.resize(static_cast<size_t>(ep));
  s.local.resize(static_cast<size_t>(local_experts));
  const std::vector<uint32_t>& splits = power_law_splits(experts, ep);
  const double weight = 1.0 / kPowerLawSplits;
  for (int split = 0; split < kPowerLawSplits; ++split) {
    const uint32_t* order = splits.data() + static_cast<size_t>(split * experts);
    busiest_rank_of_split(s, order, ep, local_experts, tokens, total, overflow, residue);
    const LoadSums sums = load_sums(s.local);
    load.local_rows += weight * static_cast<double>(sums.rows);
    load.touched_experts += weight * static_cast<double>(sums.touched);
    add_padded(sums, weight, load.local_padded_rows);
  }
  return load;
}

}  // namespace

std::string_view moe_kernel_name(MoeKernel kernel) { return kKernelNames[static_cast<size_t>(kernel)]; }

std::optional<MoeKernel> parse_moe_kernel(std::string_view name) {
  for (int i = 0; i < kNumMoeKernels; ++i) {
    if (kKernelNames[static_cast<size_t>(i)] == name) return static_cast<MoeKernel>(i);
  }
  return std::nullopt;
}

MoeKernel default_moe_kernel(WeightFormat format, int64_t ep) {
  switch (format) {
    case WeightFormat::bf16:
      return MoeKernel::bf16_triton;
    case WeightFormat::fp8:
      return MoeKernel::fp8_flashinfer_cutlass;
    case WeightFormat::fp8_block:
      return ep > 1 ? MoeKernel::fp8_block_flashinfer_cutlass : MoeKernel::fp8_block_triton;
    case WeightFormat::mxfp4:
      return MoeKernel::mxfp4_oai_triton;
    case WeightFormat::nvfp4:
      return MoeKernel::w4a16_marlin;
  }
  return MoeKernel::bf16_triton;
}

int moe_kernel_tile_rows(MoeKernel kernel) {
  switch (kernel) {
    case MoeKernel::bf16_triton:
    case MoeKernel::fp8_block_triton:
      return 64;
    case MoeKernel::fp8_flashinfer_cutlass:
    case MoeKernel::fp8_block_flashinfer_cutlass:
      return 128;
    case MoeKernel::mxfp4_oai_triton:
    case MoeKernel::w4a16_marlin:
      return 16;
  }
  return 64;
}

bool moe_kernel_uses_all_rows(MoeKernel kernel) {
  return kernel == MoeKernel::bf16_triton || kernel == MoeKernel::fp8_block_triton || kernel == MoeKernel::w4a16_marlin;
}

std::string_view fused_moe_call_problem(const FusedMoeCall& c) {
  if (c.tokens <= 0) return "tokens must be > 0";
  if (c.hidden <= 0 || c.intermediate <= 0) return "hidden and intermediate sizes must be > 0";
  if (c.experts <= 0 || c.top_k <= 0) return "experts and top_k must be > 0";
  if (c.top_k > c.experts) return "top_k must not exceed the experts";
  if (c.ep <= 0 || c.experts % c.ep != 0) return "ep must divide the experts";
  if (!(c.weight_bytes >= 0) || !std::isfinite(c.weight_bytes)) return "weight_bytes must be >= 0";
  if (c.routing.kind == MoeRoutingKind::power_law && !(c.routing.alpha > 0 && std::isfinite(c.routing.alpha))) {
    return "a power-law routing needs an exponent alpha > 0";
  }
  return "";
}

double MoeRankLoad::padded_rows(int tile_rows, bool all_experts) const {
  const int i = tile_index(tile_rows);
  return all_experts ? all_padded_rows[static_cast<size_t>(i)] : local_padded_rows[static_cast<size_t>(i)];
}

MoeRankLoad expected_moe_load(const FusedMoeCall& call) {
  if (const std::string_view why = fused_moe_call_problem(call); !why.empty()) {
    throw std::invalid_argument("expected_moe_load: " + std::string(why));
  }
  return call.routing.kind == MoeRoutingKind::power_law ? power_law_load(call) : balanced_load(call);
}

namespace {
int64_t grid_point(int k) {
  return static_cast<int64_t>(
      std::ceil(static_cast<double>(kExactLoadTokens) * std::exp2(static_cast<double>(k) / kLoadGridPerOctave)));
}
}  // namespace

std::pair<int64_t, int64_t> moe_load_grid_bracket(int64_t tokens) {
  if (tokens <= kExactLoadTokens) {
    throw std::invalid_argument("moe_load_grid_bracket: " + std::to_string(tokens) + " tokens are on no grid");
  }
  // The point index from the logarithm, then corrected by whole steps against its rounding.
  int k = static_cast<int>(
      std::floor(kLoadGridPerOctave * std::log2(static_cast<double>(tokens) / static_cast<double>(kExactLoadTokens))));
  k = std::max(k, 0);
  while (k > 0 && grid_point(k) > tokens) --k;
  while (grid_point(k + 1) <= tokens) ++k;
  return {grid_point(k), grid_point(k + 1)};
}

MoeRankLoad interpolate_moe_load(const MoeRankLoad& lo_load, int64_t lo, const MoeRankLoad& hi_load, int64_t hi,
                                 int64_t tokens, int64_t top_k) {
  if (tokens == lo) return lo_load;
  const double w = static_cast<double>(tokens - lo) / static_cast<double>(hi - lo);
  const auto mix = [w](double a, double b) { return a + (b - a) * w; };
  MoeRankLoad load;
  load.routed_rows = static_cast<double>(tokens) * static_cast<double>(top_k);
  load.local_rows = mix(lo_load.local_rows, hi_load.local_rows);
  load.touched_experts = mix(lo_load.touched_experts, hi_load.touched_experts);
  for (size_t i = 0; i < kMoeTileRows.size(); ++i) {
    load.local_padded_rows[i] = mix(lo_load.local_padded_rows[i], hi_load.local_padded_rows[i]);
    load.all_padded_rows[i] = mix(lo_load.all_padded_rows[i], hi_load.all_padded_rows[i]);
  }
  return load;
}

const std::array<MoeKernelKey, 10>& moe_kernel_keys() {
  static const std::array<MoeKernelKey, 10> keys = {{
      {"launch_s", &MoeKernelFit::launch_s},
      {"ep_launch_s", &MoeKernelFit::ep_launch_s},
      {"per_expert_s", &MoeKernelFit::per_expert_s},
      {"weight_bytes_per_s", &MoeKernelFit::weight_bytes_per_s},
      {"flops_per_s", &MoeKernelFit::flops_per_s},
      {"out_element_s", &MoeKernelFit::out_element_s},
      {"row_element_s", &MoeKernelFit::row_element_s},
      {"token_element_s", &MoeKernelFit::token_element_s},
      {"roofline_exponent", &MoeKernelFit::roofline_exponent},
      {"misaligned_slowdown", &MoeKernelFit::misaligned_slowdown},
  }};
  return keys;
}

const MoeKernelFit* find_moe_kernel_fit(const HardwareProfile& gpu, MoeKernel kernel) {
  for (const MoeKernelFit& f : gpu.moe_kernels) {
    if (f.kernel == kernel) return &f;
  }
  return nullptr;
}

MoeKernelFit moe_kernel_roofline(const HardwareProfile& gpu, MoeKernel kernel, WeightFormat format) {
  MoeKernelFit f;
  f.kernel = kernel;
  f.launch_s = 3 * gpu.kernel_launch_s;
  f.weight_bytes_per_s = gpu.hbm_bytes_per_s * gpu.hbm_efficiency;
  f.flops_per_s = gemm_peak_flops(gpu, format) * gpu.gemm_eta_max;
  f.row_element_s = 4.0 / (gpu.hbm_bytes_per_s * gpu.hbm_efficiency);
  f.roofline_exponent = gpu.gemm_roofline_exponent;
  return f;
}

FusedMoeTime fused_moe_time(const MoeKernelFit& f, const FusedMoeCall& c, const MoeRankLoad& load) {
  if (const std::string_view why = fused_moe_call_problem(c); !why.empty()) {
    throw std::invalid_argument("fused_moe_time: " + std::string(why));
  }
  FusedMoeTime t;
  t.kernel = f.kernel;
  const double g = c.gated ? 2 : 1;
  const double hidden = static_cast<double>(c.hidden), inter = static_cast<double>(c.intermediate);
  const double expert_weights = (g + 1) * inter * hidden;  // w13 + w2 elements of one expert
  const double bytes = c.weight_bytes > 0 ? c.weight_bytes : weight_format_bytes(c.format);
  const bool all_rows = moe_kernel_uses_all_rows(f.kernel);
  const double slow = 1 + (c.intermediate % 16 != 0 ? f.misaligned_slowdown : 0);
  t.fixed_s = f.launch_s + (c.ep > 1 ? f.ep_launch_s : 0) + f.per_expert_s * load.touched_experts;
  t.weights_s = load.touched_experts * expert_weights * bytes / f.weight_bytes_per_s;
  t.compute_s = slow * 2 * load.padded_rows(moe_kernel_tile_rows(f.kernel)) * expert_weights / f.flops_per_s;
  t.gemm_s = roofline_combine(t.weights_s, t.compute_s, f.roofline_exponent);
  const double out = load.padded_rows(kOutTileRows, all_rows) * (g * inter + hidden);
  const double act = (all_rows ? load.routed_rows : load.local_rows) * ((g + 1) * inter + hidden);
  const double tok = static_cast<double>(c.tokens) * hidden;
  t.rows_s = slow * (f.out_element_s * out + f.row_element_s * act) + f.token_element_s * tok;
  t.total_s = t.fixed_s + t.gemm_s + t.rows_s;
  return t;
}

FusedMoeTime fused_moe_time(const HardwareProfile& gpu, const FusedMoeCall& call, const MoeRankLoad& load) {
  const MoeKernel kernel = call.kernel.value_or(default_moe_kernel(call.format, call.ep));
  if (const MoeKernelFit* fit = find_moe_kernel_fit(gpu, kernel)) {
    FusedMoeTime t = fused_moe_time(*fit, call, load);
    t.fitted = true;
    return t;
  }
  return fused_moe_time(moe_kernel_roofline(gpu, kernel, call.format), call, load);
}

FusedMoeTime fused_moe_time(const HardwareProfile& gpu, const FusedMoeCall& call) {
  return fused_moe_time(gpu, call, expected_moe_load(call));
}

double fused_moe_time_s(const HardwareProfile& gpu, const FusedMoeCall& call) {
  return fused_moe_time(gpu, call).total_s;
}

}  // namespace batchsim
