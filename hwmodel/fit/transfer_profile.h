// batchsim — moving a fitted profile onto another GPU's datasheet ceilings (issue 12, item 3).
//
// A fitted profile is datasheet ceilings plus what the fit measured relative to them:
// dimensionless efficiencies (of peak FLOP/s, of HBM bandwidth), roofline exponents, and a few
// absolute quantities (per-unit times, per-SM byte rates, all-reduce bandwidths, measured GEMM
// times). The efficiencies describe the kernels (cuBLAS, FlashAttention, NCCL), which are the
// same on a sibling GPU; the absolute quantities are tied to the GPU they were measured on.
// transfer_profile keeps the first and rescales the second by the ceiling each depends on, so
// that a profile never carries another GPU's absolute times silently. This is how a user
// simulates an H200 from H100 tables (`batchsim calibrate transfer h100-sxm-fitted --to h200`).
//
// What the result holds (each choice is argued where it is made, transfer_profile.cpp):
//   - the target's ceilings: peak_flops, peak_fp8_flops, hbm_bytes_per_s, memory_bytes,
//     pcie_bytes_per_s, sm_count, and its datasheet interconnect where the fitted profile's
//     all-reduce fits cannot be rescaled;
//   - the fitted efficiencies and exponents as they are;
//   - per-unit attention compute times x (fitted peak FLOP/s / target peak FLOP/s);
//   - per-SM K/V rates x the ratio of HBM bandwidth per SM (per_sm_rate_on);
//   - all-reduce fits (allreduce, custom_allreduce, interconnect_*): latency kept, bandwidth x
//     (target link / the fitted GPU's datasheet link);
//   - launch floors and per-sequence costs kept (latency, not throughput);
//   - measured GEMM tables onto a GPU of the same SMs and FLOP/s (H100 -> H200): rescaled point
//     by point by the ratio of the fitted roofline's times on the two GPUs; onto other SMs:
//     dropped, so the transferred roofline answers (held out A100 <-> A40 on Vidur's
//     measurements, that is better than a rescaled table: hwmodel/README.md);
//   - the rest (CPU costs, names of no ceiling) as it is.
// The result's `source` is "transferred from <fitted> to <target> ceilings"; its `provenance`
// is the fitted profile's, then a paragraph listing every rescaling with its ratio and what
// could not be transferred. Its `validation` is empty and `transferred_from` names the fitted
// profile: the fitted profile's figures were measured on another GPU, so a run on the result
// states what transfers measurably lose instead (measured_transfer_error, hardware_profile.h).
#pragma once

#include "hwmodel/hardware_profile.h"

namespace batchsim {

// Throws UserError when `target_datasheet` is not a datasheet profile (source "datasheet"), when
// `fitted` is one (it has nothing fitted to carry), or when `fitted` already has the target's
// ceilings (a transfer onto the same GPU). The result is named "<target>-from-<fitted>".
HardwareProfile transfer_profile(const HardwareProfile& fitted, const HardwareProfile& target_datasheet);

// A GEMM table of one GPU moved to another: each measured time x the ratio of the roofline's
// times for its shape under `to` and under `from` (gemm_roofline_time_s; tables are not
// consulted), with the range of ratios applied and the number of times moved.
struct RescaledGemmTable {
  GemmTable table;
  double min_ratio = 0, max_ratio = 0;
  size_t points = 0;
};
RescaledGemmTable rescale_gemm_table(const GemmTable& table, const HardwareProfile& from, const HardwareProfile& to);

// A per-SM K/V rate measured on `from`, carried to `to` as the same fraction of each GPU's
// per-SM share of its HBM bandwidth (hbm_bytes_per_s / sm_count); 0 (no wave term) when either
// has no SM count. Shared with the fit's attention fallback (fit_profile.h), which carries the
// same rates from a profiled GPU to one without attention rows.
double per_sm_rate_on(double rate, const HardwareProfile& from, const HardwareProfile& to);

}  // namespace batchsim
