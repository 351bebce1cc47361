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

// What code outside policies/ may ask of a base instead of testing its name (issue 47): each base
// declares its own in its registration. The defaults are those of a base that claims nothing.
struct PolicyBaseTraits {
  // Batches start and end together: no request joins a running batch (the static base).
  bool static_batching = false;
  // Models a host KV tier under its prefix cache (--kv-offload; PolicyEnv::kv_offload_cpu_tokens).
  bool kv_offload = false;
  // Verifies draft tokens as vLLM v1 does (--spec-decode; Batch::add_speculative_decode).
  bool speculative_decoding = false;
  // Host memory one simulated request costs the whole process, which `run` checks against the
  // machine's before it starts. Measured: `run --num-requests N --arrival poisson:50
  // --no-streaming` at N = 200k and 1M, peak RSS difference over the request difference (README,
  // "Robustness"), after requests carried their latency breakdown (RequestRecord::breakdown and
  // its accounting): 734 B on the continuous policies. A base that keeps more per request
  // measures and declares its own.
  double host_bytes_per_request = 734;
  // For the latency diagnosis (experiments/run/latency_diagnosis.h): the option that sets the
  // chunk budget of a base that chunks prompts, and, where a base may run prefill batches without
  // the running decodes, whether it does under `options` (its preset's and the user's).
  std::string chunk_budget_option = "max_num_batched_tokens";
  std::function<bool(const PolicyOptions& options)> prefill_batches_pause_decodes;
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
  PolicyBaseTraits traits;
};

// What the registration functions fill: the bases in registration order, and every policy.
struct PolicyCatalog {
  std::vector<PolicyBase> bases;
  std::vector<PolicyInfo> policies;
};

}  // namespace batchsim
