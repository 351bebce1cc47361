// batchsim — the profile fit (see fit_profile.h).
#include "hwmodel/fit/fit_profile.h"
#include "hwmodel/fit/fit_coordinates.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "hwmodel/base/error.h"
#include "hwmodel/fit/predict.h"
#include "hwmodel/fit/solvers.h"
#include "hwmodel/fit/transfer_profile.h"
#include "hwmodel/roofline.h"

namespace batchsim {

namespace {

bool usable(double measured_s) { return std::isfinite(measured_s) && measured_s > 0; }

constexpr TokenOp kGemmOps[] = {TokenOp::attn_pre_proj, TokenOp::attn_post_proj, TokenOp::mlp_up_proj,
                                TokenOp::mlp_down_proj};

void fit_gemms(const Measurements& m, const FitModelRows& rows, HardwareProfile& p, std::vector<std::string>& notes) {
  std::vector<GemmFitPoint> points;
  for (const TokenOpRow& row : m.token_ops) {
    if (!rows.token_row(row)) continue;
    const ModelSpec model = row.shape.as_model_spec();
    const auto shapes = layer_gemm_shapes(model, row.tp);
    for (TokenOp op : kGemmOps) {
      const double t = row.median_s[static_cast<int>(op)];
      if (!usable(t)) continue;
      points.push_back({shapes[static_cast<int>(token_op_gemm(op))], row.num_tokens, model.weight_format, t});
    }
  }
  if (points.empty()) {
    notes.push_back("no GEMM rows of the fit model: GEMM parameters are the base profile's");
    return;
  }
  fit_gemm_roofline(points, p);
}

void fit_elementwise(const Measurements& m, const FitModelRows& rows, HardwareProfile& p,
                     std::vector<std::string>& notes) {
  std::map<int, std::vector<std::pair<double, double>>> by_kind;  // kind -> (bytes, t)
  for (const TokenOpRow& row : m.token_ops) {
    if (!rows.token_row(row)) continue;
    const ModelSpec model = row.shape.as_model_spec();
    for (int op = 0; op < kNumTokenOps; ++op) {
      ElementwiseOp kind{};
      if (!token_op_elementwise(static_cast<TokenOp>(op), kind) || !usable(row.median_s[op])) {
        continue;
      }
      by_kind[static_cast<int>(kind)].emplace_back(elementwise_bytes(model, row.tp, kind, row.num_tokens),
                                                   row.median_s[op]);
    }
  }
  for (int k = 0; k < kNumElementwiseOps; ++k) {
    const char* name = elementwise_op_name(static_cast<ElementwiseOp>(k));
    if (by_kind[k].empty()) {
      notes.push_back(fmt::format("no {} rows of the fit model: base values kept", name));
      continue;
    }
    const LinearFit f = fit_intercept_slope(by_kind[k]);
    StreamingKernel& kernel = p.elementwise[k];
    kernel.launch_s = f.intercept;
    // slope = 1 / (hbm_bytes_per_s * efficiency). A kernel that streams faster than the
    // datasheet (slope too small: L2 hits on small tensors) is capped at efficiency 1.
    const double efficiency = f.slope > 0 ? 1 / (f.slope * p.hbm_bytes_per_s) : 1.0;
    if (efficiency > 1) notes.push_back(fmt::format("{} efficiency {:.3f} capped at 1", name, efficiency));
    kernel.efficiency = std::min(1.0, efficiency);
  }
}

// The attention parameters of `from`, copied into `to`.
void copy_attention(const HardwareProfile& from, HardwareProfile& to) {
  to.attention_launch_s = from.attention_launch_s;
  to.prefill_attention_per_head_token_s = from.prefill_attention_per_head_token_s;
  to.prefill_attention_efficiency = from.prefill_attention_efficiency;
  to.prefill_attention_causal_efficiency = from.prefill_attention_causal_efficiency;
  to.decode_attention_per_seq_kv_head_s = from.decode_attention_per_seq_kv_head_s;
  to.decode_attention_efficiency = from.decode_attention_efficiency;
  to.decode_attention_roofline_exponent = from.decode_attention_roofline_exponent;
  to.decode_attention_per_seq_s = from.decode_attention_per_seq_s;
  // Per-SM K/V rates carry over as fractions of each GPU's per-SM share of its HBM bandwidth
  // (like the efficiencies, relative to the GPU's own datasheet); the SM count is the GPU's own.
  to.decode_attention_sm_bytes_per_s = per_sm_rate_on(from.decode_attention_sm_bytes_per_s, from, to);
  to.prefill_attention_sm_bytes_per_s = per_sm_rate_on(from.prefill_attention_sm_bytes_per_s, from, to);
  to.prefill_attention_roofline_exponent = from.prefill_attention_roofline_exponent;
  to.prefill_attention_kernel = from.prefill_attention_kernel;
  to.prefill_attention_per_tile_s = from.prefill_attention_per_tile_s;
  to.attention_kv_write_efficiency = from.attention_kv_write_efficiency;
  to.attention_kv_write_per_token_s = from.attention_kv_write_per_token_s;
}

void fit_attention(const Measurements& m, const FitModelRows& rows, HardwareProfile& p, const HardwareProfile* fallback,
                   std::vector<std::string>& notes) {
  std::vector<const AttentionRow*> points;
  bool any_prefill = false, any_decode = false;
  for (const AttentionRow& row : m.attention) {
    if (!rows.attention_row(row) || !usable(row.median_s)) continue;
    points.push_back(&row);
    (row.is_prefill ? any_prefill : any_decode) = true;
  }
  if (points.empty() && fallback != nullptr) {
    copy_attention(*fallback, p);
    notes.push_back(
        fmt::format("no attention rows of the fit model: attention parameters "
                    "taken from profile '{}'",
                    fallback->name));
    return;
  }
  if (!any_prefill) notes.push_back("no prefill attention rows of the fit model: base values kept");
  if (!any_decode) notes.push_back("no decode attention rows of the fit model: base values kept");
  if (points.empty()) return;
  fit_attention_parameters(
      points.size(), any_prefill, any_decode,
      [&](const HardwareProfile& q, size_t i) { return predict_attention(q, *points[i]); },
      [&](size_t i) { return points[i]->median_s; }, p);
}

void fit_all_reduce(const Measurements& m, HardwareProfile& p, std::vector<std::string>& notes) {
  std::map<int, std::vector<std::pair<double, double>>> by_degree;  // tp -> (wire bytes, t)
  std::vector<std::pair<double, double>> all;
  for (const AllReduceRow& row : m.all_reduce) {
    if (row.num_workers < 2 || !usable(row.median_s)) continue;
    const double wire = ring_allreduce_wire_bytes(row.size_bytes, row.num_workers);
    by_degree[row.num_workers].emplace_back(wire, row.median_s);
    all.emplace_back(wire, row.median_s);
  }
  if (all.empty()) {
    notes.push_back("no all-reduce rows: interconnect values are the base profile's");
    return;
  }
  p.allreduce.clear();
  for (const auto& [tp, points] : by_degree) {
    const LinearFit f = fit_intercept_slope(points);
    if (f.slope > 0) p.allreduce.push_back({tp, f.intercept, 1 / f.slope});
  }
  const AllReduceFit pooled = fit_pooled_all_reduce(m.all_reduce);
  if (pooled.bytes_per_s > 0) {
    p.interconnect_latency_s = pooled.latency_s;
    p.interconnect_bytes_per_s = pooled.bytes_per_s;
  }
}

void fit_cpu(const Measurements& m, const FitModelRows& rows, FitResult& result) {
  std::vector<std::string>& notes = result.notes;
  // Rows (1/t, batch/t, (tp-1)/t) . (fixed, per sequence, per extra worker) ~ 1.
  std::vector<std::array<double, 3>> points;  // batch size, extra workers, t
  bool multi_worker = false;
  for (const CpuOverheadRow& row : m.cpu_overheads) {
    if (rows.cpu_row(row) && usable(row.total_s())) {
      points.push_back({static_cast<double>(row.batch_size), static_cast<double>(row.tp - 1), row.total_s()});
      multi_worker = multi_worker || row.tp > 1;
    }
  }
  if (points.empty()) {
    notes.push_back("no CPU overhead rows: no engine CPU cost measured");
    return;
  }
  if (!rows.cpu_rows_by_name()) {
    notes.push_back("no CPU overhead rows of the fit model: fitted on every model's rows");
  }
  Eigen::MatrixXd a(static_cast<Eigen::Index>(points.size()), 3);
  for (Eigen::Index i = 0; i < a.rows(); ++i) {
    const auto [batch, extra_workers, t] = points[static_cast<size_t>(i)];
    a.row(i) << 1 / t, batch / t, extra_workers / t;
  }
  const Eigen::VectorXd c = fit::nnls(a, Eigen::VectorXd::Ones(a.rows()));
  result.cpu = CpuOverhead{c(0), c(1), c(2)};
  if (!multi_worker) {
    notes.push_back("CPU overhead rows of the fit model are all TP 1: no per-worker cost fitted");
  }
  // The CPU rows time the engine Vidur profiled, not the GPU: reported, not part of the profile.
  notes.push_back(
      fmt::format("engine CPU overhead measured with these tables (an engine profile's cpu block, "
                  "not this profile's): {:.4g} ms per iteration + {:.4g} us per sequence + {:.4g} ms "
                  "per extra TP worker",
                  c(0) * 1e3, c(1) * 1e6, c(2) * 1e3));
}

}  // namespace

// ---- the shared cores (fit_profile.h) ----

std::string fit_provenance(std::string_view fitter, const std::vector<std::string>& files, const std::string& context,
                           const std::vector<std::string>& notes) {
  std::string text = fmt::format("fitted by {} from:", fitter);
  for (const std::string& f : files) text += "\n  " + f;
  if (!context.empty()) text += "\n" + context;
  if (!notes.empty()) text += "\nnotes:";
  for (const std::string& n : notes) text += "\n  " + n;
  return text + "\n";
}

LinearFit fit_intercept_slope(const std::vector<std::pair<double, double>>& x_and_t) {
  Eigen::MatrixXd a(static_cast<Eigen::Index>(x_and_t.size()), 2);
  Eigen::VectorXd b = Eigen::VectorXd::Ones(a.rows());
  for (Eigen::Index i = 0; i < a.rows(); ++i) {
    const auto [x, t] = x_and_t[static_cast<size_t>(i)];
    a(i, 0) = 1 / t;
    a(i, 1) = x / t;
  }
  const Eigen::VectorXd c = fit::nnls(a, b);
  return {c(0), c(1)};
}

void fit_attention_parameters(size_t count, bool any_prefill, bool any_decode,
                              const std::function<double(const HardwareProfile&, size_t)>& predict,
                              const std::function<double(size_t)>& measured, HardwareProfile& p, bool per_sequence,
                              bool kv_write) {
  // The wave terms need the GPU's SM count (a datasheet value); without it they stay off.
  const bool waves = p.sm_count > 0;
  // FlashAttention-3's prefill (roofline.h) has a fixed time per tile where FlashAttention-2's
  // has one per query token and head (slot 1), and one efficiency for all its K/V-block
  // iterations: no causal one (slot 6) and no per-SM K/V rate (slot 8); those keep the base's.
  const bool fa3 = p.prefill_attention_kernel == PrefillAttentionKernel::flash_attention_3;
  auto apply = [&](const Eigen::VectorXd& x) {
    HardwareProfile q = p;
    q.attention_launch_s = from_log(x(0));
    if (any_prefill) {
      (fa3 ? q.prefill_attention_per_tile_s : q.prefill_attention_per_head_token_s) = from_log(x(1));
      q.prefill_attention_efficiency = from_logit(x(2));
    }
    if (any_decode) {
      q.decode_attention_per_seq_kv_head_s = from_log(x(3));
      q.decode_attention_efficiency = from_logit(x(4));
      q.decode_attention_roofline_exponent = from_log(x(5));
    }
    if (any_prefill && !fa3) q.prefill_attention_causal_efficiency = from_logit(x(6));
    if (any_decode && waves) q.decode_attention_sm_bytes_per_s = from_log(x(7));
    if (any_prefill && (waves || fa3)) {
      if (!fa3) q.prefill_attention_sm_bytes_per_s = from_log(x(8));
      q.prefill_attention_roofline_exponent = from_log(x(9));
    }
    if (any_prefill && per_sequence) q.prefill_attention_per_seq_s = from_log(x(10));
    if (kv_write) {
      q.attention_kv_write_efficiency = from_logit(x(11));
      q.attention_kv_write_per_token_s = from_log(x(12));
    }
    return q;
  };
  Eigen::VectorXd x0(kv_write ? 13 : per_sequence ? 11 : 10);
  // The per-SM rates start at an even share of the datasheet bandwidth, the prefill corner at
  // p = 2.
  x0.head(10) << to_log(5e-6), to_log(1e-9), to_logit(p.prefill_attention_efficiency), to_log(5e-8),
      to_logit(p.decode_attention_efficiency), to_log(2), to_logit(p.prefill_attention_causal_efficiency),
      to_log(p.sm_count > 0 ? p.hbm_bytes_per_s / p.sm_count : 1e10),
      to_log(p.sm_count > 0 ? p.hbm_bytes_per_s / p.sm_count : 1e10), to_log(2);
  if (per_sequence || kv_write) x0(10) = to_log(1e-7);
  // The KV-cache write starts at the GEMMs' streaming efficiency and 1 ns per token, a
  // FlashAttention-3 tile at 1 us.
  if (kv_write) {
    x0(11) = to_logit(p.hbm_efficiency);
    x0(12) = to_log(1e-9);
  }
  if (fa3) x0(1) = to_log(1e-6);
  const fit::ResidualFunction residuals = [&](const Eigen::VectorXd& x, Eigen::VectorXd& r) {
    const HardwareProfile q = apply(x);
    for (size_t i = 0; i < count; ++i) {
      r(static_cast<Eigen::Index>(i)) = std::log(predict(q, i) / measured(i));
    }
  };
  // The two roofline corners (decode, prefill) make the cost non-convex: start from a soft and
  // a hard corner for each and keep the lowest cost on the fit rows (a fixed order: the fit
  // stays a pure function of the data).
  fit::LmResult best;
  bool have_best = false;
  for (const double prefill_p : {1.5, 4.0}) {
    for (const double decode_p : {1.5, 4.0}) {
      x0(5) = to_log(decode_p);
      x0(9) = to_log(prefill_p);
      fit::LmResult r = fit::levenberg_marquardt(residuals, x0, static_cast<int>(count));
      if (!have_best || r.cost < best.cost) best = std::move(r);
      have_best = true;
    }
  }
  p = apply(best.x);
  p.decode_attention_per_seq_s = 0;  // the per-(sequence, KV head) term replaces it
}

void fit_gemm_roofline(const std::vector<GemmFitPoint>& points, HardwareProfile& p) {
  auto apply = [&p](const Eigen::VectorXd& x) {
    HardwareProfile q = p;
    q.kernel_launch_s = from_log(x(0));
    q.gemm_eta_max = from_logit(x(1));
    q.hbm_efficiency = from_logit(x(2));
    q.gemm_m_half = from_log(x(3));
    q.gemm_roofline_exponent = from_log(x(4));
    return q;
  };
  Eigen::VectorXd x0(5);
  // Start from a smooth corner (p = 2) and a few microseconds of launch; the datasheet
  // efficiencies of the base are the starting roofs.
  x0 << to_log(5e-6), to_logit(p.gemm_eta_max), to_logit(p.hbm_efficiency), to_log(32), to_log(2);
  const auto result = fit::levenberg_marquardt(
      [&](const Eigen::VectorXd& x, Eigen::VectorXd& r) {
        const HardwareProfile q = apply(x);
        for (size_t i = 0; i < points.size(); ++i) {
          const GemmFitPoint& g = points[i];
          r(static_cast<Eigen::Index>(i)) = std::log(gemm_roofline_time_s(q, g.shape, g.m, g.format) / g.seconds);
        }
      },
      x0, static_cast<int>(points.size()));
  p = apply(result.x);
  // Where the tables show no rise of efficiency with M (every shape's time its roofline), the
  // half-saturation point runs off towards zero along a flat direction and stops wherever the
  // solver's last step fell (H100 tables: 1.36996e-41 on the machine that wrote the profile,
  // 1.37024e-41 on an AMD EPYC; the last bits of libm differ between CPUs). Below a thousandth of a row, eta(M) at the
  // smallest GEMM (M = 1) is within 0.1% of its maximum, so the fit reports what it measured: 0.
  if (p.gemm_m_half < 1e-3) p.gemm_m_half = 0;
}

AllReduceFit fit_pooled_all_reduce(const std::vector<AllReduceRow>& rows) {
  std::vector<std::pair<double, double>> points;
  for (const AllReduceRow& row : rows) {
    if (row.num_workers < 2 || !usable(row.median_s)) continue;
    points.emplace_back(ring_allreduce_wire_bytes(row.size_bytes, row.num_workers), row.median_s);
  }
  if (points.empty()) return {};
  const LinearFit f = fit_intercept_slope(points);
  return {0, f.intercept, f.slope > 0 ? 1 / f.slope : 0};
}

FitModelRows::FitModelRows(const Measurements& m, std::string_view fit_on) {
  if (fit_on.empty()) return;  // no fit model: every row is held out
  std::error_code ec;
  try {
    spec_ = resolve_model(fit_on);
    has_spec_ = true;
  } catch (const UserError&) {
    has_spec_ = false;  // a Vidur model id that is not built in: match by name only
  }
  name_ = canonical_model_name(has_spec_ && std::filesystem::is_regular_file(fit_on, ec) ? spec_.name
                                                                                         : std::string(fit_on));
  for (const TokenOpRow& row : m.token_ops) {
    if (canonical_model_name(row.model) == name_) token_by_name_ = true;
  }
  for (const AttentionRow& row : m.attention) {
    if (canonical_model_name(row.source) == name_) attention_by_name_ = true;
  }
  for (const CpuOverheadRow& row : m.cpu_overheads) {
    if (canonical_model_name(row.model) == name_) cpu_by_name_ = true;
  }
  bool any = false;
  std::set<std::string> present;
  for (const TokenOpRow& row : m.token_ops) {
    any = any || token_row(row);
    present.insert(canonical_model_name(row.model));
  }
  if (!any) {
    throw UserError(
        fmt::format("--fit-on {}: no measured GEMM/operator rows of this model in {} "
                    "(models measured: {})",
                    fit_on, m.root, fmt::join(present, ", ")));
  }
}

bool FitModelRows::token_row(const TokenOpRow& row) const {
  if (name_.empty()) return false;
  if (token_by_name_) return canonical_model_name(row.model) == name_;
  return has_spec_ && row.shape.same_layer_shape(spec_);
}

bool FitModelRows::attention_row(const AttentionRow& row) const {
  if (name_.empty()) return false;
  if (attention_by_name_) return canonical_model_name(row.source) == name_;
  return has_spec_ && row.hidden_size == spec_.hidden_size && row.num_heads == spec_.num_heads &&
         row.num_kv_heads == spec_.num_kv_heads;
}

bool FitModelRows::cpu_row(const CpuOverheadRow& row) const {
  if (name_.empty()) return false;
  return !cpu_by_name_ || canonical_model_name(row.model) == name_;
}

FitResult fit_profile(const Measurements& measurements, std::string_view fit_on_model, const HardwareProfile& base,
                      const HardwareProfile* fallback) {
  const FitModelRows rows(measurements, fit_on_model);
  FitResult result;
  result.fit_on = rows.name();
  HardwareProfile& p = result.profile;
  p = base;
  p.name = base.name + "-fitted";
  if (p.has_gemm_tables()) {
    // Tables are measurements of the base's own GPU; a fit on other measurements replaces them
    // by its roofline (which must be fitted without them).
    p.gemm_tables = {};
    result.notes.push_back(fmt::format("GEMM tables of base '{}' dropped: fitted here on these rows", base.name));
  }
  fit_gemms(measurements, rows, p, result.notes);
  fit_elementwise(measurements, rows, p, result.notes);
  fit_attention(measurements, rows, p, fallback, result.notes);
  fit_all_reduce(measurements, p, result.notes);
  fit_cpu(measurements, rows, result);
  p.source = fmt::format("fitted on {} rows of {}{}, ceilings of {}", rows.name(), measurements.root,
                         measurements.device.empty() ? "" : " (" + measurements.device + ")", base.name);
  p.kernels = measurements.kernels;
  p.provenance = fit_provenance("hwmodel/fit/fit_profile.cpp", measurements.files_read,
                                !base.provenance.empty() || base.source != "datasheet"
                                    ? fmt::format("base profile '{}': {}", base.name, base.source)
                                    : "",
                                result.notes);
  return result;
}

std::string datasheet_gpu_for_device(std::string_view device) {
  // LLMServingSim's profiler names a GPU's folder in capitals without separators (profiler/perf/
  // RTX4090, RTXPRO6000, H100, A100, L40S): the same GPUs by their letters and digits.
  std::string compact;
  for (char c : device) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      compact += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  for (const auto& [folder, gpu] : {std::pair{"rtx4090", "rtx-4090"},
                                    {"rtxpro6000", "rtx-pro-6000"},
                                    {"l40s", "l40s"},
                                    {"h100", "h100-sxm"},
                                    {"h200", "h200"},
                                    {"b200", "b200"},
                                    {"a100", "a100-80gb"},
                                    {"a40", "a40"}}) {
    if (compact == folder) return gpu;
  }
  if (device == "a100") return "a100-80gb";  // Vidur profiled 80 GB A100s (data/README.md)
  if (device == "h100") return "h100-sxm";
  // The H800 is the H100 SXM's export variant: the same SMs, tensor cores and HBM3, a lower
  // NVLink (InferSim's tables, hwmodel/measured/README.md).
  if (device == "h800") return "h100-sxm";
  auto datasheet = [](std::string_view name) {
    for (const HardwareProfile& g : builtin_gpus()) {
      if (g.name == name && g.source == "datasheet") return true;
    }
    return false;
  };
  if (datasheet(device)) return std::string(device);  // "a40", "h200", ...
  // A fitted profile's name is not a device's, though it starts like one.
  if (device.ends_with("-fitted") || device.ends_with("-measured")) return "";
  // batchsim-calibrate names a GPU's folder after nvidia-smi's name, lowercased with dashes
  // ("NVIDIA H100 80GB HBM3" -> "h100-80gb-hbm3", "NVIDIA A100-SXM4-80GB" -> "a100-sxm4-80gb",
  // "NVIDIA H200" -> "h200"): the datasheet GPU whose name its leading model and memory give.
  struct Known {
    std::string_view prefix, gpu;
  };
  for (const Known& k :
       {Known{"h100-80gb", "h100-sxm"}, Known{"h100-sxm", "h100-sxm"}, Known{"h200", "h200"}, Known{"b200", "b200"},
        Known{"a100-sxm4-80gb", "a100-80gb"}, Known{"a100-80gb", "a100-80gb"}, Known{"a100-sxm4-40gb", "a100-40gb"},
        Known{"a100-40gb", "a100-40gb"}, Known{"l40s", "l40s"}}) {
    if (device.starts_with(k.prefix)) return std::string(k.gpu);
  }
  // NVIDIA's system folders name the form factor ("b200_sxm", "h200_sxm"; read as "b200-sxm"):
  // the datasheet GPU of that name without it, when there is one.
  for (std::string_view suffix : {"-sxm", "_sxm"}) {
    if (device.ends_with(suffix) && datasheet(device.substr(0, device.size() - suffix.size()))) {
      return std::string(device.substr(0, device.size() - suffix.size()));
    }
  }
  return "";
}

}  // namespace batchsim
