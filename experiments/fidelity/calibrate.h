// batchsim — `batchsim calibrate fit`: turn a calibration run's measurements into a hardware
// profile (issue 6). The GPU side, `batchsim-calibrate measure`, lives in calibration/ and
// writes the measurement directory this reads.
//
//   batchsim calibrate fit MEASUREMENTS_DIR --out PROFILE.yaml [--fit-on MODEL]
//                          [--base-gpu NAME] [--report FILE.json]
//
// The fit is hwmodel/fit (plain C++, Eigen): the same code `batchsim validate` runs on the
// published Vidur measurements. The profile records what it was fitted from and, per operator,
// the fit's error against the measurements, so a user can see how far to trust it.
//
//   batchsim calibrate transfer PROFILE --to GPU --out PROFILE.yaml [--name NAME]
//
// moves a fitted profile onto another datasheet GPU's ceilings (hwmodel/fit/transfer_profile.h:
// efficiencies kept, absolute quantities rescaled, each rescaling recorded in the provenance),
// e.g. an H200 profile from the H100 kernel tables.
#pragma once

#include <iosfwd>
#include <string>

#include "experiments/fidelity/validate.h"

namespace batchsim {

// `batchsim calibrate fit`: the measurement directory (or one CSV of it), the profile to write,
// the optional JSON report, and the fit's options.
struct CalibrateFitOptions {
  ValidateOptions validate;
  std::string measurements, profile_out, report_out;
};
int run_calibrate_fit(const CalibrateFitOptions& options, std::ostream& out);

// `batchsim calibrate transfer`: the fitted profile, the datasheet GPU it moves onto, the file to
// write and its profile's name (empty: the file's stem).
struct CalibrateTransferOptions {
  std::string profile, to, profile_out, name;
};
int run_calibrate_transfer(const CalibrateTransferOptions& options, std::ostream& out);

}  // namespace batchsim
