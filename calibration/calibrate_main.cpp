// batchsim-calibrate: measure a GPU for batchsim's cost model.
//
//   batchsim-calibrate measure --out DIR [--model NAME ...] [--quick] [--check] ...
//   batchsim-calibrate check [--seed N]   kernels vs the CPU reference; non-zero on mismatch
//   batchsim-calibrate info               the device record, as JSON, to stdout
//
// Exit status: 0 success, 1 kernel mismatch or CUDA failure, 2 bad usage, 3 no CUDA device.
// Options are parsed by hand (no Boost) so the binary builds with nvcc alone on a bare CUDA
// image; see calibration/CMakeLists.txt.
#include <charconv>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "calibration/calibrate.h"
#include "calibration/cuda_runtime_support.h"
#include "calibration/kernel_timer.h"
#include "calibration/shape_grid.h"

using namespace batchsim::calibration;

namespace {

constexpr int kExitMismatch = 1, kExitUsage = 2, kExitNoDevice = 3;

const char* kUsage =
    "usage: batchsim-calibrate <command> [options]\n"
    "commands:\n"
    "  measure   time GEMMs, attention and bandwidth kernels; write a measurement directory\n"
    "  check     compare the CUDA kernels with the CPU reference on random inputs\n"
    "  info      print the CUDA device record\n";

const char* kMeasureHelp =
    "measure options:\n"
    "  --out DIR            measurement directory to write (required)\n"
    "  --model NAME ...     model(s) whose layer shapes to measure\n"
    "                       (default: llama-2-7b with --quick, every built-in model otherwise)\n"
    "  --tp N ...           tensor-parallel degrees for the GEMM shapes (default 1 2 4 8)\n"
    "  --quick              sparse grids and a loose stopping rule: minutes, not hours\n"
    "  --no-fp16            skip the FP16 GEMMs (always skipped with --quick)\n"
    "  --timer cupti|event  kernel timer (default cupti; falls back to events if CUPTI fails)\n"
    "  --time-budget-s S    stop measuring after S seconds, keeping the rows so far (default: none)\n"
    "  --check              run `check` first and stop on a mismatch\n"
    "  --seed N             seed for inputs and block tables (default 1)\n"
    "check options:\n"
    "  --seed N             seed for the random inputs (default 1)\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Command-line tokens after the command, with "--name=value" split into two.
class Args {
 public:
  Args(int argc, char** argv) {
    for (int i = 2; i < argc; ++i) {
      const std::string arg = argv[i];
      const size_t eq = arg.find('=');
      if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
        tokens_.push_back(arg.substr(0, eq));
        tokens_.push_back(arg.substr(eq + 1));
      } else {
        tokens_.push_back(arg);
      }
    }
  }
  bool done() const { return pos_ >= tokens_.size(); }
  // `measure --help` (anywhere among the options) asks for the command's help, not a run.
  bool wants_help() const {
    for (const std::string& t : tokens_) {
      if (t == "--help" || t == "-h") return true;
    }
    return false;
  }
  std::string next_option() {
    const std::string t = tokens_[pos_++];
    if (t.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + t + "'");
    return t;
  }
  std::string value(const std::string& option) {
    if (done() || tokens_[pos_].rfind("--", 0) == 0) throw UsageError(option + " needs a value");
    return tokens_[pos_++];
  }
  // One or more values up to the next option.
  std::vector<std::string> values(const std::string& option) {
    std::vector<std::string> out{value(option)};
    while (!done() && tokens_[pos_].rfind("--", 0) != 0) out.push_back(tokens_[pos_++]);
    return out;
  }

 private:
  std::vector<std::string> tokens_;
  size_t pos_ = 0;
};

template <class Number>
Number parse_number(const std::string& option, const std::string& text) {
  Number value{};
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) {
    throw UsageError(option + ": '" + text + "' is not a number");
  }
  return value;
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
  Args args(argc, argv);
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kUsage << "\n" << kMeasureHelp << "\nmodels:";
    for (const CalibrationModel& m : calibration_models()) std::cout << " " << m.name;
    std::cout << "\n";
    return 0;
  }
  if ((command == "measure" || command == "check" || command == "info") && args.wants_help()) {
    std::cout << "usage: batchsim-calibrate " << command
              << (command == "measure" ? " --out DIR [options]\n" : command == "check" ? " [--seed N]\n" : "\n");
    if (command == "info") std::cout << "  prints the CUDA device record (name, SMs, clocks, memory, versions) as JSON\n";
    else std::cout << kMeasureHelp;
    return 0;
  }
  if (command == "info") {
    if (!args.done()) throw UsageError("info takes no options");
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
    while (!args.done()) {
      const std::string option = args.next_option();
      if (option != "--seed") throw UsageError("check: unknown option " + option);
      seed = parse_number<uint64_t>(option, args.value(option));
    }
    return run_check(seed);
  }
  if (command != "measure") throw UsageError("unknown command '" + command + "'");

  MeasureOptions options;
  bool check = false;
  while (!args.done()) {
    const std::string option = args.next_option();
    if (option == "--out") {
      options.out_dir = args.value(option);
    } else if (option == "--model") {
      for (const std::string& m : args.values(option)) options.models.push_back(m);
    } else if (option == "--tp") {
      for (const std::string& t : args.values(option)) {
        const int tp = parse_number<int>(option, t);
        if (tp < 1) throw UsageError("--tp degrees must be >= 1");
        options.tensor_parallel_degrees.push_back(tp);
      }
    } else if (option == "--quick") {
      options.quick = true;
    } else if (option == "--no-fp16") {
      options.fp16 = false;
    } else if (option == "--timer") {
      const std::string timer = args.value(option);
      if (timer != "cupti" && timer != "event") throw UsageError("--timer must be cupti or event, not '" + timer + "'");
      options.allow_cupti = timer == "cupti";
    } else if (option == "--time-budget-s") {
      options.time_budget_s = parse_number<double>(option, args.value(option));
    } else if (option == "--check") {
      check = true;
    } else if (option == "--seed") {
      options.seed = parse_number<uint64_t>(option, args.value(option));
    } else {
      throw UsageError("measure: unknown option " + option);
    }
  }
  if (options.out_dir.empty()) throw UsageError("measure needs --out DIR");
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
  } catch (const std::exception& e) {
    std::cerr << "batchsim-calibrate: " << e.what() << "\n";
    return kExitMismatch;
  }
}
