// batchsim — how a policy base registers itself: its option schema, its presets and its factory.
//
// A *base* is one scheduler class with its options (static, continuous, chunked-prefill, sglang,
// example-sjf); a *policy* is a name `--policy` accepts: a base, or a preset of one (option values
// that mirror a documented engine). Each base's folder defines one registration function,
//
//   void register_<base>_policies(PolicyCatalog& catalog);   // e.g. policies/static/static_registration.cpp
//
// that adds its bases and their presets, and names it in its CMakeLists.txt with
// batchsim_policy_base(TARGET FUNCTION) (policies/CMakeLists.txt). CMake writes the list of those
// functions into one generated file that the registry calls once, in the order of the
// add_subdirectory lines: an explicit call, so no registration depends on the order of static
// initialisation, and no base's object file is dropped by the linker as unreferenced.
//
// The option schema is the one place an option is declared: its key, type, default, range and
// documentation. The base's config reads options through it (PolicyOptionSchema::get_int and
// the rest take default and range from the schema), and `batchsim list policies` prints it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/policy.h"

namespace batchsim {

enum class PolicyOptionType { integer, real, boolean, choice };

// One option of a base. `default_value` is what `list policies` prints; it is also the default
// the getters return, unless it is prose ("auto", "max(max_model_len, 2048)"), where the config
// passes its own.
struct PolicyOptionDoc {
  std::string key;
  std::string default_value;
  std::string description;
  PolicyOptionType type = PolicyOptionType::choice;
  double min = 0;  // integer, real: the range
  double max = 0;
  std::vector<std::string> choices;  // choice: the values accepted
};

PolicyOptionDoc int_option(std::string key, std::string default_value, int64_t min, int64_t max,
                           std::string description);
PolicyOptionDoc real_option(std::string key, std::string default_value, double min, double max,
                            std::string description);
PolicyOptionDoc bool_option(std::string key, std::string default_value, std::string description);
PolicyOptionDoc choice_option(std::string key, std::string default_value, std::vector<std::string> choices,
                              std::string description);

// The options of one base. The getters read `o` with the schema's default and range, so that
// PolicyOptions::check_all_used refuses what the base never read; a key missing from the schema
// is a programming error (std::logic_error).
class PolicyOptionSchema {
 public:
  PolicyOptionSchema() = default;
  explicit PolicyOptionSchema(std::vector<PolicyOptionDoc> options) : options_(std::move(options)) {}

  const std::vector<PolicyOptionDoc>& options() const { return options_; }
  const PolicyOptionDoc& option(std::string_view key) const;

  int64_t get_int(const PolicyOptions& o, std::string_view key) const;
  int64_t get_int(const PolicyOptions& o, std::string_view key, int64_t fallback) const;
  double get_double(const PolicyOptions& o, std::string_view key) const;
  double get_double(const PolicyOptions& o, std::string_view key, double fallback) const;
  bool get_bool(const PolicyOptions& o, std::string_view key) const;
  std::string get_choice(const PolicyOptions& o, std::string_view key) const;
  std::string get_choice(const PolicyOptions& o, std::string_view key, const std::string& fallback) const;
  // Whether the option is given as `word` ("auto", "none"), outside its type; reads it if so.
  bool is_word(const PolicyOptions& o, std::string_view key, const std::string& word) const;

 private:
  std::vector<PolicyOptionDoc> options_;
};

struct PolicyInfo {
  std::string name;
  std::string base;                                         // one of policy_bases()
  std::string description;                                  // one line, with the source it mirrors
  std::vector<std::pair<std::string, std::string>> preset;  // options the preset sets
  // The engine profile (hwmodel/engines/) the preset's engine runs as, unless --engine says
  // otherwise; the base policies run as current vLLM.
  std::string engine = "vllm";
  // Where `batchsim list policies` lists it: by rank, equal ranks in registration order.
  int list_rank = 1000;
};

struct PolicyBase {
  std::string name;
  PolicyOptionSchema options;
  // Builds policy `info` of this base from `merged` (its preset under the user's options);
  // `user` holds the user's options alone, for the checks that name what the user set.
  std::function<std::unique_ptr<Policy>(const PolicyBase& self, const PolicyInfo& info, const PolicyOptions& merged,
                                        const PolicyOptions& user)>
      make;
  // Whether a policy of this base with these options chunks prefills (vLLM's
  // --enable-chunked-prefill asks); none: it never does.
  std::function<bool(const std::map<std::string, std::string>& options)> chunks_prefills;
};

// What the registration functions fill: the bases in registration order, and every policy.
struct PolicyCatalog {
  std::vector<PolicyBase> bases;
  std::vector<PolicyInfo> policies;
};

}  // namespace batchsim
