// batchsim — built-in datasheet GPUs and the profile file reader/writer.
#include "hwmodel/hardware_profile.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

#include "hwmodel/base/error.h"
#include "hwmodel/base/line_reader.h"
#include "hwmodel/base/yaml_fields.h"
#include "hwmodel/model_spec.h"
#include "hwmodel/shipped_profiles.h"

namespace batchsim {

namespace {

using yaml_fields::at_line;
using yaml_fields::bad_value;
using yaml_fields::key_text;
using yaml_fields::read_double;
using yaml_fields::read_integer;

constexpr double kGB = 1e9;
constexpr double kTera = 1e12;
constexpr int64_t kMiB = int64_t{1} << 20;

// Datasheet ceilings; memory as the driver reports it (nvidia-smi "MiB"), which is the total
// that vLLM's gpu_memory_utilization multiplies (torch.cuda.mem_get_info).
// Interconnect: per-GPU, per-direction NVLink bandwidth (half the bidirectional datasheet
// figure), which is what a ring all-reduce's bus bandwidth is bounded by. Latency: a round
// figure for one small NCCL all-reduce within a node. PCIe: per direction.
// The efficiency parameters keep the defaults of HardwareProfile: datasheet defaults, NOT
// fitted (see hwmodel/README.md; fitted profiles live in hwmodel/profiles/).
HardwareProfile datasheet(std::string name, double tflops, double fp8_tflops, double hbm_gb_per_s, int64_t mem_mib,
                          double link_gb_per_s, double link_latency_us, double pcie_gb_per_s, int sm_count,
                          double fp4_tflops = 0, double internode_gb_per_s = 0) {
  HardwareProfile p;
  p.peak_fp4_flops = fp4_tflops * kTera;
  p.internode_bytes_per_s = internode_gb_per_s * kGB;
  // One RDMA exchange between nodes: a round figure above NVLink's (DeepEP's low-latency
  // kernels: 77 us for a 128-token dispatch at EP 8 rising to 118-194 us across 2-32 nodes,
  // docs/REFERENCE-moe-spec-offload.md 1.3).
  p.internode_latency_s = internode_gb_per_s > 0 ? 20e-6 : 0;
  p.sm_count = sm_count;
  p.name = std::move(name);
  p.source = "datasheet";
  p.peak_flops = tflops * kTera;
  p.peak_fp8_flops = fp8_tflops * kTera;
  p.hbm_bytes_per_s = hbm_gb_per_s * kGB;
  p.memory_bytes = mem_mib * kMiB;
  p.interconnect_bytes_per_s = link_gb_per_s * kGB;
  p.interconnect_latency_s = link_latency_us * 1e-6;
  p.pcie_bytes_per_s = pcie_gb_per_s * kGB;
  return p;
}

// SM counts (the last argument): A100 108, H100/H200 SXM 132, L40S 142, A40 84 (NVIDIA
// whitepapers and datasheets); they set the waves of decode attention (roofline.h).
// FP8 (the third argument): dense FP8 tensor-core TFLOP/s, the datasheets' figure "with
// sparsity" halved; 0 for Ampere GPUs, which have no FP8 tensor cores.
std::vector<HardwareProfile> make_gpu_datasheets() {
  return {
      // NVIDIA A100 datasheet: 312 TFLOP/s dense BF16; NVLink 3 600 GB/s bidirectional;
      // PCIe Gen4 x16 64 GB/s bidirectional. 40 GB: 1,555 GB/s; 80 GB SXM: 2,039 GB/s.
      // Between nodes: one ConnectX-6 200 Gb/s HDR InfiniBand NIC per GPU (DGX A100), 25 GB/s.
      datasheet("a100-40gb", 312, 0, 1555, 40960, 300, 10, 32, 108, 0, 25),
      datasheet("a100-80gb", 312, 0, 2039, 81920, 300, 10, 32, 108, 0, 25),
      // NVIDIA H100 SXM5: 989 TFLOP/s dense BF16, 1,979 dense FP8 (3,958 with sparsity),
      // 3.35 TB/s, 80 GB; NVLink 4 900 GB/s bidirectional; PCIe Gen5 x16 128 GB/s
      // bidirectional.
      // Between nodes: one ConnectX-7 400 Gb/s InfiniBand NIC per GPU (DGX H100), 50 GB/s per
      // direction (NVIDIA's h100_sxm/system.yaml inter_node_bw in aiconfigurator).
      datasheet("h100-sxm", 989, 1979, 3350, 81559, 450, 10, 64, 132, 0, 50),
      // NVIDIA H200 SXM: H100 compute (989 BF16, 1,979 FP8) with 141 GB HBM3e at 4.8 TB/s;
      // same NVLink and PCIe.
      datasheet("h200", 989, 1979, 4800, 143771, 450, 10, 64, 132, 0, 50),
      // NVIDIA B200 (HGX/DGX B200; Blackwell datasheet, nvdam.widen.net/s/wwnsxrhm2w): 2,250
      // TFLOP/s dense BF16, 4,500 dense FP8, 9,000 dense FP4; HBM3e 8 TB/s (DGX B200: 64 TB/s
      // for 8 GPUs) and 180 GiB (aiconfigurator's b200_sxm/system.yaml mem_capacity); NVLink 5
      // 1.8 TB/s bidirectional; PCIe Gen6 x16 128 GB/s per direction; one ConnectX-8 800 Gb/s
      // NIC per GPU (100 GB/s per direction); 148 SMs.
      datasheet("b200", 2250, 4500, 8000, 184320, 900, 10, 128, 148, 9000, 100),
      // NVIDIA L40S: 362 TFLOP/s dense BF16, 733 dense FP8 (1,466 with sparsity), 864 GB/s,
      // 48 GB; no NVLink, so collectives run over PCIe Gen4 x16 (32 GB/s per direction) with a
      // higher latency.
      datasheet("l40s", 362, 733, 864, 46068, 32, 25, 32, 142),
      // NVIDIA A40 (the other GPU of Vidur's measurements): 149.7 TFLOP/s dense FP16/BF16
      // tensor, 696 GB/s GDDR6, 48 GB; a two-GPU NVLink bridge at 112.5 GB/s per direction,
      // PCIe Gen4 x16. Ampere: no FP8.
      datasheet("a40", 149.7, 0, 696, 46068, 112.5, 15, 32, 84),
      // NVIDIA GeForce RTX 4090 (Ada AD102; NVIDIA Ada GPU architecture whitepaper v2.1,
      // appendix table 2): 165.2 TFLOP/s dense FP16/BF16 tensor with FP32 accumulate (vLLM's),
      // 330.3 dense FP8 with FP32 accumulate, 1,008 GB/s GDDR6X, 128 SMs. Memory: 24,080 MiB,
      // what CUDA reports (device_total_memory_bytes 25,250,627,584 in LLMServingSim's vLLM run,
      // measured/llmservingsim). No NVLink: collectives over PCIe Gen4 x16, 32 GB/s per direction.
      datasheet("rtx-4090", 165.2, 330.3, 1008, 24080, 32, 25, 32, 128),
      // NVIDIA RTX PRO 6000 Blackwell (GB202; NVIDIA RTX Blackwell GPU architecture whitepaper,
      // RTX PRO 6000 Blackwell Workstation/Server Edition): 503.8 TFLOP/s dense FP16/BF16 tensor
      // with FP32 accumulate, 1,007.6 dense FP8, 2,015 dense FP4; 96 GB GDDR7 at 1,792 GB/s; 188
      // SMs. No NVLink: PCIe Gen5 x16, 64 GB/s per direction.
      datasheet("rtx-pro-6000", 503.8, 1007.6, 1792, 98304, 64, 25, 64, 188, 2015.2),
  };
}

// Local NVMe per GPU, which KV offload's disk tier reads (--kv-offload ...,disk=GIB): DGX A100
// carries 4 x 3.84 TB U.2 NVMe drives for its 8 GPUs, DGX H100/H200 and DGX B200 8 x 3.84 TB
// (NVIDIA's DGX user guides, "internal storage"), and a datacenter PCIe Gen4 U.2 drive reads
// about 7 GB/s sequentially (Samsung PM1733: 7,000 MB/s; KIOXIA CM6: 6,900 MB/s, their
// datasheets): 3.5 GB/s per GPU on A100 systems, 7 on the others. A datasheet ceiling for whole
// blocks, not a measurement. Workstation GPUs (L40S, A40, RTX) have no standard system: unknown.
std::vector<HardwareProfile> make_builtin_gpus() {
  std::vector<HardwareProfile> gpus = make_gpu_datasheets();
  for (HardwareProfile& p : gpus) {
    if (p.name == "a100-40gb" || p.name == "a100-80gb") p.disk_bytes_per_s = 3.5 * kGB;
    if (p.name == "h100-sxm" || p.name == "h200" || p.name == "b200") p.disk_bytes_per_s = 7 * kGB;
  }
  return gpus;
}

// One table of the numeric keys of a profile file, so that reading, writing and the list of
// known keys cannot drift apart. Key names are the member names (units in the names).
struct NumberKey {
  std::string key;
  std::function<double&(HardwareProfile&)> get;
  bool is_efficiency = false;                           // must lie in (0, 1]
  std::function<double(const HardwareProfile&)> value;  // what `get` refers to, of a const profile
};

const std::vector<NumberKey>& number_keys() {
  static const std::vector<NumberKey> keys = [] {
    std::vector<NumberKey> k;
    auto add = [&k](std::string key, double HardwareProfile::*member, bool efficiency = false) {
      k.push_back({std::move(key), [member](HardwareProfile& p) -> double& { return p.*member; }, efficiency,
                   [member](const HardwareProfile& p) { return p.*member; }});
    };
    add("peak_flops", &HardwareProfile::peak_flops);
    add("peak_fp8_flops", &HardwareProfile::peak_fp8_flops);
    add("peak_fp4_flops", &HardwareProfile::peak_fp4_flops);
    add("hbm_bytes_per_s", &HardwareProfile::hbm_bytes_per_s);
    add("interconnect_bytes_per_s", &HardwareProfile::interconnect_bytes_per_s);
    add("interconnect_latency_s", &HardwareProfile::interconnect_latency_s);
    add("pcie_bytes_per_s", &HardwareProfile::pcie_bytes_per_s);
    add("gpus_per_node", &HardwareProfile::gpus_per_node);
    add("internode_bytes_per_s", &HardwareProfile::internode_bytes_per_s);
    add("internode_latency_s", &HardwareProfile::internode_latency_s);
    add("gemm_eta_max", &HardwareProfile::gemm_eta_max, true);
    add("gemm_m_half", &HardwareProfile::gemm_m_half);
    add("gemm_roofline_exponent", &HardwareProfile::gemm_roofline_exponent);
    add("hbm_efficiency", &HardwareProfile::hbm_efficiency, true);
    add("prefill_attention_efficiency", &HardwareProfile::prefill_attention_efficiency, true);
    add("prefill_attention_causal_efficiency", &HardwareProfile::prefill_attention_causal_efficiency, true);
    add("decode_attention_efficiency", &HardwareProfile::decode_attention_efficiency, true);
    add("decode_attention_per_seq_s", &HardwareProfile::decode_attention_per_seq_s);
    add("kernel_launch_s", &HardwareProfile::kernel_launch_s);
    add("attention_launch_s", &HardwareProfile::attention_launch_s);
    add("prefill_attention_per_head_token_s", &HardwareProfile::prefill_attention_per_head_token_s);
    add("prefill_attention_per_seq_s", &HardwareProfile::prefill_attention_per_seq_s);
    add("decode_attention_per_seq_kv_head_s", &HardwareProfile::decode_attention_per_seq_kv_head_s);
    add("decode_attention_roofline_exponent", &HardwareProfile::decode_attention_roofline_exponent);
    add("sm_count", &HardwareProfile::sm_count);
    add("decode_attention_sm_bytes_per_s", &HardwareProfile::decode_attention_sm_bytes_per_s);
    add("prefill_attention_sm_bytes_per_s", &HardwareProfile::prefill_attention_sm_bytes_per_s);
    add("prefill_attention_roofline_exponent", &HardwareProfile::prefill_attention_roofline_exponent);
    add("prefill_attention_per_tile_s", &HardwareProfile::prefill_attention_per_tile_s);
    add("attention_kv_write_efficiency", &HardwareProfile::attention_kv_write_efficiency);
    add("attention_kv_write_per_token_s", &HardwareProfile::attention_kv_write_per_token_s);
    for (int i = 0; i < kNumElementwiseOps; ++i) {
      const std::string op = elementwise_op_name(static_cast<ElementwiseOp>(i));
      k.push_back({op + "_efficiency", [i](HardwareProfile& p) -> double& { return p.elementwise[i].efficiency; }, true,
                   [i](const HardwareProfile& p) { return p.elementwise[i].efficiency; }});
      k.push_back({op + "_launch_s", [i](HardwareProfile& p) -> double& { return p.elementwise[i].launch_s; }, false,
                   [i](const HardwareProfile& p) { return p.elementwise[i].launch_s; }});
    }
    return k;
  }();
  return keys;
}

// `fp8_block_gemms: [{kernel, scale, call_floor_s, rows}, ...]`, every key required, one entry per
// kernel (HardwareProfile::BlockFp8GemmFit).
std::vector<HardwareProfile::BlockFp8GemmFit> read_fp8_block_gemms(const YAML::Node& node, const std::string& where) {
  const std::string block = "fp8_block_gemms";
  if (!node.IsSequence())
    bad_value(at_line(where, node), block, "must be a list of {kernel, scale, call_floor_s, rows}");
  std::vector<HardwareProfile::BlockFp8GemmFit> fits;
  for (const YAML::Node& entry : node) {
    if (!entry.IsMap())
      bad_value(at_line(where, entry), block, "entries must be maps {kernel, scale, call_floor_s, rows}");
    HardwareProfile::BlockFp8GemmFit fit;
    std::set<std::string> seen;
    for (const auto& kv : entry) {
      const std::string key = key_text(kv.first, where);
      const std::string at = at_line(where, kv.first);
      if (!seen.insert(key).second) bad_value(at, block + "." + key, "is given twice");
      if (key == "kernel") {
        if (!kv.second.IsScalar() || kv.second.Scalar().empty())
          bad_value(at, block + ".kernel", "must be a kernel's name");
        fit.kernel = kv.second.Scalar();
      } else if (key == "scale") {
        fit.scale = read_double(kv.second, where, block + ".scale");
        if (!(fit.scale > 0 && std::isfinite(fit.scale)))
          bad_value(at, block + ".scale", "must be a finite number > 0");
      } else if (key == "call_floor_s") {
        fit.call_floor_s = read_double(kv.second, where, block + ".call_floor_s");
        if (!(fit.call_floor_s >= 0 && std::isfinite(fit.call_floor_s))) {
          bad_value(at, block + ".call_floor_s", "must be a finite number >= 0");
        }
      } else if (key == "rows") {
        fit.rows = read_integer(kv.second, where, block + ".rows", 0, 1e12);
      } else {
        bad_value(at, block + "." + key, "is unknown (kernel, scale, call_floor_s, rows)");
      }
    }
    if (seen.size() != 4) bad_value(at_line(where, entry), block, "entries need kernel, scale, call_floor_s and rows");
    for (const auto& f : fits) {
      if (f.kernel == fit.kernel)
        bad_value(at_line(where, entry), block, fmt::format("kernel {} is given twice", fit.kernel));
    }
    fits.push_back(fit);
  }
  return fits;
}

// `key` is the profile key: allreduce (NCCL) or custom_allreduce.
std::vector<AllReduceFit> read_allreduce(const YAML::Node& node, const std::string& where,
                                         const std::string& key_name) {
  if (!node.IsSequence()) {
    bad_value(where, key_name, "must be a list of {tp, latency_s, bytes_per_s}");
  }
  std::vector<AllReduceFit> fits;
  for (const YAML::Node& entry : node) {
    if (!entry.IsMap()) bad_value(where, key_name, "entries must be maps");
    AllReduceFit fit;
    for (const auto& kv : entry) {
      const std::string key = key_text(kv.first, where);
      if (key == "tp") {
        fit.tp = static_cast<int>(read_integer(kv.second, where, key_name + ".tp", 2, 4096));
      } else if (key == "latency_s") {
        fit.latency_s = read_double(kv.second, where, key_name + "." + key);
      } else if (key == "bytes_per_s") {
        fit.bytes_per_s = read_double(kv.second, where, key_name + "." + key);
      } else {
        bad_value(where, key_name + "." + key, "is unknown (tp, latency_s, bytes_per_s)");
      }
    }
    if (fit.tp < 2 || fit.bytes_per_s <= 0) {
      bad_value(where, key_name, "entries need tp >= 2 and bytes_per_s > 0");
    }
    fits.push_back(fit);
  }
  return fits;
}

// One line of text under `key` (the validation block's measured_on and scored_on): shown in
// run output and reports, where a line break would break the line.
std::string read_line(const YAML::Node& node, const std::string& where, const std::string& key) {
  if (!node.IsScalar()) bad_value(at_line(where, node), key, "must be a string");
  if (node.Scalar().empty() || node.Scalar().find('\n') != std::string::npos) {
    bad_value(at_line(where, node), key, "must be one line of text");
  }
  return node.Scalar();
}

// `serving: {measured_on, backends: {NAME: {ttft_mape, tpot_mape, count}}}`, every key required.
ServingValidation read_serving_validation(const YAML::Node& node, const std::string& where) {
  const std::string block = "validation.serving";
  if (!node.IsMap()) bad_value(at_line(where, node), block, "must be a map {measured_on, backends}");
  ServingValidation v;
  std::set<std::string> seen;
  for (const auto& kv : node) {
    const std::string key = key_text(kv.first, where);
    const std::string name = block + "." + key;
    if (!seen.insert(key).second) bad_value(at_line(where, kv.first), name, "is given twice");
    if (key == "measured_on") {
      v.measured_on = read_line(kv.second, where, name);
    } else if (key == "backends") {
      if (!kv.second.IsMap() || kv.second.size() == 0) {
        bad_value(at_line(where, kv.second), name, "must be a map of backends to {ttft_mape, tpot_mape, count}");
      }
      for (const auto& b : kv.second) {
        ServingError e;
        e.backend = key_text(b.first, where);
        const std::string b_name = name + "." + e.backend;
        for (const ServingError& other : v.backends) {
          if (other.backend == e.backend) bad_value(at_line(where, b.first), b_name, "is given twice");
        }
        if (!b.second.IsMap())
          bad_value(at_line(where, b.second), b_name, "must be a map {ttft_mape, tpot_mape, count}");
        std::set<std::string> fields;
        for (const auto& f : b.second) {
          const std::string field = key_text(f.first, where);
          const std::string field_name = b_name + "." + field;
          if (field == "ttft_mape")
            e.ttft_mape_percent = read_double(f.second, where, field_name);
          else if (field == "tpot_mape")
            e.tpot_mape_percent = read_double(f.second, where, field_name);
          else if (field == "ttft_median_ratio" || field == "tpot_median_ratio") {
            const double ratio = read_double(f.second, where, field_name);
            if (ratio <= 0) bad_value(at_line(where, f.second), field_name, "must be > 0 (predicted / measured)");
            (field == "ttft_median_ratio" ? e.ttft_median_ratio : e.tpot_median_ratio) = ratio;
          } else if (field == "count")
            e.count = read_integer(f.second, where, field_name, 1, 1e15);
          else
            bad_value(at_line(where, f.first), field_name,
                      "is unknown (ttft_mape, tpot_mape, count, ttft_median_ratio, tpot_median_ratio)");
          fields.insert(field);
        }
        for (const char* required : {"ttft_mape", "tpot_mape", "count"}) {
          if (!fields.count(required))
            bad_value(at_line(where, b.second), b_name, "needs ttft_mape, tpot_mape and count");
        }
        v.backends.push_back(std::move(e));
      }
    } else {
      bad_value(at_line(where, kv.first), name, "is unknown (measured_on, backends)");
    }
  }
  for (const char* key : {"measured_on", "backends"}) {
    if (!seen.count(key)) bad_value(at_line(where, node), block + "." + key, "is required");
  }
  return v;
}

// `validation: {measured_on, held_out, scored_on, operators: {NAME: {mape, p90, count}},
// [serving]}`: every key but serving required, so that a figure never stands without what it
// was measured on.
ProfileValidation read_validation(const YAML::Node& node, const std::string& where) {
  const std::string block = "validation";
  if (!node.IsMap()) {
    bad_value(at_line(where, node), block, "must be a map {measured_on, held_out, scored_on, operators}");
  }
  ProfileValidation v;
  std::set<std::string> seen;
  for (const auto& kv : node) {
    const std::string key = key_text(kv.first, where);
    const std::string name = block + "." + key;
    if (!seen.insert(key).second) bad_value(at_line(where, kv.first), name, "is given twice");
    if (key == "measured_on" || key == "scored_on") {
      (key == "measured_on" ? v.measured_on : v.scored_on) = read_line(kv.second, where, name);
    } else if (key == "held_out") {
      if (!kv.second.IsScalar() || !YAML::convert<bool>::decode(kv.second, v.held_out)) {
        bad_value(at_line(where, kv.second), name, "must be true or false");
      }
    } else if (key == "operators") {
      if (!kv.second.IsMap() || kv.second.size() == 0) {
        bad_value(at_line(where, kv.second), name, "must be a map of operator names to {mape, p90, count}");
      }
      for (const auto& op : kv.second) {
        OperatorError e;
        e.op = key_text(op.first, where);
        const std::string op_name = name + "." + e.op;
        if (e.op.empty()) bad_value(at_line(where, op.first), name, "names an operator with an empty name");
        for (const OperatorError& other : v.operators) {
          if (other.op == e.op) bad_value(at_line(where, op.first), op_name, "is given twice");
        }
        if (!op.second.IsMap()) bad_value(at_line(where, op.second), op_name, "must be a map {mape, p90, count}");
        std::set<std::string> fields;
        for (const auto& f : op.second) {
          const std::string field = key_text(f.first, where);
          const std::string field_name = op_name + "." + field;
          if (field == "mape")
            e.mape_percent = read_double(f.second, where, field_name);
          else if (field == "p90")
            e.p90_percent = read_double(f.second, where, field_name);
          else if (field == "count")
            e.count = read_integer(f.second, where, field_name, 1, 1e15);
          else
            bad_value(at_line(where, f.first), field_name, "is unknown (mape, p90, count)");
          fields.insert(field);
        }
        if (fields.size() != 3) bad_value(at_line(where, op.second), op_name, "needs mape, p90 and count");
        v.operators.push_back(std::move(e));
      }
    } else if (key == "serving") {
      v.serving = read_serving_validation(kv.second, where);
    } else {
      bad_value(at_line(where, kv.first), name, "is unknown (measured_on, held_out, scored_on, operators, serving)");
    }
  }
  for (const char* key : {"measured_on", "held_out", "scored_on", "operators"}) {
    if (!seen.count(key)) bad_value(at_line(where, node), block + "." + key, "is required");
  }
  return v;
}

// `attention_kernels: [{phase, kernel, kv_cache_dtype, tiles, head_dims, efficiency, NUMBERS}]`
// (attention_kernel.h): one entry per (phase, kernel, KV dtype); every number of the entry's
// phase optional (0), the rest required.
std::vector<AttentionKernelFit> read_attention_kernels(const YAML::Node& node, const std::string& where) {
  const std::string block = "attention_kernels";
  if (!node.IsSequence())
    bad_value(at_line(where, node), block, "must be a list of kernel regimes (hwmodel/README.md)");
  std::vector<AttentionKernelFit> kernels;
  for (const YAML::Node& entry : node) {
    const std::string at = at_line(where, entry);
    if (!entry.IsMap()) bad_value(at, block, "entries must be maps");
    AttentionKernelFit k;
    std::set<std::string> seen;
    // The phase first: it says which numbers the entry may carry.
    if (!entry["phase"] || !entry["phase"].IsScalar() ||
        (entry["phase"].Scalar() != "prefill" && entry["phase"].Scalar() != "decode")) {
      bad_value(at, block + ".phase", "is required: prefill or decode");
    }
    k.prefill = entry["phase"].Scalar() == "prefill";
    const std::string name = fmt::format("{}[{}]", block, kernels.size());
    for (const auto& kv : entry) {
      const std::string key = key_text(kv.first, where);
      const std::string field = name + "." + key;
      if (!seen.insert(key).second) bad_value(at_line(where, kv.first), field, "is given twice");
      const YAML::Node& v = kv.second;
      if (key == "phase") continue;
      if (key == "kernel") {
        if (!v.IsScalar() || v.Scalar().empty()) bad_value(at_line(where, v), field, "must be the kernel's name");
        k.kernel = v.Scalar();
      } else if (key == "kv_cache_dtype") {
        const int bytes = v.IsScalar() ? parse_dtype_bytes(v.Scalar(), field) : 0;
        if (bytes != 1 && bytes != 2) bad_value(at_line(where, v), field, "must be bfloat16, float16 or fp8");
        k.kv_dtype_bytes = bytes;
      } else if (key == "tiles") {
        if (!v.IsScalar() || (v.Scalar() != "fa3" && v.Scalar() != "generic")) {
          bad_value(at_line(where, v), field, "must be fa3 (FlashAttention-3's tile table) or generic (128 x 128)");
        }
        k.tiles = v.Scalar() == "fa3" ? AttentionTiles::fa3 : AttentionTiles::generic;
      } else if (key == "head_dims") {
        if (!v.IsSequence() || v.size() == 0) bad_value(at_line(where, v), field, "must be a list of head dims");
        for (const YAML::Node& h : v)
          k.head_dims.push_back(static_cast<int>(read_integer(h, where, field, 1, 1 << 16)));
        if (!std::is_sorted(k.head_dims.begin(), k.head_dims.end()) ||
            std::adjacent_find(k.head_dims.begin(), k.head_dims.end()) != k.head_dims.end()) {
          bad_value(at_line(where, v), field, "must be strictly increasing");
        }
      } else if (key == "efficiency") {
        if (!v.IsSequence() || v.size() == 0) bad_value(at_line(where, v), field, "must be a list, one per head dim");
        for (const YAML::Node& e : v) {
          const double x = read_double(e, where, field);
          if (!(x > 0 && x <= 1)) bad_value(at_line(where, e), field, "entries are efficiencies and must be in (0, 1]");
          k.efficiency.push_back(x);
        }
      } else {
        const AttentionKernelKey* number = nullptr;
        for (const AttentionKernelKey& a : attention_kernel_keys()) {
          if (key == a.key && a.prefill == k.prefill) number = &a;
        }
        if (number == nullptr) {
          std::string known;
          for (const AttentionKernelKey& a : attention_kernel_keys()) {
            if (a.prefill == k.prefill) known += (known.empty() ? "" : ", ") + std::string(a.key);
          }
          bad_value(
              at_line(where, kv.first), field,
              fmt::format("is unknown for a {} entry (phase, kernel, kv_cache_dtype, tiles, head_dims, efficiency, {})",
                          k.prefill ? "prefill" : "decode", known));
        }
        const double x = read_double(v, where, field);
        if (number->efficiency && !(x <= 1 && (x > 0 || number->zero_is_off))) {
          bad_value(at_line(where, v), field,
                    number->zero_is_off ? "is an efficiency and must be in [0, 1] (0: off)"
                                        : "is an efficiency and must be in (0, 1]");
        }
        k.*(number->member) = x;
      }
    }
    for (const char* required : {"kernel", "kv_cache_dtype", "tiles", "head_dims", "efficiency"}) {
      if (!seen.count(required)) bad_value(at, name + "." + required, "is required");
    }
    if (k.head_dims.size() != k.efficiency.size()) {
      bad_value(at, name + ".efficiency",
                fmt::format("must give one efficiency per head dim ({} head dims, {} efficiencies)", k.head_dims.size(),
                            k.efficiency.size()));
    }
    for (const AttentionKernelFit& other : kernels) {
      if (other.prefill == k.prefill && other.kernel == k.kernel && other.kv_dtype_bytes == k.kv_dtype_bytes) {
        bad_value(
            at, name,
            fmt::format("repeats the {} regime of {} with this KV dtype", k.prefill ? "prefill" : "decode", k.kernel));
      }
    }
    kernels.push_back(std::move(k));
  }
  return kernels;
}

// `mla: {decode_launch_s, decode_compute_efficiency, decode_memory_efficiency, prefill_launch_s,
// prefill_efficiency}` (attention_kernel.h, MlaAttentionFit), every key required.
MlaAttentionFit read_mla(const YAML::Node& node, const std::string& where) {
  const std::string block = "mla";
  if (!node.IsMap()) bad_value(at_line(where, node), block, "must be a map (hwmodel/README.md)");
  MlaAttentionFit m;
  std::set<std::string> seen;
  for (const auto& kv : node) {
    const std::string key = key_text(kv.first, where);
    const std::string field = block + "." + key;
    if (!seen.insert(key).second) bad_value(at_line(where, kv.first), field, "is given twice");
    const MlaAttentionKey* number = nullptr;
    std::string known;
    for (const MlaAttentionKey& a : mla_attention_keys()) {
      if (key == a.key) number = &a;
      known += (known.empty() ? "" : ", ") + std::string(a.key);
    }
    if (number == nullptr) bad_value(at_line(where, kv.first), field, fmt::format("is unknown ({})", known));
    const double x = read_double(kv.second, where, field);
    if (number->efficiency && !(x > 0 && x <= 1)) {
      bad_value(at_line(where, kv.second), field, "is an efficiency and must be in (0, 1]");
    }
    m.*(number->member) = x;
  }
  for (const MlaAttentionKey& a : mla_attention_keys()) {
    if (!seen.count(a.key)) bad_value(at_line(where, node), block + "." + a.key, "is required");
  }
  return m;
}

// `moe_kernels: {KERNEL: {launch_s, ..., misaligned_slowdown}}` (moe_kernel.h, MoeKernelFit),
// every key of an entry required. An entry replaces the base profile's entry for the same kernel
// (`into` holds the base's); the others are inherited.
void read_moe_kernels(const YAML::Node& node, const std::string& where, std::vector<MoeKernelFit>& into) {
  const std::string block = "moe_kernels";
  if (!node.IsMap() || node.size() == 0) {
    bad_value(at_line(where, node), block, "must be a map of kernel names to their constants (hwmodel/README.md)");
  }
  std::string kernels, keys;
  for (int i = 0; i < kNumMoeKernels; ++i) {
    kernels += (i == 0 ? "" : ", ") + std::string(moe_kernel_name(static_cast<MoeKernel>(i)));
  }
  for (const MoeKernelKey& k : moe_kernel_keys()) keys += (keys.empty() ? "" : ", ") + std::string(k.key);
  std::set<std::string> named;
  for (const auto& entry : node) {
    const std::string name = key_text(entry.first, where);
    const std::string at = at_line(where, entry.first);
    const std::string field = block + "." + name;
    const std::optional<MoeKernel> kernel = parse_moe_kernel(name);
    if (!kernel) bad_value(at, field, fmt::format("is not a MoE kernel ({})", kernels));
    if (!named.insert(name).second) bad_value(at, field, "is given twice");
    if (!entry.second.IsMap())
      bad_value(at_line(where, entry.second), field, fmt::format("must be a map {{{}}}", keys));
    MoeKernelFit fit;
    fit.kernel = *kernel;
    std::set<std::string> seen;
    for (const auto& kv : entry.second) {
      const std::string key = key_text(kv.first, where);
      const MoeKernelKey* number = nullptr;
      for (const MoeKernelKey& k : moe_kernel_keys()) {
        if (key == k.key) number = &k;
      }
      if (number == nullptr)
        bad_value(at_line(where, kv.first), field + "." + key, fmt::format("is unknown ({})", keys));
      if (!seen.insert(key).second) bad_value(at_line(where, kv.first), field + "." + key, "is given twice");
      fit.*(number->member) = read_double(kv.second, where, field + "." + key);
    }
    for (const MoeKernelKey& k : moe_kernel_keys()) {
      if (!seen.count(k.key)) bad_value(at_line(where, entry.second), field + "." + k.key, "is required");
    }
    for (const char* key : {"weight_bytes_per_s", "flops_per_s"}) {
      const double v = key == std::string_view("flops_per_s") ? fit.flops_per_s : fit.weight_bytes_per_s;
      if (!(v > 0)) bad_value(at_line(where, entry.second), field + "." + key, "must be > 0");
    }
    if (fit.roofline_exponent > 0 && fit.roofline_exponent < 1) {
      bad_value(at_line(where, entry.second), field + ".roofline_exponent",
                "must be 0 (the max of the two roofs) or >= 1");
    }
    const auto same =
        std::find_if(into.begin(), into.end(), [&](const MoeKernelFit& f) { return f.kernel == fit.kernel; });
    if (same != into.end())
      *same = fit;
    else
      into.push_back(fit);
  }
  std::sort(into.begin(), into.end(), [](const MoeKernelFit& a, const MoeKernelFit& b) { return a.kernel < b.kernel; });
}

// The text of a GEMM table file a profile names (relative to the profile); where it was found
// goes into error messages.
using TableReader = std::function<std::pair<std::string, std::string>(const std::string& file)>;

void read_gemm_tables(const YAML::Node& node, const std::string& where, const TableReader& read_table,
                      HardwareProfile& p) {
  if (!node.IsMap()) bad_value(at_line(where, node), "gemm_tables", "must be a map {bf16: FILE, fp8: FILE, ...}");
  for (const auto& kv : node) {
    const std::string dtype = key_text(kv.first, where);
    if (!kv.second.IsScalar()) bad_value(at_line(where, kv.second), "gemm_tables." + dtype, "must be a file name");
    auto [text, found_at] = read_table(kv.second.Scalar());
    auto source = std::make_shared<GemmTableSource>(kv.second.Scalar(), std::move(text), found_at);
    bool known = false;
    for (int f = 0; f < kNumWeightFormats; ++f) {
      if (weight_format_name(static_cast<WeightFormat>(f)) == dtype) {
        p.gemm_tables[static_cast<size_t>(f)] = std::move(source);
        known = true;
        break;
      }
    }
    if (!known)
      bad_value(at_line(where, kv.first), "gemm_tables." + dtype, "is unknown (bf16, fp8, fp8-block, mxfp4, nvfp4)");
  }
}

// What a key's reader needs beside its value: the file's name for errors, and how to read the
// GEMM table files it names.
struct ProfileFile {
  const std::string& where;
  const TableReader& read_table;
};

// One key of a profile file: how to read its value into a profile, and how to write it from
// one (nothing when the profile leaves it at its default, for the keys that are optional).
struct ProfileKey {
  std::string key;
  std::function<void(const YAML::Node& value, const ProfileFile& file, HardwareProfile& p)> read;
  std::function<void(YAML::Emitter& out, const HardwareProfile& p)> write;
};

// A one-line string key (name, source, ...).
std::string read_string(const YAML::Node& value, const std::string& where, const std::string& key) {
  if (!value.IsScalar()) bad_value(where, key, "must be a string");
  return value.Scalar();
}

// A text that may span lines (source, provenance). A literal block reads back with one trailing
// newline (YAML "clip" chomping), so only texts that end in one are written as a block; other
// multi-line texts are quoted.
void write_text(YAML::Emitter& out, const char* key, const std::string& text) {
  out << YAML::Key << key << YAML::Value;
  if (text.find('\n') != std::string::npos) {
    out << (text.back() == '\n' ? YAML::Literal : YAML::DoubleQuoted);
  }
  out << text;
}

// The validation block (read_validation). Percentages as their shortest exact text ("6.5", not
// 17 digits of 6.5000000000000000): they are rounded to 0.1 and read back the same.
void write_validation(YAML::Emitter& out, const ProfileValidation& v) {
  out << YAML::Key << "validation" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "measured_on" << YAML::Value << v.measured_on;
  out << YAML::Key << "held_out" << YAML::Value << v.held_out;
  out << YAML::Key << "scored_on" << YAML::Value << v.scored_on;
  out << YAML::Key << "operators" << YAML::Value << YAML::BeginMap;
  for (const OperatorError& e : v.operators) {
    out << YAML::Key << e.op << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "mape" << YAML::Value
        << fmt::format("{}", e.mape_percent) << YAML::Key << "p90" << YAML::Value << fmt::format("{}", e.p90_percent)
        << YAML::Key << "count" << YAML::Value << e.count << YAML::EndMap;
  }
  out << YAML::EndMap;
  if (!v.serving.empty()) {
    out << YAML::Key << "serving" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "measured_on" << YAML::Value << v.serving.measured_on;
    out << YAML::Key << "backends" << YAML::Value << YAML::BeginMap;
    for (const ServingError& e : v.serving.backends) {
      out << YAML::Key << e.backend << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "ttft_mape"
          << YAML::Value << fmt::format("{}", e.ttft_mape_percent) << YAML::Key << "tpot_mape" << YAML::Value
          << fmt::format("{}", e.tpot_mape_percent);
      if (e.ttft_median_ratio > 0) {
        out << YAML::Key << "ttft_median_ratio" << YAML::Value << fmt::format("{}", e.ttft_median_ratio);
      }
      if (e.tpot_median_ratio > 0) {
        out << YAML::Key << "tpot_median_ratio" << YAML::Value << fmt::format("{}", e.tpot_median_ratio);
      }
      out << YAML::Key << "count" << YAML::Value << e.count << YAML::EndMap;
    }
    out << YAML::EndMap << YAML::EndMap;
  }
  out << YAML::EndMap;
}

// `gemm_tables: {dtype: FILE}` (read_gemm_tables).
void write_gemm_tables(YAML::Emitter& out, const HardwareProfile& p) {
  if (!p.has_gemm_tables()) return;
  out << YAML::Key << "gemm_tables" << YAML::Value << YAML::BeginMap;
  for (int f = 0; f < kNumWeightFormats; ++f) {
    if (const auto& t = p.gemm_tables[static_cast<size_t>(f)]) {
      out << YAML::Key << std::string(weight_format_name(static_cast<WeightFormat>(f))) << YAML::Value << t->file();
    }
  }
  out << YAML::EndMap;
}

// `allreduce` or `custom_allreduce: [{tp, latency_s, bytes_per_s}, ...]` (read_allreduce).
void write_allreduce(YAML::Emitter& out, const char* key, const std::vector<AllReduceFit>& fits) {
  if (fits.empty()) return;
  out << YAML::Key << key << YAML::Value << YAML::BeginSeq;
  for (const AllReduceFit& f : fits) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "tp" << YAML::Value << f.tp << YAML::Key << "latency_s"
        << YAML::Value << f.latency_s << YAML::Key << "bytes_per_s" << YAML::Value << f.bytes_per_s << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

// `fp8_block_gemms: [{kernel, scale, call_floor_s, rows}, ...]` (read_fp8_block_gemms).
void write_fp8_block_gemms(YAML::Emitter& out, const HardwareProfile& p) {
  if (p.fp8_block_gemms.empty()) return;
  out << YAML::Key << "fp8_block_gemms" << YAML::Value << YAML::BeginSeq;
  for (const HardwareProfile::BlockFp8GemmFit& f : p.fp8_block_gemms) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "kernel" << YAML::Value << f.kernel << YAML::Key << "scale"
        << YAML::Value << f.scale << YAML::Key << "call_floor_s" << YAML::Value << f.call_floor_s << YAML::Key << "rows"
        << YAML::Value << f.rows << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

// `moe_kernels: {KERNEL: {...}}`, the keys of moe_kernel_keys (read_moe_kernels).
void write_moe_kernels(YAML::Emitter& out, const HardwareProfile& p) {
  if (p.moe_kernels.empty()) return;
  out << YAML::Key << "moe_kernels" << YAML::Value << YAML::BeginMap;
  for (const MoeKernelFit& f : p.moe_kernels) {
    out << YAML::Key << std::string(moe_kernel_name(f.kernel)) << YAML::Value << YAML::Flow << YAML::BeginMap;
    for (const MoeKernelKey& k : moe_kernel_keys()) out << YAML::Key << k.key << YAML::Value << f.*(k.member);
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
}

// `attention_kernels: [{phase, kernel, ...}, ...]`, each with its phase's keys of
// attention_kernel_keys (read_attention_kernels).
void write_attention_kernels(YAML::Emitter& out, const HardwareProfile& p) {
  if (p.attention_kernels.empty()) return;
  out << YAML::Key << "attention_kernels" << YAML::Value << YAML::BeginSeq;
  for (const AttentionKernelFit& k : p.attention_kernels) {
    out << YAML::BeginMap;
    out << YAML::Key << "phase" << YAML::Value << (k.prefill ? "prefill" : "decode");
    out << YAML::Key << "kernel" << YAML::Value << k.kernel;
    out << YAML::Key << "kv_cache_dtype" << YAML::Value << (k.kv_dtype_bytes == 1 ? "fp8" : "bfloat16");
    out << YAML::Key << "tiles" << YAML::Value << attention_tiles_name(k.tiles);
    out << YAML::Key << "head_dims" << YAML::Value << YAML::Flow << k.head_dims;
    out << YAML::Key << "efficiency" << YAML::Value << YAML::Flow << k.efficiency;
    AttentionKernelFit copy = k;
    for (const AttentionKernelKey& a : attention_kernel_keys()) {
      if (a.prefill == k.prefill) out << YAML::Key << a.key << YAML::Value << copy.*(a.member);
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

// `mla: {...}`, the keys of mla_attention_keys (read_mla).
void write_mla(YAML::Emitter& out, const HardwareProfile& p) {
  if (p.mla.empty()) return;
  out << YAML::Key << "mla" << YAML::Value << YAML::BeginMap;
  MlaAttentionFit copy = p.mla;
  for (const MlaAttentionKey& a : mla_attention_keys()) out << YAML::Key << a.key << YAML::Value << copy.*(a.member);
  out << YAML::EndMap;
}

// A string key (name, source, ...): read as it is; written always or only when set, as
// plain text or as text that may span lines (write_text).
enum class Written { always, when_set };
ProfileKey string_key(const char* key, std::string HardwareProfile::*member, Written when, bool multiline) {
  return {key,
          [key, member](const YAML::Node& v, const ProfileFile& f, HardwareProfile& p) {
            p.*member = read_string(v, f.where, key);
          },
          [key, member, when, multiline](YAML::Emitter& out, const HardwareProfile& p) {
            const std::string& text = p.*member;
            if (when == Written::when_set && text.empty()) return;
            if (multiline) {
              write_text(out, key, text);
            } else {
              out << YAML::Key << key << YAML::Value << text;
            }
          }};
}

// What the profile is and where it came from: its name, source, provenance, the profile it was
// transferred from, the kernels timed, and its figures against measurements.
void add_identity_keys(std::vector<ProfileKey>& k) {
  k.push_back(string_key("name", &HardwareProfile::name, Written::always, false));
  k.push_back(string_key("source", &HardwareProfile::source, Written::always, true));
  k.push_back(string_key("provenance", &HardwareProfile::provenance, Written::when_set, true));
  k.push_back(string_key("transferred_from", &HardwareProfile::transferred_from, Written::when_set, false));
  k.push_back(string_key("kernels", &HardwareProfile::kernels, Written::when_set, false));
  k.push_back({"validation",
               [](const YAML::Node& v, const ProfileFile& f, HardwareProfile& p) {
                 p.validation = read_validation(v, f.where);
               },
               [](YAML::Emitter& out, const HardwareProfile& p) {
                 if (!p.validation.empty()) write_validation(out, p.validation);
               }});
}

// The GPU's figures: memory, price, every number of number_keys, the prefill attention kernel.
void add_figure_keys(std::vector<ProfileKey>& k) {
  k.push_back({"memory_bytes",
               [](const YAML::Node& v, const ProfileFile& f, HardwareProfile& p) {
                 // A petabyte is far beyond any GPU; checked before the conversion to an integer.
                 p.memory_bytes = read_integer(v, f.where, "memory_bytes", 1, 1e15);
               },
               [](YAML::Emitter& out, const HardwareProfile& p) {
                 out << YAML::Key << "memory_bytes" << YAML::Value << p.memory_bytes;
               }});
  k.push_back({"price_per_hour",
               [](const YAML::Node& v, const ProfileFile& f, HardwareProfile& p) {
                 // Optional: what one GPU costs per hour (USD), for `batchsim plan` to rank by cost.
                 p.price_per_hour = read_double(v, f.where, "price_per_hour");
                 if (!(p.price_per_hour >= 0 && std::isfinite(p.price_per_hour))) {
                   bad_value(f.where, "price_per_hour", "must be a finite number >= 0 (USD per GPU-hour; 0: unknown)");
                 }
               },
               [](YAML::Emitter& out, const HardwareProfile& p) {
                 if (p.price_per_hour > 0) out << YAML::Key << "price_per_hour" << YAML::Value << p.price_per_hour;
               }});
  // Optional like the price: written only when known, so profiles without a disk keep their text.
  k.push_back({"disk_bytes_per_s",
               [](const YAML::Node& v, const ProfileFile& f, HardwareProfile& p) {
                 p.disk_bytes_per_s = read_double(v, f.where, "disk_bytes_per_s");
                 if (!(p.disk_bytes_per_s >= 0 && std::isfinite(p.disk_bytes_per_s))) {
                   bad_value(
                       f.where, "disk_bytes_per_s",
                       "must be a finite number >= 0 (bytes per second one GPU reads from local NVMe; 0: unknown)");
                 }
               },
               [](YAML::Emitter& out, const HardwareProfile& p) {
                 if (p.disk_bytes_per_s > 0)
                   out << YAML::Key << "disk_bytes_per_s" << YAML::Value << p.disk_bytes_per_s;
               }});
  for (const NumberKey& number : number_keys()) {
    const NumberKey* n = &number;  // number_keys() is a static table
    k.push_back({n->key,
                 [n](const YAML::Node& v, const ProfileFile& f, HardwareProfile& p) {
                   n->get(p) = read_double(v, f.where, n->key);
                 },
                 [n](YAML::Emitter& out, const HardwareProfile& p) {
                   out << YAML::Key << n->key << YAML::Value << n->value(p);
                 }});
  }
  k.push_back({"prefill_attention_kernel",
               [](const YAML::Node& v, const ProfileFile& f, HardwareProfile& p) {
                 if (!v.IsScalar() || (v.Scalar() != "fa2" && v.Scalar() != "fa3")) {
                   bad_value(f.where, "prefill_attention_kernel",
                             "must be fa2 (FlashAttention-2) or fa3 (FlashAttention-3, Hopper)");
                 }
                 p.prefill_attention_kernel = v.Scalar() == "fa3" ? PrefillAttentionKernel::flash_attention_3
                                                                  : PrefillAttentionKernel::flash_attention_2;
               },
               [](YAML::Emitter& out, const HardwareProfile& p) {
                 out << YAML::Key << "prefill_attention_kernel" << YAML::Value
                     << prefill_attention_kernel_name(p.prefill_attention_kernel);
               }});
}

// The fitted blocks, each written only when the profile has it: measured GEMM tables,
// all-reduce fits, block-FP8 GEMMs, fused-MoE kernels, attention-kernel regimes, MLA.
void add_fit_keys(std::vector<ProfileKey>& k) {
  k.push_back({"gemm_tables",
               [](const YAML::Node& v, const ProfileFile& f, HardwareProfile& p) {
                 read_gemm_tables(v, f.where, f.read_table, p);
               },
               write_gemm_tables});
  k.push_back({"allreduce",
               [](const YAML::Node& v, const ProfileFile& f, HardwareProfile& p) {
                 p.allreduce = read_allreduce(v, f.where, "allreduce");
               },
               [](YAML::Emitter& out, const HardwareProfile& p) { write_allreduce(out, "allreduce", p.allreduce); }});
  k.push_back({"custom_allreduce",
               [](const YAML::Node& v, const ProfileFile& f, HardwareProfile& p) {
                 p.custom_allreduce = read_allreduce(v, f.where, "custom_allreduce");
               },
               [](YAML::Emitter& out, const HardwareProfile& p) {
                 write_allreduce(out, "custom_allreduce", p.custom_allreduce);
               }});
  k.push_back({"fp8_block_gemms",
               [](const YAML::Node& v, const ProfileFile& f, HardwareProfile& p) {
                 p.fp8_block_gemms = read_fp8_block_gemms(v, f.where);
               },
               write_fp8_block_gemms});
  k.push_back({"moe_kernels",
               [](const YAML::Node& v, const ProfileFile& f, HardwareProfile& p) {
                 read_moe_kernels(v, f.where, p.moe_kernels);
               },
               write_moe_kernels});
  k.push_back({"attention_kernels",
               [](const YAML::Node& v, const ProfileFile& f, HardwareProfile& p) {
                 p.attention_kernels = read_attention_kernels(v, f.where);
               },
               write_attention_kernels});
  k.push_back({"mla",
               [](const YAML::Node& v, const ProfileFile& f, HardwareProfile& p) { p.mla = read_mla(v, f.where); },
               write_mla});
}

// The keys of a profile file in the order hardware_profile_yaml writes them; the reader looks
// each key of a file up here, so that a key written is a key read, and the same way. `base`
// and the retired iteration_overhead* keys are the reader's alone (profile_from_yaml).
const std::vector<ProfileKey>& profile_keys() {
  static const std::vector<ProfileKey> keys = [] {
    std::vector<ProfileKey> k;
    add_identity_keys(k);
    add_figure_keys(k);
    add_fit_keys(k);
    return k;
  }();
  return keys;
}

// `base` names a built-in GPU whose values are the defaults for keys the file leaves out; its
// validation figures and transfer are not this profile's (hardware_profile.h).
void apply_base(const YAML::Node& root, const std::string& where, const std::vector<HardwareProfile>& bases,
                HardwareProfile& p) {
  const YAML::Node base = root["base"];
  if (!base) return;
  if (!base.IsScalar()) bad_value(where, "base", "must be a built-in GPU name");
  bool found = false;
  std::string names;
  for (const auto& g : bases) {
    names += (names.empty() ? "" : ", ") + g.name;
    if (g.name == base.Scalar()) {
      p = g;
      p.validation = {};  // the base's figures are not this profile's (hardware_profile.h)
      p.transferred_from.clear();
      found = true;
    }
  }
  if (!found) {
    bad_value(where, "base", fmt::format("names unknown GPU '{}' (known: {})", base.Scalar(), names));
  }
}

// What no single key can check: the required ceilings, positive links, and the keys that need
// others (sm_count for FlashAttention-3's tiles and the attention regimes).
void check_profile(const HardwareProfile& p, const std::string& where) {
  if (p.peak_flops <= 0) bad_value(where, "peak_flops", "is required and must be > 0");
  if (p.hbm_bytes_per_s <= 0) bad_value(where, "hbm_bytes_per_s", "is required and must be > 0");
  if (p.memory_bytes <= 0) bad_value(where, "memory_bytes", "is required and must be > 0");
  // Links of zero bandwidth would make a transfer over them free (swap preemption, all-reduce),
  // not impossible: they must be given, and positive.
  for (const auto& [key, value] : {std::pair<const char*, double>{"pcie_bytes_per_s", p.pcie_bytes_per_s},
                                   {"interconnect_bytes_per_s", p.interconnect_bytes_per_s}}) {
    if (!(value > 0)) bad_value(where, key, "must be > 0 (bytes per second of the link)");
  }
  if (p.sm_count != std::floor(p.sm_count) || p.sm_count > 1e6) {
    bad_value(where, "sm_count", fmt::format("must be a whole number (0: no wave model), got {}", p.sm_count));
  }
  if (!(p.attention_kv_write_efficiency >= 0 && p.attention_kv_write_efficiency <= 1)) {
    bad_value(where, "attention_kv_write_efficiency", "is an efficiency and must be in [0, 1] (0: not charged)");
  }
  if (p.prefill_attention_kernel == PrefillAttentionKernel::flash_attention_3 && p.sm_count <= 0) {
    bad_value(where, "prefill_attention_kernel", "fa3 needs sm_count: its tiles are spread over the SMs");
  }
  if (!p.attention_kernels.empty() && p.sm_count <= 0) {
    bad_value(where, "attention_kernels", "need sm_count: their tiles and blocks are spread over the SMs");
  }
  for (const auto& k : number_keys()) {
    const double v = k.value(p);
    if (k.is_efficiency && !(v > 0 && v <= 1)) {
      bad_value(where, k.key, "is an efficiency and must be in (0, 1]");
    }
  }
}

// A profile from a parsed YAML map; `where` names the file in errors, `default_name` is used
// when the map has no `name`.
HardwareProfile profile_from_yaml(const YAML::Node& root, const std::string& where, const std::string& default_name,
                                  const std::vector<HardwareProfile>& bases, const TableReader& read_table) {
  if (!root.IsMap()) {
    throw UserError(fmt::format("{}: a hardware profile is a map of keys to values", where));
  }
  HardwareProfile p;
  apply_base(root, where, bases, p);
  p.name = default_name;
  const ProfileFile file{where, read_table};
  for (const auto& kv : root) {
    const std::string key = key_text(kv.first, where);
    if (key == "base") continue;
    const auto& keys = profile_keys();
    const auto known = std::find_if(keys.begin(), keys.end(), [&key](const ProfileKey& k) { return k.key == key; });
    if (known != keys.end()) {
      known->read(kv.second, file, p);
      continue;
    }
    if (key.starts_with("iteration_overhead")) {
      // Profiles written before engine profiles existed carry the engine's CPU cost.
      throw UserError(
          fmt::format("{}: key '{}' is an engine's CPU cost, no longer a GPU's: remove it here and put it in an "
                      "engine profile (cpu.per_iteration_s, cpu.per_sequence_s, cpu.per_extra_worker_s; "
                      "--engine FILE, see hwmodel/README.md \"Engine profiles\")",
                      at_line(where, kv.first), key));
    }
    throw UserError(
        fmt::format("{}: unknown key '{}' in hardware profile (see "
                    "hwmodel/README.md for the keys)",
                    where, key));
  }
  check_profile(p, where);
  return p;
}

// The datasheet GPUs alone, which fitted profiles name as their base (no YAML to parse).
const std::vector<HardwareProfile>& datasheet_gpus() {
  static const std::vector<HardwareProfile> gpus = make_builtin_gpus();
  return gpus;
}

std::string shipped_stem(std::size_t i) {
  const std::string file = detail::kShippedProfiles[i].file_name;
  return file.substr(0, file.rfind('.'));
}

bool shipped_is_profile(std::size_t i) {
  return std::string_view(detail::kShippedProfiles[i].file_name)
      .ends_with(".yaml");  // else a GEMM table a profile names
}

// Shipped profile `i` (a .yaml entry), parsed.
HardwareProfile load_shipped_gpu(std::size_t i) {
  const auto& shipped = detail::kShippedProfiles[i];
  const std::string file = shipped.file_name;
  const TableReader shipped_table = [](const std::string& name) -> std::pair<std::string, std::string> {
    for (std::size_t t = 0; t < detail::kNumShippedProfiles; ++t) {
      if (name == detail::kShippedProfiles[t].file_name) {
        return {detail::kShippedProfiles[t].yaml, "hwmodel/profiles/" + name};
      }
    }
    throw std::logic_error("shipped profile names a missing GEMM table: " + name);
  };
  try {
    return profile_from_yaml(YAML::Load(shipped.yaml), "hwmodel/profiles/" + file, shipped_stem(i), datasheet_gpus(),
                             shipped_table);
  } catch (const std::exception& e) {
    // A shipped profile that does not load is a bug in the build, not a user error.
    throw std::logic_error(std::string("shipped profile broken: ") + e.what());
  }
}

std::vector<HardwareProfile> make_all_gpus() {
  std::vector<HardwareProfile> gpus = datasheet_gpus();
  for (std::size_t i = 0; i < detail::kNumShippedProfiles; ++i) {
    if (shipped_is_profile(i)) gpus.push_back(load_shipped_gpu(i));
  }
  return gpus;
}

// The shipped profile whose file is `<name>.yaml` and whose name is `name`, parsed alone (once,
// then kept): what resolve_gpu finds most often, without parsing every shipped profile and its
// tables, which was a tenth of a short run. Null when there is none (the catalogue decides).
const HardwareProfile* shipped_gpu_named(std::string_view name) {
  static std::mutex mutex;
  static std::map<std::string, HardwareProfile, std::less<>> loaded;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = loaded.find(name); it != loaded.end()) return &it->second;
  for (std::size_t i = 0; i < detail::kNumShippedProfiles; ++i) {
    if (!shipped_is_profile(i) || shipped_stem(i) != name) continue;
    HardwareProfile profile = load_shipped_gpu(i);
    if (profile.name != name) return nullptr;
    return &loaded.emplace(std::string(name), std::move(profile)).first->second;
  }
  return nullptr;
}

std::string known_gpu_names() {
  std::string names;
  for (const auto& g : builtin_gpus()) names += (names.empty() ? "" : ", ") + g.name;
  return names;
}

}  // namespace

const char* prefill_attention_kernel_name(PrefillAttentionKernel kernel) {
  return kernel == PrefillAttentionKernel::flash_attention_3 ? "fa3" : "fa2";
}

const char* elementwise_op_name(ElementwiseOp op) {
  static constexpr const char* kNames[kNumElementwiseOps] = {"norm", "rope", "activation", "residual_add", "embedding"};
  return kNames[static_cast<int>(op)];
}

double HardwareProfile::fp8_block_gemm_scale() const {
  const BlockFp8GemmFit* most = nullptr;
  for (const BlockFp8GemmFit& f : fp8_block_gemms) {
    if (most == nullptr || f.rows > most->rows) most = &f;
  }
  return most != nullptr ? most->scale : 1.0;
}

const HardwareProfile::BlockFp8GemmFit* HardwareProfile::fp8_block_gemm(std::string_view kernel) const {
  for (const BlockFp8GemmFit& f : fp8_block_gemms) {
    if (f.kernel == kernel) return &f;
  }
  return nullptr;
}

const std::vector<HardwareProfile>& builtin_gpus() {
  static const std::vector<HardwareProfile> gpus = make_all_gpus();
  return gpus;
}

HardwareProfile load_hardware_profile(const std::filesystem::path& path) {
  const YAML::Node root = yaml_fields::load_file(path, "hardware profile");
  const TableReader file_table = [&path](const std::string& name) -> std::pair<std::string, std::string> {
    const std::filesystem::path table = path.parent_path() / name;
    LineReader in(table, "GEMM table");
    std::string text, line;
    while (in.next(line)) {
      text += line;
      text += '\n';
    }
    return {std::move(text), table.string()};
  };
  return profile_from_yaml(root, path.string(), path.stem().string(), builtin_gpus(), file_table);
}

std::string measured_transfer_error(const HardwareProfile& transferred) {
  std::vector<std::string> figures;
  for (const MeasuredTransfer& m : kMeasuredTransfers) {
    figures.push_back(
        fmt::format("{}: GEMM {:.1f}%, iteration {:.1f}%", m.direction, m.gemm_mape_percent, m.iteration_mape_percent));
  }
  // The source reads "transferred from <fitted> to <target> ceilings" unless a user rewrote it.
  const std::string what = transferred.source.starts_with("transferred from ")
                               ? transferred.source
                               : fmt::format("transferred from {}", transferred.transferred_from);
  return fmt::format(
      "{}, never measured on this GPU; what a transfer loses, measured held out on Vidur's "
      "kernels (MAPE): {} (hwmodel/README.md, \"Held out\")",
      what, fmt::join(figures, "; "));
}

std::string hardware_profile_yaml(const HardwareProfile& profile) {
  YAML::Emitter out;
  out.SetDoublePrecision(17);
  out << YAML::Comment("batchsim hardware profile (format: hwmodel/README.md)");
  out << YAML::BeginMap;
  for (const ProfileKey& k : profile_keys()) k.write(out, profile);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

void save_hardware_profile(const HardwareProfile& original, const std::filesystem::path& path) {
  // The tables go beside the profile, named after it, and the profile names them so.
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  HardwareProfile profile = original;
  for (auto& table_source : profile.gemm_tables) {
    auto* source = &table_source;
    if (!*source) continue;
    const GemmTable& table = (*source)->table();
    const std::string name = path.stem().string() + ".gemm-" + table.dtype() + ".txt";
    std::ofstream file(path.parent_path() / name);
    file << table.to_text();
    if (!file) throw UserError(fmt::format("{}: cannot write GEMM table", (path.parent_path() / name).string()));
    *source = std::make_shared<GemmTableSource>(name, table);
  }
  const std::string text = hardware_profile_yaml(profile);
  std::ofstream file(path);
  if (!file) throw UserError(fmt::format("{}: cannot write hardware profile", path.string()));
  file << text;
  if (!file) throw UserError(fmt::format("{}: write failed", path.string()));
}

HardwareProfile resolve_gpu(std::string_view name_or_path) {
  // The catalogue's answer (datasheets first, then the shipped profiles) without parsing it
  // all: names are unique (tests/hwmodel checks), so the shipped profile whose file's stem is
  // the name, if it has that name, is the one.
  for (const auto& g : datasheet_gpus()) {
    if (g.name == name_or_path) return g;
  }
  if (const HardwareProfile* shipped = shipped_gpu_named(name_or_path)) return *shipped;
  for (const auto& g : builtin_gpus()) {
    if (g.name == name_or_path) return g;
  }
  const std::filesystem::path path(name_or_path);
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return load_hardware_profile(path);
  throw UserError(
      fmt::format("unknown GPU '{}': not a built-in GPU ({}) nor a profile file", name_or_path, known_gpu_names()));
}

}  // namespace batchsim
