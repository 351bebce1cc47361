// batchsim — `batchsim validate`: fit the cost model to measured operator times and report how
// far it is from them, per operator and per whole iteration (issue 4, item 6).
//
//   batchsim validate --measurements DIR --fit-on MODEL [--out FILE.json]
//                     [--device a100] [--base-gpu a100-80gb] [--profile-out FILE.yaml]
//                     [--fallback-gpu PROFILE] [--gpu PROFILE]
//
// With --fit-on, the profile is fitted (hwmodel/fit/fit_profile.h) on MODEL's rows with the
// datasheet ceilings of --base-gpu, then checked against every row; errors over the other
// models are the "held-out" figures. With --gpu and no --fit-on, an existing profile (built-in
// or file) is checked against the measurements as it is: how a user checks a profile against
// their own GPU.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "hwmodel/fit/validation.h"
#include "hwmodel/hardware_profile.h"

namespace batchsim {

struct ValidateOptions {
  std::filesystem::path measurements_dir;
  std::string device;        // which GPU of a Vidur tree ("a100"); empty: the only one
  std::string fit_on;        // model to fit on (built-in name, Vidur id or config.json)
  std::string base_gpu;      // datasheet ceilings for the fit; empty: from the device name
  std::string gpu;           // check this profile instead of fitting one
  std::string fallback_gpu;  // attention parameters when the measurements have none
  // Whose kernels the measurements timed, recorded in the fitted profile (HardwareProfile::
  // kernels); empty: what the layout says (kernel tables, LLMServingSim's meta.yaml), else none.
  std::string kernels;
  std::filesystem::path out_json;     // optional: the report as JSON
  std::filesystem::path profile_out;  // optional: the fitted profile as YAML
  std::string framework = "vllm";     // kernel tables: whose kernels (vllm, sglang, trtllm)
  std::string profile_name;           // kernel tables: the fitted profile's name
  std::filesystem::path rows_out;     // kernel tables: every scored row as CSV
  // Vidur trees with --gpu: the engine whose CPU cost the CPU-overhead rows are scored on (a
  // fit scores the CPU cost it fitted).
  std::string engine = "vllm";
};

struct Measurements;

// A profile (fitted on options.fit_on, or options.gpu as it is) and its error report against
// the measurements. Shared by `batchsim validate` and `batchsim calibrate fit`.
struct ValidationRun {
  HardwareProfile profile;
  ValidationReport report;
  std::optional<CpuOverhead> fitted_cpu;  // the engine CPU cost the fit measured, if any
};
ValidationRun fit_and_validate(const Measurements& measurements, const ValidateOptions& options);
// Writes options.out_json (the report) and options.profile_out (the profile) where set.
void write_validation_outputs(const ValidationRun& run, const ValidateOptions& options, std::ostream& out);

// The kernel-table path of `validate` and `calibrate fit` (aiconfigurator layout,
// hwmodel/fit/kernel_tables.h): with options.gpu, that profile scored on every row; otherwise a
// profile fitted on the training half scored on the held-out half, and, when
// options.profile_out is set, a profile fitted on every row written there.
int run_validate_kernel_tables(const ValidateOptions& options, std::ostream& out);
// The InferSim MLA path of `validate` and `calibrate fit` (hwmodel/fit/fit_mla.h): with
// options.gpu, that profile's MLA constants scored on every row; otherwise fitted on the
// training rows of options.base_gpu (default: the folder's GPU, h800 -> h100-sxm) and scored on
// the held-out rows, and, when options.profile_out is set, that base with its `mla` block fitted
// on every row written there.
int run_validate_mla(const ValidateOptions& options, std::ostream& out);
// The datasheet GPU of a kernel-table system folder ("h100_sxm" -> "h100-sxm"), or
// options.base_gpu; UserError when neither names one.
std::string kernel_table_base_gpu(const std::string& system, const ValidateOptions& options);

// Runs the command and prints the table to `out`. Returns the exit status (0); throws
// UserError for bad input.
int run_validate(const ValidateOptions& options, std::ostream& out);

}  // namespace batchsim
