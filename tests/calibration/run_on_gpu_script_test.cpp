// calibration/run-on-gpu.sh without a GPU: every step after the build runs with stand-in
// binaries (tests/calibration/stand_ins/: nvidia-smi, batchsim-calibrate, batchsim), so that the
// one GPU run cannot fail on a typo in the fit, the validation or the copy. The stand-in
// measurement is a directory written by calibration's own writers, and where this build tree
// has the real `batchsim`, the fit and validation run for real on it. Bad input (no NVIDIA GPU,
// a compute capability below 8.0, a model batchsim-calibrate does not know, shapes that do not
// fit) must fail with the reason and a non-zero exit, and still copy what was measured.
// calibration/cuda-arch.sh, which turns nvidia-smi's compute capability into the architecture
// the script builds for, is checked on its own at the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "calibration/device_info.h"
#include "calibration/measurement_csv.h"
#include "run_command.h"
#include "test_support.h"

namespace batchsim::calibration {
namespace {

using shell::CommandResult;
using shell::last_line;
using shell::quoted;
using shell::run_command;

const std::filesystem::path kStandIns = ::batchsim::testing::source_dir() / "tests" / "calibration" / "stand_ins";

SampleSummary exactly(double seconds) { return summarize(std::vector<double>(5, seconds)); }

// A measurement directory as `measure --quick` writes it (on an H200 unless told): device.json,
// bandwidth.csv, and llama-2-7b's mlp.csv (TP 1, 2, 4, 8) and attention files, with roofline
// times (80% of 989 TFLOP/s, 90% of 4.8 TB/s, 4 us per launch; compute and memory combined as
// a 3-norm, smoother than max() as real kernels are).
std::filesystem::path write_measurement_dir(const std::filesystem::path& dir,
                                            const std::string& device_name = "NVIDIA H200") {
  DeviceInfo info;
  info.name = device_name;
  info.compute_capability_major = 9;
  info.sm_count = 132;
  info.memory_bytes = int64_t{141} << 30;
  info.timer = "cupti";
  info.measured_at_utc = "2025-01-01T00:00:00Z";
  write_device_info_json(info, dir / "device.json");
  BandwidthCsvWriter bandwidth(dir / "bandwidth.csv");
  bandwidth.write({"stream_read", int64_t{1} << 30, TimerKind::kCupti, exactly(0.25e-3)});
  const CalibrationModel& model = find_calibration_model("llama-2-7b");
  const std::filesystem::path model_dir = model_measurement_dir(dir, device_slug(info.name), model);
  const auto roofline_s = [](double flops, double bytes) {
    return 4e-6 + std::cbrt(std::pow(flops / (989e12 * 0.8), 3) + std::pow(bytes / (4.8e12 * 0.9), 3));
  };
  MlpCsvWriter mlp(model_dir / "mlp.csv");
  for (int tp : {1, 2, 4, 8}) {
    for (int m : quick_token_count_grid(16384)) {
      MlpRow row{&model, m, tp, "bf16", TimerKind::kCupti, {}};
      for (const GemmShape& g : layer_gemm_shapes(model, tp)) {
        const double flops = 2.0 * m * static_cast<double>(g.k * g.n);
        const double bytes =
            2.0 * (m * static_cast<double>(g.k) + static_cast<double>(g.k * g.n) + m * static_cast<double>(g.n));
        row.ops[static_cast<size_t>(g.op)] = exactly(roofline_s(flops, bytes));
      }
      mlp.write(row);
    }
  }
  AttentionCsvWriter attention(model_dir / "attention.csv", AttentionFileKind::kVidur);
  const double d = model.head_dim, heads = model.num_heads;
  for (int batch : {1, 8, 32}) {
    for (int context : {512, 2048, 8192}) {
      AttentionRow row;
      row.model = &model;
      row.max_model_len_tokens = 16384;
      row.batch_size = batch;
      row.kv_cache_size_tokens = row.kv_cache_size_max_tokens = context;
      row.kv_cache_size_sum_tokens = int64_t{batch} * context;
      row.attention_backend = "batchsim_paged_v1";
      row.dtype = "bf16";
      row.stats = exactly(roofline_s(4 * heads * d * batch * context, 4 * heads * d * batch * context));
      attention.write(row);
    }
  }
  for (int chunk : {256, 1024}) {
    for (int prior : {0, 1024}) {
      AttentionRow row;
      row.model = &model;
      row.max_model_len_tokens = 16384;
      row.batch_size = 1;
      row.prefill_chunk_size_tokens = chunk;
      row.kv_cache_size_tokens = prior;
      row.kv_cache_size_max_tokens = row.kv_cache_size_sum_tokens = chunk + prior;
      row.is_prefill = true;
      row.attention_backend = "batchsim_prefill_wmma";
      row.dtype = "bf16";
      const double flops = 4 * heads * d * chunk * (prior + chunk / 2.0);
      row.stats = exactly(roofline_s(flops / 0.5, 4 * heads * d * (chunk + prior)));
      attention.write(row);
    }
  }
  AttentionCsvWriter mixed(model_dir / "attention_mixed.csv", AttentionFileKind::kMixedDecode);
  return dir;
}

struct ScriptRun {
  CommandResult result;
  std::filesystem::path out, build, log;
  std::string run_log;          // $OUT/run.log
  std::string calls;            // every stand-in call, one per line
  std::set<std::string> files;  // what $OUT holds
};

// Runs the script with the stand-ins; `env` adds or overrides variables (NAME=VALUE words).
ScriptRun run_script(const std::string& name, const std::vector<std::string>& env,
                     const std::filesystem::path& batchsim = kStandIns / "batchsim",
                     const std::string& device_name = "NVIDIA H200") {
  const std::filesystem::path dir = ::batchsim::testing::scratch_dir(name);
  ScriptRun run;
  run.out = dir / "out";
  run.build = dir / "build";
  run.log = dir / "calls.log";
  const std::filesystem::path meas = write_measurement_dir(dir / "measured", device_name);
  std::string command = "env OUT=" + quoted(run.out) + " BUILD_DIR=" + quoted(run.build) +
                        " CALIBRATE_BIN=" + quoted(kStandIns / "batchsim-calibrate") +
                        " BATCHSIM_BIN=" + quoted(batchsim) + " NVIDIA_SMI=" + quoted(kStandIns / "nvidia-smi") +
                        " FAKE_MEAS=" + quoted(meas) + " FAKE_LOG=" + quoted(run.log) + " SCRIPT_BUDGET_S=300";
  for (const std::string& e : env) command += " " + quoted(e);
  command += " bash " + quoted(::batchsim::testing::source_dir() / "calibration" / "run-on-gpu.sh");
  run.result = run_command(command);
  run.run_log = ::batchsim::testing::read_text_file(run.out / "run.log");
  run.calls = ::batchsim::testing::read_text_file(run.log);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(run.out, ec))
    run.files.insert(entry.path().filename().string());
  return run;
}

std::string describe(const ScriptRun& r) {
  return "exit " + std::to_string(r.result.exit_code) + "\n--- output:\n" + r.result.output + "\n--- calls:\n" +
         r.calls;
}

TEST(RunOnGpuScript, StandInsRunEveryLaterStepAndTheResultsComeBack) {
  const ScriptRun r = run_script("done", {});
  ASSERT_EQ(r.result.exit_code, 0) << describe(r);
  EXPECT_TRUE(last_line(r.run_log).ends_with("done")) << r.run_log;
  EXPECT_EQ(r.files, (std::set<std::string>{"run.log", "meas.tar.gz", "device.json", "bandwidth.csv", "mlp.csv",
                                            "attention.csv", "profile.yaml", "validation.json"}))
      << describe(r);
  // Built for the GPU nvidia-smi reports (an H100: compute capability 9.0).
  EXPECT_NE(r.run_log.find("building for CUDA architectures: 90"), std::string::npos) << r.run_log;
  // The steps in order, with the options the real binaries take.
  const std::vector<std::string> expected_calls = {
      "batchsim-calibrate shapes --quick --model llama-2-7b",
      "batchsim-calibrate info",
      "batchsim-calibrate check",
      "batchsim-calibrate measure --quick --out " + (r.build / "probe").string() + " --time-budget-s 0.001",
      "batchsim-calibrate measure --quick --model llama-2-7b --out " + (r.build / "meas").string() + " --time-budget-s",
      "batchsim calibrate fit " + (r.build / "meas").string() + " --out " + (r.build / "profile.yaml").string() +
          " --fit-on llama-2-7b --base-gpu h200",
      "batchsim validate --measurements " + (r.build / "meas").string() + " --fit-on llama-2-7b --out " +
          (r.build / "validation.json").string() + " --base-gpu h200"};
  size_t at = 0;
  for (const std::string& call : expected_calls) {
    const size_t found = r.calls.find(call, at);
    ASSERT_NE(found, std::string::npos) << "missing or out of order: " << call << "\n" << describe(r);
    at = found + call.size();
  }
  // The copies are the measured files themselves.
  EXPECT_EQ(::batchsim::testing::read_text_file(r.out / "mlp.csv"),
            ::batchsim::testing::read_text_file(r.out.parent_path() / "measured" / "compute" / "h200" / "meta-llama" /
                                                "Llama-2-7b-hf" / "mlp.csv"));
  const CommandResult listing = run_command("tar tzf " + quoted(r.out / "meas.tar.gz"));
  EXPECT_NE(listing.output.find("meas/compute/h200/meta-llama/Llama-2-7b-hf/attention_mixed.csv"), std::string::npos)
      << listing.output;
}

TEST(RunOnGpuScript, AFailedMeasurementStillBringsBackWhatWasMeasured) {
  for (const auto& [status, reason] : std::map<std::string, std::string>{
           {"1", "FAILED: measure (exit status 1)"},
           {"4", "FAILED: measure (some shapes did not fit in the GPU's memory; the rest is measured)"}}) {
    SCOPED_TRACE("measure exits " + status);
    const ScriptRun r = run_script("measure-exits-" + status, {"FAKE_MEASURE_EXIT=" + status});
    EXPECT_EQ(r.result.exit_code, 1) << describe(r);
    EXPECT_NE(last_line(r.run_log).find(reason), std::string::npos) << last_line(r.run_log);
    for (const char* file : {"run.log", "meas.tar.gz", "device.json", "bandwidth.csv", "mlp.csv", "attention.csv"}) {
      EXPECT_TRUE(r.files.count(file)) << file << "\n" << describe(r);
    }
    // The fit still ran on what was measured: a cut-short run keeps its TP 1 rows.
    EXPECT_TRUE(r.files.count("profile.yaml")) << describe(r);
  }
}

TEST(RunOnGpuScript, NoNvidiaGpuFailsFirstWithTheReason) {
  for (const auto& [name, env, why] : std::vector<std::tuple<std::string, std::vector<std::string>, std::string>>{
           {"no-nvidia-smi",
            {"NVIDIA_SMI=/nonexistent/nvidia-smi"},
            "no NVIDIA GPU: /nonexistent/nvidia-smi is not installed"},
           {"no-driver", {"FAKE_NVIDIA_SMI_FAIL=1"}, "communicate with the NVIDIA driver"},
           {"no-gpu-listed", {"FAKE_GPUS="}, "lists none"},
           {"turing", {"FAKE_GPUS=Tesla T4, 7.5"}, "unsupported GPU: sm_75 is below sm_80"}}) {
    SCOPED_TRACE(name);
    const ScriptRun r = run_script(name, env);
    EXPECT_EQ(r.result.exit_code, 1) << describe(r);
    EXPECT_NE(r.run_log.find(why), std::string::npos) << r.run_log;
    EXPECT_NE(last_line(r.run_log).find("FAILED: device"), std::string::npos) << last_line(r.run_log);
    EXPECT_EQ(r.calls, "") << "nothing may run on a machine the script refuses";
    EXPECT_EQ(r.files, std::set<std::string>{"run.log"}) << describe(r);
  }
}

TEST(RunOnGpuScript, AnyModelIsMeasuredFromItsShapeFile) {
  // Not built into batchsim-calibrate: the script asks the batchsim CLI for its shapes.
  const ScriptRun made = run_script("model-shapes", {"MODEL=deepseek-v3", "TP=8", "EP=8"});
  ASSERT_EQ(made.result.exit_code, 0) << describe(made);
  const std::string shapes = (made.build / "shapes.csv").string();
  EXPECT_NE(made.calls.find("batchsim calibrate shapes --model deepseek-v3 --tp 8 --ep 8 --out " + shapes),
            std::string::npos)
      << describe(made);
  EXPECT_NE(made.calls.find("batchsim-calibrate measure --quick --model llama-2-7b --shapes " + shapes + " --out"),
            std::string::npos)
      << describe(made);
  // A built-in one is measured as llama-2-7b is.
  const ScriptRun builtin = run_script("model-builtin", {"MODEL=llama-3-8b"});
  ASSERT_EQ(builtin.result.exit_code, 0) << describe(builtin);
  EXPECT_NE(builtin.calls.find("batchsim-calibrate measure --quick --model llama-2-7b llama-3-8b --out"),
            std::string::npos)
      << describe(builtin);
  // Without the CLI, the script says how to make the shape file, before anything runs on the GPU.
  const ScriptRun refused = run_script("model-without-cli", {"MODEL=deepseek-v3"}, "/nonexistent/batchsim");
  EXPECT_EQ(refused.result.exit_code, 1) << describe(refused);
  EXPECT_NE(refused.run_log.find("MODEL=deepseek-v3 is not built into batchsim-calibrate"), std::string::npos)
      << refused.run_log;
  EXPECT_NE(refused.run_log.find("batchsim calibrate shapes --model deepseek-v3"), std::string::npos)
      << refused.run_log;
  EXPECT_NE(last_line(refused.run_log).find("FAILED: input"), std::string::npos) << refused.run_log;
  EXPECT_EQ(refused.calls.find("batchsim-calibrate measure"), std::string::npos) << describe(refused);
  // A shape file that is not there fails before the build.
  const ScriptRun missing = run_script("missing-shapes", {"SHAPES=/nonexistent/shapes.csv"});
  EXPECT_EQ(missing.result.exit_code, 1) << describe(missing);
  EXPECT_NE(missing.run_log.find("SHAPES=/nonexistent/shapes.csv: no such file"), std::string::npos) << missing.run_log;
  EXPECT_EQ(missing.calls, "");
}

TEST(RunOnGpuScript, TheRealBatchsimFitsAndValidatesTheMeasurement) {
  const std::filesystem::path batchsim = shell::built_batchsim();
  if (batchsim.empty()) GTEST_SKIP() << "experiments/batchsim is not built in " << BATCHSIM_BINARY_DIR;
  // An H100 measures into compute/h100-80gb-hbm3/, a name hwmodel's fit does not map to a
  // datasheet GPU by itself: the script must name the base GPU (this failed once).
  for (const auto& [device, base] :
       std::map<std::string, std::string>{{"NVIDIA H200", "h200"}, {"NVIDIA H100 80GB HBM3", "h100-sxm"}}) {
    SCOPED_TRACE(device);
    const ScriptRun r = run_script("real-batchsim-" + base, {}, batchsim, device);
    ASSERT_EQ(r.result.exit_code, 0) << describe(r);
    EXPECT_TRUE(last_line(r.run_log).ends_with("done")) << r.run_log;
    EXPECT_NE(r.run_log.find("fitting onto the ceilings of " + base), std::string::npos) << r.run_log;
    ASSERT_TRUE(r.files.count("profile.yaml") && r.files.count("validation.json")) << describe(r);
    const std::string profile = ::batchsim::testing::read_text_file(r.out / "profile.yaml");
    EXPECT_NE(profile.find("ceilings of " + base), std::string::npos) << profile.substr(0, 2000);
    // The profile is one `batchsim run` takes.
    const CommandResult run = run_command(quoted(batchsim) + " run --gpu " + quoted(r.out / "profile.yaml") +
                                          " --num-requests 20 --arrival poisson:5");
    EXPECT_EQ(run.exit_code, 0) << run.output;
  }
}

// calibration/cuda-arch.sh: nvidia-smi's compute capabilities -> the architectures to build for.
TEST(CudaArchScript, ComputeCapabilityBecomesTheArchitecture) {
  const std::string script = quoted(::batchsim::testing::source_dir() / "calibration" / "cuda-arch.sh");
  const std::string smi = "NVIDIA_SMI=" + quoted(kStandIns / "nvidia-smi");
  struct Case {
    std::string gpus;
    int exit_code;
    std::string printed;  // stdout's last line when it succeeds, else a part of the reason
  };
  for (const Case& c :
       std::vector<Case>{{"NVIDIA A100-SXM4-80GB, 8.0", 0, "80"},
                         {"NVIDIA A10, 8.6", 0, "86"},
                         {"NVIDIA L40S, 8.9", 0, "89"},
                         {"NVIDIA H100 80GB HBM3, 9.0", 0, "90"},
                         {"NVIDIA B200, 10.0", 0, "100"},
                         {"NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0", 0, "120"},
                         {"NVIDIA H200, 9.0\nNVIDIA H200, 9.0", 0, "90"},
                         {"NVIDIA A100-SXM4-80GB, 8.0\nNVIDIA H100 80GB HBM3, 9.0", 0, "80;90"},
                         {"Tesla T4, 7.5\nNVIDIA H100 80GB HBM3, 9.0", 0, "90"},
                         {"Tesla T4, 7.5", 4, "unsupported GPU: sm_75 is below sm_80"},
                         {"Tesla V100-SXM2-16GB, 7.0", 4, "Tesla V100-SXM2-16GB (compute capability 7.0)"},
                         {"", 3, "lists none"},
                         {"NVIDIA H100, [N/A]", 3, "cannot read the compute capability"}}) {
    SCOPED_TRACE(c.gpus);
    // NVCC=/nonexistent: whether this machine's nvcc knows an architecture is not what is checked here.
    const CommandResult r = run_command("env " + smi + " FAKE_GPUS=" + quoted(c.gpus) + " NVCC=/nonexistent " + script);
    EXPECT_EQ(r.exit_code, c.exit_code) << r.output;
    if (c.exit_code == 0) {
      EXPECT_EQ(last_line(r.output), c.printed) << r.output;
    } else {
      EXPECT_NE(r.output.find(c.printed), std::string::npos) << r.output;
    }
  }
  const CommandResult given = run_command("env CUDA_ARCH=90 NVIDIA_SMI=/nonexistent NVCC=/nonexistent " + script);
  EXPECT_EQ(given.exit_code, 0) << given.output;
  EXPECT_EQ(last_line(given.output), "90");
  const CommandResult old = run_command("env CUDA_ARCH=75 NVCC=/nonexistent " + script);
  EXPECT_EQ(old.exit_code, 4) << old.output;
  const CommandResult none = run_command("env NVIDIA_SMI=/nonexistent/nvidia-smi " + script);
  EXPECT_EQ(none.exit_code, 3) << none.output;
  EXPECT_NE(none.output.find("no NVIDIA GPU"), std::string::npos) << none.output;
}

}  // namespace
}  // namespace batchsim::calibration
