// batchsim — how far a profile is from a GPU's kernel tables (aiconfigurator layout).
//
// score_kernel_tables compares a profile's predictions with every row of a kernel-table set
// that the cost model can express, per operator: `gemm`, `context_attention` (prefill),
// `generation_attention` (decode), `nccl_all_reduce`, `custom_all_reduce` and `moe`, with the
// mean and 90th-percentile absolute percentage error. Rows it cannot express (block-scaled
// FP8 GEMMs, ...) are counted per reason, never scored
// silently. `batchsim validate --measurements <system folder>` fits a profile on one half of the
// rows (fit_kernel_tables.h, KernelRows::kTrain) and scores it here on the other half; with
// `--gpu PROFILE` it scores that profile on every row.
//
// Attention's headline is over every row (every head_dim, window, KV dtype and kernel), with
// parts per regime (kernel and KV dtype, fit_attention_kernels.h) and per head_dim and window
// within a regime. GEMM errors are also broken down where the tables' grid puts them: shapes with n and k both
// >= 1024 (the weights of real models) and the rest, each per dtype, and the rows that fell
// outside the profile's table (answered by its fitted roofline).
// Fused-MoE rows (fit_moe.h, moe_kernel.h) are scored by kernel library, routing and layout
// (EP, TP, one GPU).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "hwmodel/fit/fit_kernel_tables.h"
#include "hwmodel/fit/validation.h"

namespace batchsim {

struct KernelOperatorScore {
  ErrorStats stats;
  std::map<std::string, int64_t> skipped;   // why -> rows left out
  std::map<std::string, ErrorStats> parts;  // breakdowns (GEMM: by region and dtype)
};

struct KernelScoredRow {
  std::string op, what;
  double measured_s = 0, predicted_s = 0;
};

struct KernelValidationReport {
  std::string tables;  // e.g. "h100_sxm (vllm)"
  // One line: the tables with every framework and version read, e.g. "NVIDIA aiconfigurator
  // kernel tables of h100_sxm (vllm 0.24.0, nccl 2.27.3)".
  std::string measured_on;
  std::string profile;                 // the profile scored
  std::string profile_source;          // its source line (datasheet, fitted on ..., transferred from ...)
  KernelRows side = KernelRows::kAll;  // which rows were scored (fit_kernel_tables.h)
  std::string rows;                    // which rows: "held-out half" or "all rows"
  std::map<std::string, KernelOperatorScore> operators;
  std::vector<KernelScoredRow> scored;  // every scored row, for `validate --rows-out`
};

KernelValidationReport score_kernel_tables(const KernelTables& tables, const HardwareProfile& profile, KernelRows rows);

// The report as a fitted profile's validation block (hardware_profile.h): each operator's
// headline MAPE / p90 / rows, and whether they are the held-out half's.
ProfileValidation profile_validation(const KernelValidationReport& report);

// tables, measured_on, profile, profile_source, rows,
// operators.<name>.{mape,p90,max_ape,count,skipped{why: rows},parts{...}}, errors in percent.
nlohmann::json kernel_validation_json(const KernelValidationReport& report);
// The profile and its source line, then one line per operator (and GEMM part): rows, MAPE,
// p90, and the skipped rows' count.
void print_kernel_validation(const KernelValidationReport& report, std::ostream& out);

}  // namespace batchsim
