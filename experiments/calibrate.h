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
#include <vector>

namespace batchsim {

int calibrate_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace batchsim
