// batchsim — fitting attention-kernel regimes on kernel tables (see fit_attention_kernels.h).
#include "hwmodel/fit/fit_attention_kernels.h"
#include "hwmodel/fit/fit_coordinates.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "hwmodel/fit/solvers.h"

namespace batchsim {

namespace {

// One fitted constant: the member, its starting value, whether it is an efficiency (logit,
// bounded by 1) or a positive quantity (log).
struct Parameter {
  double AttentionKernelFit::*member;
  double start;
  bool efficiency;
};

// The starting values of the prototype fit (/tmp/moe-work/attn-fit/fit_attention.py, PRE and
// DEC): round figures of the right order, not tuned to a result.
std::vector<Parameter> prefill_parameters() {
  using F = AttentionKernelFit;
  return {{&F::launch_s, 5e-6, false},
          {&F::per_seq_s, 1e-8, false},
          {&F::per_tile_s, 1.5e-6, false},
          {&F::exponent, 2.0, false},
          {&F::kv_write_efficiency, 0.8, true},
          {&F::kv_write_per_token_s, 1e-9, false},
          {&F::kv_reread_bytes_per_s, 5e12, false}};
}

std::vector<Parameter> decode_parameters(bool fa3_tiles, bool windowed, bool fa4) {
  using F = AttentionKernelFit;
  std::vector<Parameter> p = {
      {&F::launch_s, 1e-5, false}, {&F::per_unit_s, 2e-8, false},       {&F::per_unit_head_dim_s, 5e-11, false},
      {&F::exponent, 2.0, false},  {&F::sm_bytes_per_s, 2.5e10, false}, {&F::combine_s, 3e-6, false}};
  // The padded-tile MMA needs FA3's tile table; the window terms an engaged window among the
  // rows; the per-sequence scheduling cost is FA4's (head_dim 512 on Hopper: ~2 us per sequence
  // below 993 of them, even at 2 cached tokens).
  if (fa3_tiles) p.push_back({&F::mma_efficiency, 0.5, true});
  if (windowed) {
    p.push_back({&F::window_s, 2e-6, false});
    p.push_back({&F::window_per_unit_s, 1e-8, false});
  }
  if (fa4) p.push_back({&F::per_seq_dynamic_s, 1e-6, false});
  return p;
}

// What one row's time needs, computed once: its work (prefill) or decode structure.
struct FitRow {
  OperatorWork work;
  AttentionDecodeStructure decode;
  double seconds = 0;
};

struct Regime {
  std::string kernel;
  std::string kv_dtype;
  bool prefill = false;
  std::vector<const KernelAttentionRow*> rows;
};

AttentionKernelFit fit_regime(const Regime& g, const HardwareProfile& base, std::vector<std::string>& notes) {
  AttentionKernelFit k;
  k.kernel = g.kernel;
  k.prefill = g.prefill;
  k.kv_dtype_bytes = g.kv_dtype == "fp8" ? 1 : 2;
  k.tiles = attention_tiles_for_kernel(g.kernel);
  std::vector<FitRow> rows;
  rows.reserve(g.rows.size());
  bool windowed = false;
  for (const KernelAttentionRow* r : g.rows) {
    FitRow f;
    f.work = kernel_row_attention_work(*r, k.tiles);
    f.seconds = r->seconds;
    if (!g.prefill) {
      f.decode = attention_decode_structure(f.work, r->batch, k.tiles, base.sm_count);
      windowed = windowed || f.decode.window;
    }
    rows.push_back(std::move(f));
    if (std::find(k.head_dims.begin(), k.head_dims.end(), static_cast<int>(r->head_dim)) == k.head_dims.end()) {
      k.head_dims.push_back(static_cast<int>(r->head_dim));
    }
  }
  std::sort(k.head_dims.begin(), k.head_dims.end());
  const std::vector<Parameter> params = g.prefill ? prefill_parameters()
                                                  : decode_parameters(k.tiles == AttentionTiles::fa3, windowed,
                                                                      g.kernel.find("fa4") != std::string::npos);
  const auto n_params = static_cast<Eigen::Index>(params.size());
  const auto n_eff = static_cast<Eigen::Index>(k.head_dims.size());
  auto apply = [&](const Eigen::VectorXd& x) {
    AttentionKernelFit q = k;
    for (Eigen::Index i = 0; i < n_params; ++i) {
      const Parameter& p = params[static_cast<size_t>(i)];
      q.*(p.member) = p.efficiency ? from_logit(x(i)) : from_log(x(i));
    }
    q.efficiency.resize(static_cast<size_t>(n_eff));
    for (Eigen::Index j = 0; j < n_eff; ++j) q.efficiency[static_cast<size_t>(j)] = from_logit(x(n_params + j));
    return q;
  };
  const fit::ResidualFunction residuals = [&](const Eigen::VectorXd& x, Eigen::VectorXd& r) {
    const AttentionKernelFit q = apply(x);
    for (size_t i = 0; i < rows.size(); ++i) {
      const FitRow& f = rows[i];
      const double t = g.prefill ? attention_kernel_prefill_time_s(base, q, f.work)
                                 : attention_kernel_decode_time_s(base, q, f.decode);
      r(static_cast<Eigen::Index>(i)) = std::log(t / f.seconds);
    }
  };
  Eigen::VectorXd x0(n_params + n_eff);
  for (Eigen::Index i = 0; i < n_params; ++i) {
    const Parameter& p = params[static_cast<size_t>(i)];
    x0(i) = p.efficiency ? to_logit(p.start) : to_log(p.start);
  }
  for (Eigen::Index j = 0; j < n_eff; ++j) x0(n_params + j) = to_logit(g.prefill ? 0.6 : 0.85);
  const auto exponent = std::find_if(params.begin(), params.end(),
                                     [](const Parameter& p) { return p.member == &AttentionKernelFit::exponent; });
  const Eigen::Index exponent_at = exponent - params.begin();
  // The roofline corner makes the cost non-convex: a soft and a hard start, the lower cost kept
  // (a fixed order: the fit stays a pure function of the rows).
  fit::LmResult best;
  bool have = false;
  fit::LmOptions options;
  options.max_iterations = 300;
  for (const double corner : {1.5, 4.0}) {
    x0(exponent_at) = to_log(corner);
    fit::LmResult r = fit::levenberg_marquardt(residuals, x0, static_cast<int>(rows.size()), options);
    if (!have || r.cost < best.cost) best = std::move(r);
    have = true;
  }
  k = apply(best.x);
  // A time the fit drove towards zero (a term these rows do not need) stops wherever the
  // solver's last step fell, in bits that differ between CPUs: below a femtosecond it is 0.
  for (const Parameter& p : params) {
    if (!p.efficiency && p.member != &AttentionKernelFit::exponent && p.member != &AttentionKernelFit::sm_bytes_per_s &&
        p.member != &AttentionKernelFit::kv_reread_bytes_per_s && k.*(p.member) < 1e-15) {
      k.*(p.member) = 0;
    }
  }
  Eigen::VectorXd res(static_cast<Eigen::Index>(rows.size()));
  residuals(best.x, res);
  double ape = 0;
  for (Eigen::Index i = 0; i < res.size(); ++i) ape += std::abs(std::exp(res(i)) - 1);
  notes.push_back(fmt::format("attention {} {} kv {} ({} tiles): {} rows, head_dim {}, fitted MAPE {:.1f}%",
                              g.prefill ? "prefill" : "decode", g.kernel, g.kv_dtype, attention_tiles_name(k.tiles),
                              rows.size(), fmt::join(k.head_dims, "/"), 100 * ape / static_cast<double>(res.size())));
  return k;
}

}  // namespace

bool kernel_row_is_decode(const KernelAttentionRow& r) { return !r.prefill || r.isl == 1; }

OperatorWork kernel_row_attention_work(const KernelAttentionRow& r, AttentionTiles tiles) {
  const ModelSpec m = attention_row_model(r);
  if (!r.prefill) {
    // Each decode reads its cached context plus the token it just wrote (BatchShape::add_decode).
    const int64_t context = r.context + 1;
    return decode_attention_work(m, 1, r.batch, r.batch * context, context, r.window);
  }
  // `batch` equal sequences in one variable-length call: one sequence's work, `batch` times.
  OperatorWork w = prefill_attention_work(m, 1, r.isl, 0, tiles, r.window);
  const auto b = static_cast<double>(r.batch);
  for (double* sum :
       {&w.flops, &w.bytes, &w.units, &w.causal_flops, &w.ctas, &w.cta_kv_bytes, &w.sequences, &w.fa3.tiles,
        &w.fa3.iterations, &w.kv_write_tokens, &w.kv_write_bytes, &w.key_sum, &w.context_sum}) {
    *sum *= b;
  }
  return w;
}

std::vector<AttentionKernelFit> fit_attention_kernels(const KernelTables& tables, const KernelSplit& split,
                                                      KernelRows rows, const HardwareProfile& base,
                                                      std::vector<std::string>& notes) {
  std::map<std::tuple<std::string, std::string, bool>, Regime> regimes;  // (kernel, KV dtype, decode)
  std::map<std::tuple<std::string, std::string, bool>, int64_t> all_rows;
  for (const KernelAttentionRow& r : tables.attention) {
    if (!attention_row_skip_reason(r).empty()) continue;
    const std::string kv = r.kv_cache_dtype == "fp8" ? "fp8" : "bfloat16";
    const auto key = std::tuple(r.kernel, kv, kernel_row_is_decode(r));
    ++all_rows[key];
    if (!split.attention(r, rows)) continue;
    Regime& g = regimes[key];
    g.kernel = r.kernel;
    g.kv_dtype = kv;
    g.prefill = !kernel_row_is_decode(r);
    g.rows.push_back(&r);
  }
  std::vector<AttentionKernelFit> fitted;
  // Prefill before decode within a (kernel, KV dtype): the map's order puts `false` (prefill) first.
  for (const auto& [key, n] : all_rows) {
    const auto it = regimes.find(key);
    if (it == regimes.end()) {
      notes.push_back(
          fmt::format("attention {} {} kv {}: no rows on this side of the split ({} in all): its rows take "
                      "the nearest regime",
                      std::get<2>(key) ? "decode" : "prefill", std::get<0>(key), std::get<1>(key), n));
      continue;
    }
    fitted.push_back(fit_regime(it->second, base, notes));
  }
  return fitted;
}

}  // namespace batchsim
