// libFuzzer harness: the trace readers (Azure CSV, generic CSV, Mooncake JSONL; plain or gzip,
// as LineReader detects it). Seeds: the first lines of every shipped trace (scripts/fuzz.sh).
#include "fuzz_input.h"
#include "hwmodel/base/error.h"
#include "sim/workload/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = batchsim::fuzz::as_file(data, size, "trace");
  try {
    const batchsim::TraceReadResult t = batchsim::read_trace_detailed(path, 0, 1.0);
    // What the reader promises (trace_reader.h): sorted arrivals from 0, lengths >= 1, and a
    // max_tokens column (when there is one) of limits >= 1, one per request.
    if (!t.max_tokens.empty() && t.max_tokens.size() != t.requests.size()) __builtin_trap();
    for (size_t i = 0; i < t.requests.size(); ++i) {
      const auto& r = t.requests[i];
      if (r.prompt_tokens < 1 || r.output_tokens < 1 || (i > 0 && r.arrival < t.requests[i - 1].arrival))
        __builtin_trap();
      if (!t.max_tokens.empty() && t.max_tokens[i] < 1) __builtin_trap();
    }
  } catch (const batchsim::UserError&) {
  }
  return 0;
}
