// batchsim — the MLA fit and its scores (see fit_mla.h).
#include "hwmodel/fit/fit_mla.h"
#include "hwmodel/fit/fit_coordinates.h"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "hwmodel/fit/fit_profile.h"
#include "hwmodel/fit/solvers.h"
#include "hwmodel/mla.h"

namespace batchsim {

namespace {

ModelSpec mla_model(int64_t heads, int64_t kv_lora, int64_t rope, int64_t nope, int kv_bytes) {
  ModelSpec m;
  m.name = "infersim-mla";
  m.num_layers = 1;
  m.attention = AttentionKind::mla;
  m.num_heads = m.num_kv_heads = static_cast<int>(heads);
  m.kv_lora_rank = static_cast<int>(kv_lora);
  m.qk_rope_head_dim = static_cast<int>(rope);
  m.qk_nope_head_dim = static_cast<int>(nope);
  m.v_head_dim = static_cast<int>(nope);
  m.head_dim = static_cast<int>(nope + rope);
  m.hidden_size = m.num_heads * m.head_dim;
  m.kv_dtype_bytes = kv_bytes;
  return m;
}

// The base's flat values where a phase has no rows to fit on (mla.h's fallback).
MlaAttentionFit flat_values(const HardwareProfile& base) {
  MlaAttentionFit m = base.mla;
  if (m.decode_compute_efficiency == 0) {
    m.decode_launch_s = base.attention_launch_s;
    m.decode_compute_efficiency = base.prefill_attention_efficiency;
    m.decode_memory_efficiency = base.decode_attention_efficiency;
  }
  if (m.prefill_efficiency == 0) {
    m.prefill_launch_s = base.attention_launch_s;
    m.prefill_efficiency = base.prefill_attention_efficiency;
  }
  return m;
}

// Fits (launch, efficiencies...) of one phase: `predict(q)` over the rows, log residuals.
// x = (log launch, logit efficiency, ...); starts from each of `starts` (efficiency vectors).
Eigen::VectorXd fit_phase(const std::function<void(const Eigen::VectorXd&, Eigen::VectorXd&)>& residuals, int rows,
                          const std::vector<std::vector<double>>& starts) {
  fit::LmResult best;
  bool have = false;
  for (const std::vector<double>& start : starts) {
    Eigen::VectorXd x0(static_cast<Eigen::Index>(start.size() + 1));
    x0(0) = to_log(15e-6);
    for (size_t i = 0; i < start.size(); ++i) x0(static_cast<Eigen::Index>(i + 1)) = to_logit(start[i]);
    fit::LmResult r = fit::levenberg_marquardt(residuals, x0, rows);
    if (!have || r.cost < best.cost) best = std::move(r);
    have = true;
  }
  return best.x;
}

MlaAttentionFit fit_rows(const std::vector<const MlaDecodeRow*>& decode,
                         const std::vector<const MlaPrefillRow*>& prefill, const HardwareProfile& base) {
  MlaAttentionFit m = flat_values(base);
  HardwareProfile q = base;
  if (!decode.empty()) {
    auto apply = [&](const Eigen::VectorXd& x) {
      q.mla = m;
      q.mla.decode_launch_s = from_log(x(0));
      q.mla.decode_compute_efficiency = from_logit(x(1));
      q.mla.decode_memory_efficiency = from_logit(x(2));
    };
    const auto residuals = [&](const Eigen::VectorXd& x, Eigen::VectorXd& r) {
      apply(x);
      for (size_t i = 0; i < decode.size(); ++i) {
        r(static_cast<Eigen::Index>(i)) = std::log(predict_mla_decode(q, *decode[i]) / decode[i]->seconds);
      }
    };
    // The roofline's corner: start compute-bound, balanced and memory-bound.
    apply(fit_phase(residuals, static_cast<int>(decode.size()), {{0.4, 0.8}, {0.6, 0.8}, {0.9, 0.8}}));
    m.decode_launch_s = q.mla.decode_launch_s;
    m.decode_compute_efficiency = q.mla.decode_compute_efficiency;
    m.decode_memory_efficiency = q.mla.decode_memory_efficiency;
  }
  if (!prefill.empty()) {
    auto apply = [&](const Eigen::VectorXd& x) {
      q.mla = m;
      q.mla.prefill_launch_s = from_log(x(0));
      q.mla.prefill_efficiency = from_logit(x(1));
    };
    const auto residuals = [&](const Eigen::VectorXd& x, Eigen::VectorXd& r) {
      apply(x);
      for (size_t i = 0; i < prefill.size(); ++i) {
        r(static_cast<Eigen::Index>(i)) = std::log(predict_mla_prefill(q, *prefill[i]) / prefill[i]->seconds);
      }
    };
    apply(fit_phase(residuals, static_cast<int>(prefill.size()), {{0.4}, {0.6}, {0.9}}));
    m.prefill_launch_s = q.mla.prefill_launch_s;
    m.prefill_efficiency = q.mla.prefill_efficiency;
  }
  return m;
}

std::string decode_what(const MlaDecodeRow& r) {
  return fmt::format("{} heads, latent {}+{}, kv {}, batch {} x kv_len {}", r.heads, r.kv_lora_rank, r.qk_rope_head_dim,
                     r.kv_dtype, r.batch, r.kv_len);
}
std::string prefill_what(const MlaPrefillRow& r) {
  return fmt::format("{} heads, qk {}+{}, seq_len {}", r.heads, r.qk_nope_head_dim, r.qk_rope_head_dim, r.seq_len);
}

std::string measured_on(const MlaTables& t) {
  return fmt::format("InferSim MLA tables of {} ({}; decode: FlashInfer's MLA kernel, prefill: FA3)", t.device,
                     fmt::join(t.files_read, ", "));
}

}  // namespace

ModelSpec mla_decode_row_model(const MlaDecodeRow& r) {
  return mla_model(r.heads, r.kv_lora_rank, r.qk_rope_head_dim, 128, r.kv_dtype == "fp8" ? 1 : 2);
}

ModelSpec mla_prefill_row_model(const MlaPrefillRow& r) {
  // Prefill decompresses K and V: the latent's width does not enter (DeepSeek-V3's 512 kept).
  return mla_model(r.heads, 512, r.qk_rope_head_dim, r.qk_nope_head_dim, 2);
}

double predict_mla_decode(const HardwareProfile& gpu, const MlaDecodeRow& r) {
  return mla_decode_attention_time_s(
      gpu, mla_decode_attention_work(mla_decode_row_model(r), 1, r.batch, r.batch * r.kv_len));
}

double predict_mla_prefill(const HardwareProfile& gpu, const MlaPrefillRow& r) {
  return mla_prefill_attention_time_s(gpu, mla_prefill_attention_work(mla_prefill_row_model(r), 1, r.seq_len, 0));
}

MlaSplit::MlaSplit(const MlaTables& t) : decode_held_out(t.decode.size()), prefill_held_out(t.prefill.size()) {
  std::vector<size_t> order(t.decode.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(t.decode[a].batch, t.decode[a].kv_len) < std::pair(t.decode[b].batch, t.decode[b].kv_len);
  });
  for (size_t k = 0; k < order.size(); ++k) decode_held_out[order[k]] = k % 5 == 4;
  int64_t longest = 0;
  for (const MlaPrefillRow& r : t.prefill) longest = std::max(longest, r.seq_len);
  // Held out only when something is left to fit on.
  for (size_t i = 0; i < t.prefill.size(); ++i) {
    prefill_held_out[i] = t.prefill.size() > 2 && t.prefill[i].seq_len == longest;
  }
}

MlaAttentionFit fit_mla(const MlaTables& t, const HardwareProfile& base, KernelRows rows) {
  const MlaSplit split(t);
  std::vector<const MlaDecodeRow*> decode;
  std::vector<const MlaPrefillRow*> prefill;
  const bool all = rows == KernelRows::kAll;
  for (size_t i = 0; i < t.decode.size(); ++i) {
    if (all || split.decode_held_out[i] == (rows == KernelRows::kHeldOut)) decode.push_back(&t.decode[i]);
  }
  for (size_t i = 0; i < t.prefill.size(); ++i) {
    if (all || split.prefill_held_out[i] == (rows == KernelRows::kHeldOut)) prefill.push_back(&t.prefill[i]);
  }
  return fit_rows(decode, prefill, base);
}

MlaValidationReport validate_mla(const MlaTables& t, const HardwareProfile& base) {
  const MlaSplit split(t);
  MlaValidationReport r;
  r.measured_on = measured_on(t);
  HardwareProfile p = base;
  p.mla = fit_mla(t, base, KernelRows::kTrain);
  r.profile = base.name + " + MLA fitted on the training rows";
  r.profile_source = base.source;
  r.rows = "held-out rows";
  r.scored = p.mla;
  for (size_t i = 0; i < t.decode.size(); ++i) {
    (split.decode_held_out[i] ? r.decode : r.decode_fitted)
        .add(predict_mla_decode(p, t.decode[i]), t.decode[i].seconds, decode_what(t.decode[i]));
  }
  for (size_t i = 0; i < t.prefill.size(); ++i) {
    (split.prefill_held_out[i] ? r.prefill : r.prefill_fitted)
        .add(predict_mla_prefill(p, t.prefill[i]), t.prefill[i].seconds, prefill_what(t.prefill[i]));
  }
  // Cross-validation: leave one kv_len (then one batch size) out, refit on the rest, score it.
  for (const bool by_kv_len : {true, false}) {
    std::map<int64_t, std::vector<const MlaDecodeRow*>> folds;
    for (const MlaDecodeRow& row : t.decode) folds[by_kv_len ? row.kv_len : row.batch].push_back(&row);
    if (folds.size() < 2) continue;
    ErrorStats& stats = by_kv_len ? r.decode_leave_one_kv_len_out : r.decode_leave_one_batch_out;
    for (const auto& [value, held] : folds) {
      std::vector<const MlaDecodeRow*> train;
      for (const MlaDecodeRow& row : t.decode) {
        if ((by_kv_len ? row.kv_len : row.batch) != value) train.push_back(&row);
      }
      HardwareProfile q = base;
      q.mla = fit_rows(train, {}, base);
      for (const MlaDecodeRow* row : held) stats.add(predict_mla_decode(q, *row), row->seconds, decode_what(*row));
    }
  }
  return r;
}

MlaValidationReport score_mla(const MlaTables& t, const HardwareProfile& profile) {
  MlaValidationReport r;
  r.measured_on = measured_on(t);
  r.profile = profile.name;
  r.profile_source = profile.source;
  r.rows = "all rows";
  r.scored = profile.mla;
  for (const MlaDecodeRow& row : t.decode)
    r.decode.add(predict_mla_decode(profile, row), row.seconds, decode_what(row));
  for (const MlaPrefillRow& row : t.prefill)
    r.prefill.add(predict_mla_prefill(profile, row), row.seconds, prefill_what(row));
  return r;
}

HardwareProfile profile_with_mla(const HardwareProfile& base, const MlaTables& t, const MlaValidationReport& held_out) {
  HardwareProfile p = base;
  p.mla = fit_mla(t, base, KernelRows::kAll);
  if (base.source == "datasheet")
    p.source = fmt::format("MLA fitted on InferSim's tables of {}, ceilings of {}", t.device, base.name);
  std::string text =
      fmt::format("mla: fitted by hwmodel/fit/fit_mla.cpp on InferSim's {} tables ({}):\n", t.device, t.root);
  for (const std::string& f : t.files_read) text += "  " + f + "\n";
  text += fmt::format(
      "  measured on an H800, the H100 SXM's export variant (the same SMs, tensor cores and HBM3), on these ceilings "
      "of {};\n"
      "  decode times FlashInfer's MLA kernel (BatchMLAPagedAttentionWrapper), not FlashMLA; prefill FA3 "
      "(sgl_kernel flash_attn_varlen_func), qk 192 / v 128;\n"
      "  held out: decode {:.1f}% MAPE on every fifth row ({} rows), {:.1f}% leaving one kv_len out, {:.1f}% leaving "
      "one batch size out; prefill {:.1f}% on the longest prompt ({} row)\n",
      base.name, held_out.decode.mape_percent, held_out.decode.count, held_out.decode_leave_one_kv_len_out.mape_percent,
      held_out.decode_leave_one_batch_out.mape_percent, held_out.prefill.mape_percent, held_out.prefill.count);
  // A profile refitted here replaces its earlier paragraph (the last of its provenance).
  if (const size_t earlier = p.provenance.find("mla: fitted by hwmodel/fit/fit_mla.cpp");
      earlier != std::string::npos) {
    p.provenance.erase(earlier);
  }
  if (!p.provenance.empty() && p.provenance.back() != '\n') p.provenance += '\n';
  p.provenance += text;
  return p;
}

void print_mla_validation(const MlaValidationReport& r, std::ostream& out) {
  fmt::print(out, "profile {} on the {}, {}:\n", r.profile, r.measured_on, r.rows);
  fmt::print(out, "profile source: {}\n", r.profile_source);
  fmt::print(out,
             "mla constants: decode launch {:.3g} us, compute {:.3f}, memory {:.3f}; prefill launch {:.3g} us, "
             "efficiency {:.3f}\n",
             r.scored.decode_launch_s * 1e6, r.scored.decode_compute_efficiency, r.scored.decode_memory_efficiency,
             r.scored.prefill_launch_s * 1e6, r.scored.prefill_efficiency);
  fmt::print(out, "{:<46} {:>7} {:>7} {:>7} {:>7}\n", "operator", "rows", "MAPE %", "p90 %", "max %");
  auto line = [&](const std::string& name, const ErrorStats& s) {
    if (s.count > 0) {
      fmt::print(out, "{:<46} {:>7} {:>7.1f} {:>7.1f} {:>7.1f}\n", name, s.count, s.mape_percent, s.p90_percent(),
                 s.max_ape_percent);
    }
  };
  line("mla_decode", r.decode);
  line("  fitted rows", r.decode_fitted);
  line("  leave one kv_len out (refit per fold)", r.decode_leave_one_kv_len_out);
  line("  leave one batch size out (refit per fold)", r.decode_leave_one_batch_out);
  line("mla_prefill", r.prefill);
  line("  fitted rows", r.prefill_fitted);
}

nlohmann::json mla_validation_json(const MlaValidationReport& r) {
  auto stats = [](const ErrorStats& s) {
    return nlohmann::json{{"mape", s.mape_percent},
                          {"p90", s.p90_percent()},
                          {"max_ape", s.max_ape_percent},
                          {"count", s.count},
                          {"worst", s.worst_case}};
  };
  nlohmann::json j;
  j["measured_on"] = r.measured_on;
  j["profile"] = r.profile;
  j["profile_source"] = r.profile_source;
  j["rows"] = r.rows;
  j["units"] = "mape, p90 and max_ape are percent: |predicted / measured - 1| * 100";
  j["mla"] = {{"decode_launch_s", r.scored.decode_launch_s},
              {"decode_compute_efficiency", r.scored.decode_compute_efficiency},
              {"decode_memory_efficiency", r.scored.decode_memory_efficiency},
              {"prefill_launch_s", r.scored.prefill_launch_s},
              {"prefill_efficiency", r.scored.prefill_efficiency}};
  j["operators"]["mla_decode"] = stats(r.decode);
  j["operators"]["mla_prefill"] = stats(r.prefill);
  if (r.decode_fitted.count > 0) j["fitted"]["mla_decode"] = stats(r.decode_fitted);
  if (r.prefill_fitted.count > 0) j["fitted"]["mla_prefill"] = stats(r.prefill_fitted);
  if (r.decode_leave_one_kv_len_out.count > 0)
    j["cross_validation"]["decode_leave_one_kv_len_out"] = stats(r.decode_leave_one_kv_len_out);
  if (r.decode_leave_one_batch_out.count > 0)
    j["cross_validation"]["decode_leave_one_batch_out"] = stats(r.decode_leave_one_batch_out);
  return j;
}

}  // namespace batchsim
