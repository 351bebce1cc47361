#include "policies/common/policy_base.h"

#include <charconv>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "hwmodel/base/error.h"

namespace batchsim {

namespace {

// The default of an option whose printed default is a number.
template <typename T>
T parse_default(const PolicyOptionDoc& d) {
  T value{};
  const char* end = d.default_value.data() + d.default_value.size();
  const auto [ptr, ec] = std::from_chars(d.default_value.data(), end, value);
  if (ec != std::errc() || ptr != end) {
    throw std::logic_error(
        fmt::format("policy option {}: default '{}' is not a number; pass one", d.key, d.default_value));
  }
  return value;
}

const PolicyOptionDoc& checked(const PolicyOptionSchema& schema, std::string_view key, PolicyOptionType type) {
  const PolicyOptionDoc& d = schema.option(key);
  if (d.type != type) throw std::logic_error(fmt::format("policy option {}: read as another type", key));
  return d;
}

}  // namespace

PolicyOptionDoc int_option(std::string key, std::string default_value, int64_t min, int64_t max,
                           std::string description) {
  return {std::move(key),
          std::move(default_value),
          std::move(description),
          PolicyOptionType::integer,
          static_cast<double>(min),
          static_cast<double>(max),
          {}};
}

PolicyOptionDoc real_option(std::string key, std::string default_value, double min, double max,
                            std::string description) {
  return {std::move(key), std::move(default_value), std::move(description), PolicyOptionType::real, min, max, {}};
}

PolicyOptionDoc bool_option(std::string key, std::string default_value, std::string description) {
  return {std::move(key), std::move(default_value), std::move(description), PolicyOptionType::boolean, 0, 0, {}};
}

PolicyOptionDoc choice_option(std::string key, std::string default_value, std::vector<std::string> choices,
                              std::string description) {
  return {std::move(key),    std::move(default_value), std::move(description), PolicyOptionType::choice, 0, 0,
          std::move(choices)};
}

const PolicyOptionDoc& PolicyOptionSchema::option(std::string_view key) const {
  for (const PolicyOptionDoc& d : options_) {
    if (d.key == key) return d;
  }
  throw std::logic_error(fmt::format("policy option {}: not in the base's schema", key));
}

int64_t PolicyOptionSchema::get_int(const PolicyOptions& o, std::string_view key) const {
  return get_int(o, key, parse_default<int64_t>(option(key)));
}

int64_t PolicyOptionSchema::get_int(const PolicyOptions& o, std::string_view key, int64_t fallback) const {
  const PolicyOptionDoc& d = checked(*this, key, PolicyOptionType::integer);
  return o.get_int(d.key, fallback, static_cast<int64_t>(d.min), static_cast<int64_t>(d.max));
}

double PolicyOptionSchema::get_double(const PolicyOptions& o, std::string_view key) const {
  return get_double(o, key, parse_default<double>(option(key)));
}

double PolicyOptionSchema::get_double(const PolicyOptions& o, std::string_view key, double fallback) const {
  const PolicyOptionDoc& d = checked(*this, key, PolicyOptionType::real);
  return o.get_double(d.key, fallback, d.min, d.max);
}

bool PolicyOptionSchema::get_bool(const PolicyOptions& o, std::string_view key) const {
  const PolicyOptionDoc& d = checked(*this, key, PolicyOptionType::boolean);
  if (d.default_value != "true" && d.default_value != "false") {
    throw std::logic_error(fmt::format("policy option {}: default '{}' is not a boolean", key, d.default_value));
  }
  return o.get_bool(d.key, d.default_value == "true");
}

std::string PolicyOptionSchema::get_choice(const PolicyOptions& o, std::string_view key) const {
  return get_choice(o, key, option(key).default_value);
}

std::string PolicyOptionSchema::get_choice(const PolicyOptions& o, std::string_view key,
                                           const std::string& fallback) const {
  const PolicyOptionDoc& d = checked(*this, key, PolicyOptionType::choice);
  if (!o.has(d.key)) return fallback;
  const std::string& text = o.values().at(d.key);
  for (const std::string& c : d.choices) {
    // Read through PolicyOptions, so that check_all_used knows the option was read.
    if (text == c) return o.get_choice(d.key, fallback, {std::string_view(c)});
  }
  throw UserError(fmt::format("--policy-opt {}={}: expected one of {}", d.key, text, fmt::join(d.choices, ", ")));
}

bool PolicyOptionSchema::is_word(const PolicyOptions& o, std::string_view key, const std::string& word) const {
  const PolicyOptionDoc& d = option(key);
  if (!o.has(d.key) || o.values().at(d.key) != word) return false;
  (void)o.get_choice(d.key, word, {std::string_view(word)});  // read, so that check_all_used accepts it
  return true;
}

}  // namespace batchsim
