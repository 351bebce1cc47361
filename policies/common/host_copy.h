// batchsim — the time to copy a request's KV between the GPU and host memory.
//
// vLLM v0's swap preemption (swap_out/swap_in) and SGLang's decode-side retraction in
// disaggregation mode (offload_kv_cache) copy a request's KV over PCIe instead of dropping it.
// Each GPU of the tensor-parallel group copies its share of the heads over its own link, so the
// time is one GPU's share at the profile's PCIe bandwidth; 0 where the profile has none.
#pragma once

#include <cstdint>

#include "hwmodel/base/time.h"
#include "hwmodel/cost_model.h"

namespace batchsim {

inline SimTime host_kv_copy_time(const CostModel& cm, int64_t tokens) {
  const double pcie = cm.gpu().pcie_bytes_per_s;
  if (pcie <= 0) return SimTime::zero();
  const double bytes =
      static_cast<double>(tokens) * static_cast<double>(cm.model().kv_bytes_per_token()) / cm.tensor_parallel();
  return SimTime::from_seconds(bytes / pcie);
}

}  // namespace batchsim
