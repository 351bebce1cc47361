// batchsim — hardware profiles: what a GPU can do, and how close real kernels get to it.
//
// A profile is the datasheet ceilings (peak dense FLOP/s, HBM bytes/s, memory, interconnect,
// PCIe) plus the efficiency parameters the roofline cost model applies to them. Built-in
// datasheet GPUs are profiles with default efficiencies; `load_hardware_profile` reads a
// YAML/JSON file (format documented in hwmodel/README.md), which is what calibration/ writes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace batchsim {

struct HardwareProfile {
  std::string name;
  std::string source;              // "datasheet", or what a fitted profile was fitted from
  double peak_flops = 0;           // dense BF16/FP16 FLOP/s of one GPU
  double hbm_bytes_per_s = 0;      // HBM bandwidth of one GPU
  int64_t memory_bytes = 0;        // HBM capacity of one GPU
  double interconnect_bytes_per_s = 0;  // per-GPU NVLink (or PCIe) bandwidth for collectives
  double interconnect_latency_s = 0;    // fixed cost of one collective
  double pcie_bytes_per_s = 0;     // host<->device, used by swap preemption

  // Efficiency parameters of the roofline (see cost_model.h for how each is used).
  // GEMM: achieved FLOP/s = peak_flops * gemm_eta_max * M / (M + gemm_m_half).
  double gemm_eta_max = 0.7;
  double gemm_m_half = 0;
  double hbm_efficiency = 0.8;      // achieved/datasheet bandwidth for streaming reads
  double prefill_attention_efficiency = 0.5;  // of peak_flops
  double decode_attention_efficiency = 0.7;   // of hbm_bytes_per_s
  double decode_attention_per_seq_s = 0;      // per sequence, per layer
  double kernel_launch_s = 0;                 // per operator launch
  double iteration_overhead_s = 0;            // CPU: scheduling, input prep, sampling (fixed)
  double iteration_overhead_per_seq_s = 0;    // CPU: per sequence in the batch
};

const std::vector<HardwareProfile>& builtin_gpus();
// A built-in GPU by name, or a profile file (YAML or JSON) when `name_or_path` names a file.
HardwareProfile resolve_gpu(std::string_view name_or_path);
HardwareProfile load_hardware_profile(const std::filesystem::path& path);
void save_hardware_profile(const HardwareProfile& profile, const std::filesystem::path& path);

}  // namespace batchsim
