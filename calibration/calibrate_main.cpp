// batchsim-calibrate: measure a GPU for batchsim's cost model.
//
//   batchsim-calibrate measure --out DIR [--model NAME ...] [--shapes FILE] [--quick] [--check] ...
//   batchsim-calibrate check [--seed N]   kernels vs the CPU reference; non-zero on mismatch
//   batchsim-calibrate info               the device record, as JSON, to stdout
//   batchsim-calibrate shapes [--model NAME ...] [--shapes FILE] [--tp N ...]
//                                         the GEMMs `measure` would time; needs no GPU
//
// Exit status: 0 success, 1 kernel mismatch or CUDA failure, 2 bad usage, 3 no usable CUDA
// device (none, a compute capability below 8.0, or a binary built for other architectures),
// 4 measured, but some points did not fit in the GPU's memory (the rows that fit are written).
// Options are parsed by hand (no Boost) so the binary builds with nvcc alone on a bare CUDA
// image; see calibration/CMakeLists.txt.
#include <charconv>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "calibration/calibrate.h"
#include "calibration/cuda_kernels.h"
#include "calibration/cuda_runtime_support.h"
#include "calibration/kernel_timer.h"
#include "calibration/shape_file.h"
#include "calibration/shape_grid.h"

using namespace batchsim::calibration;

namespace {

constexpr int kExitMismatch = 1, kExitUsage = 2, kExitNoDevice = 3, kExitDidNotFit = 4;
// BF16 tensor cores (WMMA bf16, cuBLASLt BF16): Ampere and newer.
constexpr int kMinComputeCapability = 80;

const char* kUsage =
    "usage: batchsim-calibrate <command> [options]\n"
    "commands:\n"
    "  measure   time GEMMs, attention and bandwidth kernels; write a measurement directory\n"
    "  check     compare the CUDA kernels with the CPU reference on random inputs\n"
    "  info      print the CUDA device record\n"
    "  shapes    list the GEMMs `measure` would time (built-in models, a shape file); no GPU needed\n";

const char* kMeasureHelp =
    "measure options:\n"
    "  --out DIR            measurement directory to write (required)\n"
    "  --model NAME ...     built-in model(s) whose layer GEMMs and attention to measure\n"
    "                       (default: llama-2-7b with --quick, every built-in model otherwise;\n"
    "                       none when --shapes is given)\n"
    "  --shapes FILE        also time the GEMMs of a shape file: any model batchsim knows, MoE\n"
    "                       experts and MLA included, at one parallel layout. Write it on a CPU\n"
    "                       machine: batchsim calibrate shapes --model M --tp N [--ep N] --out FILE\n"
    "  --tp N ...           tensor-parallel degrees of the built-in models' GEMMs (default 1 2 4 8;\n"
    "                       a shape file has its own layout)\n"
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

// 0 when device 0 can run our kernels, else kExitNoDevice with the reason on stderr. `info`
// asks only for a device (its record says what the GPU is, supported or not).
int require_device(bool to_run_kernels) {
  if (const auto reason = cuda_device_unavailable_reason()) {
    std::cerr << "batchsim-calibrate: no CUDA device available (" << *reason
              << "). Calibration needs an NVIDIA GPU; everything else in batchsim runs without one.\n";
    return kExitNoDevice;
  }
  if (!to_run_kernels) return 0;
  const DeviceInfo device = query_device_info(0);
  const int capability = device.compute_capability_major * 10 + device.compute_capability_minor;
  const std::string cc =
      std::to_string(device.compute_capability_major) + "." + std::to_string(device.compute_capability_minor);
  if (capability < kMinComputeCapability) {
    std::cerr << "batchsim-calibrate: unsupported GPU: " << device.name << " has compute capability " << cc
              << "; calibration needs 8.0 or newer (BF16 tensor cores: A100, A10/A40, L4/L40S, H100/H200, "
                 "B200 ...).\n";
    return kExitNoDevice;
  }
  if (const std::string problem = kernel_image_problem(); !problem.empty()) {
    std::cerr << "batchsim-calibrate: this binary was compiled for " << compiled_cuda_architectures()
              << " and cannot run on " << device.name << " (compute capability " << cc << ", sm_" << capability
              << "): " << problem << ". Rebuild it for this GPU: cmake -DCMAKE_CUDA_ARCHITECTURES=" << capability
              << " (calibration/run-on-gpu.sh asks nvidia-smi for it).\n";
    return kExitNoDevice;
  }
  return 0;
}

int run_check(uint64_t seed) {
  if (int rc = require_device(true)) return rc;
  return run_kernel_checks(std::cout, seed) == 0 ? 0 : kExitMismatch;
}

// `shapes`: what `measure` with the same options would time, one GEMM per line.
void print_shapes(const MeasureOptions& options, const std::vector<ShapeFileGemm>& shape_file) {
  std::cout << "op,k,n,groups,tp,model\n";
  for (const std::string& name : options.models) {
    const CalibrationModel& model = find_calibration_model(name);
    for (int tp : options.tensor_parallel_degrees) {
      try {
        for (const GemmShape& g : layer_gemm_shapes(model, tp)) {
          std::cout << vidur_op_name(g.op) << "," << g.k << "," << g.n << ",1," << tp << "," << model.name << "\n";
        }
      } catch (const std::invalid_argument& e) {
        std::cout << "# skip TP " << tp << ": " << e.what() << "\n";
      }
    }
  }
  for (const std::string& model : shape_file_models(shape_file)) {
    for (const DistinctGemm& d : distinct_gemms(shape_file, model)) {
      for (const ShapeFileGemm& g : d.rows) {
        std::cout << g.op << "," << g.k << "," << g.n << "," << g.groups << "," << g.tp << "," << g.model << "\n";
      }
    }
  }
}

// `--help`: the commands, the options of measure and check, and the built-in models.
int print_usage() {
  std::cout << kUsage << "\n" << kMeasureHelp << "\nmodels:";
  for (const CalibrationModel& m : calibration_models()) std::cout << " " << m.name;
  std::cout << "\n";
  return 0;
}

// `COMMAND --help`: that command's usage line and options.
int print_command_help(const std::string& command) {
  std::cout << "usage: batchsim-calibrate " << command
            << (command == "measure"  ? " --out DIR [options]\n"
                : command == "check"  ? " [--seed N]\n"
                : command == "shapes" ? " [--model NAME ...] [--shapes FILE] [--tp N ...]\n"
                                      : "\n");
  if (command == "info")
    std::cout << "  prints the CUDA device record (name, SMs, clocks, memory, versions) as JSON\n";
  else if (command == "shapes")
    std::cout << "  lists the GEMMs `measure` would time with the same options; needs no GPU\n";
  else
    std::cout << kMeasureHelp;
  return 0;
}

// `info`: the device record as JSON on stdout. write_device_info_json writes a file (what
// `measure` keeps beside its CSVs), so the record goes through a temporary one.
int run_info(const Args& args) {
  if (!args.done()) throw UsageError("info takes no options");
  if (int rc = require_device(false)) return rc;
  DeviceInfo info = query_device_info(0);
  info.cupti_api_version = cupti_api_version();
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() / "batchsim-calibrate-info.json";
  write_device_info_json(info, tmp);
  std::cout << std::ifstream(tmp).rdbuf();
  std::filesystem::remove(tmp);
  return 0;
}

// `check [--seed N]`.
int run_check_command(Args& args) {
  uint64_t seed = 1;
  while (!args.done()) {
    const std::string option = args.next_option();
    if (option != "--seed") throw UsageError("check: unknown option " + option);
    seed = parse_number<uint64_t>(option, args.value(option));
  }
  return run_check(seed);
}

// The options `measure` and `shapes` share, as given (resolve_defaults fills the rest), and
// whether `measure --check` asked for the kernel checks first.
struct MeasureCommand {
  MeasureOptions options;
  bool check = false;
};

MeasureCommand parse_measure_options(Args& args) {
  MeasureCommand c;
  MeasureOptions& options = c.options;
  while (!args.done()) {
    const std::string option = args.next_option();
    if (option == "--out") {
      options.out_dir = args.value(option);
    } else if (option == "--model") {
      for (const std::string& m : args.values(option)) options.models.push_back(m);
    } else if (option == "--shapes") {
      options.shapes_file = args.value(option);
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
      c.check = true;
    } else if (option == "--seed") {
      options.seed = parse_number<uint64_t>(option, args.value(option));
    } else {
      throw UsageError("measure: unknown option " + option);
    }
  }
  return c;
}

// The GEMMs of the shape file `--shapes` names, if any; its errors are the user's.
std::vector<ShapeFileGemm> read_shapes_option(const MeasureOptions& options) {
  try {
    if (!options.shapes_file.empty()) return read_shape_file(options.shapes_file);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--shapes: ") + e.what());
  }
  return {};
}

// `measure`: the kernel checks when asked, then the measurements. Points that did not fit in
// the GPU's memory are listed, and the exit status says so (the rows that fit are written).
int run_measure(const MeasureOptions& options, bool check) {
  if (int rc = require_device(true)) return rc;
  if (check) {
    if (int rc = run_check(options.seed)) return rc;
  }
  const MeasureReport report = run_measurements(options, std::cout);
  if (report.points_not_fitting_memory > 0) {
    std::cerr << "batchsim-calibrate: " << report.points_not_fitting_memory
              << " points did not fit in the GPU's memory, and were not measured:\n";
    for (const std::string& line : report.not_fitting_memory) std::cerr << "  " << line << "\n";
    std::cerr << "The rows that fit are written to " << options.out_dir.string()
              << ". A GPU with more memory, or a higher --tp / --ep in the shape file, measures the rest.\n";
    return kExitDidNotFit;
  }
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 2) throw UsageError("missing command");
  const std::string command = argv[1];
  Args args(argc, argv);
  if (command == "--help" || command == "-h" || command == "help") return print_usage();
  if ((command == "measure" || command == "check" || command == "info" || command == "shapes") && args.wants_help()) {
    return print_command_help(command);
  }
  if (command == "info") return run_info(args);
  if (command == "check") return run_check_command(args);
  if (command != "measure" && command != "shapes") throw UsageError("unknown command '" + command + "'");

  MeasureCommand measure = parse_measure_options(args);
  MeasureOptions& options = measure.options;
  if (options.out_dir.empty() && command == "measure") throw UsageError("measure needs --out DIR");
  try {
    options = resolve_defaults(options);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--model: ") + e.what());
  }
  const std::vector<ShapeFileGemm> shape_file = read_shapes_option(options);
  if (command == "shapes") {
    print_shapes(options, shape_file);
    return 0;
  }
  return run_measure(options, measure.check);
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
