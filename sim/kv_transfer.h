// batchsim — moving a request's KV cache from a prefill replica to a decode replica: the links,
// the transfer's size and duration, and how transfers share a replica's link.
//
// Prefill/decode disaggregation (sim/simulation.h, "Disaggregated pools") ends every prefill
// with a transfer of the request's KV over a link. Its size is the request's KV, all layers and
// KV heads: tokens x 2 (K and V) x layers x KV heads x head_dim x KV dtype bytes
// (ModelSpec::kv_bytes_per_token). Each GPU of a tensor-parallel group holds 1/tp of the heads
// and sends its shard over its own NIC (one ConnectX-7 per H100 in a DGX H100, as Splitwise's
// and DistServe's testbeds have one NIC or NVLink port per GPU), so shards move in parallel and
// a replica of tp GPUs moves tp x the per-GPU bandwidth; between pools of different TP degrees
// the side with fewer GPUs, hence fewer NICs, is the bottleneck: min(tp_prefill, tp_decode) x
// per-GPU bandwidth.
//
// Sharing: transfers QUEUE, first come first served, they do not share bandwidth. A transfer
// holds the sending replica's NIC and the receiving replica's NIC from its start to its end,
// and starts when both are free (reserved in the order transfers are requested). That is the
// behaviour of one RDMA queue pair per peer that posts a request's blocks as one batch (vLLM's
// NixlConnector reads a request's blocks in one xfer; Mooncake's TransferEngine batches a
// request's slices), and it makes a burst of long prompts show up as transfer queueing rather
// than as every transfer slowing down at once. Fair sharing would give the same total time and
// later first completions.
//
// Two modes:
//  * pull (DistServe, OSDI'24 section 4.4; vLLM's NixlConnector, whose decode side READs the
//    prompt blocks once its scheduler has allocated them: get_num_new_matched_tokens returns
//    load_kv_async=True, vllm/distributed/kv_transfer/kv_connector/v1/nixl/scheduler.py at
//    local-inference-lab/vllm@28be48f): the whole KV moves after the prefill, once the decode
//    replica has room for it; its full duration is exposed.
//  * layerwise (Splitwise, ISCA'24 section IV-C: the KV of each layer is sent while the next
//    layer computes; Mooncake FAST'25, layer-wise prefill with the transfer overlapped; vLLM's
//    KVConnectorBase_V1.save_kv_layer hook): what the link could carry while the prefill ran
//    is already across when it ends; at least the last layer's share (bytes / layers) is
//    exposed. The stream needs a destination, so the overlap is credited only when the decode
//    replica admits the request at its first schedule() after the prefill ends, i.e. it had
//    room (in Splitwise the token machine is chosen, and its memory taken, when the prompt
//    phase starts); a request that waits for decode memory moves all its bytes afterwards, as
//    a pull. The exposed share starts at that admission, and the overlapped share is not
//    charged to the link's queue, so under a burst layerwise understates queueing somewhat.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hwmodel/base/time.h"

namespace batchsim {

// A link between replicas: per-GPU bandwidth (one direction) and a fixed cost per transfer.
struct KvLink {
  std::string name;
  double gbps = 0;        // gigabits per second per GPU, one direction
  double latency_us = 0;  // fixed cost of one transfer (setup, completion)
  std::string description;
  double bytes_per_s() const { return gbps * 1e9 / 8; }
};

// nvlink, ib, roce, pcie (each cites its datasheet).
const std::vector<KvLink>& kv_links();
// The named link, its figures replaced by `gbps` / `latency_us` when given. Throws UserError
// naming the option for an unknown name, a bandwidth that is not > 0 or a latency < 0.
KvLink resolve_kv_link(std::string_view name, std::optional<double> gbps = std::nullopt,
                       std::optional<double> latency_us = std::nullopt, std::string_view option = "--kv-link");

enum class KvTransferMode : uint8_t { kPull, kLayerwise };
std::string_view kv_transfer_mode_name(KvTransferMode mode);
// Throws UserError naming `option` and the known modes.
KvTransferMode parse_kv_transfer_mode(std::string_view name, std::string_view option = "--kv-transfer");

// Seconds a transfer of `bytes` holds the link: latency + bytes / (per-GPU bandwidth x
// `parallel_gpus`), the GPUs whose NICs carry shards at once (min of the two TP degrees).
double kv_transfer_seconds(const KvLink& link, double bytes, int parallel_gpus);

// Bytes a layer-wise stream still has to move when the prefill ends after `overlap_s` seconds
// of streaming: at least the last of `num_layers` layers' share, at least what the link could
// not carry meanwhile (bytes - link rate x overlap_s).
double layerwise_exposed_bytes(double bytes, int num_layers, double bytes_per_s, double overlap_s);

// First-come-first-served reservations of each replica's NIC (see "Sharing" above): a transfer
// from `src` to `dst` that is ready at `ready` starts when both are free, and holds both for
// `duration`. Replicas are 0..n-1. Deterministic: the same requests in the same order give the
// same slots.
class KvLinkSchedule {
 public:
  explicit KvLinkSchedule(size_t num_replicas = 0) : free_at_(num_replicas, SimTime::zero()) {}
  struct Slot {
    SimTime start;
    SimTime end;
  };
  Slot reserve(size_t src, size_t dst, SimTime ready, SimTime duration);
  SimTime free_at(size_t replica) const { return free_at_.at(replica); }

 private:
  std::vector<SimTime> free_at_;
};

}  // namespace batchsim
