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

namespace {

// A transfer onto a GPU that is not a datasheet, from a profile with nothing fitted, or onto
// the fitted GPU itself would carry nothing or mean nothing: the user is told what to use.
void check_transferable(const HardwareProfile& fitted, const HardwareProfile& target) {
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
}

// One transfer as a pipeline over the profile being built: each step rescales one group of
// quantities by the ceiling it depends on and adds the line that says so to the provenance
// paragraph, in the order the paragraph lists them (so the steps run in that order).
class ProfileTransfer {
 public:
  ProfileTransfer(const HardwareProfile& fitted, const HardwareProfile& target)
      : fitted_(fitted),
        target_(target),
        fitted_datasheet_(datasheet_of(fitted)),
        flop_ratio_(fitted.peak_flops / target.peak_flops),
        sm_ratio_(per_sm_rate_on(1.0, fitted, target)),
        p_(fitted) {}  // the efficiencies, exponents and everything the steps leave alone

  HardwareProfile run() && {
    take_target_ceilings();
    carry_efficiencies();
    scale_attention_unit_times();
    scale_attention_sm_rates();
    scale_attention_kernels();
    scale_moe_kernels();
    keep_latencies();
    carry_allreduce_fits();
    carry_gemm_tables();
    lines_.push_back(
        "caveat: the efficiencies are those of the fitted GPU's kernels; a target of another architecture runs "
        "other kernels (FlashAttention-3 is Hopper's, FP8 GEMMs need FP8 tensor cores), which no ratio captures");
    lines_.push_back("the rest of the profile is carried as it is");
    write_provenance();
    return std::move(p_);
  }

 private:
  // The name, the source, and the target's ceilings, node and network (datasheet figures,
  // never fitted here).
  void take_target_ceilings() {
    p_.name = fmt::format("{}-from-{}", target_.name, fitted_.name);
    p_.source = fmt::format("transferred from {} to {} ceilings", fitted_.name, target_.name);
    // The fitted profile's figures are its own GPU's: a run here must not claim them.
    p_.validation = ProfileValidation{};
    p_.transferred_from = fitted_.name;
    p_.peak_flops = target_.peak_flops;
    p_.peak_fp8_flops = target_.peak_fp8_flops;
    p_.peak_fp4_flops = target_.peak_fp4_flops;
    p_.hbm_bytes_per_s = target_.hbm_bytes_per_s;
    p_.memory_bytes = target_.memory_bytes;
    p_.pcie_bytes_per_s = target_.pcie_bytes_per_s;
    p_.sm_count = target_.sm_count;
    // The node and its network are the target's: a datasheet figure, never fitted here.
    p_.gpus_per_node = target_.gpus_per_node;
    p_.internode_bytes_per_s = target_.internode_bytes_per_s;
    p_.internode_latency_s = target_.internode_latency_s;
    p_.disk_bytes_per_s = target_.disk_bytes_per_s;
    lines_.push_back(
        fmt::format("ceilings of {}: peak_flops {:g}, peak_fp8_flops {:g}, peak_fp4_flops {:g}, "
                    "hbm_bytes_per_s {:g}, memory_bytes {}, pcie_bytes_per_s {:g}, sm_count {:g}, "
                    "internode_bytes_per_s {:g}",
                    target_.name, p_.peak_flops, p_.peak_fp8_flops, p_.peak_fp4_flops, p_.hbm_bytes_per_s,
                    p_.memory_bytes, p_.pcie_bytes_per_s, p_.sm_count, p_.internode_bytes_per_s));
  }

  // Efficiencies are fractions of a ceiling, so they carry as they are. For the elementwise
  // kernels that is the weakest assumption held out (A100 <-> A40, hwmodel/README.md): small
  // kernels that reach a fraction of the A100's HBM (embedding 16%) are bound by something else,
  // and reach more of the A40's slower memory; one GPU's fit cannot tell which bound binds.
  void carry_efficiencies() {
    lines_.push_back(
        "carried as fitted (fractions of the ceilings, or shapes of the roofline): gemm_eta_max, gemm_m_half, "
        "hbm_efficiency, the attention and elementwise efficiencies (attention_kv_write_efficiency too), the "
        "roofline exponents, and the prefill attention kernel whose tiling they were fitted for");
  }

  // Per-unit attention times are work the SMs do beside the FLOPs counted (prefill: diagonal
  // tiles, softmax rescaling, per-tile set-up per query token and head; decode: per thread
  // block, Q load, softmax and output of one (sequence, KV head)), spread over the whole GPU,
  // so they shrink as the GPU computes faster. The datasheet's only figure for that is peak
  // FLOP/s: the times scale by its inverse.
  void scale_attention_unit_times() {
    p_.prefill_attention_per_head_token_s *= flop_ratio_;
    p_.decode_attention_per_seq_kv_head_s *= flop_ratio_;
    lines_.push_back(
        fmt::format("{} (peak FLOP/s {:g} -> {:g} TFLOP/s): prefill_attention_per_head_token_s, "
                    "decode_attention_per_seq_kv_head_s",
                    ratio_text(flop_ratio_), fitted_.peak_flops / 1e12, target_.peak_flops / 1e12));
  }

  // One SM streams K/V at a bounded rate (roofline.h, the wave terms), a share of the GPU's HBM
  // bandwidth: the same share of the target's per-SM bandwidth.
  void scale_attention_sm_rates() {
    p_.decode_attention_sm_bytes_per_s = per_sm_rate_on(fitted_.decode_attention_sm_bytes_per_s, fitted_, target_);
    p_.prefill_attention_sm_bytes_per_s = per_sm_rate_on(fitted_.prefill_attention_sm_bytes_per_s, fitted_, target_);
    if (sm_ratio_ > 0) {
      lines_.push_back(
          fmt::format("{} (HBM bandwidth per SM {:.4g} -> {:.4g} GB/s): decode_attention_sm_bytes_per_s, "
                      "prefill_attention_sm_bytes_per_s",
                      ratio_text(sm_ratio_), fitted_.hbm_bytes_per_s / fitted_.sm_count / 1e9,
                      target_.hbm_bytes_per_s / target_.sm_count / 1e9));
    } else {
      lines_.push_back("not transferred: the per-SM K/V rates (an SM count is missing), set to 0 (no wave term)");
    }
  }

  // The attention-kernel regimes (attention_kernel.h) by the same rules: per-unit times by the
  // FLOP ratio, per-SM K/V rates by the per-SM bandwidth ratio, the GPU-wide K/V re-read rate by
  // the HBM ratio, efficiencies, exponents, launches, per-tile, combine, window and
  // per-sequence times as fitted. The MLA block is efficiencies and launches: carried as fitted.
  void scale_attention_kernels() {
    if (p_.attention_kernels.empty()) return;
    const double hbm_ratio = target_.hbm_bytes_per_s / fitted_.hbm_bytes_per_s;
    for (AttentionKernelFit& k : p_.attention_kernels) {
      k.per_unit_s *= flop_ratio_;
      k.per_unit_head_dim_s *= flop_ratio_;
      k.sm_bytes_per_s = per_sm_rate_on(k.sm_bytes_per_s, fitted_, target_);
      k.kv_reread_bytes_per_s *= hbm_ratio;
    }
    lines_.push_back(fmt::format(
        "attention_kernels ({} regimes): per_unit_s and per_unit_head_dim_s {}, sm_bytes_per_s "
        "{}, kv_reread_bytes_per_s {} (HBM bandwidth); the rest as fitted",
        p_.attention_kernels.size(), ratio_text(flop_ratio_), ratio_text(sm_ratio_), ratio_text(hbm_ratio)));
  }

  // The fused-MoE kernels (moe_kernel.h): weight streaming by the HBM ratio and the GEMMs' FLOP
  // rate by the tensor-core ratio of the kernel's format (FP8 kernels by peak_fp8_flops, the
  // others by peak_flops: the Hopper kernels these fits time run FP4 experts at the 16-bit rate),
  // each capped at the target's ceiling; per-element row and token work by the HBM ratio (it is
  // memory traffic); launch, EP and per-expert floors are latency and kept. On another
  // generation the engine picks other kernels (Blackwell's native FP4 and FP8 paths), which a
  // transfer cannot know: the provenance says so.
  void scale_moe_kernels() {
    if (p_.moe_kernels.empty()) return;
    const double hbm = target_.hbm_bytes_per_s / fitted_.hbm_bytes_per_s;
    const double fp8 = fitted_.peak_fp8_flops > 0 && target_.peak_fp8_flops > 0
                           ? target_.peak_fp8_flops / fitted_.peak_fp8_flops
                           : target_.peak_flops / fitted_.peak_flops;
    const double bf16 = target_.peak_flops / fitted_.peak_flops;
    for (MoeKernelFit& k : p_.moe_kernels) {
      const bool fp8_kernel = k.kernel == MoeKernel::fp8_flashinfer_cutlass ||
                              k.kernel == MoeKernel::fp8_block_triton ||
                              k.kernel == MoeKernel::fp8_block_flashinfer_cutlass;
      k.weight_bytes_per_s = std::min(k.weight_bytes_per_s * hbm, target_.hbm_bytes_per_s);
      const double ceiling = fp8_kernel && target_.peak_fp8_flops > 0 ? target_.peak_fp8_flops : target_.peak_flops;
      k.flops_per_s = std::min(k.flops_per_s * (fp8_kernel ? fp8 : bf16), ceiling);
      k.out_element_s /= hbm;
      k.row_element_s /= hbm;
      k.token_element_s /= hbm;
    }
    lines_.push_back(fmt::format(
        "moe_kernels ({} kernels): weight_bytes_per_s {} and the per-element times {} (HBM "
        "bandwidth), flops_per_s {} (FP8 kernels) or {} (the others), each capped at the "
        "target's ceiling; launch floors as fitted; the kernels are {}'s, which another "
        "generation may not run",
        p_.moe_kernels.size(), ratio_text(hbm), ratio_text(1 / hbm), ratio_text(fp8), ratio_text(bf16), fitted_.name));
  }

  // Launch floors and per-sequence set-up (metadata, block tables) are latency, not
  // throughput: no ceiling of the datasheet sets them, so they are kept. So are the fixed time
  // of one FlashAttention-3 tile on its SM (the target's SM count spreads the tiles, roofline.h)
  // and the KV-cache write's per token (one thread block each): set-up, not FLOPs or bytes.
  void keep_latencies() {
    lines_.push_back(
        "kept (latency, not throughput): kernel_launch_s, attention_launch_s, the elementwise launch_s, "
        "prefill_attention_per_seq_s, decode_attention_per_seq_s, prefill_attention_per_tile_s, "
        "attention_kv_write_per_token_s");
  }

  // All-reduce fits: latency (NCCL's and the kernel's set-up) is kept; the bandwidth is a
  // fraction of the link, so it moves with the link. A fit overwrote the profile's interconnect
  // values, so the link it was measured on is the fitted GPU's datasheet link.
  void carry_allreduce_fits() {
    if (fitted_datasheet_ == nullptr) {
      p_.allreduce.clear();
      p_.custom_allreduce.clear();
      p_.interconnect_bytes_per_s = target_.interconnect_bytes_per_s;
      p_.interconnect_latency_s = target_.interconnect_latency_s;
      lines_.push_back(fmt::format(
          "not transferred: the all-reduce fits (the ceilings of '{}' are those of no built-in datasheet GPU, so "
          "the link they were measured on is unknown); interconnect_* are {}'s datasheet values",
          fitted_.name, target_.name));
      return;
    }
    const HardwareProfile& fitted_datasheet = *fitted_datasheet_;
    const double link_ratio = target_.interconnect_bytes_per_s / fitted_datasheet.interconnect_bytes_per_s;
    for (auto* fits : {&p_.allreduce, &p_.custom_allreduce}) {
      for (AllReduceFit& f : *fits) f.bytes_per_s *= link_ratio;
    }
    // interconnect_* equal to the fitted GPU's datasheet values were not fitted (no all-reduce
    // rows): the target's own datasheet values then, not a rescaled copy of another GPU's round
    // latency.
    const bool link_fitted = fitted_.interconnect_bytes_per_s != fitted_datasheet.interconnect_bytes_per_s ||
                             fitted_.interconnect_latency_s != fitted_datasheet.interconnect_latency_s;
    if (link_fitted) {
      p_.interconnect_bytes_per_s *= link_ratio;
    } else {
      p_.interconnect_bytes_per_s = target_.interconnect_bytes_per_s;
      p_.interconnect_latency_s = target_.interconnect_latency_s;
    }
    lines_.push_back(fmt::format(
        "{} (datasheet link {:g} -> {:g} GB/s per direction, {} -> {}): allreduce and "
        "custom_allreduce bytes_per_s{}; their latencies kept",
        ratio_text(link_ratio), fitted_datasheet.interconnect_bytes_per_s / 1e9, target_.interconnect_bytes_per_s / 1e9,
        fitted_datasheet.name, target_.name, link_fitted ? ", interconnect_bytes_per_s" : ""));
    if (!link_fitted) {
      lines_.push_back(fmt::format("interconnect_* were {}'s datasheet values (not fitted): {}'s datasheet values",
                                   fitted_datasheet.name, target_.name));
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
  void carry_gemm_tables() {
    const bool same_sms = fitted_.peak_flops == target_.peak_flops &&
                          fitted_.peak_fp8_flops == target_.peak_fp8_flops && fitted_.sm_count == target_.sm_count;
    // The roofline of the profile as transferred so far, under the target's name.
    HardwareProfile from = fitted_, to = p_;
    to.name = target_.name;
    for (auto& table_source : p_.gemm_tables) {
      auto* table = &table_source;
      if (!*table) continue;
      const GemmTable& measured = (*table)->table();
      if (!same_sms) {
        lines_.push_back(fmt::format(
            "not transferred: the {} GEMM table ({} has {:g} SMs at {:g} TFLOP/s, {} {:g} at {:g}: other kernel "
            "choices, which held out made a rescaled table worse than the roofline; hwmodel/README.md); {} GEMMs use "
            "the fitted roofline on {}'s ceilings",
            measured.dtype(), fitted_.name, fitted_.sm_count, fitted_.peak_flops / 1e12, target_.name, target_.sm_count,
            target_.peak_flops / 1e12, measured.dtype(), target_.name));
        *table = nullptr;
        continue;
      }
      RescaledGemmTable r = rescale_gemm_table(measured, from, to);
      lines_.push_back(
          fmt::format("GEMM table {}: each of its {} times x the fitted roofline's time on {} / on {} "
                      "({:.4g} to {:.4g})",
                      measured.dtype(), r.points, target_.name, fitted_.name, r.min_ratio, r.max_ratio));
      // The file name is a placeholder until save_hardware_profile names the table after the profile.
      *table = std::make_shared<GemmTableSource>(fmt::format("{}.gemm-{}.txt", p_.name, measured.dtype()),
                                                 std::move(r.table));
    }
  }

  // The fitted profile's provenance, then one paragraph of every line above.
  void write_provenance() {
    std::string& text = p_.provenance;
    if (!text.empty() && text.back() != '\n') text += '\n';
    text += fmt::format(
        "transferred by hwmodel/fit/transfer_profile.cpp from '{}' ({}) to the datasheet ceilings of "
        "'{}':",
        fitted_.name, fitted_.source, target_.name);
    for (const std::string& line : lines_) text += "\n  " + line;
    text += '\n';
  }

  const HardwareProfile& fitted_;
  const HardwareProfile& target_;
  const HardwareProfile* fitted_datasheet_;  // null: the fitted ceilings are no built-in GPU's
  const double flop_ratio_;                  // fitted peak FLOP/s over the target's
  const double sm_ratio_;                    // target HBM per SM over the fitted; 0: an SM count is missing
  HardwareProfile p_;
  std::vector<std::string> lines_;  // the provenance paragraph, one line per step
};

}  // namespace

HardwareProfile transfer_profile(const HardwareProfile& fitted, const HardwareProfile& target) {
  check_transferable(fitted, target);
  return ProfileTransfer(fitted, target).run();
}

}  // namespace batchsim
