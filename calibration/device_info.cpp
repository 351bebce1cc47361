#include "calibration/device_info.h"

#include <cctype>
#include <cstdio>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

// device.json is one flat object of strings and numbers. It is written and read here without a
// JSON library on purpose: batchsim-calibrate must build with nvcc alone on a bare CUDA image
// (the GPU machines have no fmt/Boost/nlohmann), and this file is its only JSON.

namespace batchsim::calibration {
namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string number(double v) {
  char buf[64];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

// Parses {"key": "string" | number, ...}; nothing nested.
std::map<std::string, std::string> parse_flat_object(const std::string& text, const std::string& where) {
  std::map<std::string, std::string> values;
  size_t i = 0;
  const auto fail = [&](const std::string& what) {
    throw std::runtime_error(where + ": " + what + " at offset " + std::to_string(i));
  };
  const auto skip_space = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  const auto expect = [&](char c) {
    skip_space();
    if (i >= text.size() || text[i] != c) fail(std::string("expected '") + c + "'");
    ++i;
  };
  const auto read_string = [&] {
    expect('"');
    std::string s;
    while (i < text.size() && text[i] != '"') {
      if (text[i] == '\\' && i + 1 < text.size()) {
        ++i;
        if (text[i] == 'u' && i + 4 < text.size()) {
          s += static_cast<char>(std::stoi(text.substr(i + 1, 4), nullptr, 16));
          i += 4;
        } else {
          s += text[i];
        }
      } else {
        s += text[i];
      }
      ++i;
    }
    expect('"');
    return s;
  };
  expect('{');
  skip_space();
  if (i < text.size() && text[i] == '}') return values;
  while (true) {
    const std::string key = read_string();
    expect(':');
    skip_space();
    if (i < text.size() && text[i] == '"') {
      values[key] = read_string();
    } else {
      const size_t start = i;
      while (i < text.size() && text[i] != ',' && text[i] != '}' && !std::isspace(static_cast<unsigned char>(text[i])))
        ++i;
      if (i == start) fail("expected a value");
      values[key] = text.substr(start, i - start);
    }
    skip_space();
    if (i < text.size() && text[i] == ',') {
      ++i;
      continue;
    }
    expect('}');
    return values;
  }
}

}  // namespace

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
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"name", quoted(d.name)},
      {"slug", quoted(device_slug(d.name))},
      {"compute_capability",
       quoted(std::to_string(d.compute_capability_major) + "." + std::to_string(d.compute_capability_minor))},
      {"compute_capability_major", std::to_string(d.compute_capability_major)},
      {"compute_capability_minor", std::to_string(d.compute_capability_minor)},
      {"sm_count", std::to_string(d.sm_count)},
      {"sm_clock_khz", std::to_string(d.sm_clock_khz)},
      {"memory_clock_khz", std::to_string(d.memory_clock_khz)},
      {"memory_bus_width_bits", std::to_string(d.memory_bus_width_bits)},
      {"memory_bytes", std::to_string(d.memory_bytes)},
      {"l2_cache_bytes", std::to_string(d.l2_cache_bytes)},
      {"theoretical_hbm_bytes_per_s", number(d.theoretical_hbm_bytes_per_s())},
      {"driver_version", std::to_string(d.driver_version)},
      {"runtime_version", std::to_string(d.runtime_version)},
      {"cublaslt_version", std::to_string(d.cublaslt_version)},
      {"cupti_api_version", std::to_string(d.cupti_api_version)},
      {"timer", quoted(d.timer)},
      {"measured_at_utc", quoted(d.measured_at_utc)},
  };
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path);
  out << "{\n";
  for (size_t i = 0; i < fields.size(); ++i) {
    out << "  " << quoted(fields[i].first) << ": " << fields[i].second << (i + 1 < fields.size() ? ",\n" : "\n");
  }
  out << "}\n";
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

DeviceInfo read_device_info_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  const std::map<std::string, std::string> v = parse_flat_object(text.str(), path.string());
  const auto field = [&](const char* key) -> const std::string& {
    const auto it = v.find(key);
    if (it == v.end()) throw std::runtime_error(path.string() + ": missing \"" + key + "\"");
    return it->second;
  };
  const auto integer = [&](const char* key) {
    const std::string& s = field(key);
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || ptr != s.data() + s.size()) {
      throw std::runtime_error(path.string() + ": \"" + key + "\" is not an integer: " + s);
    }
    return value;
  };
  DeviceInfo d;
  d.name = field("name");
  d.compute_capability_major = static_cast<int>(integer("compute_capability_major"));
  d.compute_capability_minor = static_cast<int>(integer("compute_capability_minor"));
  d.sm_count = static_cast<int>(integer("sm_count"));
  d.sm_clock_khz = static_cast<int>(integer("sm_clock_khz"));
  d.memory_clock_khz = static_cast<int>(integer("memory_clock_khz"));
  d.memory_bus_width_bits = static_cast<int>(integer("memory_bus_width_bits"));
  d.memory_bytes = integer("memory_bytes");
  d.l2_cache_bytes = integer("l2_cache_bytes");
  d.driver_version = static_cast<int>(integer("driver_version"));
  d.runtime_version = static_cast<int>(integer("runtime_version"));
  d.cublaslt_version = integer("cublaslt_version");
  d.cupti_api_version = static_cast<int>(integer("cupti_api_version"));
  d.timer = field("timer");
  d.measured_at_utc = field("measured_at_utc");
  return d;
}

}  // namespace batchsim::calibration
