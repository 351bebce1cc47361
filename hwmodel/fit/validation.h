// batchsim — how far the cost model is from measured operator times.
//
// `validate_cost_model` compares a profile's predictions with every measured row and reports, per
// operator, the mean absolute percentage error (MAPE) and the worst absolute percentage error (max
// APE), separately over the rows of the model the profile was fitted on ("fitted": training error)
// and over every other model ("held_out": what a user with a new model can expect). A whole
// iteration of a token-level row is the sum of its measured operators (those the model runs;
// the four GEMMs at least): layers x (the per-layer operators) + the embedding, with the
// model's layer count when it is a built-in model (else one layer). Attention and all-reduce
// are measured separately from the token-level operators, so they are reported as their own
// operators, not inside the iteration.
//
// All-reduce times do not depend on the model: when a fit was made they are fitted on every row
// and reported under "fitted" (in-sample); "held_out" then holds a leave-one-degree-out check:
// each tensor-parallel degree predicted by the pooled latency + bandwidth fit of the others.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "hwmodel/engine_profile.h"
#include "hwmodel/fit/measurements.h"
#include "hwmodel/hardware_profile.h"

namespace batchsim {

struct ErrorStats {
  int64_t count = 0;
  double mape_percent = 0;          // mean of |predicted / measured - 1| * 100
  double max_ape_percent = 0;       // worst |predicted / measured - 1| * 100
  std::string worst_case;           // which row, with measured and predicted times
  std::vector<double> ape_percent;  // every row's error, for the percentiles

  void add(double predicted_s, double measured_s, const std::string& what);
  // The 90th percentile of the rows' errors (nearest rank); 0 without rows.
  double p90_percent() const;
};

struct ValidationReport {
  std::string fit_on;
  std::string measured_on;  // one line: the GPU and folder of the measurements
  HardwareProfile profile;
  std::map<std::string, ErrorStats> held_out;  // operator name -> over models not fitted on
  std::map<std::string, ErrorStats> fitted;    // operator name -> over the fit model's rows
  ErrorStats iteration_held_out;
  ErrorStats iteration_fitted;
  // "<model> tp=<n>" -> operator name (and "iteration") -> stats, for every model and degree.
  std::map<std::string, std::map<std::string, ErrorStats>> by_model;
  std::vector<std::string> notes;
};

// Operator names in reports: Vidur's token-level names (token_op_name), then "attn_prefill",
// "attn_decode", "all_reduce", "cpu_overhead". The CPU-overhead rows measure an engine, not the
// GPU: they are scored on `cpu` (the fitted one, or an engine profile's).
ValidationReport validate_cost_model(const Measurements& measurements, std::string_view fit_on_model,
                                     const HardwareProfile& profile, const CpuOverhead& cpu);

// An operator's figures as a profile records them (hardware_profile.h): MAPE and p90 rounded
// to 0.1%, the precision every report prints them at.
OperatorError operator_error(std::string op, const ErrorStats& stats);
// The report as a fitted profile's validation block: "iteration" (the whole iteration), then
// each operator in the order of the table below, with the figures over the models not fitted
// on when there are any, else over the fit model's rows (held_out false: nothing else was
// measured).
ProfileValidation profile_validation(const ValidationReport& report);

// The report as JSON: fit_on, measured_on, operators.<name>.{mape,max_ape,count,worst} over held-out models,
// operators_fitted.<name>..., iteration.{mape,max_ape,count}, iteration_fitted, by_model,
// profile (its name), profile_source (its source line: datasheet, fitted on ..., transferred
// from ...), profile_yaml (the keys of a profile file), notes. Errors are in percent.
nlohmann::json validation_json(const ValidationReport& report);
// A terminal table: the profile and its source line, then per operator, held-out and fitted
// MAPE / max APE.
void print_validation_table(const ValidationReport& report, std::ostream& out);

}  // namespace batchsim
