// libFuzzer harness: the readers of measurement files a user hands `validate`, `calibrate` and
// `validate-serving`, and of engine profiles (issue 47: a fuzzer for every reader of user files).
// The first byte picks what the rest becomes:
//   0  an engine profile (YAML or JSON, hwmodel/engine_profile.h), which must write back and
//      read back;
//   1  a measured serving CSV in aiconfigurator's silicon layout (read_serving_rows,
//      experiments/fidelity/validate_serving.h), whose rows must be replayable;
//   2  an operator-timing CSV of Vidur's or calibration's layout (read_measurements,
//      hwmodel/fit/measurements.h).
// Seeds: tests/fuzz/seeds/measurements (the shipped files' first lines; scripts/fuzz.sh).
#include <string>

#include "experiments/fidelity/validate_serving.h"
#include "fuzz_input.h"
#include "hwmodel/base/error.h"
#include "hwmodel/engine_profile.h"
#include "hwmodel/fit/measurements.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int which = data[0] % 3;
  try {
    if (which == 0) {
      const auto path = batchsim::fuzz::as_file(data + 1, size - 1, "engine.yaml");
      const batchsim::EngineProfile e = batchsim::load_engine_profile(path);
      const std::string text = batchsim::engine_profile_yaml(e);
      const auto again =
          batchsim::fuzz::as_file(reinterpret_cast<const uint8_t*>(text.data()), text.size(), "written.yaml");
      batchsim::load_engine_profile(again);  // a UserError here is a writer bug: it escapes
    } else if (which == 1) {
      const auto path = batchsim::fuzz::as_file(data + 1, size - 1, "serving.csv");
      batchsim::ServingReplayOptions o;
      o.gpu = "h100-sxm";
      const batchsim::ServingRows rows = batchsim::read_serving_rows(path.string(), o);
      // What the reader promises of every row it keeps: something to replay.
      for (const auto& r : rows.rows) {
        if (r.isl < 1 || r.osl < 1 || r.concurrency < 1 || !(r.ttft_ms > 0) || !(r.tpot_ms > 0)) __builtin_trap();
        if (r.tp < 1 || r.dp < 1 || r.ep < 1) __builtin_trap();
      }
    } else {
      const auto path = batchsim::fuzz::as_file(data + 1, size - 1, "mlp.csv");
      const batchsim::Measurements m = batchsim::read_measurements(path);
      for (const auto& row : m.token_ops) {
        if (row.num_tokens < 1) __builtin_trap();
      }
    }
  } catch (const batchsim::UserError&) {
  }
  return 0;
}
