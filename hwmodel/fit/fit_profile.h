// batchsim — fitting a hardware profile's efficiency parameters to measured operator times.
//
// The fit is a pure function of the measurements: same CSVs, same model, same base profile ->
// the same profile, bit for bit. Datasheet ceilings (peak FLOP/s, HBM bytes/s, memory, PCIe)
// come from the base profile and are never fitted: the fitted parameters are efficiencies and
// fixed costs relative to them, so they carry over to models and shapes not measured.
//
// What is fitted from which rows (each by minimising squared log(predicted / measured), i.e.
// relative error, so that microsecond kernels count as much as millisecond ones):
//   GEMMs (QKV, O, up, down of the fit model, every TP degree) -> kernel_launch_s, gemm_eta_max,
//     gemm_m_half, hbm_efficiency, gemm_roofline_exponent (Levenberg–Marquardt);
//   norms, rotary, activation, residual add, embedding -> each kind's launch_s and efficiency
//     (NNLS on launch + bytes / bandwidth);
//   prefill and decode attention of the fit model -> attention_launch_s,
//     prefill_attention_per_head_token_s, prefill_attention_efficiency,
//     prefill_attention_causal_efficiency,
//     decode_attention_per_seq_kv_head_s, decode_attention_efficiency,
//     decode_attention_roofline_exponent, and when the base has an sm_count
//     decode_attention_sm_bytes_per_s, prefill_attention_sm_bytes_per_s,
//     prefill_attention_roofline_exponent (Levenberg–Marquardt, jointly: one launch);
//   all-reduce (every single-node degree; model-independent) -> one AllReduceFit per degree plus
//     interconnect_latency_s / interconnect_bytes_per_s over all degrees (NNLS);
//   CPU overheads of the fit model -> FitResult::cpu, an engine's cost and not the profile's
//     (engine_profile.h): per iteration, per sequence, per extra TP worker (NNLS).
// A part with no rows keeps the base profile's values, or, for attention, takes a `fallback`
// profile's attention parameters when one is given (e.g. the fitted A100's for an A40 that
// was not profiled for attention: same FlashAttention kernels, efficiencies relative to each
// GPU's own peak), and says so in FitResult::notes.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hwmodel/engine_profile.h"
#include "hwmodel/fit/measurements.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"
#include "hwmodel/roofline.h"

namespace batchsim {

// Which measured rows belong to the model a fit is made on. Rows match by model name first
// (canonical_model_name of the row's folder or model_name == the fit model's name); when no
// row of a kind matches by name and the fit model is known (a built-in or a config.json), rows
// of the same layer shape match.
class FitModelRows {
 public:
  // Throws UserError when no token-level row belongs to `fit_on` (naming the models present).
  // An empty `fit_on` matches no row (validating a given profile: everything is held out).
  FitModelRows(const Measurements& m, std::string_view fit_on);

  const std::string& name() const { return name_; }
  bool token_row(const TokenOpRow& row) const;
  bool attention_row(const AttentionRow& row) const;
  bool cpu_row(const CpuOverheadRow& row) const;
  bool cpu_rows_by_name() const { return cpu_by_name_; }

 private:
  std::string name_;
  bool has_spec_ = false;
  ModelSpec spec_;
  bool token_by_name_ = false;
  bool attention_by_name_ = false;
  bool cpu_by_name_ = false;
};

struct FitResult {
  HardwareProfile profile;
  std::string fit_on;              // canonical name of the model fitted on
  std::vector<std::string> notes;  // parts left at the base values, clamps applied
  // The CPU cost of the engine the measurements ran under, when they have CPU-overhead rows.
  std::optional<CpuOverhead> cpu;
};

// Fits `base`'s efficiency parameters on the rows of `fit_on_model` (a built-in name such as
// "llama-2-7b", a Vidur model id, or a config.json path). The profile is named
// "<base.name>-fitted"; its `source` says in one line what it was fitted on, its `provenance`
// lists the files read and the fit's notes.
FitResult fit_profile(const Measurements& measurements, std::string_view fit_on_model, const HardwareProfile& base,
                      const HardwareProfile* fallback = nullptr);

// latency + wire bytes / bandwidth fitted (NNLS, relative error) over all-reduce rows of any
// degrees pooled, wire bytes = size x 2 (n-1)/n: what fit_profile sets as interconnect_*, and
// what `batchsim validate` fits on all degrees but one to predict the one left out. tp = 0;
// bytes_per_s = 0 when the rows give no positive slope.
AllReduceFit fit_pooled_all_reduce(const std::vector<AllReduceRow>& rows);

// ---- the fitting cores, shared by the fits on Vidur's tables (fit_profile) and on kernel
// tables (fit_kernel_tables.h) ----

// A fitted profile's provenance: "fitted by FITTER from:" and the files read, then `context`
// (one line, or nothing when empty), then the fit's notes; ends with a newline.
std::string fit_provenance(std::string_view fitter, const std::vector<std::string>& files, const std::string& context,
                           const std::vector<std::string>& notes);

// intercept + slope * x fitted on relative error: rows (1/t, x/t) . (intercept, slope) ~ 1,
// non-negative (NNLS). The all-reduce and elementwise fits' form: launch + bytes / bandwidth.
struct LinearFit {
  double intercept = 0;
  double slope = 0;
};
LinearFit fit_intercept_slope(const std::vector<std::pair<double, double>>& x_and_t);

struct GemmFitPoint {
  GemmShape shape;
  int64_t m = 0;
  WeightFormat format = WeightFormat::bf16;
  double seconds = 0;
};
// kernel_launch_s, gemm_eta_max, hbm_efficiency, gemm_m_half, gemm_roofline_exponent of
// gemm_roofline_time_s, by Levenberg–Marquardt on log(predicted / measured).
void fit_gemm_roofline(const std::vector<GemmFitPoint>& points, HardwareProfile& p);
// The attention parameters (see the list above) on `count` rows: predict(q, i) is row i's time
// under profile q, measured(i) its measured time; prefill and decode parameters are fitted only
// when rows of that kind exist (any_prefill, any_decode). Four starting corners, the best kept.
// `per_sequence` also fits prefill_attention_per_seq_s (rows with several sequences per call),
// `kv_write` attention_kv_write_efficiency and attention_kv_write_per_token_s (rows whose times
// include the KV-cache write). Under a FlashAttention-3 profile (p.prefill_attention_kernel) the
// prefill terms are its own: prefill_attention_per_tile_s and one prefill_attention_efficiency
// in place of the per-head-token time, the causal efficiency and the per-SM K/V rate.
void fit_attention_parameters(size_t count, bool any_prefill, bool any_decode,
                              const std::function<double(const HardwareProfile&, size_t)>& predict,
                              const std::function<double(size_t)>& measured, HardwareProfile& p,
                              bool per_sequence = false, bool kv_write = false);

// The built-in datasheet GPU a device folder was measured on ("a100" -> "a100-80gb", per
// hwmodel/measured/README.md; "h100" and "h800" -> "h100-sxm"; a datasheet GPU's own name, e.g.
// "a40" or "h200", -> itself, also with NVIDIA's form-factor suffix: "b200-sxm" or "b200_sxm" ->
// "b200"); empty when unknown.
std::string datasheet_gpu_for_device(std::string_view device);

}  // namespace batchsim
