// libFuzzer harness: the trace readers (Azure CSV, generic CSV, Mooncake JSONL; plain or gzip,
// as LineReader detects it), and --trace-sessions' linking of a Mooncake trace's rows into
// conversations by their hash_ids (sim/workload/trace_sessions.h). Seeds: the first lines of every
// shipped trace (scripts/fuzz.sh).
#include <vector>

#include "fuzz_input.h"
#include "hwmodel/base/error.h"
#include "sim/workload/trace_reader.h"
#include "sim/workload/trace_sessions.h"

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
    if (!t.prefix_blocks.empty()) {
      // --trace-sessions: every turn continues an earlier request, and a session is a chain.
      batchsim::SessionLinks links;
      batchsim::link_trace_sessions(t.requests, t.prefix_blocks, t.lines, path.string(), links);
      std::vector<int> continued(t.requests.size(), 0);
      for (size_t i = 0; i < links.predecessor.size(); ++i) {
        const auto p = links.predecessor[i];
        if (p >= static_cast<batchsim::RequestId>(i) || (p >= 0 && ++continued[static_cast<size_t>(p)] > 1))
          __builtin_trap();
      }
    }
  } catch (const batchsim::UserError&) {
  }
  return 0;
}
