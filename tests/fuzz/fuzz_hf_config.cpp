// libFuzzer harness: the Hugging Face config.json reader, and every size the cost model derives
// from what it accepts (they must be positive: no wrapped products). Seeds: tests/fuzz/seeds/hf_config.
#include "fuzz_input.h"
#include "hwmodel/base/error.h"
#include "hwmodel/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = batchsim::fuzz::as_file(data, size, "config.json");
  try {
    const batchsim::ModelSpec m = batchsim::load_hf_config(path);
    if (m.total_params() <= 0 || m.weight_bytes() <= 0 || m.kv_bytes_per_token() <= 0 || m.active_params() <= 0 ||
        m.active_params() > m.total_params()) {
      __builtin_trap();
    }
  } catch (const batchsim::UserError&) {
  }
  return 0;
}
