#include "experiments/calibrate.h"

#include <ostream>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "experiments/command_line.h"
#include "experiments/engine_fit.h"
#include "experiments/validate.h"
#include "hwmodel/error.h"
#include "hwmodel/fit/transfer_profile.h"
#include "hwmodel/hardware_profile.h"
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

// `calibrate transfer PROFILE --to GPU --out FILE`: the fitted profile's efficiencies on another
// datasheet GPU's ceilings (hwmodel/fit/transfer_profile.h), written with its GEMM tables.
int calibrate_transfer(const std::vector<std::string>& args, std::ostream& out) {
  std::string from, to, profile_out, name;
  po::options_description d("batchsim calibrate transfer options");
  d.add_options()
      ("profile", po::value(&from), "the fitted profile to transfer (a built-in name or a profile file)")
      ("to", po::value(&to), "the datasheet GPU whose ceilings it moves onto (batchsim list gpus, or a file)")
      ("out", po::value(&profile_out), "the profile to write (YAML; its GEMM tables beside it)")
      ("name", po::value(&name), "the written profile's name (default: the --out file name without extension)")
      ("help,h", "show this help");
  po::positional_options_description pos;
  pos.add("profile", 1);
  const po::variables_map vm = parse_command_line(args, d, &pos, "calibrate transfer");
  if (vm.count("help")) {
    out << "usage: batchsim calibrate transfer PROFILE --to GPU --out PROFILE.yaml [--name NAME]\n\n" << d << '\n';
    return 0;
  }
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

}  // namespace

int calibrate_command(const std::vector<std::string>& args, std::ostream& out) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    out << "usage: batchsim calibrate fit MEASUREMENTS --out PROFILE.yaml [options]\n"
           "  Fits a hardware profile on the measurements `batchsim-calibrate measure` wrote\n"
           "  on a GPU (see calibration/README.md), and records the fit error per operator.\n"
           "  MEASUREMENTS is the measurement directory, or one CSV of it (e.g. its mlp.csv:\n"
           "  operators without rows then keep the base GPU's datasheet values).\n"
           "usage: batchsim calibrate transfer PROFILE --to GPU --out PROFILE.yaml [--name NAME]\n"
           "  Moves a fitted profile's efficiencies onto another datasheet GPU's ceilings,\n"
           "  rescaling what is absolute (e.g. an H200 from the H100 tables: \n"
           "  batchsim calibrate transfer h100-sxm-fitted --to h200 --out h200.yaml); the\n"
           "  profile's provenance lists each rescaling (hwmodel/README.md).\n"
           "usage: batchsim calibrate engine --measurements FILE.csv --gpu PROFILE --backend B --out ENGINE.yaml\n"
           "  Fits an engine's residual time per iteration, per sequence and per extra TP worker\n"
           "  to measured closed-loop serving benchmarks, scored on held-out rows.\n";
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "fit") return calibrate_fit({args.begin() + 1, args.end()}, out);
  if (args[0] == "transfer") return calibrate_transfer({args.begin() + 1, args.end()}, out);
  if (args[0] == "engine") return calibrate_engine_command({args.begin() + 1, args.end()}, out);
  throw UserError(fmt::format("calibrate: unknown subcommand '{}' (expected: fit, transfer, engine)", args[0]));
}

}  // namespace batchsim
