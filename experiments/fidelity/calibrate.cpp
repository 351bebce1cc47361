#include "experiments/fidelity/calibrate.h"

#include <ostream>

#include <fmt/format.h>

#include "experiments/fidelity/validate.h"
#include "hwmodel/base/error.h"
#include "hwmodel/fit/kernel_tables.h"
#include "hwmodel/fit/llmservingsim_profile.h"
#include "hwmodel/fit/measurements.h"
#include "hwmodel/fit/mla_tables.h"
#include "hwmodel/fit/transfer_profile.h"
#include "hwmodel/fit/validation.h"
#include "hwmodel/hardware_profile.h"

namespace batchsim {

namespace {

// The model to fit on when none is named: the first one measured (calibration measures the
// models given to `batchsim-calibrate measure --model`, llama-2-7b by default).
std::string first_measured_model(const Measurements& m) {
  if (!m.token_ops.empty()) return m.token_ops.front().model;
  throw UserError(fmt::format("calibrate fit: {} holds no GEMM (mlp) measurements to fit on", m.root));
}

}  // namespace

int run_calibrate_fit(const CalibrateFitOptions& options, std::ostream& out) {
  ValidateOptions o = options.validate;
  const std::string& dir = options.measurements;
  const std::string& profile_out = options.profile_out;
  const std::string& report_out = options.report_out;
  if (dir.empty()) throw UserError("calibrate fit: give the measurement directory (or one CSV of it)");
  if (profile_out.empty()) throw UserError("calibrate fit: give --out PROFILE.yaml");
  o.measurements_dir = dir;
  o.profile_out = profile_out;
  o.out_json = report_out;

  if (is_mla_table_dir(dir)) {
    // InferSim's MLA tables: the base (--base-gpu, e.g. a fitted profile) with its `mla` block
    // fitted on every row; the report is the held-out check.
    o.profile_name = o.profile_out.stem().string();
    return run_validate_mla(o, out);
  }
  if (is_kernel_table_dir(dir)) {
    // NVIDIA's kernel tables of a GPU: the profile is fitted on every row, and the report is
    // the held-out check of the same fit on half of the shapes.
    o.profile_name = o.profile_out.stem().string();
    return run_validate_kernel_tables(o, out);
  }
  // LLMServingSim's per-layer profile of a GPU (profiler/perf/<GPU>/...), or Vidur's schema.
  const bool per_layer_profile = is_llmservingsim_profile(dir);
  const Measurements measurements =
      per_layer_profile ? read_llmservingsim_profile(dir, o.device) : read_measurements(dir, o.device);
  if (o.fit_on.empty()) o.fit_on = first_measured_model(measurements);
  if (per_layer_profile) {
    // One model's profile has no other model to score on: the profile is fitted on every row, and
    // its validation block is the held-out check of the same fit on every other shape (as for
    // kernel tables).
    const ValidationRun held_out = fit_and_validate(holdout_by_shape(measurements), o);
    ValidationRun run = fit_and_validate(measurements, o);
    run.profile.validation = held_out.profile.validation;
    run.profile.validation.scored_on = fmt::format(
        "fitted on every other shape of {}'s per-layer profile, scored on the rest (dense ops by token count, "
        "attention by shape); the profile itself is fitted on every row",
        run.report.fit_on);
    run.report = held_out.report;
    print_validation_table(run.report, out);
    write_validation_outputs(run, o, out);
    return 0;
  }
  // The profile records its error per operator in its validation block (fit_and_validate):
  // over the other models measured, or over the fit model's rows when there are none.
  const ValidationRun run = fit_and_validate(measurements, o);
  print_validation_table(run.report, out);
  write_validation_outputs(run, o, out);
  return 0;
}

// `calibrate transfer PROFILE --to GPU --out FILE`: the fitted profile's efficiencies on another
// datasheet GPU's ceilings (hwmodel/fit/transfer_profile.h), written with its GEMM tables.
int run_calibrate_transfer(const CalibrateTransferOptions& options, std::ostream& out) {
  const std::string& from = options.profile;
  const std::string& to = options.to;
  const std::string& profile_out = options.profile_out;
  const std::string& name = options.name;
  if (from.empty()) throw UserError("calibrate transfer: give the fitted profile to transfer (e.g. h100-sxm-fitted)");
  if (to.empty()) throw UserError("calibrate transfer: give --to GPU, the datasheet GPU to move it onto (e.g. h200)");
  if (profile_out.empty()) throw UserError("calibrate transfer: give --out PROFILE.yaml");
  const HardwareProfile fitted = resolve_gpu(from);
  HardwareProfile p = transfer_profile(fitted, resolve_gpu(to));
  // Named like any profile file without a name key: after the file.
  p.name = name.empty() ? std::filesystem::path(profile_out).stem().string() : name;
  save_hardware_profile(p, profile_out);
  // What the transfer did: the paragraph it added after the fitted profile's provenance.
  std::string added = p.provenance.substr(fitted.provenance.size());
  if (!added.empty() && added.front() == '\n') added.erase(0, 1);
  out << p.source << '\n' << added << "wrote " << profile_out << '\n';
  return 0;
}

}  // namespace batchsim
