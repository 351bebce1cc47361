// batchsim — scoring a profile on kernel tables (see kernel_validation.h).
#include "hwmodel/fit/kernel_validation.h"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "hwmodel/fit/fit_attention_kernels.h"
#include "hwmodel/fit/fit_moe.h"
#include "hwmodel/roofline.h"

namespace batchsim {

namespace {

void add(KernelValidationReport& report, const std::string& name, double predicted, double measured,
         const std::string& what) {
  report.operators[name].stats.add(predicted, measured, what);
  report.scored.push_back({name, what, measured, predicted});
}

// "NVIDIA aiconfigurator kernel tables of h100_sxm (vllm 0.24.0, nccl 2.27.3)": the framework
// and version folders of the files read (<family>/<framework>/<version>/<table>), each once.
std::string tables_measured_on(const KernelTables& tables) {
  std::vector<std::string> versions;
  for (const std::string& file : tables.files_read) {
    const size_t a = file.find('/'), b = file.find('/', a + 1), c = file.find('/', b + 1);
    if (a == std::string::npos || b == std::string::npos || c == std::string::npos) continue;
    std::string v = file.substr(a + 1, b - a - 1) + " " + file.substr(b + 1, c - b - 1);
    if (std::find(versions.begin(), versions.end(), v) == versions.end()) versions.push_back(std::move(v));
  }
  return fmt::format("NVIDIA aiconfigurator kernel tables of {} ({})", tables.system, fmt::join(versions, ", "));
}

// GEMM rows: per dtype and size class, outside the measured table, and the roofline alone on
// the same rows (what the table adds).
void score_gemm_rows(const KernelTables& tables, const KernelSplit& split, KernelRows rows,
                     const HardwareProfile& profile, KernelValidationReport& report) {
  for (const KernelGemmRow& r : tables.gemm) {
    KernelOperatorScore& op = report.operators["gemm"];
    if (const std::string why = gemm_row_skip_reason(r); !why.empty()) {
      ++op.skipped[why];
      continue;
    }
    if (!split.gemm(r, rows)) continue;
    const double predicted = predict_kernel_gemm(profile, r);
    const std::string what = fmt::format("{} m={} n={} k={}", r.dtype, r.m, r.n, r.k);
    add(report, "gemm", predicted, r.seconds, what);
    const std::string dtype = gemm_row_table_dtype(r);
    const bool large = r.n >= 1024 && r.k >= 1024;
    op.parts[fmt::format("{} n,k {}", dtype, large ? ">= 1024" : "< 1024 (either)")].add(predicted, r.seconds, what);
    const GemmTable* table = profile.gemm_table(gemm_row_format(r));
    if (table == nullptr || !table->seconds(static_cast<double>(r.m), r.n, r.k)) {
      op.parts[fmt::format("{} outside the table (roofline)", dtype)].add(predicted, r.seconds, what);
    }
    if (table != nullptr) {
      // The roofline alone on the same rows: what the table adds.
      const double roofline = gemm_roofline_time_s(profile, GemmShape{r.k, r.n}, r.m, gemm_row_format(r));
      op.parts[fmt::format("{} n,k {}, roofline alone", dtype, large ? ">= 1024" : "< 1024 (either)")].add(
          roofline, r.seconds, what);
    }
  }
}

// Attention rows: context (prefill) and generation (decode) apart, then per regime (kernel
// and KV dtype, fit_attention_kernels.h), and per head_dim and window within it; one-token
// prompts are their kernel's decodes.
void score_attention_rows(const KernelTables& tables, const KernelSplit& split, KernelRows rows,
                          const HardwareProfile& profile, KernelValidationReport& report) {
  for (const KernelAttentionRow& r : tables.attention) {
    KernelOperatorScore& op = report.operators[r.prefill ? "context_attention" : "generation_attention"];
    if (const std::string why = attention_row_skip_reason(r); !why.empty()) {
      ++op.skipped[why];
      continue;
    }
    if (!split.attention(r, rows)) continue;
    const std::string window = r.window > 0 ? fmt::format(", window {}", r.window) : "";
    const std::string what =
        r.prefill ? fmt::format("batch {} x isl {}, heads {}/{} x {}{}, kv {}, {}", r.batch, r.isl, r.num_heads,
                                r.num_kv_heads, r.head_dim, window, r.kv_cache_dtype, r.kernel)
                  : fmt::format("batch {} x context {}, heads {}/{} x {}{}, kv {}, {}", r.batch, r.context, r.num_heads,
                                r.num_kv_heads, r.head_dim, window, r.kv_cache_dtype, r.kernel);
    const double predicted = predict_kernel_attention(profile, r);
    add(report, r.prefill ? "context_attention" : "generation_attention", predicted, r.seconds, what);
    const std::string regime = fmt::format("{} kv {}{}", r.kernel.empty() ? "unnamed kernel" : r.kernel,
                                           r.kv_cache_dtype == "fp8" ? "fp8" : "bf16",
                                           r.prefill && kernel_row_is_decode(r) ? " (isl 1: decode)" : "");
    op.parts["regime " + regime].add(predicted, r.seconds, what);
    op.parts[fmt::format("{}, head_dim {}, {}", regime, r.head_dim, r.window > 0 ? "window" : "full")].add(
        predicted, r.seconds, what);
  }
}

// All-reduce rows, NCCL's and the custom kernel's apart, per GPU count; a GPU count the
// profile has no fit for is skipped, not scored.
void score_collective_rows(const KernelTables& tables, const KernelSplit& split, KernelRows rows,
                           const HardwareProfile& profile, KernelValidationReport& report) {
  for (const KernelCollectiveRow& r : tables.collectives) {
    KernelOperatorScore& op = report.operators[r.implementation == "nccl" ? "nccl_all_reduce" : "custom_all_reduce"];
    if (const std::string why = collective_row_skip_reason(r); !why.empty()) {
      ++op.skipped[why];
      continue;
    }
    if (!split.collective(r, rows)) continue;
    const double predicted = predict_kernel_collective(profile, r);
    if (!std::isfinite(predicted)) {
      ++op.skipped[fmt::format("no fit for {} GPUs in the profile", r.num_gpus)];
      continue;
    }
    const std::string what = fmt::format("{} GPUs, {} bytes", r.num_gpus, r.bytes);
    add(report, r.implementation == "nccl" ? "nccl_all_reduce" : "custom_all_reduce", predicted, r.seconds, what);
    op.parts[fmt::format("{} GPUs", r.num_gpus)].add(predicted, r.seconds, what);
  }
}

// Fused MoE: each row as the call it timed (fit_moe.h), at the expected loads of its routing
// (moe_kernel.h), by the profile's fit for the kernel that ran (or that kernel's roofline).
void score_moe_rows(const KernelTables& tables, const KernelSplit& split, KernelRows rows,
                    const HardwareProfile& profile, KernelValidationReport& report) {
  MoeLoadCache moe_loads;
  for (const KernelMoeRow& r : tables.moe) {
    KernelOperatorScore& op = report.operators["moe"];
    std::string why;
    const std::optional<FusedMoeCall> call = kernel_moe_row_call(r, &why);
    if (!call) {
      ++op.skipped[why];
      continue;
    }
    if (!split.moe(r, rows)) continue;
    const std::optional<GroupedTopK> grouping = kernel_moe_row_grouping(r);
    const FusedMoeTime t = fused_moe_time(profile, *call, moe_loads.load(*call, grouping));
    const std::string what =
        fmt::format("{} tokens, {} x {} experts top-{}, hidden {}, inter {}, tp {}, ep {}, {}", r.tokens, r.dtype,
                    r.experts, r.topk, r.hidden, r.inter, r.tp, r.ep, r.distribution);
    add(report, "moe", t.total_s, r.seconds, what);
    op.parts[fmt::format("kernel {}{}", moe_kernel_name(t.kernel), t.fitted ? "" : " (roofline: no fit)")].add(
        t.total_s, r.seconds, what);
    op.parts["routing " + r.distribution].add(t.total_s, r.seconds, what);
    op.parts[r.ep > 1 ? "layout EP" : r.tp > 1 ? "layout TP" : "layout one GPU"].add(t.total_s, r.seconds, what);
    if (grouping) op.parts["grouped top-k (DeepSeek-V3)"].add(t.total_s, r.seconds, what);  // collector_grouped_load
  }
}

}  // namespace

KernelValidationReport score_kernel_tables(const KernelTables& tables, const HardwareProfile& profile,
                                           KernelRows rows) {
  const KernelSplit split(tables);
  KernelValidationReport report;
  report.tables = fmt::format("{} ({})", tables.system, tables.framework);
  report.measured_on = tables_measured_on(tables);
  report.profile = profile.name;
  report.profile_source = profile.source;
  report.side = rows;
  report.rows = rows == KernelRows::kHeldOut ? "held-out half"
                : rows == KernelRows::kTrain ? "training half"
                                             : "all rows";
  score_gemm_rows(tables, split, rows, profile, report);
  score_attention_rows(tables, split, rows, profile, report);
  score_collective_rows(tables, split, rows, profile, report);
  score_moe_rows(tables, split, rows, profile, report);
  return report;
}

nlohmann::json kernel_validation_json(const KernelValidationReport& report) {
  auto stats = [](const ErrorStats& s) {
    return nlohmann::json{{"mape", s.mape_percent},
                          {"p90", s.p90_percent()},
                          {"max_ape", s.max_ape_percent},
                          {"count", s.count},
                          {"worst", s.worst_case}};
  };
  nlohmann::json j;
  j["tables"] = report.tables;
  j["measured_on"] = report.measured_on;
  j["profile"] = report.profile;
  j["profile_source"] = report.profile_source;
  j["rows"] = report.rows;
  j["units"] = "mape, p90 and max_ape are percent: |predicted / measured - 1| * 100";
  for (const auto& [name, op] : report.operators) {
    nlohmann::json o = stats(op.stats);
    o["skipped"] = nlohmann::json::object();
    for (const auto& [why, n] : op.skipped) o["skipped"][why] = n;
    o["parts"] = nlohmann::json::object();
    for (const auto& [part, s] : op.parts) o["parts"][part] = stats(s);
    j["operators"][name] = o;
  }
  return j;
}

ProfileValidation profile_validation(const KernelValidationReport& report) {
  ProfileValidation v;
  v.measured_on = report.measured_on;
  v.held_out = report.side == KernelRows::kHeldOut;
  // The split of fit_kernel_tables.h: by shape, so that no scored shape was fitted on.
  v.scored_on =
      v.held_out ? "fitted on half the shapes, scored on the other half" : fmt::format("scored on the {}", report.rows);
  for (const auto& [name, op] : report.operators) {
    if (op.stats.count > 0) v.operators.push_back(operator_error(name, op.stats));
  }
  return v;
}

void print_kernel_validation(const KernelValidationReport& report, std::ostream& out) {
  fmt::print(out, "profile {} on the kernel tables of {}, {}:\n", report.profile, report.tables, report.rows);
  // A transferred or datasheet profile reads as such before its errors do.
  fmt::print(out, "profile source: {}\n", report.profile_source);
  fmt::print(out, "{:<46} {:>7} {:>7} {:>7} {:>8}\n", "operator", "rows", "MAPE %", "p90 %", "skipped");
  for (const auto& [name, op] : report.operators) {
    int64_t skipped = 0;
    for (const auto& [why, n] : op.skipped) skipped += n;
    fmt::print(out, "{:<46} {:>7} {:>7.1f} {:>7.1f} {:>8}\n", name, op.stats.count, op.stats.mape_percent,
               op.stats.p90_percent(), skipped);
    for (const auto& [part, s] : op.parts) {
      fmt::print(out, "  {:<44} {:>7} {:>7.1f} {:>7.1f}\n", part, s.count, s.mape_percent, s.p90_percent());
    }
    for (const auto& [why, n] : op.skipped) fmt::print(out, "  skipped {} rows: {}\n", n, why);
  }
}

}  // namespace batchsim
