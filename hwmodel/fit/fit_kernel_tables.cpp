// batchsim — fitting a profile on aiconfigurator-layout kernel tables (see fit_kernel_tables.h).
#include "hwmodel/fit/fit_kernel_tables.h"

#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "hwmodel/fit/fit_attention_kernels.h"
#include "hwmodel/fit/fit_moe.h"
#include "hwmodel/fit/fit_profile.h"
#include "hwmodel/roofline.h"

namespace batchsim {

namespace {

// Alternate halves of a sorted list of distinct values: index parity.
template <typename T>
size_t index_in(const std::vector<T>& sorted, const T& value) {
  return static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), value) - sorted.begin());
}

template <typename T>
void sort_unique(std::vector<T>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

bool on_side(bool train, KernelRows rows) { return rows == KernelRows::kAll || (rows == KernelRows::kTrain) == train; }

}  // namespace

KernelSplit::KernelSplit(const KernelTables& tables) {
  for (const auto& r : tables.gemm) {
    gemm_n_.push_back(r.n);
    gemm_k_.push_back(r.k);
  }
  for (const auto& r : tables.attention) head_configs_.emplace_back(r.num_heads, r.num_kv_heads);
  for (const auto& r : tables.collectives) message_sizes_.emplace_back(r.implementation, r.num_gpus, r.elements);
  for (const auto& r : tables.moe) moe_groups_.emplace_back(r.hidden, r.inter, r.topk, r.experts, r.tp, r.ep, r.dtype);
  sort_unique(gemm_n_);
  sort_unique(gemm_k_);
  sort_unique(head_configs_);
  sort_unique(message_sizes_);
  sort_unique(moe_groups_);
}

bool KernelSplit::gemm(const KernelGemmRow& r, KernelRows rows) const {
  return on_side((index_in(gemm_n_, r.n) + index_in(gemm_k_, r.k)) % 2 == 0, rows);
}

bool KernelSplit::attention(const KernelAttentionRow& r, KernelRows rows) const {
  return on_side(index_in(head_configs_, std::pair(r.num_heads, r.num_kv_heads)) % 2 == 0, rows);
}

bool KernelSplit::collective(const KernelCollectiveRow& r, KernelRows rows) const {
  // Within one (implementation, GPU count) the message sizes alternate; the smallest and the
  // largest stay in training so that held-out sizes are interpolated, not extrapolated.
  const auto key = std::tuple(r.implementation, r.num_gpus, r.elements);
  const size_t i = index_in(message_sizes_, key);
  const auto first = std::lower_bound(message_sizes_.begin(), message_sizes_.end(),
                                      std::tuple(r.implementation, r.num_gpus, int64_t{0}));
  const auto last = std::upper_bound(message_sizes_.begin(), message_sizes_.end(),
                                     std::tuple(r.implementation, r.num_gpus, std::numeric_limits<int64_t>::max()));
  const size_t begin = static_cast<size_t>(first - message_sizes_.begin());
  const size_t end = static_cast<size_t>(last - message_sizes_.begin());
  const bool edge = i == begin || i + 1 == end;
  return on_side(edge || (i - begin) % 2 == 0, rows);
}

bool KernelSplit::moe(const KernelMoeRow& r, KernelRows rows) const {
  return on_side(index_in(moe_groups_, std::tuple(r.hidden, r.inter, r.topk, r.experts, r.tp, r.ep, r.dtype)) % 2 == 0,
                 rows);
}

std::string gemm_row_skip_reason(const KernelGemmRow& r) {
  if (r.dtype == "bfloat16" || r.dtype == "float16" || r.dtype == "fp8" || r.dtype == "fp8_block" ||
      r.dtype == "nvfp4") {
    return "";
  }
  return fmt::format("dtype {}: not modelled", r.dtype);
}

std::string attention_row_skip_reason(const KernelAttentionRow& r) {
  // Every head_dim, window, KV dtype and kernel is modelled (attention_kernel.h: a regime per
  // kernel and KV dtype); only what no row has yet is not.
  if (r.attn_dtype != "bfloat16" && r.attn_dtype != "float16")
    return fmt::format("attention dtype {}: not modelled", r.attn_dtype);
  if (r.kv_cache_dtype != "bfloat16" && r.kv_cache_dtype != "float16" && r.kv_cache_dtype != "fp8") {
    return fmt::format("KV cache dtype {}: not modelled", r.kv_cache_dtype);
  }
  return "";
}

std::string collective_row_skip_reason(const KernelCollectiveRow& r) {
  if (r.op != "all_reduce") return fmt::format("{}: tensor parallelism runs all-reduces only", r.op);
  if (r.num_gpus < 2) return "one GPU: no all-reduce";
  if (r.implementation == "nccl" && r.dtype != "half" && r.dtype != "bfloat16") {
    return fmt::format("NCCL {} messages: the activations all-reduced are 16-bit", r.dtype);
  }
  if (r.implementation != "nccl" && r.implementation.find("graph") == std::string::npos) {
    return fmt::format("{}: the engine runs its custom all-reduce under CUDA graphs", r.implementation);
  }
  return "";
}

WeightFormat gemm_row_format(const KernelGemmRow& r) {
  if (r.dtype == "fp8") return WeightFormat::fp8;
  if (r.dtype == "fp8_block") return WeightFormat::fp8_block;
  if (r.dtype == "nvfp4") return WeightFormat::nvfp4;
  return WeightFormat::bf16;
}

std::string gemm_row_table_dtype(const KernelGemmRow& r) { return std::string(weight_format_name(gemm_row_format(r))); }

ModelSpec attention_row_model(const KernelAttentionRow& r) {
  ModelSpec m;
  m.name = "kernel-table-attention";
  m.num_layers = 1;
  m.num_heads = static_cast<int>(r.num_heads);
  m.num_kv_heads = static_cast<int>(r.num_kv_heads);
  m.head_dim = static_cast<int>(r.head_dim);
  m.hidden_size = m.num_heads * m.head_dim;
  m.kv_dtype_bytes = r.kv_cache_dtype == "fp8" ? 1 : 2;
  return m;
}

double predict_kernel_attention(const HardwareProfile& gpu, const KernelAttentionRow& r) {
  // `batch` sequences of `isl` new tokens in one variable-length call, as CostModel sums them,
  // counting the tiles the profile costs the model's attention by; or `batch` decodes.
  const OperatorWork work = kernel_row_attention_work(r, prefill_attention_tiles(gpu, attention_row_model(r)));
  return r.prefill ? prefill_attention_time_s(gpu, work) : decode_attention_time_s(gpu, work, r.batch);
}

double predict_kernel_gemm(const HardwareProfile& gpu, const KernelGemmRow& r) {
  const double kernel_s = gemm_time_s(gpu, GemmShape{r.k, r.n}, r.m, gemm_row_format(r));
  if (r.dtype != "fp8_block") return kernel_s;
  // What the collector timed: no call below its kernel's floor (HardwareProfile::fp8_block_gemms).
  const HardwareProfile::BlockFp8GemmFit* fit = gpu.fp8_block_gemm(r.kernel);
  return fit != nullptr ? std::max(fit->call_floor_s, kernel_s) : kernel_s;
}

double predict_kernel_collective(const HardwareProfile& gpu, const KernelCollectiveRow& r) {
  if (r.implementation == "nccl") return allreduce_time_s(gpu, r.bytes, r.num_gpus);
  const auto t = custom_allreduce_time_s(gpu, r.bytes, r.num_gpus);
  return t ? *t : std::numeric_limits<double>::quiet_NaN();
}

namespace {

// Block-scaled FP8 per kernel library (HardwareProfile::BlockFp8GemmFit): the floor is the 5th
// percentile of the kernel's times (NVIDIA's rows sit on it at every m below a few thousand:
// 0.056 ms at m = 1 and 0.078 ms at m = 4096 for H100's DeepGEMM, 0.15 ms on B200), and the
// scale the median ratio to the per-tensor FP8 GEMM of the same shape over the rows well above
// that floor (twice it), where the kernel's own time shows.
std::vector<HardwareProfile::BlockFp8GemmFit> fit_fp8_block_gemms(const std::vector<const KernelGemmRow*>& rows,
                                                                  const HardwareProfile& p,
                                                                  std::vector<std::string>& notes) {
  std::map<std::string, std::vector<const KernelGemmRow*>> by_kernel;
  for (const KernelGemmRow* r : rows) by_kernel[r->kernel].push_back(r);
  if (!by_kernel.empty() && p.gemm_table(WeightFormat::fp8) == nullptr) {
    notes.push_back("block-FP8 GEMM rows but no per-tensor FP8 rows: block FP8 scaled from the FP8 roofline");
  }
  std::vector<HardwareProfile::BlockFp8GemmFit> fits;
  for (auto& [kernel, kr] : by_kernel) {
    std::vector<double> times;
    for (const KernelGemmRow* r : kr) times.push_back(r->seconds);
    std::sort(times.begin(), times.end());
    HardwareProfile::BlockFp8GemmFit fit;
    fit.kernel = kernel;
    fit.rows = static_cast<int64_t>(kr.size());
    fit.call_floor_s = times[times.size() / 20];
    std::vector<double> ratios;
    for (const KernelGemmRow* r : kr) {
      if (r->seconds <= 2 * fit.call_floor_s) continue;
      const double fp8 = gemm_time_s(p, GemmShape{r->k, r->n}, r->m, WeightFormat::fp8);
      if (fp8 > 0) ratios.push_back(r->seconds / fp8);
    }
    if (!ratios.empty()) {
      std::nth_element(ratios.begin(), ratios.begin() + static_cast<std::ptrdiff_t>(ratios.size() / 2), ratios.end());
      fit.scale = ratios[ratios.size() / 2];
    } else {
      notes.push_back(fmt::format("block-FP8 kernel {}: no row above its call floor; scale 1", kernel));
    }
    fits.push_back(fit);
  }
  return fits;
}

// GEMM: the measured tables per dtype (what the roofline cannot know: cuBLAS's kernel choices
// per shape), the roofline outside them fitted on the 16-bit rows, and block-scaled FP8 per
// kernel library against the FP8 table.
void fit_gemm_rows(const KernelTables& tables, const KernelSplit& split, KernelRows rows, KernelFitResult& result) {
  HardwareProfile& p = result.profile;
  const std::string where = fmt::format("{} ({})", tables.system, tables.framework);
  std::map<std::string, std::vector<GemmPoint>> by_dtype;
  std::map<std::string, std::string> kernels;
  std::vector<GemmFitPoint> roofline_points;
  std::vector<const KernelGemmRow*> block_fp8;
  for (const KernelGemmRow& r : tables.gemm) {
    if (!gemm_row_skip_reason(r).empty() || !split.gemm(r, rows)) continue;
    if (r.dtype == "fp8_block") {
      block_fp8.push_back(&r);  // fitted against the fp8 table below
      continue;
    }
    const std::string dtype = gemm_row_table_dtype(r);
    by_dtype[dtype].push_back({r.m, r.n, r.k, r.seconds});
    kernels[dtype] = r.kernel;
    if (dtype == "bf16") roofline_points.push_back({GemmShape{r.k, r.n}, r.m, WeightFormat::bf16, r.seconds});
  }
  for (auto& [dtype, points] : by_dtype) {
    auto table = GemmTable::from_points(
        dtype, fmt::format("{} gemm_perf, {} ({} points)", where, kernels[dtype], points.size()), points);
    auto source = std::make_shared<GemmTableSource>(fmt::format("{}.gemm-{}.txt", p.name, dtype), std::move(table));
    p.gemm_table_source(parse_weight_format(dtype, "GEMM table")) = std::move(source);
  }
  if (!roofline_points.empty()) {
    fit_gemm_roofline(roofline_points, p);
  } else {
    result.notes.push_back("no 16-bit GEMM rows: the GEMM roofline is the base profile's");
  }
  p.fp8_block_gemms = fit_fp8_block_gemms(block_fp8, p, result.notes);
}

// The flat attention parameters (what a call no regime covers falls back to), on Llama-like
// heads as before the regimes: FlashAttention-3, head_dim 128, full attention, 16-bit KV
// (one parameter set cannot follow both KV dtypes: FA3's FP8-KV path dequantises K and V, so
// it is nowhere near twice as fast as the byte count says), prefill and decode together (one
// launch floor). The regimes (fit_attention_kernels) cost every row; they are cleared here so
// that these rows are predicted by the flat parameters alone.
void fit_flat_attention(const KernelTables& tables, const KernelSplit& split, KernelRows rows,
                        KernelFitResult& result) {
  HardwareProfile& p = result.profile;
  p.attention_kernels.clear();
  std::vector<const KernelAttentionRow*> attention;
  bool any_prefill = false, any_decode = false;
  for (const KernelAttentionRow& r : tables.attention) {
    if (!attention_row_skip_reason(r).empty() || !split.attention(r, rows)) continue;
    const bool llama_like = r.window == 0 && r.head_dim == 128 && r.kv_cache_dtype != "fp8" &&
                            attention_tiles_for_kernel(r.kernel) == AttentionTiles::fa3;
    if (!llama_like) continue;
    attention.push_back(&r);
    (r.prefill ? any_prefill : any_decode) = true;
  }
  if (attention.empty()) {
    result.notes.push_back("no Llama-like attention rows: the flat attention parameters are the base profile's");
    return;
  }
  // The rows are FlashAttention-3's (attention_row_skip_reason): prefill is costed by its
  // tiles, which need the GPU's SM count.
  if (p.sm_count > 0) {
    p.prefill_attention_kernel = PrefillAttentionKernel::flash_attention_3;
  } else {
    result.notes.push_back(
        "base without sm_count: prefill attention costed as FlashAttention-2, not by "
        "FlashAttention-3's tiles");
  }
  fit_attention_parameters(
      attention.size(), any_prefill, any_decode,
      [&](const HardwareProfile& q, size_t i) { return predict_kernel_attention(q, *attention[i]); },
      [&](size_t i) { return attention[i]->seconds; }, p, /*per_sequence=*/true, /*kv_write=*/true);
}

// All-reduce: one latency + bandwidth per (implementation, GPU count). NCCL's is on a ring's
// wire bytes (allreduce_time_s), the custom kernel's on the message bytes.
void fit_allreduce_rows(const KernelTables& tables, const KernelSplit& split, KernelRows rows,
                        KernelFitResult& result) {
  HardwareProfile& p = result.profile;
  std::map<std::pair<bool, int>, std::vector<std::pair<double, double>>> comm;
  for (const KernelCollectiveRow& r : tables.collectives) {
    if (!collective_row_skip_reason(r).empty() || !split.collective(r, rows)) continue;
    const bool nccl = r.implementation == "nccl";
    const double x = nccl ? ring_allreduce_wire_bytes(r.bytes, r.num_gpus) : r.bytes;
    comm[{nccl, r.num_gpus}].emplace_back(x, r.seconds);
  }
  if (comm.empty()) {
    result.notes.push_back("no all-reduce rows: interconnect values are the base profile's");
    return;
  }
  p.allreduce.clear();
  p.custom_allreduce.clear();
  for (const auto& [key, points] : comm) {
    const LinearFit f = fit_intercept_slope(points);
    if (f.slope > 0) (key.first ? p.allreduce : p.custom_allreduce).push_back({key.second, f.intercept, 1 / f.slope});
  }
}

// Fused MoE: each kernel library's constants on the rows it ran (fit_moe.h), at the expected
// loads of each row's routing (DeepSeek-V3's rows: at the loads the collector's routing gave
// its grouped top-k, collector_grouped_load); rows the model cannot express are left out
// (kernel_validation counts them). The roofline ceilings are the base's.
void fit_moe_rows(const KernelTables& tables, const KernelSplit& split, KernelRows rows, const HardwareProfile& base,
                  KernelFitResult& result) {
  std::vector<MoeSample> moe;
  MoeLoadCache loads;
  for (const KernelMoeRow& r : tables.moe) {
    if (!split.moe(r, rows)) continue;
    const std::optional<FusedMoeCall> call = kernel_moe_row_call(r);
    if (call) moe.push_back({*call, loads.load(*call, kernel_moe_row_grouping(r)), r.seconds});
  }
  if (moe.empty()) return;
  MoeFitResult fits = fit_moe_kernels(moe, base);
  result.profile.moe_kernels = std::move(fits.fits);
  for (std::string& note : fits.notes) result.notes.push_back(std::move(note));
}

// The kernels timed: the framework and the version folder its GEMM tables came from
// (<family>/<framework>/<version>/<table>), or the framework alone.
std::string kernels_timed(const KernelTables& tables) {
  for (const std::string& f : tables.files_read) {
    const std::filesystem::path path(f);
    std::vector<std::string> parts(path.begin(), path.end());
    if (parts.size() >= 4 && parts[1] == tables.framework) return tables.framework + " " + parts[2];
  }
  return tables.framework;
}

}  // namespace

KernelFitResult fit_kernel_tables(const KernelTables& tables, const HardwareProfile& base, KernelRows rows) {
  const KernelSplit split(tables);
  KernelFitResult result;
  HardwareProfile& p = result.profile;
  p = base;
  p.name = base.name + "-fitted";
  p.gemm_tables = {};
  fit_gemm_rows(tables, split, rows, result);
  fit_flat_attention(tables, split, rows, result);
  // Every attention row: one regime per (phase, kernel, KV dtype) (fit_attention_kernels.h).
  p.attention_kernels = fit_attention_kernels(tables, split, rows, p, result.notes);
  fit_allreduce_rows(tables, split, rows, result);
  fit_moe_rows(tables, split, rows, base, result);

  p.source = fmt::format("fitted on {} kernel tables of {}{}, ceilings of {}", tables.framework, tables.system,
                         rows == KernelRows::kTrain ? " (training half)" : "", base.name);
  p.provenance = fit_provenance("hwmodel/fit/fit_kernel_tables.cpp", tables.files_read, "", result.notes);
  p.kernels = kernels_timed(tables);
  return result;
}

}  // namespace batchsim
