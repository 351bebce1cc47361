// batchsim — predicted vs measured operator times (see validation.h).
#include "hwmodel/fit/validation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "hwmodel/fit/fit_profile.h"
#include "hwmodel/fit/predict.h"

namespace batchsim {

double ErrorStats::p90_percent() const {
  if (ape_percent.empty()) return 0;
  std::vector<double> sorted = ape_percent;
  const size_t rank = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(sorted.size()))) - 1;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(rank), sorted.end());
  return sorted[rank];
}

void ErrorStats::add(double predicted_s, double measured_s, const std::string& what) {
  const double ape = std::abs(predicted_s / measured_s - 1) * 100;
  ape_percent.push_back(ape);
  mape_percent = (mape_percent * static_cast<double>(count) + ape) / static_cast<double>(count + 1);
  ++count;
  if (ape > max_ape_percent || count == 1) {
    max_ape_percent = ape;
    worst_case = fmt::format("{}: measured {:.4f} ms, predicted {:.4f} ms", what, measured_s * 1e3, predicted_s * 1e3);
  }
}

namespace {

bool usable(double measured_s) { return std::isfinite(measured_s) && measured_s > 0; }

// Layers of a measured model when it is a built-in one (the iteration sums layers x ops).
int layers_of(const std::string& measured_model) {
  const std::string name = canonical_model_name(measured_model);
  for (const ModelSpec& m : builtin_models()) {
    if (m.name == name) return m.num_layers;
  }
  return 1;
}

// Token-level operators, each row per operator and as one iteration: the operators the model
// runs, summed over its layers.
void score_token_ops(const Measurements& measurements, const FitModelRows& rows, const HardwareProfile& profile,
                     ValidationReport& report) {
  std::map<std::string, int> unknown_layers;
  for (const TokenOpRow& row : measurements.token_ops) {
    const bool fitted = rows.token_row(row);
    auto& per_op = fitted ? report.fitted : report.held_out;
    auto& breakdown = report.by_model[fmt::format("{} tp={}", row.model, row.tp)];
    const std::string what = fmt::format("{} tp={} tokens={}", row.model, row.tp, row.num_tokens);
    const int layers = layers_of(row.model);
    if (layers == 1) ++unknown_layers[row.model];
    double measured_iteration_s = 0, predicted_iteration_s = 0;
    // An iteration sums the operators the model runs, i.e. those measured (Phi-2's parallel
    // attention/MLP block has no post-attention norm); it needs at least the four GEMMs.
    int gemms_measured = 0;
    for (int op = 0; op < kNumTokenOps; ++op) {
      const double measured_s = row.median_s[op];
      if (!usable(measured_s)) {
        continue;
      }
      const double predicted_s = predict_token_op(profile, row, static_cast<TokenOp>(op));
      ElementwiseOp kind{};
      if (!token_op_elementwise(static_cast<TokenOp>(op), kind)) ++gemms_measured;
      const std::string name = token_op_name(static_cast<TokenOp>(op));
      per_op[name].add(predicted_s, measured_s, what);
      breakdown[name].add(predicted_s, measured_s, what);
      // The embedding runs once per iteration, every other operator once per layer.
      const double times = static_cast<TokenOp>(op) == TokenOp::emb ? 1.0 : layers;
      measured_iteration_s += times * measured_s;
      predicted_iteration_s += times * predicted_s;
    }
    if (gemms_measured == 4) {
      (fitted ? report.iteration_fitted : report.iteration_held_out)
          .add(predicted_iteration_s, measured_iteration_s, what);
      breakdown["iteration"].add(predicted_iteration_s, measured_iteration_s, what);
    }
  }
  for (const auto& [model, count] : unknown_layers) {
    report.notes.push_back(
        fmt::format("{} is not a built-in model: its iteration counts one layer ({} rows)", model, count));
  }
}

// Attention rows, prefill and decode apart.
void score_attention(const Measurements& measurements, const FitModelRows& rows, const HardwareProfile& profile,
                     ValidationReport& report) {
  for (const AttentionRow& row : measurements.attention) {
    if (!usable(row.median_s)) continue;
    const std::string name = row.is_prefill ? "attn_prefill" : "attn_decode";
    const std::string what =
        row.is_prefill
            ? fmt::format("{} tp={} chunk={} context={}", row.source, row.tp, row.prefill_chunk_size, row.kv_cache_size)
            : fmt::format("{} tp={} batch={} context={}", row.source, row.tp, row.batch_size, row.kv_cache_size);
    const double predicted_s = predict_attention(profile, row);
    (rows.attention_row(row) ? report.fitted : report.held_out)[name].add(predicted_s, row.median_s, what);
    report.by_model[fmt::format("{} tp={}", row.source, row.tp)][name].add(predicted_s, row.median_s, what);
  }
}

// Leave-one-degree-out fits of the pooled all-reduce model, by the degree left out; none when
// no fit was made (a given profile is checked as it is).
std::map<int, AllReduceFit> all_reduce_fits_without_degree(const Measurements& measurements, const FitModelRows& rows) {
  std::map<int, AllReduceFit> without_degree;
  if (rows.name().empty()) return without_degree;
  for (const AllReduceRow& row : measurements.all_reduce) {
    if (without_degree.count(row.num_workers) || row.num_workers < 2) continue;
    std::vector<AllReduceRow> others;
    for (const AllReduceRow& r : measurements.all_reduce) {
      if (r.num_workers != row.num_workers) others.push_back(r);
    }
    without_degree[row.num_workers] = fit_pooled_all_reduce(others);
  }
  return without_degree;
}

// All-reduce rows: in-sample by the profile, and held out by a fit on the other degrees.
void score_all_reduce(const Measurements& measurements, const FitModelRows& rows, const HardwareProfile& profile,
                      ValidationReport& report) {
  const std::map<int, AllReduceFit> without_degree = all_reduce_fits_without_degree(measurements, rows);
  for (const AllReduceRow& row : measurements.all_reduce) {
    if (!usable(row.median_s) || row.num_workers < 2) continue;
    const std::string what = fmt::format("{} GPUs, {} bytes", row.num_workers, row.size_bytes);
    const double predicted_s = predict_all_reduce(profile, row);
    // Fitted on every all-reduce row when a fit was made: in-sample, so reported as fitted.
    (rows.name().empty() ? report.held_out : report.fitted)["all_reduce"].add(predicted_s, row.median_s, what);
    report.by_model[fmt::format("all_reduce tp={}", row.num_workers)]["all_reduce"].add(predicted_s, row.median_s,
                                                                                        what);
    // Held out: this degree predicted by a fit on the other degrees (what a degree that was not
    // measured gets, through interconnect_*).
    const auto it = without_degree.find(row.num_workers);
    if (it != without_degree.end() && it->second.bytes_per_s > 0) {
      HardwareProfile other = profile;
      other.allreduce.clear();
      other.interconnect_latency_s = it->second.latency_s;
      other.interconnect_bytes_per_s = it->second.bytes_per_s;
      report.held_out["all_reduce"].add(predict_all_reduce(other, row), row.median_s, what);
    }
  }
}

// CPU-overhead rows, scored on the engine's CPU cost `cpu`, not on the GPU profile.
void score_cpu_overheads(const Measurements& measurements, const FitModelRows& rows, const CpuOverhead& cpu,
                         ValidationReport& report) {
  for (const CpuOverheadRow& row : measurements.cpu_overheads) {
    if (!usable(row.total_s())) continue;
    const std::string what = fmt::format("{} tp={} batch={}", row.model, row.tp, row.batch_size);
    const double predicted_s = predict_cpu_overhead(cpu, row);
    // Without rows of the fit model the CPU fit used every model's rows: all are in-sample.
    const bool fitted = rows.cpu_rows_by_name() ? rows.cpu_row(row) : !rows.name().empty();
    (fitted ? report.fitted : report.held_out)["cpu_overhead"].add(predicted_s, row.total_s(), what);
    report.by_model[fmt::format("{} tp={}", row.model, row.tp)]["cpu_overhead"].add(predicted_s, row.total_s(), what);
  }
}

}  // namespace

ValidationReport validate_cost_model(const Measurements& measurements, std::string_view fit_on_model,
                                     const HardwareProfile& profile, const CpuOverhead& cpu) {
  const FitModelRows rows(measurements, fit_on_model);
  ValidationReport report;
  report.fit_on = rows.name();
  report.measured_on = fmt::format("operator timings (Vidur schema) of {} in {}",
                                   measurements.device.empty() ? "one GPU" : measurements.device, measurements.root);
  report.profile = profile;
  score_token_ops(measurements, rows, profile, report);
  score_attention(measurements, rows, profile, report);
  score_all_reduce(measurements, rows, profile, report);
  score_cpu_overheads(measurements, rows, cpu, report);
  return report;
}

namespace {

nlohmann::json stats_json(const ErrorStats& s) {
  return {{"mape", s.mape_percent},
          {"p90", s.p90_percent()},
          {"max_ape", s.max_ape_percent},
          {"count", s.count},
          {"worst", s.worst_case}};
}

// Operators in the order of a layer's forward pass, then the separately measured ones.
std::vector<std::string> operator_order() {
  std::vector<std::string> names;
  for (int op = 0; op < kNumTokenOps; ++op) names.push_back(token_op_name(static_cast<TokenOp>(op)));
  for (const char* n : {"attn_prefill", "attn_decode", "all_reduce", "cpu_overhead"}) {
    names.push_back(n);
  }
  return names;
}

}  // namespace

OperatorError operator_error(std::string op, const ErrorStats& stats) {
  auto tenth = [](double percent) { return std::round(percent * 10) / 10; };
  return {std::move(op), tenth(stats.mape_percent), tenth(stats.p90_percent()), stats.count};
}

ProfileValidation profile_validation(const ValidationReport& report) {
  ProfileValidation v;
  v.measured_on = report.measured_on;
  v.held_out = report.iteration_held_out.count > 0;
  v.scored_on = v.held_out
                    ? fmt::format(
                          "fitted on {}, scored on the other models (all-reduce: each GPU count "
                          "predicted from the others)",
                          report.fit_on)
                    : fmt::format("scored on the {} rows it was fitted on (no other model measured)", report.fit_on);
  // The whole iteration first: the figure closest to what a run's latencies are made of.
  const ErrorStats& iteration = v.held_out ? report.iteration_held_out : report.iteration_fitted;
  if (iteration.count > 0) v.operators.push_back(operator_error("iteration", iteration));
  const auto& per_op = v.held_out ? report.held_out : report.fitted;
  for (const std::string& name : operator_order()) {
    // The CPU-overhead rows score an engine's CPU cost (engine_profile.h), not this profile.
    if (name == "cpu_overhead") continue;
    const auto it = per_op.find(name);
    if (it != per_op.end() && it->second.count > 0) v.operators.push_back(operator_error(name, it->second));
  }
  return v;
}

nlohmann::json validation_json(const ValidationReport& report) {
  nlohmann::json j;
  j["fit_on"] = report.fit_on;
  j["measured_on"] = report.measured_on;
  j["units"] = "mape and max_ape are percent: |predicted / measured - 1| * 100";
  j["operators"] = nlohmann::json::object();
  j["operators_fitted"] = nlohmann::json::object();
  for (const auto& [name, s] : report.held_out) j["operators"][name] = stats_json(s);
  for (const auto& [name, s] : report.fitted) j["operators_fitted"][name] = stats_json(s);
  j["iteration"] = stats_json(report.iteration_held_out);
  j["iteration_fitted"] = stats_json(report.iteration_fitted);
  for (const auto& [group, ops] : report.by_model) {
    for (const auto& [name, s] : ops) j["by_model"][group][name] = stats_json(s);
  }
  j["notes"] = report.notes;
  // Where the profile's numbers came from (datasheet, fitted on ..., transferred from ...),
  // beside the whole profile below.
  j["profile"] = report.profile.name;
  j["profile_source"] = report.profile.source;
  j["profile_yaml"] = hardware_profile_yaml(report.profile);
  return j;
}

void print_validation_table(const ValidationReport& report, std::ostream& out) {
  out << fmt::format("Cost model vs measurements, profile '{}', {}\n", report.profile.name,
                     report.fit_on.empty() ? "checked as it is" : "fitted on " + report.fit_on);
  // A transferred or datasheet profile reads as such before its errors do.
  out << fmt::format("profile source: {}\n", report.profile.source);
  out << fmt::format("{:<26} {:>22} {:>22}\n", "operator", "held-out MAPE / max", "fitted MAPE / max");
  auto cell = [](const std::map<std::string, ErrorStats>& m, const std::string& name) {
    auto it = m.find(name);
    if (it == m.end() || it->second.count == 0) return std::string("-");
    return fmt::format("{:6.1f}% / {:6.1f}%", it->second.mape_percent, it->second.max_ape_percent);
  };
  for (const std::string& name : operator_order()) {
    if (!report.held_out.count(name) && !report.fitted.count(name)) continue;
    out << fmt::format("{:<26} {:>22} {:>22}\n", name, cell(report.held_out, name), cell(report.fitted, name));
  }
  auto iteration_cell = [](const ErrorStats& s) {
    return s.count == 0 ? std::string("-") : fmt::format("{:6.1f}% / {:6.1f}%", s.mape_percent, s.max_ape_percent);
  };
  out << fmt::format("{:<26} {:>22} {:>22}\n", "iteration (layers x ops)", iteration_cell(report.iteration_held_out),
                     iteration_cell(report.iteration_fitted));
  for (const std::string& note : report.notes) out << "note: " << note << "\n";
}

}  // namespace batchsim
