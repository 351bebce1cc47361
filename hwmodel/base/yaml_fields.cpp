// batchsim — reading the fields of a profile file (see yaml_fields.h).
#include "hwmodel/base/yaml_fields.h"

#include <fmt/format.h>

#include <cmath>

#include "hwmodel/base/error.h"

namespace batchsim::yaml_fields {

void bad_value(const std::string& where, const std::string& key, const std::string& why) {
  throw UserError(fmt::format("{}: key '{}' {}", where, key, why));
}

std::string at_line(const std::string& where, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();  // yaml-cpp counts lines from 0
  return mark.line >= 0 ? fmt::format("{}:{}", where, mark.line + 1) : where;
}

std::string key_text(const YAML::Node& key, const std::string& where) {
  if (!key.IsScalar()) {
    throw UserError(fmt::format("{}: a key must be a name, got a {}", at_line(where, key),
                                key.IsSequence() ? "list"
                                : key.IsMap()    ? "map"
                                                 : "null"));
  }
  return key.Scalar();
}

double read_double(const YAML::Node& node, const std::string& where, const std::string& key) {
  double v = 0;
  if (!node.IsScalar() || !YAML::convert<double>::decode(node, v)) {
    bad_value(at_line(where, node), key, "must be a number");
  }
  if (!(v >= 0) || v > kMaxValue) {
    bad_value(at_line(where, node), key,
              fmt::format("must be a finite number from 0 to {:g}, got {}", kMaxValue, node.Scalar()));
  }
  return v;
}

int64_t read_integer(const YAML::Node& node, const std::string& where, const std::string& key, double low,
                     double high) {
  const double v = read_double(node, where, key);
  if (v != std::floor(v) || v < low || v > high) {
    bad_value(at_line(where, node), key,
              fmt::format("must be a whole number from {:.0f} to {:.0f}, got {}", low, high, node.Scalar()));
  }
  return static_cast<int64_t>(v);
}

YAML::Node load_file(const std::filesystem::path& path, const std::string& what) {
  try {
    return YAML::LoadFile(path.string());
  } catch (const YAML::BadFile&) {
    throw UserError(fmt::format("{}: cannot open {}", path.string(), what));
  } catch (const YAML::Exception& e) {
    throw UserError(fmt::format("{}:{}: not valid YAML/JSON ({})", path.string(), e.mark.line + 1, e.msg));
  }
}

std::string read_string(const YAML::Node& node, const std::string& where, const std::string& key) {
  if (!node.IsScalar()) bad_value(at_line(where, node), key, "must be a string");
  return node.Scalar();
}

}  // namespace batchsim::yaml_fields
