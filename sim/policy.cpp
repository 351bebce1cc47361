#include "sim/policy.h"

#include <charconv>
#include <cmath>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "hwmodel/base/error.h"

namespace batchsim {

std::string_view pool_role_name(PoolRole role) {
  switch (role) {
    case PoolRole::kColocated:
      return "colocated";
    case PoolRole::kPrefill:
      return "prefill";
    case PoolRole::kDecode:
      return "decode";
  }
  return "?";
}

std::string Policy::unsupported_role_reason(PoolRole role) const {
  if (role == PoolRole::kColocated) return "";
  return fmt::format(
      "policy '{}' has no {} role: it cannot hold a finished request's KV for a "
      "transfer, nor admit a request whose prompt was prefilled elsewhere",
      name(), pool_role_name(role));
}

Policy::KvSizing Policy::after_profile_run(const CostModel& cost_model, double gpu_memory_utilization, int64_t tokens,
                                           int64_t sequences, CostModel::WindowKv window) {
  return KvSizing{cost_model.kv_capacity_tokens(gpu_memory_utilization, tokens, sequences, window),
                  fmt::format("--gpu-memory-utilization {:g} after a profile run of {} tokens in {} sequences",
                              gpu_memory_utilization, tokens, sequences)};
}

const std::string* PolicyOptions::lookup(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return nullptr;
  used_[key] = true;
  return &it->second;
}

namespace {

// Parses the whole of `text` as a number of type T in [min, max], or names the option.
template <typename T>
T parse_number(const std::string& key, const std::string& text, T min, T max, const char* what) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw UserError(fmt::format("--policy-opt {}={}: expected {}", key, text, what));
  }
  // Written so that NaN (which from_chars accepts as "nan") fails too: every comparison with
  // NaN is false, and a NaN watermark or timeout would reach integer casts (undefined).
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) {
      throw UserError(fmt::format("--policy-opt {}={}: must be a finite number", key, text));
    }
  }
  if (!(value >= min && value <= max)) {
    throw UserError(fmt::format("--policy-opt {}={}: must be in [{}, {}]", key, text, min, max));
  }
  return value;
}

}  // namespace

int64_t PolicyOptions::get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max) const {
  const std::string* text = lookup(key);
  return text == nullptr ? fallback : parse_number<int64_t>(key, *text, min, max, "an integer");
}

double PolicyOptions::get_double(const std::string& key, double fallback, double min, double max) const {
  const std::string* text = lookup(key);
  return text == nullptr ? fallback : parse_number<double>(key, *text, min, max, "a number");
}

bool PolicyOptions::get_bool(const std::string& key, bool fallback) const {
  const std::string* text = lookup(key);
  if (text == nullptr) return fallback;
  if (*text == "true" || *text == "1" || *text == "yes") return true;
  if (*text == "false" || *text == "0" || *text == "no") return false;
  throw UserError(fmt::format("--policy-opt {}={}: expected true or false", key, *text));
}

std::string PolicyOptions::get_choice(const std::string& key, const std::string& fallback,
                                      std::initializer_list<std::string_view> choices) const {
  const std::string* text = lookup(key);
  if (text == nullptr) return fallback;
  for (std::string_view c : choices) {
    if (*text == c) return *text;
  }
  throw UserError(fmt::format("--policy-opt {}={}: expected one of {}", key, *text, fmt::join(choices, ", ")));
}

void PolicyOptions::check_all_used(std::string_view policy_name) const {
  for (const auto& [key, value] : values_) {
    if (!used_.count(key)) {
      throw UserError(
          fmt::format("--policy-opt {}={}: policy '{}' has no option '{}' "
                      "(`batchsim list policies` shows the options)",
                      key, value, policy_name, key));
    }
  }
}

}  // namespace batchsim
