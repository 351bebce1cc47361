// How far to trust a run (issue 12, item 9): summary.json's `trust` carries the GPU profile's
// validation figures, or says outright that there are none; `batchsim run` prints them in one
// line, and the experiment report shows them once per GPU profile used.
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "experiments/cli/cli.h"
#include "hwmodel/hardware_profile.h"
#include "test_support.h"

namespace batchsim {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using ::testing::HasSubstr;
using ::testing::Not;

// `batchsim ARGS`: its stdout; the exit status must be 0.
std::string run_cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  EXPECT_EQ(cli_main(args, out, err), 0) << err.str();
  return out.str();
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A short run on `gpu`: its summary.json and what it printed.
std::pair<ordered_json, std::string> run_on(const std::string& gpu, const fs::path& out) {
  const std::string printed = run_cli({"run", "--gpu", gpu, "--num-requests", "20", "--out", out.string()});
  return {ordered_json::parse(testing::read_text_file(out / "summary.json")), printed};
}

// The trust block holds the profile's figures as they are, operator by operator in its order.
void expect_trust_is(const ordered_json& trust, const HardwareProfile& gpu) {
  EXPECT_EQ(trust["profile"], gpu.name);
  EXPECT_EQ(trust["source"], gpu.source);
  EXPECT_EQ(trust["validated"], true);
  EXPECT_EQ(trust["measured_on"], gpu.validation.measured_on);
  EXPECT_EQ(trust["held_out"], gpu.validation.held_out);
  EXPECT_EQ(trust["scored_on"], gpu.validation.scored_on);
  ASSERT_EQ(trust["operators"].size(), gpu.validation.operators.size());
  size_t i = 0;
  for (const auto& [name, e] : trust["operators"].items()) {
    const OperatorError& want = gpu.validation.operators[i++];
    EXPECT_EQ(name, want.op);
    EXPECT_EQ(e["mape"].get<double>(), want.mape_percent) << name;
    EXPECT_EQ(e["p90"].get<double>(), want.p90_percent) << name;
    EXPECT_EQ(e["count"].get<int64_t>(), want.count) << name;
  }
  // End to end, when the profile was replayed on serving benchmarks (validate-serving).
  ASSERT_EQ(trust.contains("serving"), !gpu.validation.serving.empty());
  if (gpu.validation.serving.empty()) return;
  EXPECT_EQ(trust["serving"]["measured_on"], gpu.validation.serving.measured_on);
  ASSERT_EQ(trust["serving"]["backends"].size(), gpu.validation.serving.backends.size());
  for (const ServingError& want : gpu.validation.serving.backends) {
    const auto& e = trust["serving"]["backends"][want.backend];
    EXPECT_EQ(e["ttft_mape"].get<double>(), want.ttft_mape_percent) << want.backend;
    EXPECT_EQ(e["tpot_mape"].get<double>(), want.tpot_mape_percent) << want.backend;
    EXPECT_EQ(e["count"].get<int64_t>(), want.count) << want.backend;
    // The error's sign where the profile records it, and nothing made up where it does not.
    EXPECT_EQ(e.contains("ttft_median_ratio"), want.ttft_median_ratio > 0) << want.backend;
    if (want.ttft_median_ratio > 0) {
      EXPECT_EQ(e["ttft_median_ratio"].get<double>(), want.ttft_median_ratio);
    }
    if (want.tpot_median_ratio > 0) {
      EXPECT_EQ(e["tpot_median_ratio"].get<double>(), want.tpot_median_ratio);
    }
  }
}

TEST(Trust, ARunOnAFittedProfileCarriesItsFigures) {
  const fs::path dir = testing::scratch_dir("trust_fitted");
  const HardwareProfile h100 = resolve_gpu("h100-sxm-fitted");
  ASSERT_FALSE(h100.validation.empty());
  const auto [summary, printed] = run_on("h100-sxm-fitted", dir / "h100");
  expect_trust_is(summary["trust"], h100);
  // One line on the terminal, with every operator's MAPE.
  EXPECT_EQ(occurrences(printed, "trust: "), 1u);
  EXPECT_THAT(printed, HasSubstr("trust: h100-sxm-fitted (vllm 0.24.0 kernels), held-out MAPE on " +
                                 h100.validation.measured_on + ": "));
  for (const OperatorError& e : h100.validation.operators) {
    EXPECT_THAT(printed, HasSubstr(fmt::format("{} {:.1f}%", e.op, e.mape_percent)));
  }
  // The shipped H100 profile was replayed on NVIDIA's measured serving benchmarks too.
  ASSERT_FALSE(h100.validation.serving.empty());
  for (const ServingError& e : h100.validation.serving.backends) {
    ASSERT_GT(e.ttft_median_ratio, 0) << e.backend;  // the shipped profile records the error's sign
    EXPECT_THAT(printed, HasSubstr(fmt::format("{} TTFT {:.1f}% ({:.2f}x) TPOT {:.1f}% ({:.2f}x)", e.backend,
                                               e.ttft_mape_percent, e.ttft_median_ratio, e.tpot_mape_percent,
                                               e.tpot_median_ratio)));
  }
  EXPECT_THAT(printed, HasSubstr("; end to end on " + h100.validation.serving.measured_on +
                                 " (MAPE, median predicted/measured): "));

  // A profile file's own block reaches the summary as written (in-sample figures too).
  const fs::path mine = testing::write_text_file(dir, "mine.yaml", R"(base: a100-80gb
name: my-a100
source: fitted on my own GPU
validation:
  measured_on: batchsim-calibrate on one A100 SXM, vLLM 0.6
  held_out: false
  scored_on: the rows it was fitted on
  operators:
    gemm: {mape: 3.2, p90: 7.5, count: 420}
    attn_decode: {mape: 9.9, p90: 21, count: 64}
)");
  const auto [own, own_printed] = run_on(mine.string(), dir / "mine");
  expect_trust_is(own["trust"], load_hardware_profile(mine));
  EXPECT_EQ(own["trust"]["operators"]["gemm"]["mape"], 3.2);
  EXPECT_THAT(own_printed, HasSubstr("trust: my-a100, in-sample MAPE on batchsim-calibrate on one A100 SXM, "
                                     "vLLM 0.6: gemm 3.2%, attn_decode 9.9%"));
}

TEST(Trust, ARunOnADatasheetProfileSaysItIsNotValidated) {
  const fs::path dir = testing::scratch_dir("trust_datasheet");
  const auto [summary, printed] = run_on("a100-80gb", dir / "datasheet");
  const ordered_json& trust = summary["trust"];
  EXPECT_EQ(trust["profile"], "a100-80gb");
  EXPECT_EQ(trust["source"], "datasheet");
  EXPECT_EQ(trust["validated"], false);
  EXPECT_THAT(trust["reason"].get<std::string>(), HasSubstr("never compared with measurements"));
  EXPECT_FALSE(trust.contains("operators"));
  EXPECT_THAT(printed, HasSubstr("trust: a100-80gb not validated: datasheet ceilings"));

  // A profile derived from a fitted one is not what was scored: it says it has no figures.
  const fs::path derived =
      testing::write_text_file(dir, "faster.yaml", "base: h100-sxm-fitted\nhbm_bytes_per_s: 4.8e12\n");
  const auto [own, own_printed] = run_on(derived.string(), dir / "derived");
  EXPECT_EQ(own["trust"]["validated"], false);
  EXPECT_THAT(own["trust"]["reason"].get<std::string>(), HasSubstr("no `validation` block"));
  EXPECT_THAT(own_printed, HasSubstr("trust: faster not validated"));
}

// A profile moved onto another GPU (`calibrate transfer`) was never measured there: it carries
// none of its source's figures, names its source, and states what transfers lose as this
// project measured it, in summary.json and on the terminal; the file keeps that through a save.
TEST(Trust, ARunOnATransferredProfileStatesTheTransferNotTheSourcesFigures) {
  const fs::path dir = testing::scratch_dir("trust_transferred");
  const fs::path file = dir / "h200-fitted.yaml";
  run_cli({"calibrate", "transfer", "h100-sxm-fitted", "--to", "h200", "--out", file.string()});
  const HardwareProfile moved = load_hardware_profile(file);
  EXPECT_EQ(moved.transferred_from, "h100-sxm-fitted");
  EXPECT_TRUE(moved.validation.empty());
  ASSERT_FALSE(resolve_gpu("h100-sxm-fitted").validation.empty());  // what it must not claim
  const auto [summary, printed] = run_on(file.string(), dir / "run");
  const ordered_json& trust = summary["trust"];
  EXPECT_EQ(trust["validated"], false);
  EXPECT_EQ(trust["transferred_from"], "h100-sxm-fitted");
  EXPECT_FALSE(trust.contains("operators"));
  EXPECT_FALSE(trust.contains("serving"));
  const std::string reason = trust["reason"].get<std::string>();
  EXPECT_THAT(reason, HasSubstr("never measured on this GPU"));
  EXPECT_THAT(reason, HasSubstr("A100 -> A40: GEMM 9.4%, iteration 9.4%"));
  ASSERT_EQ(trust["transfer_error_measured"].size(), std::size(kMeasuredTransfers));
  EXPECT_EQ(trust["transfer_error_measured"][1]["gemm_mape"], kMeasuredTransfers[1].gemm_mape_percent);
  EXPECT_THAT(printed, HasSubstr("trust: h200-fitted not validated: transferred from h100-sxm-fitted to h200 ceilings, "
                                 "never measured on this GPU"));
  EXPECT_THAT(printed, Not(HasSubstr("held-out MAPE")));
}

// An experiment over two GPUs: report.md says per profile how far to trust the figures, once
// each however many runs used it; results.csv leaves the per-GPU block out.
TEST(Trust, TheReportShowsEveryGpuProfileUsedOnce) {
  const fs::path dir = testing::scratch_dir("trust_report");
  const fs::path file = testing::write_text_file(dir, "two-gpus.yaml", R"(name: two-gpus
base: {model: llama-2-7b, num-requests: 20, prompt-len: "fixed:128", output-len: "fixed:16"}
policies: [continuous, vllm]
axes:
  gpu: [h100-sxm-fitted, a100-80gb]
)");
  const std::string printed =
      run_cli({"compare", file.string(), "--out", (dir / "out").string(), "--no-plots", "--jobs", "1"});
  const std::string report = testing::read_text_file(dir / "out" / "report.md");
  EXPECT_EQ(occurrences(report, "## How far to trust these figures"), 1u);
  const HardwareProfile h100 = resolve_gpu("h100-sxm-fitted");
  EXPECT_EQ(occurrences(report, "- `h100-sxm-fitted` (" + h100.source + "): held out (" + h100.validation.scored_on +
                                    ") on " + h100.validation.measured_on + "\n"),
            1u);
  EXPECT_THAT(report, HasSubstr("| profile | operator | MAPE % | p90 % | rows |"));
  for (const OperatorError& e : h100.validation.operators) {
    EXPECT_EQ(occurrences(report, fmt::format("| h100-sxm-fitted | {} | {:.1f} | {:.1f} | {} |\n", e.op, e.mape_percent,
                                              e.p90_percent, e.count)),
              1u)
        << e.op;
  }
  EXPECT_THAT(report, HasSubstr("| profile | serving engine | TTFT MAPE % | TTFT predicted / measured | TPOT MAPE % | "
                                "TPOT predicted / measured | benchmark runs |"));
  for (const ServingError& e : h100.validation.serving.backends) {
    EXPECT_EQ(occurrences(report, fmt::format("| h100-sxm-fitted | {} | {:.1f} | {:.2f} | {:.1f} | {:.2f} | {} |\n",
                                              e.backend, e.ttft_mape_percent, e.ttft_median_ratio, e.tpot_mape_percent,
                                              e.tpot_median_ratio, e.count)),
              1u)
        << e.backend;
  }
  EXPECT_EQ(occurrences(report, "- `a100-80gb` (datasheet): **not validated**: "), 1u);
  EXPECT_THAT(report, Not(HasSubstr("| a100-80gb |")));
  // The section stands before the results it qualifies.
  EXPECT_LT(report.find("## How far to trust these figures"), report.find("## Throughput"));

  // The terminal: one trust line per profile after the table.
  EXPECT_EQ(occurrences(printed, "trust: h100-sxm-fitted (vllm 0.24.0 kernels), held-out MAPE on "), 1u);
  EXPECT_EQ(occurrences(printed, "trust: a100-80gb not validated"), 1u);

  // Every run's summary.json keeps its block; results.csv does not repeat it on every row.
  const std::string csv = testing::read_text_file(dir / "out" / "results.csv");
  EXPECT_THAT(csv.substr(0, csv.find('\n')), Not(HasSubstr("trust")));
  EXPECT_THAT(csv.substr(0, csv.find('\n')), HasSubstr("throughput.output_tokens_per_s"));
}

// Issue 44, item 5: a profile names the kernels it timed, and a run or a check on other kernels
// says so.
TEST(Trust, AProfileNamesItsKernelsAndARunOnAnotherFrameworkIsTold) {
  EXPECT_EQ(resolve_gpu("h100-sxm-fitted").kernels, "vllm 0.24.0");
  EXPECT_EQ(resolve_gpu("b200-fitted").kernels, "vllm 0.24.0");
  EXPECT_EQ(resolve_gpu("rtx-4090-fitted").kernels, "vllm 0.19.0");
  EXPECT_EQ(resolve_gpu("a100-80gb-fitted").kernels, "sarathi-serve (Vidur's profiling, 2024)");
  EXPECT_EQ(resolve_gpu("h100-sxm").kernels, "");
  const fs::path dir = testing::scratch_dir("kernels");
  auto trust_of = [&](const std::string& policy) {
    const fs::path out = dir / policy;
    const std::string printed = run_cli({"run", "--gpu", "h100-sxm-fitted", "--model", "llama-3-8b", "--policy", policy,
                                         "--num-requests", "20", "--out", out.string()});
    EXPECT_THAT(printed, HasSubstr("trust: h100-sxm-fitted (vllm 0.24.0 kernels), held-out"));
    return std::make_pair(printed, ordered_json::parse(testing::read_text_file(out / "summary.json"))["trust"]);
  };
  const auto [vllm_text, vllm] = trust_of("vllm");
  EXPECT_EQ(vllm["kernels"], "vllm 0.24.0");
  EXPECT_FALSE(vllm.contains("kernels_note")) << "vllm-async is of the vllm family";
  const auto [trt_text, trt] = trust_of("trtllm");
  ASSERT_TRUE(trt.contains("kernels_note"));
  EXPECT_THAT(trt["kernels_note"].get<std::string>(), HasSubstr("this run's engine is trtllm"));
  EXPECT_THAT(trt_text, HasSubstr("; note: the profile timed vllm 0.24.0's kernels"));
  // The kernels round-trip through a profile file, and a check on other kernels says so.
  HardwareProfile p = resolve_gpu("h100-sxm-fitted");
  p.kernels = "sglang 0.5.2";
  save_hardware_profile(p, dir / "p.yaml");
  EXPECT_EQ(load_hardware_profile(dir / "p.yaml").kernels, "sglang 0.5.2");
  const std::string checked =
      run_cli({"validate", "--measurements", (testing::measured_dir() / "vidur").string(), "--device", "a100", "--gpu",
               "h100-sxm-fitted", "--kernels", "sarathi-serve (Vidur's profiling, 2024)"});
  EXPECT_THAT(checked,
              HasSubstr("profile 'h100-sxm-fitted' was measured on vllm 0.24.0 kernels; these measurements timed "
                        "sarathi-serve (Vidur's profiling, 2024)'s"));
}

}  // namespace
}  // namespace batchsim
