// libFuzzer harness: the experiment-file loader (parse, count, expand, check every planned run)
// and the --config reader of `batchsim run`. The run limit is kept small so that one input
// costs milliseconds. Seeds: experiments/data/*.yaml and tests/fuzz/seeds/run_config.
#include <string>

#include "experiments/run/run_config.h"
#include "experiments/study/experiment.h"
#include "fuzz_input.h"
#include "hwmodel/base/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto path = batchsim::fuzz::as_file(data, size, "experiment.yaml");
  try {
    const batchsim::Experiment e = batchsim::parse_experiment_text(text, path, {}, 200);
    if (batchsim::count_runs(e) != static_cast<int64_t>(batchsim::expand_runs(e).size())) __builtin_trap();
  } catch (const batchsim::UserError&) {
  }
  try {
    batchsim::RunConfig c = batchsim::default_run_config();
    batchsim::apply_yaml_config(path, c);
    batchsim::validate(c);
  } catch (const batchsim::UserError&) {
  }
  return 0;
}
