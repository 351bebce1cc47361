#include "experiments/calibrate.h"

#include <ostream>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "experiments/command_line.h"
#include "experiments/validate.h"
#include "hwmodel/error.h"
#include "hwmodel/kernel_tables.h"
#include "hwmodel/measurements.h"
#include "hwmodel/validation.h"

namespace po = boost::program_options;

namespace batchsim {

namespace {

// The model to fit on when none is named: the first one measured (calibration measures the
// models given to `batchsim-calibrate measure --model`, llama-2-7b by default).
std::string first_measured_model(const Measurements& m) {
  if (!m.token_ops.empty()) return m.token_ops.front().model;
  throw UserError(fmt::format("calibrate fit: {} holds no GEMM (mlp) measurements to fit on",
                              m.root));
}

int calibrate_fit(const std::vector<std::string>& args, std::ostream& out) {
  ValidateOptions o;
  std::string dir, profile_out, report_out;
  po::options_description d("batchsim calibrate fit options");
  d.add_options()
      ("measurements", po::value(&dir), "measurement directory written by batchsim-calibrate, or one of its CSVs")
      ("out", po::value(&profile_out), "the hardware profile to write (YAML)")
      ("device", po::value(&o.device), "the GPU folder to read when the tree holds several "
       "(compute/<device>/..., e.g. a100)")
      ("fit-on", po::value(&o.fit_on), "model whose rows to fit on (default: the first measured)")
      ("base-gpu", po::value(&o.base_gpu), "datasheet GPU for the ceilings (default: from the device)")
      ("report", po::value(&report_out), "also write the full error report as JSON")
      ("framework", po::value(&o.framework), "kernel tables (aiconfigurator layout): whose kernels, vllm | "
       "sglang | trtllm (default vllm)")
      ("help,h", "show this help");
  po::positional_options_description pos;
  pos.add("measurements", 1);
  const po::variables_map vm = parse_command_line(args, d, &pos, "calibrate fit");
  if (vm.count("help")) {
    out << "usage: batchsim calibrate fit MEASUREMENTS --out PROFILE.yaml [options]\n\n" << d << '\n';
    return 0;
  }
  if (dir.empty()) throw UserError("calibrate fit: give the measurement directory (or one CSV of it)");
  if (profile_out.empty()) throw UserError("calibrate fit: give --out PROFILE.yaml");
  o.measurements_dir = dir;
  o.profile_out = profile_out;
  o.out_json = report_out;

  if (is_kernel_table_dir(dir)) {
    // NVIDIA's kernel tables of a GPU: the profile is fitted on every row, and the report is
    // the held-out check of the same fit on half of the shapes.
    o.profile_name = o.profile_out.stem().string();
    return run_validate_kernel_tables(o, out);
  }
  const Measurements measurements = read_measurements(dir, o.device);
  if (o.fit_on.empty()) o.fit_on = first_measured_model(measurements);
  // The profile records its error per operator in its validation block (fit_and_validate):
  // over the other models measured, or over the fit model's rows when there are none.
  const ValidationRun run = fit_and_validate(measurements, o);
  print_validation_table(run.report, out);
  write_validation_outputs(run, o, out);
  return 0;
}

}  // namespace

int calibrate_command(const std::vector<std::string>& args, std::ostream& out) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    out << "usage: batchsim calibrate fit MEASUREMENTS --out PROFILE.yaml [options]\n"
           "  Fits a hardware profile on the measurements `batchsim-calibrate measure` wrote\n"
           "  on a GPU (see calibration/README.md), and records the fit error per operator.\n"
           "  MEASUREMENTS is the measurement directory, or one CSV of it (e.g. its mlp.csv:\n"
           "  operators without rows then keep the base GPU's datasheet values).\n";
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "fit") return calibrate_fit({args.begin() + 1, args.end()}, out);
  throw UserError(fmt::format("calibrate: unknown subcommand '{}' (expected: fit)", args[0]));
}

}  // namespace batchsim
