// batchsim — reading the fields of a profile file (hardware or engine profile): numbers with
// their ranges, keys as names, and errors that name the file, the line and the key.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <string>

namespace batchsim::yaml_fields {

// Values beyond any GPU or engine: they would overflow what they are multiplied into.
inline constexpr double kMaxValue = 1e30;

// Throws UserError "<where>: key '<key>' <why>".
[[noreturn]] void bad_value(const std::string& where, const std::string& key, const std::string& why);
// "file:LINE" for a node of the file (built-in text parsed from a string has no lines).
std::string at_line(const std::string& where, const YAML::Node& node);
// A mapping's key as text; a key that is a list or a map is an error naming its line.
std::string key_text(const YAML::Node& key, const std::string& where);
// A finite number in [0, kMaxValue].
double read_double(const YAML::Node& node, const std::string& where, const std::string& key);
// A whole number in [low, high], range-checked before the conversion.
int64_t read_integer(const YAML::Node& node, const std::string& where, const std::string& key, double low, double high);
// The parsed file; UserError "<path>: cannot open <what>" or "<path>:LINE: not valid YAML/JSON (...)".
YAML::Node load_file(const std::filesystem::path& path, const std::string& what);
// A string scalar.
std::string read_string(const YAML::Node& node, const std::string& where, const std::string& key);

}  // namespace batchsim::yaml_fields
