// batchsim — the time to copy a request's KV between the GPU and host memory.
//
// vLLM v0's swap preemption (swap_out/swap_in) and SGLang's decode-side retraction in
// disaggregation mode (offload_kv_cache) copy a request's KV over PCIe instead of dropping it.
// Each GPU of the tensor-parallel group copies its share of the heads over its own link, so the
// time is one GPU's share at the profile's PCIe bandwidth; 0 where the profile has none.
#pragma once

#include <algorithm>
#include <cstdint>

#include "hwmodel/base/time.h"
#include "hwmodel/cost_model.h"

namespace batchsim {

inline double kv_bytes_per_gpu(const CostModel& cm, int64_t tokens) {
  return static_cast<double>(tokens) * static_cast<double>(cm.model().kv_bytes_per_token()) / cm.tensor_parallel();
}

inline SimTime host_kv_copy_time(const CostModel& cm, int64_t tokens) {
  const double pcie = cm.gpu().pcie_bytes_per_s;
  if (pcie <= 0) return SimTime::zero();
  return SimTime::from_seconds(kv_bytes_per_gpu(cm, tokens) / pcie);
}

// KV offload's disk tier (PagedKvCache::set_disk_tier): each GPU reads its share from local NVMe
// into host memory and copies it over PCIe, block after block, so the slower of the two links
// sets the pace (LMCache's local disk backend reads a chunk into a host buffer, then copies it
// to the GPU). The profile's disk_bytes_per_s must be set (the run refuses a disk tier without).
inline SimTime disk_kv_read_time(const CostModel& cm, int64_t tokens) {
  const double disk = cm.gpu().disk_bytes_per_s;
  if (disk <= 0) return SimTime::zero();
  const double pcie = cm.gpu().pcie_bytes_per_s;
  return SimTime::from_seconds(kv_bytes_per_gpu(cm, tokens) / (pcie > 0 ? std::min(disk, pcie) : disk));
}

}  // namespace batchsim
