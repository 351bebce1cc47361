#include "sim/kv_transfer.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "hwmodel/base/error.h"

namespace batchsim {

namespace {

// Bandwidths are datasheet figures per GPU and direction. The latencies are not datasheet
// figures but a round per-transfer cost of the order of one RDMA or NCCL point-to-point round
// trip with its completion (the profiles' interconnect_latency_s for one small NCCL collective
// is 10 us, hwmodel/hardware_profile.cpp); --kv-link-latency-us replaces them.
const std::vector<KvLink> kLinks = {
    // NVIDIA H100 SXM datasheet: NVLink 4 at 900 GB/s bidirectional per GPU, 450 GB/s each way
    // (prefill and decode GPUs in one NVSwitch node: DistServe's placement for slow clusters).
    {"nvlink", 3600, 10,
     "NVLink 4 within a node: 450 GB/s per GPU each way (H100 SXM datasheet, 900 GB/s bidirectional)"},
    // NVIDIA ConnectX-7: 400 Gb/s InfiniBand NDR, one per GPU in a DGX H100 (Splitwise's
    // H100 machines, ISCA'24 section V).
    {"ib", 400, 10, "InfiniBand NDR between nodes: 400 Gb/s per GPU (ConnectX-7, one per GPU as in DGX H100)"},
    // NVIDIA ConnectX-6 Dx: up to 200 GbE with RoCE v2, the RDMA NIC of A100-generation cloud
    // nodes; Ethernet RDMA adds a little latency over InfiniBand.
    {"roce", 200, 20, "RoCE v2 between nodes: 200 Gb/s per GPU (ConnectX-6 Dx 200GbE)"},
    // PCIe Gen4 x16: 32 GB/s each way (the A100's host link), the KV staged through host memory
    // as a CPU-offloading connector moves it.
    {"pcie", 256, 20, "through host memory over PCIe Gen4 x16: 32 GB/s each way"},
};

const std::vector<std::pair<KvTransferMode, std::string_view>> kModes = {
    {KvTransferMode::kPull, "pull"},
    {KvTransferMode::kLayerwise, "layerwise"},
};

}  // namespace

const std::vector<KvLink>& kv_links() { return kLinks; }

KvLink resolve_kv_link(std::string_view name, std::optional<double> gbps, std::optional<double> latency_us,
                       std::string_view option) {
  const auto it = std::find_if(kLinks.begin(), kLinks.end(), [&](const KvLink& l) { return l.name == name; });
  if (it == kLinks.end()) {
    std::string known;
    for (const KvLink& l : kLinks) known += (known.empty() ? "" : ", ") + l.name;
    throw UserError(
        fmt::format("{} '{}': unknown link (expected one of {}; --kv-link-gbps and "
                    "--kv-link-latency-us replace its figures)",
                    option, name, known));
  }
  KvLink link = *it;
  if (gbps) {
    if (!(*gbps > 0) || !std::isfinite(*gbps)) {
      throw UserError(fmt::format("--kv-link-gbps {}: the link's bandwidth must be > 0 Gb/s", *gbps));
    }
    link.gbps = *gbps;
    link.description = fmt::format("{} Gb/s per GPU (--kv-link-gbps)", *gbps);
  }
  if (latency_us) {
    if (!(*latency_us >= 0) || !std::isfinite(*latency_us)) {
      throw UserError(fmt::format("--kv-link-latency-us {}: must be >= 0", *latency_us));
    }
    link.latency_us = *latency_us;
  }
  return link;
}

std::string_view kv_transfer_mode_name(KvTransferMode mode) {
  for (const auto& [m, name] : kModes) {
    if (m == mode) return name;
  }
  return "?";
}

KvTransferMode parse_kv_transfer_mode(std::string_view name, std::string_view option) {
  for (const auto& [m, n] : kModes) {
    if (n == name) return m;
  }
  throw UserError(fmt::format("{} '{}': unknown transfer mode (expected pull or layerwise)", option, name));
}

double kv_transfer_seconds(const KvLink& link, double bytes, int parallel_gpus) {
  return link.latency_us * 1e-6 + bytes / (link.bytes_per_s() * std::max(1, parallel_gpus));
}

double layerwise_exposed_bytes(double bytes, int num_layers, double bytes_per_s, double overlap_s) {
  const double last_layer = bytes / std::max(1, num_layers);
  return std::min(bytes, std::max(last_layer, bytes - bytes_per_s * std::max(0.0, overlap_s)));
}

KvLinkSchedule::Slot KvLinkSchedule::reserve(size_t src, size_t dst, SimTime ready, SimTime duration) {
  SimTime& a = free_at_.at(src);
  SimTime& b = free_at_.at(dst);
  const SimTime start = std::max({ready, a, b});
  const SimTime end = start + duration;
  a = end;
  b = end;
  return {start, end};
}

}  // namespace batchsim
