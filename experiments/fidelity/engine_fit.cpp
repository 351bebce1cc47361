// batchsim — `batchsim calibrate engine` (see engine_fit.h).
#include "experiments/fidelity/engine_fit.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <ostream>
#include <set>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

#include "experiments/fidelity/validate_serving.h"
#include "experiments/run/output.h"
#include "hwmodel/base/error.h"
#include "hwmodel/engine_profile.h"
#include "hwmodel/fit/solvers.h"

namespace batchsim {

namespace {

constexpr int kMaxRounds = 5;
constexpr double kConverged = 0.01;  // relative change of every fitted time

// Whether row `r` is held out: the rows of every second distinct value of the split column.
std::vector<bool> held_out(const std::vector<ServingRow>& rows, const std::string& holdout) {
  std::vector<bool> out(rows.size(), false);
  if (holdout == "none") return out;
  auto key = [&](const ServingRow& r) { return holdout == "osl" ? r.osl : r.isl; };
  std::set<int64_t> values;
  for (const ServingRow& r : rows) values.insert(key(r));
  if (values.size() < 2) {
    throw UserError(
        fmt::format("--holdout {}: the rows have one {} only ({}); nothing to hold out (give "
                    "--holdout none or another split)",
                    holdout, holdout, *values.begin()));
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto index = std::distance(values.begin(), values.find(key(rows[i])));
    out[i] = index % 2 == 1;
  }
  return out;
}

struct Scores {
  Mape ttft_fit, tpot_fit, ttft_held, tpot_held;
};

Scores score(const std::vector<ServingRow>& rows, const std::vector<ServingPrediction>& p,
             const std::vector<bool>& held) {
  Scores s;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    (held[i] ? s.ttft_held : s.ttft_fit).add(p[i].ttft_ms, rows[i].ttft_ms);
    (held[i] ? s.tpot_held : s.tpot_fit).add(p[i].tpot_ms, rows[i].tpot_ms);
  }
  return s;
}

nlohmann::ordered_json scores_json(const Scores& s) {
  auto one = [](const Mape& ttft, const Mape& tpot) {
    return nlohmann::ordered_json{{"ttft_mape", ttft.value()}, {"tpot_mape", tpot.value()}, {"count", ttft.count}};
  };
  return {{"fit", one(s.ttft_fit, s.tpot_fit)}, {"held_out", one(s.ttft_held, s.tpot_held)}};
}

// The residual that closes the fitting rows' TPOT gaps: what each row lacks (measured - predicted)
// plus what the current residual already adds to its iterations, regressed non-negatively on the
// row's features. The loss is the mean absolute relative error, what MAPE scores, so that a few
// rows the model misses for another reason (a deployment the file does not record) cannot drag
// the fit; it is minimised by iteratively reweighted least squares (each row weighted by the
// inverse of its current absolute error, Schlossmacher 1973), 50 rounds from the least-squares
// start.
CpuOverhead fit_residual(const std::vector<ServingRow>& rows, const std::vector<ServingPrediction>& p,
                         const std::vector<bool>& held, const CpuOverhead& current) {
  std::vector<std::size_t> fitting;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!held[i]) fitting.push_back(i);
  }
  const auto n = static_cast<Eigen::Index>(fitting.size());
  Eigen::MatrixXd features(n, 3);
  Eigen::VectorXd needed(n);  // relative: the TPOT the residual must supply, over the measured TPOT
  for (Eigen::Index k = 0; k < n; ++k) {
    const ServingRow& r = rows[fitting[static_cast<std::size_t>(k)]];
    const double seq = p[fitting[static_cast<std::size_t>(k)]].sequences_per_iteration;
    const double workers = std::max(0, r.tp - 1);
    const double measured_s = r.tpot_ms * 1e-3;
    features(k, 0) = 1 / measured_s;
    features(k, 1) = seq / measured_s;
    features(k, 2) = workers / measured_s;
    const double now = current.per_iteration_s + current.per_sequence_s * seq + current.per_extra_worker_s * workers;
    needed(k) = ((r.tpot_ms - p[fitting[static_cast<std::size_t>(k)]].tpot_ms) * 1e-3 + now) / measured_s;
  }
  Eigen::VectorXd x = fit::nnls(features, needed);
  for (int round = 0; round < 50; ++round) {
    const Eigen::VectorXd error = (features * x - needed).cwiseAbs().cwiseMax(1e-4);
    const Eigen::VectorXd w = error.cwiseInverse().cwiseSqrt();
    x = fit::nnls(w.asDiagonal() * features, w.asDiagonal() * needed);
  }
  return {x(0), x(1), x(2)};
}

bool converged(const CpuOverhead& before, const CpuOverhead& after) {
  auto close = [](double x, double y) { return std::abs(x - y) <= kConverged * std::max(std::abs(x), 1e-12); };
  return close(before.per_iteration_s, after.per_iteration_s) && close(before.per_sequence_s, after.per_sequence_s) &&
         close(before.per_extra_worker_s, after.per_extra_worker_s);
}

}  // namespace

int run_calibrate_engine(const EngineFitOptions& options, std::ostream& out) {
  EngineFitOptions o = options;
  if (o.measurements.empty()) throw UserError("calibrate engine: --measurements is required");
  if (o.gpu.empty()) throw UserError("calibrate engine: --gpu is required");
  if (o.backend.empty()) throw UserError("calibrate engine: --backend is required (one engine per backend)");
  if (o.out.empty()) throw UserError("calibrate engine: --out ENGINE.yaml is required");
  if (o.holdout != "osl" && o.holdout != "isl" && o.holdout != "none") {
    throw UserError(fmt::format("--holdout: '{}' is not osl, isl or none", o.holdout));
  }
  check_replay_options(o);
  (void)resolve_gpu(o.gpu);
  if (!o.base_engine.empty()) o.engines[o.backend] = o.base_engine;

  const ServingRows selected = read_serving_rows(o.measurements, o);
  const std::vector<ServingRow>& rows = selected.rows;
  const std::vector<bool> held = held_out(rows, o.holdout);

  EngineProfile engine = resolve_engine(o.base_engine.empty() ? o.backend : o.base_engine);
  const std::string base_name = engine.name;
  engine.residual = {};
  auto replay_all = [&](const EngineProfile& e) {
    std::vector<ServingPrediction> p;
    p.reserve(rows.size());
    for (const ServingRow& r : rows) p.push_back(replay_serving_row(r, o, &e));
    return p;
  };
  std::vector<ServingPrediction> predictions = replay_all(engine);
  const Scores before = score(rows, predictions, held);
  int rounds = 0;
  for (; rounds < kMaxRounds; ++rounds) {
    const CpuOverhead next = fit_residual(rows, predictions, held, engine.residual);
    const bool done = converged(engine.residual, next);
    engine.residual = next;
    predictions = replay_all(engine);
    if (done) break;
  }
  const Scores after = score(rows, predictions, held);

  const int64_t fitting = std::count(held.begin(), held.end(), false);
  engine.name = o.name.empty() ? base_name + "-fitted" : o.name;
  const std::string fitted_on = fmt::format(
      "residual fitted by batchsim calibrate engine on {} {} rows of {} ({}; {} on {}, holdout {}: {} held out{})",
      fitting, o.backend, std::filesystem::path(o.measurements).filename().string(), o.system, base_name, o.gpu,
      o.holdout, static_cast<int64_t>(rows.size()) - fitting,
      o.think_time.empty() ? "" : fmt::format("; clients thinking {} s", o.think_time));
  engine.sources = engine.sources.empty() ? fitted_on : engine.sources + "; " + fitted_on;
  engine.description = engine.description + " (+ fitted residual)";
  {
    auto file = open_for_write(o.out);
    file << engine_profile_yaml(engine);
  }

  fmt::print(out, "{} {} rows of {} replayed on {} with engine {} ({} fitting, {} held out by {}):\n", rows.size(),
             o.backend, o.measurements, o.gpu, base_name, fitting, static_cast<int64_t>(rows.size()) - fitting,
             o.holdout);
  fmt::print(out,
             "residual per iteration {:.3f} ms, per sequence {:.2f} us, per extra TP worker {:.3f} ms "
             "({} rounds)\n",
             engine.residual.per_iteration_s * 1e3, engine.residual.per_sequence_s * 1e6,
             engine.residual.per_extra_worker_s * 1e3, rounds + 1);
  fmt::print(out, "{:<22} {:>12} {:>12} {:>12} {:>12}\n", "", "TPOT fit %", "TPOT held %", "TTFT fit %", "TTFT held %");
  auto line = [&](const char* what, const Scores& s) {
    fmt::print(out, "{:<22} {:>12.1f} {:>12.1f} {:>12.1f} {:>12.1f}\n", what, s.tpot_fit.value(), s.tpot_held.value(),
               s.ttft_fit.value(), s.ttft_held.value());
  };
  line(fmt::format("{} (residual 0)", base_name).c_str(), before);
  line(engine.name.c_str(), after);
  for (const auto& [why, n] : selected.skipped) fmt::print(out, "skipped {} rows: {}\n", n, why);
  fmt::print(out, "wrote {}\n", o.out);

  if (!o.report.empty()) {
    nlohmann::ordered_json j;
    j["measurements"] = o.measurements;
    j["gpu"] = o.gpu;
    j["backend"] = o.backend;
    j["base_engine"] = base_name;
    j["holdout"] = o.holdout;
    j["units"] = "mape in percent: mean of |predicted / measured - 1| * 100; residual in seconds";
    j["residual"] = {{"per_iteration_s", engine.residual.per_iteration_s},
                     {"per_sequence_s", engine.residual.per_sequence_s},
                     {"per_extra_worker_s", engine.residual.per_extra_worker_s}};
    j["rounds"] = rounds + 1;
    j["before"] = scores_json(before);
    j["after"] = scores_json(after);
    auto file = open_for_write(o.report);
    file << j.dump(2) << '\n';
    fmt::print(out, "wrote {}\n", o.report);
  }
  return 0;
}

}  // namespace batchsim
