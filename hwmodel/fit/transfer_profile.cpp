// batchsim — a fitted profile moved onto another GPU's datasheet ceilings (see transfer_profile.h).
#include "hwmodel/fit/transfer_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "hwmodel/base/error.h"
#include "hwmodel/roofline.h"

namespace batchsim {

namespace {

// The ceilings a fit never changes (fit_profile.h, fit_kernel_tables.h: they come from the
// base datasheet GPU): equal ceilings mean the same GPU.
bool same_ceilings(const HardwareProfile& a, const HardwareProfile& b) {
  return a.peak_flops == b.peak_flops && a.peak_fp8_flops == b.peak_fp8_flops &&
         a.hbm_bytes_per_s == b.hbm_bytes_per_s && a.memory_bytes == b.memory_bytes &&
         a.pcie_bytes_per_s == b.pcie_bytes_per_s && a.sm_count == b.sm_count;
}

// The built-in datasheet GPU whose ceilings `p` carries, or null. A fit overwrites the
// interconnect values with its all-reduce fit, so this is where the link bandwidth that fit
// was measured against is found.
const HardwareProfile* datasheet_of(const HardwareProfile& p) {
  for (const HardwareProfile& g : builtin_gpus()) {
    if (g.source == "datasheet" && same_ceilings(g, p)) return &g;
  }
  return nullptr;
}

std::string ratio_text(double r) { return fmt::format("x {:.4g}", r); }

}  // namespace

RescaledGemmTable rescale_gemm_table(const GemmTable& table, const HardwareProfile& from, const HardwareProfile& to) {
  std::vector<GemmPoint> points;
  RescaledGemmTable out;
  out.min_ratio = std::numeric_limits<double>::infinity();
  for (const GemmTable::Column& c : table.columns()) {
    for (size_t i = 0; i < c.seconds.size(); ++i) {
      if (std::isnan(c.seconds[i])) continue;
      const int64_t m = table.m_grid()[i];
      const GemmShape shape{c.k, c.n};
      // The roofline alone (gemm_roofline_time_s never looks at a table).
      const double ratio =
          gemm_roofline_time_s(to, shape, m, table.format()) / gemm_roofline_time_s(from, shape, m, table.format());
      out.min_ratio = std::min(out.min_ratio, ratio);
      out.max_ratio = std::max(out.max_ratio, ratio);
      points.push_back({m, c.n, c.k, c.seconds[i] * ratio});
    }
  }
  out.points = points.size();
  out.table =
      GemmTable::from_points(table.dtype(),
                             fmt::format("{}; rescaled from {} to {} ceilings by the fitted roofline's time ratio",
                                         table.source(), from.name, to.name),
                             points);
  return out;
}

double per_sm_rate_on(double rate, const HardwareProfile& from, const HardwareProfile& to) {
  if (from.sm_count <= 0 || to.sm_count <= 0) return 0.0;
  return rate / (from.hbm_bytes_per_s / from.sm_count) * (to.hbm_bytes_per_s / to.sm_count);
}

HardwareProfile transfer_profile(const HardwareProfile& fitted, const HardwareProfile& target) {
  if (target.source != "datasheet") {
    throw UserError(fmt::format(
        "cannot transfer '{}' onto '{}': the target must be a datasheet GPU (source 'datasheet'), and "
        "'{}' is '{}'; give a built-in datasheet GPU (batchsim list gpus) or a profile file of datasheet ceilings",
        fitted.name, target.name, target.name, target.source));
  }
  if (fitted.source == "datasheet") {
    throw UserError(
        fmt::format("cannot transfer '{}': it is a datasheet profile, with no fitted efficiencies "
                    "to carry; use '{}' itself",
                    fitted.name, target.name));
  }
  if (same_ceilings(fitted, target)) {
    throw UserError(
        fmt::format("cannot transfer '{}' onto '{}': it already has the ceilings of '{}' (the same "
                    "GPU); use '{}' as it is",
                    fitted.name, target.name, target.name, fitted.name));
  }
  const HardwareProfile* fitted_datasheet = datasheet_of(fitted);
  std::vector<std::string> lines;

  HardwareProfile p = fitted;  // the efficiencies, exponents and everything not below
  p.name = fmt::format("{}-from-{}", target.name, fitted.name);
  p.source = fmt::format("transferred from {} to {} ceilings", fitted.name, target.name);
  // The fitted profile's figures are its own GPU's: a run here must not claim them.
  p.validation = ProfileValidation{};
  p.transferred_from = fitted.name;
  p.peak_flops = target.peak_flops;
  p.peak_fp8_flops = target.peak_fp8_flops;
  p.peak_fp4_flops = target.peak_fp4_flops;
  p.hbm_bytes_per_s = target.hbm_bytes_per_s;
  p.memory_bytes = target.memory_bytes;
  p.pcie_bytes_per_s = target.pcie_bytes_per_s;
  p.sm_count = target.sm_count;
  // The node and its network are the target's: a datasheet figure, never fitted here.
  p.gpus_per_node = target.gpus_per_node;
  p.internode_bytes_per_s = target.internode_bytes_per_s;
  p.internode_latency_s = target.internode_latency_s;
  lines.push_back(
      fmt::format("ceilings of {}: peak_flops {:g}, peak_fp8_flops {:g}, peak_fp4_flops {:g}, "
                  "hbm_bytes_per_s {:g}, memory_bytes {}, pcie_bytes_per_s {:g}, sm_count {:g}, "
                  "internode_bytes_per_s {:g}",
                  target.name, p.peak_flops, p.peak_fp8_flops, p.peak_fp4_flops, p.hbm_bytes_per_s, p.memory_bytes,
                  p.pcie_bytes_per_s, p.sm_count, p.internode_bytes_per_s));
  // Efficiencies are fractions of a ceiling, so they carry as they are. For the elementwise
  // kernels that is the weakest assumption held out (A100 <-> A40, hwmodel/README.md): small
  // kernels that reach a fraction of the A100's HBM (embedding 16%) are bound by something else,
  // and reach more of the A40's slower memory; one GPU's fit cannot tell which bound binds.
  lines.push_back(
      "carried as fitted (fractions of the ceilings, or shapes of the roofline): gemm_eta_max, gemm_m_half, "
      "hbm_efficiency, the attention and elementwise efficiencies (attention_kv_write_efficiency too), the roofline "
      "exponents, and the prefill attention kernel whose tiling they were fitted for");

  // Per-unit attention times are work the SMs do beside the FLOPs counted (prefill: diagonal
  // tiles, softmax rescaling, per-tile set-up per query token and head; decode: per thread
  // block, Q load, softmax and output of one (sequence, KV head)), spread over the whole GPU,
  // so they shrink as the GPU computes faster. The datasheet's only figure for that is peak
  // FLOP/s: the times scale by its inverse.
  const double flop_ratio = fitted.peak_flops / target.peak_flops;
  p.prefill_attention_per_head_token_s *= flop_ratio;
  p.decode_attention_per_seq_kv_head_s *= flop_ratio;
  lines.push_back(
      fmt::format("{} (peak FLOP/s {:g} -> {:g} TFLOP/s): prefill_attention_per_head_token_s, "
                  "decode_attention_per_seq_kv_head_s",
                  ratio_text(flop_ratio), fitted.peak_flops / 1e12, target.peak_flops / 1e12));

  // One SM streams K/V at a bounded rate (roofline.h, the wave terms), a share of the GPU's HBM
  // bandwidth: the same share of the target's per-SM bandwidth.
  const double sm_ratio = per_sm_rate_on(1.0, fitted, target);
  p.decode_attention_sm_bytes_per_s = per_sm_rate_on(fitted.decode_attention_sm_bytes_per_s, fitted, target);
  p.prefill_attention_sm_bytes_per_s = per_sm_rate_on(fitted.prefill_attention_sm_bytes_per_s, fitted, target);
  if (sm_ratio > 0) {
    lines.push_back(
        fmt::format("{} (HBM bandwidth per SM {:.4g} -> {:.4g} GB/s): decode_attention_sm_bytes_per_s, "
                    "prefill_attention_sm_bytes_per_s",
                    ratio_text(sm_ratio), fitted.hbm_bytes_per_s / fitted.sm_count / 1e9,
                    target.hbm_bytes_per_s / target.sm_count / 1e9));
  } else {
    lines.push_back("not transferred: the per-SM K/V rates (an SM count is missing), set to 0 (no wave term)");
  }

  // The attention-kernel regimes (attention_kernel.h) by the same rules: per-unit times by the
  // FLOP ratio, per-SM K/V rates by the per-SM bandwidth ratio, the GPU-wide K/V re-read rate by
  // the HBM ratio, efficiencies, exponents, launches, per-tile, combine, window and
  // per-sequence times as fitted. The MLA block is efficiencies and launches: carried as fitted.
  if (!p.attention_kernels.empty()) {
    const double hbm_ratio = target.hbm_bytes_per_s / fitted.hbm_bytes_per_s;
    for (AttentionKernelFit& k : p.attention_kernels) {
      k.per_unit_s *= flop_ratio;
      k.per_unit_head_dim_s *= flop_ratio;
      k.sm_bytes_per_s = per_sm_rate_on(k.sm_bytes_per_s, fitted, target);
      k.kv_reread_bytes_per_s *= hbm_ratio;
    }
    lines.push_back(
        fmt::format("attention_kernels ({} regimes): per_unit_s and per_unit_head_dim_s {}, sm_bytes_per_s "
                    "{}, kv_reread_bytes_per_s {} (HBM bandwidth); the rest as fitted",
                    p.attention_kernels.size(), ratio_text(flop_ratio), ratio_text(sm_ratio), ratio_text(hbm_ratio)));
  }

  // The fused-MoE kernels (moe_kernel.h): weight streaming by the HBM ratio and the GEMMs' FLOP
  // rate by the tensor-core ratio of the kernel's format (FP8 kernels by peak_fp8_flops, the
  // others by peak_flops: the Hopper kernels these fits time run FP4 experts at the 16-bit rate),
  // each capped at the target's ceiling; per-element row and token work by the HBM ratio (it is
  // memory traffic); launch, EP and per-expert floors are latency and kept. On another
  // generation the engine picks other kernels (Blackwell's native FP4 and FP8 paths), which a
  // transfer cannot know: the provenance says so.
  if (!p.moe_kernels.empty()) {
    const double hbm = target.hbm_bytes_per_s / fitted.hbm_bytes_per_s;
    const double fp8 = fitted.peak_fp8_flops > 0 && target.peak_fp8_flops > 0
                           ? target.peak_fp8_flops / fitted.peak_fp8_flops
                           : target.peak_flops / fitted.peak_flops;
    const double bf16 = target.peak_flops / fitted.peak_flops;
    for (MoeKernelFit& k : p.moe_kernels) {
      const bool fp8_kernel = k.kernel == MoeKernel::fp8_flashinfer_cutlass ||
                              k.kernel == MoeKernel::fp8_block_triton ||
                              k.kernel == MoeKernel::fp8_block_flashinfer_cutlass;
      k.weight_bytes_per_s = std::min(k.weight_bytes_per_s * hbm, target.hbm_bytes_per_s);
      const double ceiling = fp8_kernel && target.peak_fp8_flops > 0 ? target.peak_fp8_flops : target.peak_flops;
      k.flops_per_s = std::min(k.flops_per_s * (fp8_kernel ? fp8 : bf16), ceiling);
      k.out_element_s /= hbm;
      k.row_element_s /= hbm;
      k.token_element_s /= hbm;
    }
    lines.push_back(fmt::format(
        "moe_kernels ({} kernels): weight_bytes_per_s {} and the per-element times {} (HBM "
        "bandwidth), flops_per_s {} (FP8 kernels) or {} (the others), each capped at the "
        "target's ceiling; launch floors as fitted; the kernels are {}'s, which another "
        "generation may not run",
        p.moe_kernels.size(), ratio_text(hbm), ratio_text(1 / hbm), ratio_text(fp8), ratio_text(bf16), fitted.name));
  }

  // Launch floors and per-sequence set-up (metadata, block tables) are latency, not
  // throughput: no ceiling of the datasheet sets them, so they are kept. So are the fixed time
  // of one FlashAttention-3 tile on its SM (the target's SM count spreads the tiles, roofline.h)
  // and the KV-cache write's per token (one thread block each): set-up, not FLOPs or bytes.
  lines.push_back(
      "kept (latency, not throughput): kernel_launch_s, attention_launch_s, the elementwise launch_s, "
      "prefill_attention_per_seq_s, decode_attention_per_seq_s, prefill_attention_per_tile_s, "
      "attention_kv_write_per_token_s");

  // All-reduce fits: latency (NCCL's and the kernel's set-up) is kept; the bandwidth is a
  // fraction of the link, so it moves with the link. A fit overwrote the profile's interconnect
  // values, so the link it was measured on is the fitted GPU's datasheet link.
  if (fitted_datasheet == nullptr) {
    p.allreduce.clear();
    p.custom_allreduce.clear();
    p.interconnect_bytes_per_s = target.interconnect_bytes_per_s;
    p.interconnect_latency_s = target.interconnect_latency_s;
    lines.push_back(fmt::format(
        "not transferred: the all-reduce fits (the ceilings of '{}' are those of no built-in datasheet GPU, so the "
        "link they were measured on is unknown); interconnect_* are {}'s datasheet values",
        fitted.name, target.name));
  } else {
    const double link_ratio = target.interconnect_bytes_per_s / fitted_datasheet->interconnect_bytes_per_s;
    for (auto* fits : {&p.allreduce, &p.custom_allreduce}) {
      for (AllReduceFit& f : *fits) f.bytes_per_s *= link_ratio;
    }
    // interconnect_* equal to the fitted GPU's datasheet values were not fitted (no all-reduce
    // rows): the target's own datasheet values then, not a rescaled copy of another GPU's round
    // latency.
    const bool link_fitted = fitted.interconnect_bytes_per_s != fitted_datasheet->interconnect_bytes_per_s ||
                             fitted.interconnect_latency_s != fitted_datasheet->interconnect_latency_s;
    if (link_fitted) {
      p.interconnect_bytes_per_s *= link_ratio;
    } else {
      p.interconnect_bytes_per_s = target.interconnect_bytes_per_s;
      p.interconnect_latency_s = target.interconnect_latency_s;
    }
    lines.push_back(fmt::format(
        "{} (datasheet link {:g} -> {:g} GB/s per direction, {} -> {}): allreduce and "
        "custom_allreduce bytes_per_s{}; their latencies kept",
        ratio_text(link_ratio), fitted_datasheet->interconnect_bytes_per_s / 1e9, target.interconnect_bytes_per_s / 1e9,
        fitted_datasheet->name, target.name, link_fitted ? ", interconnect_bytes_per_s" : ""));
    if (!link_fitted) {
      lines.push_back(fmt::format("interconnect_* were {}'s datasheet values (not fitted): {}'s datasheet values",
                                  fitted_datasheet->name, target.name));
    }
  }

  // Measured GEMM tables hold what the roofline cannot: the steps of cuBLAS's kernel choices
  // (tile, split-K) per shape. Those choices follow the SMs (their count and kind), so they carry
  // to a GPU of the same SMs and FLOP/s (H100 -> H200, A100 40 GB -> 80 GB: another memory on the
  // same die), where each time is moved by the ratio of the fitted roofline's times on the two
  // GPUs (rescale_gemm_table: x 1 for a compute-bound shape, about the bandwidth ratio for a
  // weight-streaming one). Onto other SMs they do not: held out on Vidur's measurements, an A100
  // table rescaled to the A40 scores 11.6% MAPE on the A40's GEMMs against 9.4% for the fitted
  // roofline alone (A40 -> A100: 10.7% against 8.7%; the two GPUs' residuals from their rooflines
  // correlate at 0.18), so there the tables are dropped and the transferred roofline answers.
  const bool same_sms = fitted.peak_flops == target.peak_flops && fitted.peak_fp8_flops == target.peak_fp8_flops &&
                        fitted.sm_count == target.sm_count;
  HardwareProfile from = fitted, to = p;
  to.name = target.name;
  for (auto& table_source : p.gemm_tables) {
    auto* table = &table_source;
    if (!*table) continue;
    const GemmTable& measured = (*table)->table();
    if (!same_sms) {
      lines.push_back(fmt::format(
          "not transferred: the {} GEMM table ({} has {:g} SMs at {:g} TFLOP/s, {} {:g} at {:g}: other kernel choices, "
          "which held out made a rescaled table worse than the roofline; hwmodel/README.md); {} GEMMs use the "
          "fitted roofline on {}'s ceilings",
          measured.dtype(), fitted.name, fitted.sm_count, fitted.peak_flops / 1e12, target.name, target.sm_count,
          target.peak_flops / 1e12, measured.dtype(), target.name));
      *table = nullptr;
      continue;
    }
    RescaledGemmTable r = rescale_gemm_table(measured, from, to);
    lines.push_back(
        fmt::format("GEMM table {}: each of its {} times x the fitted roofline's time on {} / on {} "
                    "({:.4g} to {:.4g})",
                    measured.dtype(), r.points, target.name, fitted.name, r.min_ratio, r.max_ratio));
    // The file name is a placeholder until save_hardware_profile names the table after the profile.
    *table =
        std::make_shared<GemmTableSource>(fmt::format("{}.gemm-{}.txt", p.name, measured.dtype()), std::move(r.table));
  }
  lines.push_back(
      "caveat: the efficiencies are those of the fitted GPU's kernels; a target of another architecture runs other "
      "kernels (FlashAttention-3 is Hopper's, FP8 GEMMs need FP8 tensor cores), which no ratio captures");
  lines.push_back("the rest of the profile is carried as it is");

  std::string& text = p.provenance;
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += fmt::format(
      "transferred by hwmodel/fit/transfer_profile.cpp from '{}' ({}) to the datasheet ceilings of "
      "'{}':",
      fitted.name, fitted.source, target.name);
  for (const std::string& line : lines) text += "\n  " + line;
  text += '\n';
  return p;
}

}  // namespace batchsim
