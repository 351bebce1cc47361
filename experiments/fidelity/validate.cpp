// batchsim — `batchsim validate` (see validate.h).
#include "experiments/fidelity/validate.h"

#include <algorithm>
#include <fstream>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "experiments/run/output.h"
#include "hwmodel/base/error.h"
#include "hwmodel/fit/fit_kernel_tables.h"
#include "hwmodel/fit/fit_mla.h"
#include "hwmodel/fit/fit_profile.h"
#include "hwmodel/fit/kernel_tables.h"
#include "hwmodel/fit/kernel_validation.h"
#include "hwmodel/fit/measurements.h"
#include "hwmodel/fit/mla_tables.h"
#include "hwmodel/fit/llmservingsim_profile.h"
#include "hwmodel/fit/validation.h"
#include "hwmodel/hardware_profile.h"

namespace batchsim {

ValidationRun fit_and_validate(const Measurements& measurements, const ValidateOptions& options) {
  ValidationRun run;
  std::vector<std::string> fit_notes;
  const bool check_as_is = !options.gpu.empty() && options.fit_on.empty();
  if (check_as_is) {
    run.profile = resolve_gpu(options.gpu);
    // A profile is its GPU and the kernels it timed: say when these measurements timed others.
    const std::string timed = !options.kernels.empty() ? options.kernels : measurements.kernels;
    if (!run.profile.kernels.empty() && timed != run.profile.kernels) {
      fit_notes.push_back(
          fmt::format("profile '{}' was measured on {} kernels; these measurements timed {}: part of "
                      "the error is the kernels', not the GPU's",
                      run.profile.name, run.profile.kernels,
                      timed.empty() ? "kernels they do not name (--kernels names them)" : timed + "'s"));
    }
  } else {
    std::string base = options.base_gpu;
    if (base.empty()) base = datasheet_gpu_for_device(measurements.device);
    if (base.empty()) {
      throw UserError(
          fmt::format("--base-gpu is required: device '{}' is not a built-in GPU (give the datasheet GPU "
                      "the measurements were taken on, e.g. a100-80gb)",
                      measurements.device));
    }
    HardwareProfile fallback;
    if (!options.fallback_gpu.empty()) fallback = resolve_gpu(options.fallback_gpu);
    FitResult fit = fit_profile(measurements, options.fit_on, resolve_gpu(base),
                                options.fallback_gpu.empty() ? nullptr : &fallback);
    run.profile = std::move(fit.profile);
    if (!options.kernels.empty()) run.profile.kernels = options.kernels;
    fit_notes = std::move(fit.notes);
    run.fitted_cpu = fit.cpu;
  }
  const CpuOverhead cpu = run.fitted_cpu ? *run.fitted_cpu : resolve_engine(options.engine).cpu;
  run.report = validate_cost_model(measurements, options.fit_on, run.profile, cpu);
  run.report.notes.insert(run.report.notes.begin(), fit_notes.begin(), fit_notes.end());
  // A profile fitted here records how far it is from the rows: what a reader needs to trust
  // it. A profile checked as it is (--gpu) keeps its own figures.
  if (!check_as_is) run.profile.validation = profile_validation(run.report);
  return run;
}

void write_validation_outputs(const ValidationRun& run, const ValidateOptions& options, std::ostream& out) {
  if (!options.out_json.empty()) {
    auto file = open_for_write(options.out_json);
    file << validation_json(run.report).dump(2) << '\n';
    out << "wrote " << options.out_json.string() << '\n';
  }
  if (!options.profile_out.empty()) {
    save_hardware_profile(run.profile, options.profile_out);
    out << "wrote " << options.profile_out.string() << '\n';
  }
}

std::string kernel_table_base_gpu(const std::string& system, const ValidateOptions& options) {
  if (!options.base_gpu.empty()) return options.base_gpu;
  std::string name = system;
  std::replace(name.begin(), name.end(), '_', '-');
  const std::string base = datasheet_gpu_for_device(name);
  if (base.empty()) {
    throw UserError(
        fmt::format("--base-gpu is required: system '{}' is not a built-in GPU (give the datasheet "
                    "GPU the tables were measured on, e.g. h100-sxm)",
                    system));
  }
  return base;
}

int run_validate_kernel_tables(const ValidateOptions& options, std::ostream& out) {
  if (!options.fit_on.empty()) {
    throw UserError("--fit-on: kernel tables time kernels, not a model's layers; leave it out");
  }
  if (!options.device.empty() || !options.fallback_gpu.empty()) {
    throw UserError("--device and --fallback-gpu apply to Vidur-style trees, not to kernel tables");
  }
  const KernelTables tables = read_kernel_tables(options.measurements_dir, options.framework);
  KernelValidationReport report;
  if (!options.gpu.empty()) {
    report = score_kernel_tables(tables, resolve_gpu(options.gpu), KernelRows::kAll);
  } else {
    const HardwareProfile base = resolve_gpu(kernel_table_base_gpu(tables.system, options));
    KernelFitResult held_out_fit = fit_kernel_tables(tables, base, KernelRows::kTrain);
    held_out_fit.profile.name += " (fitted on the training half)";
    report = score_kernel_tables(tables, held_out_fit.profile, KernelRows::kHeldOut);
    if (!options.profile_out.empty()) {
      KernelFitResult full = fit_kernel_tables(tables, base, KernelRows::kAll);
      if (!options.profile_name.empty()) full.profile.name = options.profile_name;
      // What a reader of the profile needs to trust it: the held-out errors of the same fit.
      full.profile.validation = profile_validation(report);
      save_hardware_profile(full.profile, options.profile_out);
      out << "wrote " << options.profile_out.string() << '\n';
    }
  }
  print_kernel_validation(report, out);
  if (!options.rows_out.empty()) {
    auto file = open_for_write(options.rows_out);
    file << "operator,row,measured_ms,predicted_ms\n";
    for (const KernelScoredRow& r : report.scored) {
      file << fmt::format("{},\"{}\",{:.6g},{:.6g}\n", r.op, r.what, r.measured_s * 1e3, r.predicted_s * 1e3);
    }
    out << "wrote " << options.rows_out.string() << '\n';
  }
  if (!options.out_json.empty()) {
    auto file = open_for_write(options.out_json);
    file << kernel_validation_json(report).dump(2) << '\n';
    out << "wrote " << options.out_json.string() << '\n';
  }
  return 0;
}

int run_validate_mla(const ValidateOptions& options, std::ostream& out) {
  if (!options.fit_on.empty() || !options.device.empty() || !options.fallback_gpu.empty() ||
      !options.rows_out.empty()) {
    throw UserError("--fit-on, --device, --fallback-gpu and --rows-out do not apply to InferSim's MLA tables");
  }
  const MlaTables tables = read_mla_tables(options.measurements_dir);
  MlaValidationReport report;
  if (!options.gpu.empty()) {
    report = score_mla(tables, resolve_gpu(options.gpu));
  } else {
    const std::string base = options.base_gpu.empty() ? datasheet_gpu_for_device(tables.device) : options.base_gpu;
    if (base.empty()) {
      throw UserError(
          fmt::format("--base-gpu is required: '{}' is not a built-in GPU (give the profile to add the MLA "
                      "constants to, e.g. h100-sxm-fitted)",
                      tables.device));
    }
    const HardwareProfile base_profile = resolve_gpu(base);
    report = validate_mla(tables, base_profile);
    if (!options.profile_out.empty()) {
      HardwareProfile p = profile_with_mla(base_profile, tables, report);
      if (!options.profile_name.empty()) p.name = options.profile_name;
      save_hardware_profile(p, options.profile_out);
      out << "wrote " << options.profile_out.string() << '\n';
    }
  }
  print_mla_validation(report, out);
  if (!options.out_json.empty()) {
    auto file = open_for_write(options.out_json);
    file << mla_validation_json(report).dump(2) << '\n';
    out << "wrote " << options.out_json.string() << '\n';
  }
  return 0;
}

int run_validate(const ValidateOptions& options, std::ostream& out) {
  if (options.measurements_dir.empty()) throw UserError("validate: --measurements is required");
  if (is_mla_table_dir(options.measurements_dir)) return run_validate_mla(options, out);
  if (is_kernel_table_dir(options.measurements_dir)) return run_validate_kernel_tables(options, out);
  if (options.fit_on.empty() && options.gpu.empty()) {
    throw UserError("validate: give --fit-on MODEL (fit a profile) or --gpu PROFILE (check one)");
  }
  const Measurements measurements = is_llmservingsim_profile(options.measurements_dir)
                                        ? read_llmservingsim_profile(options.measurements_dir, options.device)
                                        : read_measurements(options.measurements_dir, options.device);
  const ValidationRun run = fit_and_validate(measurements, options);
  print_validation_table(run.report, out);
  write_validation_outputs(run, options, out);
  return 0;
}

}  // namespace batchsim
