// batchsim — scoring a profile on kernel tables (see kernel_validation.h).
#include "hwmodel/fit/kernel_validation.h"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "hwmodel/roofline.h"

namespace batchsim {

namespace {

// The MoE rows the cost model expresses: uniform (balanced) routing, no expert parallelism,
// 16-bit or per-tensor FP8 experts, an intermediate size the TP degree divides.
std::string moe_row_skip_reason(const KernelMoeRow& r) {
  if (r.distribution != "balanced" && r.distribution != "uniform") {
    return fmt::format("{} routing: the model assumes balanced routing", r.distribution);
  }
  if (r.ep != 1) return "expert parallelism: not modelled";
  if (r.dtype != "bfloat16" && r.dtype != "fp8") return fmt::format("{} experts: not modelled", r.dtype);
  if (r.inter % r.tp != 0) return "intermediate size not divisible by the TP degree";
  return "";
}

// One MoE layer's experts as CostModel costs them: the routed experts' up[/gate] and down as
// grouped GEMMs over the experts the tokens touch, and the activation (fused_moe's, gated).
double predict_kernel_moe(const HardwareProfile& gpu, const KernelMoeRow& r) {
  ModelSpec m;
  m.name = "kernel-table-moe";
  m.num_layers = 1;
  m.hidden_size = static_cast<int>(r.hidden);
  m.ffn_size = static_cast<int>(r.inter);
  m.gated_mlp = true;  // fused_moe's w13: gate and up
  m.num_experts = static_cast<int>(r.experts);
  m.experts_per_token = static_cast<int>(r.topk);
  m.num_heads = m.num_kv_heads = 1;
  m.head_dim = 1;
  m.weight_format = m.expert_weight_format = r.dtype == "fp8" ? WeightFormat::fp8 : WeightFormat::bf16;
  const int tp = static_cast<int>(r.tp);
  const auto shapes = layer_gemm_shapes(m, tp);
  const ExpertLoad load = expected_expert_load(m, r.tokens);
  return grouped_gemm_time_s(gpu, shapes[static_cast<int>(LayerGemm::mlp_up)], load.tokens_per_expert, load.experts, m.expert_weight_format) +
         grouped_gemm_time_s(gpu, shapes[static_cast<int>(LayerGemm::mlp_down)], load.tokens_per_expert, load.experts, m.expert_weight_format) +
         elementwise_time_s(gpu, ElementwiseOp::activation, elementwise_bytes(m, tp, ElementwiseOp::activation, r.tokens));
}

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
  report.rows = rows == KernelRows::kHeldOut ? "held-out half" : rows == KernelRows::kTrain ? "training half" : "all rows";
  auto& ops = report.operators;

  for (const KernelGemmRow& r : tables.gemm) {
    KernelOperatorScore& op = ops["gemm"];
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
      op.parts[fmt::format("{} n,k {}, roofline alone", dtype, large ? ">= 1024" : "< 1024 (either)")].add(roofline, r.seconds, what);
    }
  }
  for (const KernelAttentionRow& r : tables.attention) {
    KernelOperatorScore& op = ops[r.prefill ? "context_attention" : "generation_attention"];
    if (const std::string why = attention_row_skip_reason(r); !why.empty()) {
      ++op.skipped[why];
      continue;
    }
    if (!split.attention(r, rows)) continue;
    const std::string what = r.prefill ? fmt::format("batch {} x isl {}, heads {}/{}, kv {}", r.batch, r.isl, r.num_heads, r.num_kv_heads, r.kv_cache_dtype)
                                       : fmt::format("batch {} x context {}, heads {}/{}, kv {}", r.batch, r.context, r.num_heads, r.num_kv_heads, r.kv_cache_dtype);
    const double predicted = predict_kernel_attention(profile, r);
    if (r.kv_cache_dtype == "fp8") {
      // Scored apart: the fit is for 16-bit KV caches (fit_kernel_tables.cpp).
      op.parts["kv fp8 (not in the fit or the headline)"].add(predicted, r.seconds, what);
      continue;
    }
    add(report, r.prefill ? "context_attention" : "generation_attention", predicted, r.seconds, what);
  }
  for (const KernelCollectiveRow& r : tables.collectives) {
    KernelOperatorScore& op = ops[r.implementation == "nccl" ? "nccl_all_reduce" : "custom_all_reduce"];
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
  for (const KernelMoeRow& r : tables.moe) {
    KernelOperatorScore& op = ops["moe"];
    if (const std::string why = moe_row_skip_reason(r); !why.empty()) {
      ++op.skipped[why];
      continue;
    }
    const double predicted = predict_kernel_moe(profile, r);
    const std::string what = fmt::format("{} tokens, {} x {} experts top-{}, hidden {}, inter {}, tp {}", r.tokens, r.dtype,
                                         r.experts, r.topk, r.hidden, r.inter, r.tp);
    add(report, "moe", predicted, r.seconds, what);
    op.parts[r.dtype].add(predicted, r.seconds, what);
  }
  return report;
}

nlohmann::json kernel_validation_json(const KernelValidationReport& report) {
  auto stats = [](const ErrorStats& s) {
    return nlohmann::json{{"mape", s.mape_percent}, {"p90", s.p90_percent()}, {"max_ape", s.max_ape_percent},
                          {"count", s.count}, {"worst", s.worst_case}};
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
  v.scored_on = v.held_out ? "fitted on half the shapes, scored on the other half"
                           : fmt::format("scored on the {}", report.rows);
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
