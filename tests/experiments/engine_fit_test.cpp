// `batchsim calibrate engine` (experiments/fidelity/engine_fit.h): the fit recovers a residual that made
// the "measurements", scores what it held out, and the shipped fitted engines equal a fresh fit
// on NVIDIA's H100 serving benchmarks.
#include <cmath>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "experiments/cli/cli.h"
#include "experiments/fidelity/validate_serving.h"
#include "hwmodel/engine_profile.h"
#include "test_support.h"

namespace batchsim {
namespace {

using ::testing::HasSubstr;

constexpr int kRequestsPerClient = 3;

// A silicon file whose "measured" figures are what batchsim predicts with `truth`: vLLM rows of
// Llama-3.1-8B at TP 1 and 2, three output lengths, two concurrencies.
std::string measured_with(const EngineProfile& truth, const std::string& think_time = "") {
  ServingReplayOptions o;
  o.gpu = "h100-sxm-fitted";
  o.requests_per_client = kRequestsPerClient;
  o.think_time = think_time;
  std::string csv = testing::kSiliconHeader;
  for (const int tp : {1, 2}) {
    for (const int osl : {24, 48, 96}) {
      for (const int c : {4, 24}) {
        ServingRow r;
        r.backend = "vllm";
        r.version = "0.12.0";
        r.model_path = "meta-llama/Llama-3.1-8B-Instruct";
        r.model = "llama-3.1-8b";
        r.isl = 256;
        r.osl = osl;
        r.concurrency = c;
        r.tp = tp;
        const ServingPrediction p = replay_serving_row(r, o, &truth);
        csv += fmt::format("x,src,vllm,0.12.0,{},h100_sxm,,agg,256,{},,,{},{},1,,1,1,,,,,,,,,,,,,,,{:.17g},{:.17g}\n",
                           r.model_path, osl, c, tp, p.ttft_ms, p.tpot_ms);
      }
    }
  }
  return csv;
}

nlohmann::json fit(const std::filesystem::path& csv, const std::string& backend, const std::string& holdout,
                   const std::filesystem::path& dir, int requests_per_client, const std::string& think_time = "") {
  std::ostringstream out, err;
  std::vector<std::string> args = {"calibrate",
                                   "engine",
                                   "--measurements",
                                   csv.string(),
                                   "--gpu",
                                   "h100-sxm-fitted",
                                   "--backend",
                                   backend,
                                   "--holdout",
                                   holdout,
                                   "--requests-per-client",
                                   std::to_string(requests_per_client),
                                   "--out",
                                   (dir / "e.yaml").string(),
                                   "--report",
                                   (dir / "r.json").string()};
  if (!think_time.empty()) args.insert(args.end(), {"--think-time", think_time});
  const int rc = cli_main(args, out, err);
  EXPECT_EQ(rc, 0) << err.str();
  std::ifstream in(dir / "r.json");
  return nlohmann::json::parse(in);
}

TEST(EngineFit, RecoversTheResidualThatMadeTheMeasurements) {
  const auto dir = testing::scratch_dir("engine-fit-recover");
  EngineProfile truth = resolve_engine("vllm");
  truth.residual = {1.2e-3, 2.0e-5, 2.5e-4};
  const auto csv = testing::write_text_file(dir, "silicon.csv", measured_with(truth));
  const nlohmann::json j = fit(csv, "vllm", "none", dir, kRequestsPerClient);
  EXPECT_NEAR(j["residual"]["per_iteration_s"].get<double>(), 1.2e-3, 0.02 * 1.2e-3);
  EXPECT_NEAR(j["residual"]["per_sequence_s"].get<double>(), 2.0e-5, 0.02 * 2.0e-5);
  EXPECT_NEAR(j["residual"]["per_extra_worker_s"].get<double>(), 2.5e-4, 0.02 * 2.5e-4);
  EXPECT_GT(j["before"]["fit"]["tpot_mape"].get<double>(), 5);  // the gap was there
  EXPECT_LT(j["after"]["fit"]["tpot_mape"].get<double>(), 0.5);
  EXPECT_EQ(j["after"]["held_out"]["count"], 0);
  // The engine written is the base with that residual, and reads back as such.
  const EngineProfile written = load_engine_profile(dir / "e.yaml");
  EXPECT_EQ(written.name, "vllm-fitted");
  EXPECT_EQ(written.cpu.per_sequence_s, truth.cpu.per_sequence_s);
  EXPECT_EQ(written.residual.per_iteration_s, j["residual"]["per_iteration_s"].get<double>());
  EXPECT_THAT(written.sources, HasSubstr("residual fitted by batchsim calibrate engine on 12 vllm rows"));
}

// Measurements made by clients that turn around: the fit replays them with the same
// --think-time, so it recovers the residual and the TTFT too, and the engine records it.
TEST(EngineFit, ReplaysTheClientsTurnaroundItIsGiven) {
  const auto dir = testing::scratch_dir("engine-fit-think");
  EngineProfile truth = resolve_engine("vllm");
  truth.residual = {1.2e-3, 2.0e-5, 2.5e-4};
  const auto csv = testing::write_text_file(dir, "silicon.csv", measured_with(truth, "uniform:0:0.02"));
  const nlohmann::json with = fit(csv, "vllm", "none", dir, kRequestsPerClient, "uniform:0:0.02");
  EXPECT_NEAR(with["residual"]["per_iteration_s"].get<double>(), 1.2e-3, 0.02 * 1.2e-3);
  EXPECT_LT(with["after"]["fit"]["ttft_mape"].get<double>(), 0.5);
  EXPECT_THAT(load_engine_profile(dir / "e.yaml").sources, HasSubstr("; clients thinking uniform:0:0.02 s)"));
  // Without it the clients move in lockstep, and the TTFT is another.
  const nlohmann::json without = fit(csv, "vllm", "none", dir, kRequestsPerClient);
  EXPECT_GT(without["after"]["fit"]["ttft_mape"].get<double>(), 1);
}

TEST(EngineFit, HoldsOutEveryOtherOutputLengthAndScoresIt) {
  const auto dir = testing::scratch_dir("engine-fit-holdout");
  EngineProfile truth = resolve_engine("vllm");
  truth.residual = {1.0e-3, 3.0e-5, 0};
  const auto csv = testing::write_text_file(dir, "silicon.csv", measured_with(truth));
  const nlohmann::json j = fit(csv, "vllm", "osl", dir, kRequestsPerClient);
  // Output lengths 24, 48, 96: the fit sees 24 and 96 (8 rows), scores 48 (4 rows).
  EXPECT_EQ(j["after"]["fit"]["count"], 8);
  EXPECT_EQ(j["after"]["held_out"]["count"], 4);
  EXPECT_GT(j["before"]["held_out"]["tpot_mape"].get<double>(), 5);
  EXPECT_LT(j["after"]["held_out"]["tpot_mape"].get<double>(), 0.5);
}

TEST(EngineFit, BadInputIsNamed) {
  const auto dir = testing::scratch_dir("engine-fit-bad");
  const auto csv = testing::write_text_file(dir, "silicon.csv", measured_with(resolve_engine("vllm")));
  auto error_of = [&](std::vector<std::string> args) {
    return testing::user_error_of([&] {
      std::ostringstream out, err;
      args.insert(args.begin(), {"calibrate", "engine"});
      cli_main(args, out, err);
    });
  };
  const std::string m = csv.string(), o = (dir / "e.yaml").string();
  EXPECT_THAT(error_of({"--measurements", m, "--gpu", "h100-sxm-fitted", "--out", o}),
              HasSubstr("--backend is required"));
  EXPECT_THAT(error_of({"--measurements", m, "--gpu", "h100-sxm-fitted", "--backend", "vllm"}), HasSubstr("--out"));
  EXPECT_THAT(
      error_of({"--measurements", m, "--gpu", "h100-sxm-fitted", "--backend", "vllm", "--out", o, "--holdout", "tp"}),
      HasSubstr("--holdout: 'tp' is not osl, isl or none"));
  // One prompt length only: nothing to hold out by it.
  EXPECT_THAT(
      error_of({"--measurements", m, "--gpu", "h100-sxm-fitted", "--backend", "vllm", "--out", o, "--holdout", "isl"}),
      HasSubstr("the rows have one isl only (256)"));
  EXPECT_THAT(error_of({"--measurements", m, "--gpu", "h100-sxm-fitted", "--backend", "sglang", "--out", o}),
              HasSubstr("no rows to replay"));
}

// The shipped hwmodel/engines/*-h100-fitted.yaml carry what the fit gives today on the shipped
// H100 benchmarks (their comments say how to regenerate them); their held-out figures are quoted
// in hwmodel/README.md.
TEST(EngineFit, ShippedFittedEnginesEqualAFreshFit) {
  const auto measurements = testing::measured_dir() / "aiconfigurator/silicon/h100_sxm_dense_agg.csv.gz";
  for (const char* backend : {"vllm", "sglang", "trtllm"}) {
    const auto dir = testing::scratch_dir(std::string("engine-fit-shipped-") + backend);
    const nlohmann::json j = fit(measurements, backend, "osl", dir, 20);
    const EngineProfile shipped = resolve_engine(std::string(backend) + "-h100-fitted");
    auto near = [](double fresh, double kept) { return std::abs(fresh - kept) <= 1e-9 * std::max(1e-6, kept); };
    EXPECT_TRUE(near(j["residual"]["per_iteration_s"].get<double>(), shipped.residual.per_iteration_s)) << backend;
    EXPECT_TRUE(near(j["residual"]["per_sequence_s"].get<double>(), shipped.residual.per_sequence_s)) << backend;
    EXPECT_TRUE(near(j["residual"]["per_extra_worker_s"].get<double>(), shipped.residual.per_extra_worker_s))
        << backend;
    // On the rows it never saw, the fitted residual brings TPOT within the target.
    EXPECT_LT(j["after"]["held_out"]["tpot_mape"].get<double>(), j["before"]["held_out"]["tpot_mape"].get<double>());
    if (std::string(backend) != "trtllm") {
      EXPECT_LE(j["after"]["held_out"]["tpot_mape"].get<double>(), 10.0);
    }
  }
}

}  // namespace
}  // namespace batchsim
