// batchsim — requests and workloads.
//
// A Request is immutable arrival data: when it arrives, how many prompt tokens it brings and
// how many output tokens it will generate before its end-of-sequence. Its progress through a
// server (tokens computed, tokens generated, preemptions, timestamps) lives in RequestProgress,
// owned by the simulation. Request ids are dense: a workload of n requests has ids 0..n-1 in
// arrival order, so per-request state is a plain vector indexed by id.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/time.h"

namespace batchsim {

using RequestId = int32_t;

struct Request {
  RequestId id = 0;
  SimTime arrival;
  int32_t prompt_tokens = 0;   // >= 1
  int32_t output_tokens = 0;   // >= 1; the first one is produced by the prefill
};

// Sorted by arrival (ties keep their input order); ids are 0..n-1 in that order.
using Workload = std::vector<Request>;

}  // namespace batchsim
