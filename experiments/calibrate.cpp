#include "experiments/calibrate.h"

#include <fstream>
#include <ostream>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>
#include <fmt/format.h>

#include "hwmodel/error.h"
#include "hwmodel/fit/fit_profile.h"
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

// One line per operator: the fitted profile against the rows it was fitted on, then (when
// other models were measured too) against those.
std::string error_lines(const ValidationReport& report) {
  std::string text = "fit error per operator (MAPE / max APE over the fitted rows):\n";
  for (const auto& [op, stats] : report.fitted) {
    if (stats.count == 0) continue;
    text += fmt::format("  {}: {:.1f}% / {:.1f}% ({} rows)\n", op, stats.mape_percent,
                        stats.max_ape_percent, stats.count);
  }
  text += fmt::format("  iteration: {:.1f}% / {:.1f}%\n", report.iteration_fitted.mape_percent,
                      report.iteration_fitted.max_ape_percent);
  if (report.iteration_held_out.count > 0) {
    text += fmt::format("held-out models, iteration: {:.1f}% / {:.1f}%\n",
                        report.iteration_held_out.mape_percent,
                        report.iteration_held_out.max_ape_percent);
  }
  return text;
}

int calibrate_fit(const std::vector<std::string>& args, std::ostream& out) {
  std::string dir, profile_out, fit_on, base_gpu, report_out;
  po::options_description d("batchsim calibrate fit options");
  d.add_options()
      ("measurements", po::value(&dir), "measurement directory written by batchsim-calibrate")
      ("out", po::value(&profile_out), "the hardware profile to write (YAML)")
      ("fit-on", po::value(&fit_on), "model whose rows to fit on (default: the first measured)")
      ("base-gpu", po::value(&base_gpu), "datasheet GPU for the ceilings (default: from the device)")
      ("report", po::value(&report_out), "also write the full error report as JSON")
      ("help,h", "show this help");
  po::positional_options_description pos;
  pos.add("measurements", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(d).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UserError(fmt::format("calibrate fit: {}", e.what()));
  }
  if (vm.count("help")) {
    out << "usage: batchsim calibrate fit MEASUREMENTS_DIR --out PROFILE.yaml [options]\n\n" << d << '\n';
    return 0;
  }
  if (dir.empty()) throw UserError("calibrate fit: give the measurement directory");
  if (profile_out.empty()) throw UserError("calibrate fit: give --out PROFILE.yaml");

  const Measurements measurements = read_measurements(dir);
  if (fit_on.empty()) fit_on = first_measured_model(measurements);
  if (base_gpu.empty()) base_gpu = datasheet_gpu_for_device(measurements.device);
  if (base_gpu.empty()) {
    throw UserError(fmt::format("calibrate fit: device '{}' is not a built-in GPU: give "
                                "--base-gpu with its datasheet ceilings",
                                measurements.device));
  }
  FitResult fit = fit_profile(measurements, fit_on, resolve_gpu(base_gpu));
  ValidationReport report = validate_cost_model(measurements, fit_on, fit.profile);
  report.notes.insert(report.notes.begin(), fit.notes.begin(), fit.notes.end());
  print_validation_table(report, out);

  HardwareProfile profile = std::move(fit.profile);
  if (!profile.provenance.empty() && profile.provenance.back() != '\n') profile.provenance += '\n';
  profile.provenance += error_lines(report);
  save_hardware_profile(profile, profile_out);
  out << "wrote " << profile_out << '\n';
  if (!report_out.empty()) {
    std::ofstream file(report_out);
    if (!file) throw UserError(fmt::format("calibrate fit: cannot write {}", report_out));
    file << validation_json(report).dump(2) << '\n';
    out << "wrote " << report_out << '\n';
  }
  return 0;
}

}  // namespace

int calibrate_command(const std::vector<std::string>& args, std::ostream& out) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    out << "usage: batchsim calibrate fit MEASUREMENTS_DIR --out PROFILE.yaml [options]\n"
           "  Fits a hardware profile on the measurements `batchsim-calibrate measure` wrote\n"
           "  on a GPU (see calibration/README.md), and records the fit error per operator.\n";
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "fit") return calibrate_fit({args.begin() + 1, args.end()}, out);
  throw UserError(fmt::format("calibrate: unknown subcommand '{}' (expected: fit)", args[0]));
}

}  // namespace batchsim
