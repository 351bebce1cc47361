// batchsim — fitting and scoring a profile's MLA attention constants (attention_kernel.h,
// MlaAttentionFit; the formulas are mla.h's) on InferSim's tables (mla_tables.h).
//
// Fitted by Levenberg–Marquardt on log(predicted / measured), efficiencies in logit space, a few
// starts (the lowest cost kept): decode's launch, compute and memory efficiencies on the decode
// rows, prefill's launch and efficiency on the prefill rows.
//
// Held-out scoring (`batchsim validate --measurements hwmodel/measured/infersim/h800/mla`):
//   decode: the rows sorted by (batch, kv_len), every fifth held out (index % 5 == 4), the fit on
//     the others; and two cross-validations that refit per fold, leaving out one kv_len, then
//     one batch size, at a time (every row is scored once in each);
//   prefill: the longest seq_len held out (an extrapolation: InferSim measured five lengths of
//     one head count, so this is thin evidence: one row).
// The tables have one head count (128, DeepSeek-V3 at DP attention or tp 1), so the 64-head
// padding of mla.h (heads per GPU under tp) is the kernels' design, not something these rows test.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "hwmodel/fit/fit_kernel_tables.h"
#include "hwmodel/fit/mla_tables.h"
#include "hwmodel/fit/validation.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/model_spec.h"

namespace batchsim {

// The one-layer MLA model of a row: DeepSeek-style heads, latent and RoPE widths from the file
// name, the KV cache's dtype; v_head_dim = qk_nope_head_dim (DeepSeek-V3: 128 both).
ModelSpec mla_decode_row_model(const MlaDecodeRow& r);
ModelSpec mla_prefill_row_model(const MlaPrefillRow& r);
// A row's time under `gpu` (mla.h), at tp 1.
double predict_mla_decode(const HardwareProfile& gpu, const MlaDecodeRow& r);
double predict_mla_prefill(const HardwareProfile& gpu, const MlaPrefillRow& r);

// Which side of the split above each row is on (true: held out), in the tables' row order.
struct MlaSplit {
  explicit MlaSplit(const MlaTables& t);
  std::vector<bool> decode_held_out, prefill_held_out;
};

// The constants fitted on the `rows` side (kAll or kTrain). A phase without rows there keeps
// the base's flat values (attention_launch_s, prefill/decode_attention_efficiency).
MlaAttentionFit fit_mla(const MlaTables& t, const HardwareProfile& base, KernelRows rows);

struct MlaValidationReport {
  std::string measured_on;  // one line: InferSim's tables, GPU and what they time
  std::string profile, profile_source;
  std::string rows;                          // "held-out rows" or "all rows"
  MlaAttentionFit scored;                    // the constants scored
  ErrorStats decode, prefill;                // the scored side
  ErrorStats decode_fitted, prefill_fitted;  // the fit side (held-out validation only)
  // Decode, refit per fold (held-out validation only; count 0 otherwise).
  ErrorStats decode_leave_one_kv_len_out, decode_leave_one_batch_out;
};
// Held out: fitted on the training side of `base` (a datasheet GPU, or a profile whose other
// parts are kept), scored on the held-out side, plus the cross-validations.
MlaValidationReport validate_mla(const MlaTables& t, const HardwareProfile& base);
// `profile`'s own constants on every row.
MlaValidationReport score_mla(const MlaTables& t, const HardwareProfile& profile);

// `base` with its `mla` block fitted on every row; its provenance gains a paragraph naming the
// files, what they time, and the held-out figures of `held_out`.
HardwareProfile profile_with_mla(const HardwareProfile& base, const MlaTables& t, const MlaValidationReport& held_out);

void print_mla_validation(const MlaValidationReport& report, std::ostream& out);
nlohmann::json mla_validation_json(const MlaValidationReport& report);

}  // namespace batchsim
