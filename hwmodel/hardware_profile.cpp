// batchsim — built-in datasheet GPUs and the profile file reader/writer.
#include "hwmodel/hardware_profile.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "hwmodel/error.h"

namespace batchsim {

namespace {

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
HardwareProfile datasheet(std::string name, double tflops, double hbm_gb_per_s, int64_t mem_mib,
                          double link_gb_per_s, double link_latency_us, double pcie_gb_per_s) {
  HardwareProfile p;
  p.name = std::move(name);
  p.source = "datasheet";
  p.peak_flops = tflops * kTera;
  p.hbm_bytes_per_s = hbm_gb_per_s * kGB;
  p.memory_bytes = mem_mib * kMiB;
  p.interconnect_bytes_per_s = link_gb_per_s * kGB;
  p.interconnect_latency_s = link_latency_us * 1e-6;
  p.pcie_bytes_per_s = pcie_gb_per_s * kGB;
  // A round 1 ms of CPU per iteration (scheduling, input preparation, sampling): the order
  // Vidur measured for a Sarathi/vLLM-style engine on A100 (cpu_overheads/a100.csv, 1.5-2 ms
  // at small batches). Not fitted; the fitted profiles replace it.
  p.iteration_overhead_s = 1e-3;
  return p;
}

std::vector<HardwareProfile> make_builtin_gpus() {
  return {
      // NVIDIA A100 datasheet: 312 TFLOP/s dense BF16; NVLink 3 600 GB/s bidirectional;
      // PCIe Gen4 x16 64 GB/s bidirectional. 40 GB: 1,555 GB/s; 80 GB SXM: 2,039 GB/s.
      datasheet("a100-40gb", 312, 1555, 40960, 300, 10, 32),
      datasheet("a100-80gb", 312, 2039, 81920, 300, 10, 32),
      // NVIDIA H100 SXM5: 989 TFLOP/s dense BF16, 3.35 TB/s, 80 GB; NVLink 4 900 GB/s
      // bidirectional; PCIe Gen5 x16 128 GB/s bidirectional.
      datasheet("h100-sxm", 989, 3350, 81559, 450, 10, 64),
      // NVIDIA H200 SXM: H100 compute with 141 GB HBM3e at 4.8 TB/s; same NVLink and PCIe.
      datasheet("h200", 989, 4800, 143771, 450, 10, 64),
      // NVIDIA L40S: 362 TFLOP/s dense BF16, 864 GB/s, 48 GB; no NVLink, so collectives run
      // over PCIe Gen4 x16 (32 GB/s per direction) with a higher latency.
      datasheet("l40s", 362, 864, 46068, 32, 25, 32),
  };
}

std::string known_gpu_names() {
  std::string names;
  for (const auto& g : builtin_gpus()) names += (names.empty() ? "" : ", ") + g.name;
  return names;
}

// One table of the numeric keys of a profile file, so that reading, writing and the list of
// known keys cannot drift apart. Key names are the member names (units in the names).
struct DoubleKey {
  const char* key;
  double HardwareProfile::*member;
};
constexpr DoubleKey kDoubleKeys[] = {
    {"peak_flops", &HardwareProfile::peak_flops},
    {"hbm_bytes_per_s", &HardwareProfile::hbm_bytes_per_s},
    {"interconnect_bytes_per_s", &HardwareProfile::interconnect_bytes_per_s},
    {"interconnect_latency_s", &HardwareProfile::interconnect_latency_s},
    {"pcie_bytes_per_s", &HardwareProfile::pcie_bytes_per_s},
    {"gemm_eta_max", &HardwareProfile::gemm_eta_max},
    {"gemm_m_half", &HardwareProfile::gemm_m_half},
    {"hbm_efficiency", &HardwareProfile::hbm_efficiency},
    {"prefill_attention_efficiency", &HardwareProfile::prefill_attention_efficiency},
    {"decode_attention_efficiency", &HardwareProfile::decode_attention_efficiency},
    {"decode_attention_per_seq_s", &HardwareProfile::decode_attention_per_seq_s},
    {"kernel_launch_s", &HardwareProfile::kernel_launch_s},
    {"iteration_overhead_s", &HardwareProfile::iteration_overhead_s},
    {"iteration_overhead_per_seq_s", &HardwareProfile::iteration_overhead_per_seq_s},
};

[[noreturn]] void bad_value(const std::filesystem::path& path, const std::string& key,
                            const std::string& why) {
  throw UserError(fmt::format("{}: key '{}' {}", path.string(), key, why));
}

double read_double(const YAML::Node& node, const std::filesystem::path& path,
                   const std::string& key) {
  double v = 0;
  if (!node.IsScalar() || !YAML::convert<double>::decode(node, v)) {
    bad_value(path, key, "must be a number");
  }
  if (!(v >= 0) || v > 1e300) bad_value(path, key, "must be a finite number >= 0");
  return v;
}

}  // namespace

const std::vector<HardwareProfile>& builtin_gpus() {
  static const std::vector<HardwareProfile> gpus = make_builtin_gpus();
  return gpus;
}

HardwareProfile load_hardware_profile(const std::filesystem::path& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path.string());
  } catch (const YAML::BadFile&) {
    throw UserError(fmt::format("{}: cannot open hardware profile", path.string()));
  } catch (const YAML::Exception& e) {
    throw UserError(fmt::format("{}: not valid YAML/JSON ({})", path.string(), e.what()));
  }
  if (!root.IsMap()) {
    throw UserError(fmt::format("{}: a hardware profile is a map of keys to values",
                                path.string()));
  }
  HardwareProfile p;
  // `base` names a built-in GPU whose values are the defaults for keys the file leaves out.
  if (const YAML::Node base = root["base"]) {
    if (!base.IsScalar()) bad_value(path, "base", "must be a built-in GPU name");
    bool found = false;
    for (const auto& g : builtin_gpus()) {
      if (g.name == base.Scalar()) {
        p = g;
        found = true;
      }
    }
    if (!found) {
      bad_value(path, "base",
                fmt::format("names unknown GPU '{}' (known: {})", base.Scalar(), known_gpu_names()));
    }
  }
  p.name = path.stem().string();
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& value = kv.second;
    if (key == "base") continue;
    if (key == "name" || key == "source") {
      if (!value.IsScalar()) bad_value(path, key, "must be a string");
      (key == "name" ? p.name : p.source) = value.Scalar();
      continue;
    }
    if (key == "memory_bytes") {
      p.memory_bytes = static_cast<int64_t>(read_double(value, path, key));
      continue;
    }
    bool known = false;
    for (const auto& k : kDoubleKeys) {
      if (key == k.key) {
        p.*k.member = read_double(value, path, key);
        known = true;
      }
    }
    if (!known) {
      throw UserError(fmt::format("{}: unknown key '{}' in hardware profile (see "
                                  "hwmodel/README.md for the keys)",
                                  path.string(), key));
    }
  }
  if (p.peak_flops <= 0) bad_value(path, "peak_flops", "is required and must be > 0");
  if (p.hbm_bytes_per_s <= 0) bad_value(path, "hbm_bytes_per_s", "is required and must be > 0");
  if (p.memory_bytes <= 0) bad_value(path, "memory_bytes", "is required and must be > 0");
  for (const char* key : {"gemm_eta_max", "hbm_efficiency", "prefill_attention_efficiency",
                          "decode_attention_efficiency"}) {
    for (const auto& k : kDoubleKeys) {
      if (key == std::string_view(k.key) && !(p.*k.member > 0 && p.*k.member <= 1)) {
        bad_value(path, key, "is an efficiency and must be in (0, 1]");
      }
    }
  }
  return p;
}

void save_hardware_profile(const HardwareProfile& profile, const std::filesystem::path& path) {
  YAML::Emitter out;
  out.SetDoublePrecision(17);
  out << YAML::Comment("batchsim hardware profile (format: hwmodel/README.md)");
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << profile.name;
  out << YAML::Key << "source" << YAML::Value << profile.source;
  out << YAML::Key << "memory_bytes" << YAML::Value << profile.memory_bytes;
  for (const auto& k : kDoubleKeys) out << YAML::Key << k.key << YAML::Value << profile.*k.member;
  out << YAML::EndMap;
  std::ofstream file(path);
  if (!file) throw UserError(fmt::format("{}: cannot write hardware profile", path.string()));
  file << out.c_str() << '\n';
  if (!file) throw UserError(fmt::format("{}: write failed", path.string()));
}

HardwareProfile resolve_gpu(std::string_view name_or_path) {
  for (const auto& g : builtin_gpus()) {
    if (g.name == name_or_path) return g;
  }
  const std::filesystem::path path(name_or_path);
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return load_hardware_profile(path);
  throw UserError(fmt::format("unknown GPU '{}': not a built-in GPU ({}) nor a profile file",
                              name_or_path, known_gpu_names()));
}

}  // namespace batchsim
