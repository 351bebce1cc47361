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
#include <string>
#include <vector>

#include "hwmodel/hardware_profile.h"
#include "hwmodel/validation.h"

namespace batchsim {

struct ValidateOptions {
  std::filesystem::path measurements_dir;
  std::string device;    // which GPU of a Vidur tree ("a100"); empty: the only one
  std::string fit_on;    // model to fit on (built-in name, Vidur id or config.json)
  std::string base_gpu;  // datasheet ceilings for the fit; empty: from the device name
  std::string gpu;       // check this profile instead of fitting one
  std::string fallback_gpu;  // attention parameters when the measurements have none
  std::filesystem::path out_json;     // optional: the report as JSON
  std::filesystem::path profile_out;  // optional: the fitted profile as YAML
};

struct Measurements;

// A profile (fitted on options.fit_on, or options.gpu as it is) and its error report against
// the measurements. Shared by `batchsim validate` and `batchsim calibrate fit`.
struct ValidationRun {
  HardwareProfile profile;
  ValidationReport report;
};
ValidationRun fit_and_validate(const Measurements& measurements, const ValidateOptions& options);
// Writes options.out_json (the report) and options.profile_out (the profile) where set.
void write_validation_outputs(const ValidationRun& run, const ValidateOptions& options,
                              std::ostream& out);

// Runs the command and prints the table to `out`. Returns the exit status (0); throws
// UserError for bad input.
int run_validate(const ValidateOptions& options, std::ostream& out);

// Parses `batchsim validate` arguments (without "validate") with Boost.Program_options and
// runs it; `--help` prints the options. Throws UserError for bad options.
int validate_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace batchsim
