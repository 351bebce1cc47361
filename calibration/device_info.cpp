#include "calibration/device_info.h"

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace batchsim::calibration {

std::string device_slug(const std::string& device_name) {
  std::string name = device_name;
  const std::string prefix = "NVIDIA ";
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  std::string slug;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      slug += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!slug.empty() && slug.back() != '-') {
      slug += '-';
    }
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug.empty() ? "gpu" : slug;
}

void write_device_info_json(const DeviceInfo& d, const std::filesystem::path& path) {
  const nlohmann::json j = {
      {"name", d.name},
      {"slug", device_slug(d.name)},
      {"compute_capability", std::to_string(d.compute_capability_major) + "." +
                                 std::to_string(d.compute_capability_minor)},
      {"compute_capability_major", d.compute_capability_major},
      {"compute_capability_minor", d.compute_capability_minor},
      {"sm_count", d.sm_count},
      {"sm_clock_khz", d.sm_clock_khz},
      {"memory_clock_khz", d.memory_clock_khz},
      {"memory_bus_width_bits", d.memory_bus_width_bits},
      {"memory_bytes", d.memory_bytes},
      {"l2_cache_bytes", d.l2_cache_bytes},
      {"theoretical_hbm_bytes_per_s", d.theoretical_hbm_bytes_per_s()},
      {"driver_version", d.driver_version},
      {"runtime_version", d.runtime_version},
      {"cublaslt_version", d.cublaslt_version},
      {"cupti_api_version", d.cupti_api_version},
      {"timer", d.timer},
      {"measured_at_utc", d.measured_at_utc},
  };
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path);
  out << j.dump(2) << '\n';
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

DeviceInfo read_device_info_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    DeviceInfo d;
    j.at("name").get_to(d.name);
    j.at("compute_capability_major").get_to(d.compute_capability_major);
    j.at("compute_capability_minor").get_to(d.compute_capability_minor);
    j.at("sm_count").get_to(d.sm_count);
    j.at("sm_clock_khz").get_to(d.sm_clock_khz);
    j.at("memory_clock_khz").get_to(d.memory_clock_khz);
    j.at("memory_bus_width_bits").get_to(d.memory_bus_width_bits);
    j.at("memory_bytes").get_to(d.memory_bytes);
    j.at("l2_cache_bytes").get_to(d.l2_cache_bytes);
    j.at("driver_version").get_to(d.driver_version);
    j.at("runtime_version").get_to(d.runtime_version);
    j.at("cublaslt_version").get_to(d.cublaslt_version);
    j.at("cupti_api_version").get_to(d.cupti_api_version);
    j.at("timer").get_to(d.timer);
    j.at("measured_at_utc").get_to(d.measured_at_utc);
    return d;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path.string() + ": " + e.what());
  }
}

}  // namespace batchsim::calibration
