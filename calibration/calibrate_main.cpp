// batchsim-calibrate: measure a GPU for batchsim's cost model.
//
//   batchsim-calibrate measure --out DIR [--model NAME ...] [--quick] [--check] ...
//   batchsim-calibrate check             kernels vs the CPU reference; non-zero on mismatch
//   batchsim-calibrate info              the device record, as JSON, to stdout
//
// Exit status: 0 success, 1 kernel mismatch or CUDA failure, 2 bad usage, 3 no CUDA device.
#include <boost/program_options.hpp>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "calibration/calibrate.h"
#include "calibration/cuda_runtime_support.h"
#include "calibration/kernel_timer.h"
#include "calibration/shape_grid.h"

namespace po = boost::program_options;
using namespace batchsim::calibration;

namespace {

constexpr int kExitMismatch = 1, kExitUsage = 2, kExitNoDevice = 3;

const char* kUsage =
    "usage: batchsim-calibrate <command> [options]\n"
    "commands:\n"
    "  measure   time GEMMs, attention and bandwidth kernels; write a measurement directory\n"
    "  check     compare the CUDA kernels with the CPU reference on random inputs\n"
    "  info      print the CUDA device record\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

po::options_description measure_options(MeasureOptions& o, std::string& timer, bool& check) {
  po::options_description d("measure options");
  d.add_options()
      ("out", po::value<std::filesystem::path>(&o.out_dir), "measurement directory to write (required)")
      ("model", po::value<std::vector<std::string>>(&o.models)->multitoken(),
       "model(s) whose layer shapes to measure (default: llama-2-7b with --quick, all otherwise)")
      ("tp", po::value<std::vector<int>>(&o.tensor_parallel_degrees)->multitoken(),
       "tensor-parallel degrees for the GEMM shapes (default 1 2 4 8)")
      ("quick", po::bool_switch(&o.quick), "a sparse grid and a loose stopping rule: minutes, not hours")
      ("no-fp16", "skip the FP16 GEMMs (always skipped with --quick)")
      ("timer", po::value<std::string>(&timer)->default_value("cupti"), "cupti | event")
      ("time-budget-s", po::value<double>(&o.time_budget_s)->default_value(0), "stop measuring after this long (0 = no limit)")
      ("check", po::bool_switch(&check), "run `check` first and stop on a mismatch")
      ("seed", po::value<uint64_t>(&o.seed)->default_value(1), "seed for inputs and block tables");
  return d;
}

int require_device() {
  if (const auto reason = cuda_device_unavailable_reason()) {
    std::cerr << "batchsim-calibrate: no CUDA device available (" << *reason
              << "). Calibration needs an NVIDIA GPU; everything else in batchsim runs without one.\n";
    return kExitNoDevice;
  }
  return 0;
}

int run_check(uint64_t seed) {
  if (int rc = require_device()) return rc;
  return run_kernel_checks(std::cout, seed) == 0 ? 0 : kExitMismatch;
}

int run(int argc, char** argv) {
  if (argc < 2) throw UsageError("missing command");
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    MeasureOptions o;
    std::string timer;
    bool check = false;
    std::cout << kUsage << "\n" << measure_options(o, timer, check) << "\nmodels:";
    for (const CalibrationModel& m : calibration_models()) std::cout << " " << m.name;
    std::cout << "\n";
    return 0;
  }
  if (command == "info") {
    if (argc > 2) throw UsageError("info takes no options");
    if (int rc = require_device()) return rc;
    DeviceInfo info = query_device_info(0);
    info.cupti_api_version = cupti_api_version();
    const std::filesystem::path tmp = std::filesystem::temp_directory_path() / "batchsim-calibrate-info.json";
    write_device_info_json(info, tmp);
    std::cout << std::ifstream(tmp).rdbuf();
    std::filesystem::remove(tmp);
    return 0;
  }
  if (command == "check") {
    uint64_t seed = 1;
    po::options_description d("check options");
    d.add_options()("seed", po::value<uint64_t>(&seed)->default_value(1), "seed for the random inputs");
    po::variables_map vm;
    po::store(po::command_line_parser(argc - 1, argv + 1).options(d).run(), vm);
    po::notify(vm);
    return run_check(seed);
  }
  if (command != "measure") throw UsageError("unknown command '" + command + "'");

  MeasureOptions options;
  std::string timer;
  bool check = false;
  const po::options_description d = measure_options(options, timer, check);
  po::variables_map vm;
  po::store(po::command_line_parser(argc - 1, argv + 1).options(d).run(), vm);
  po::notify(vm);
  if (options.out_dir.empty()) throw UsageError("measure needs --out DIR");
  if (timer != "cupti" && timer != "event") throw UsageError("--timer must be cupti or event, not '" + timer + "'");
  options.allow_cupti = timer == "cupti";
  options.fp16 = vm.count("no-fp16") == 0;
  for (int tp : options.tensor_parallel_degrees) {
    if (tp < 1) throw UsageError("--tp degrees must be >= 1");
  }
  try {
    options = resolve_defaults(options);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--model: ") + e.what());
  }
  if (int rc = require_device()) return rc;
  if (check) {
    if (int rc = run_check(options.seed)) return rc;
  }
  run_measurements(options, std::cout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "batchsim-calibrate: " << e.what() << "\n\n" << kUsage << "(see batchsim-calibrate --help)\n";
    return kExitUsage;
  } catch (const po::error& e) {
    std::cerr << "batchsim-calibrate: " << e.what() << "\n\n" << kUsage;
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "batchsim-calibrate: " << e.what() << "\n";
    return kExitMismatch;
  }
}
