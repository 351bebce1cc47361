// batchsim — engine profiles: the reader, the writer and the built-in engines (engine_profile.h).
#include "hwmodel/engine_profile.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>

#include "hwmodel/base/error.h"
#include "hwmodel/base/yaml_fields.h"
#include "hwmodel/shipped_profiles.h"

namespace batchsim {

using yaml_fields::at_line;
using yaml_fields::bad_value;
using yaml_fields::key_text;
using yaml_fields::read_double;
using yaml_fields::read_integer;
using yaml_fields::read_string;

double CpuOverhead::seconds(int64_t sequences, int tp) const {
  return per_iteration_s + per_sequence_s * static_cast<double>(sequences) + per_extra_worker_s * std::max(0, tp - 1);
}

double EngineProfile::launch_s(int64_t num_layers, int64_t tokens, bool prefill) const {
  const bool graphed = cuda_graph_max_tokens > 0 && tokens <= cuda_graph_max_tokens;
  if (graphed && !(prefill && cuda_graph_decode_only)) return cuda_graph_launch_s;
  return launch_per_kernel_s * static_cast<double>(num_layers * kernels_per_layer + kernels_per_iteration);
}

const char* allreduce_impl_name(AllReduceImpl impl) { return impl == AllReduceImpl::custom ? "custom" : "nccl"; }
const char* kv_cache_write_name(KvCacheWrite w) { return w == KvCacheWrite::concat ? "concat" : "in_place"; }

namespace {

// The keys of a group (`cpu:`, `launch:`, ...), each with how it is read and written, so that
// the reader, the writer and the list of known keys cannot drift apart.
struct Field {
  std::string key;
  std::function<void(EngineProfile&, const YAML::Node&, const std::string& where)> read;
  std::function<void(EngineProfile&, YAML::Emitter&)> write;  // reads through the same getter
};
struct Group {
  std::string name;
  std::vector<Field> fields;
};

Field seconds_field(std::string key, std::function<double&(EngineProfile&)> get) {
  return {key,
          [get, key](EngineProfile& e, const YAML::Node& n, const std::string& where) {
            get(e) = read_double(n, where, key);
          },
          [get](EngineProfile& e, YAML::Emitter& out) { out << get(e); }};
}
Field count_field(std::string key, std::function<int64_t&(EngineProfile&)> get) {
  return {key,
          [get, key](EngineProfile& e, const YAML::Node& n, const std::string& where) {
            get(e) = read_integer(n, where, key, 0, 1e9);
          },
          [get](EngineProfile& e, YAML::Emitter& out) { out << get(e); }};
}
Field bool_field(std::string key, std::function<bool&(EngineProfile&)> get) {
  return {key,
          [get, key](EngineProfile& e, const YAML::Node& n, const std::string& where) {
            bool v = false;
            if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
              bad_value(at_line(where, n), key, "must be true or false");
            }
            get(e) = v;
          },
          [get](EngineProfile& e, YAML::Emitter& out) { out << get(e); }};
}
template <typename Enum>
Field choice_field(std::string key, std::function<Enum&(EngineProfile&)> get,
                   std::vector<std::pair<std::string, Enum>> choices) {
  return {key,
          [get, key, choices](EngineProfile& e, const YAML::Node& n, const std::string& where) {
            const std::string text = read_string(n, where, key);
            std::string names;
            for (const auto& [name, value] : choices) {
              if (name == text) {
                get(e) = value;
                return;
              }
              names += (names.empty() ? "" : ", ") + name;
            }
            bad_value(at_line(where, n), key, fmt::format("must be one of {}, got '{}'", names, text));
          },
          [get, choices](EngineProfile& e, YAML::Emitter& out) {
            for (const auto& [name, value] : choices) {
              if (value == get(e)) out << name;
            }
          }};
}

const std::vector<Group>& groups() {
  static const std::vector<Group> g = {
      {"cpu",
       {seconds_field("per_iteration_s", [](EngineProfile& e) -> double& { return e.cpu.per_iteration_s; }),
        seconds_field("per_sequence_s", [](EngineProfile& e) -> double& { return e.cpu.per_sequence_s; }),
        seconds_field("per_extra_worker_s", [](EngineProfile& e) -> double& { return e.cpu.per_extra_worker_s; }),
        bool_field("overlaps_gpu", [](EngineProfile& e) -> bool& { return e.cpu_overlaps_gpu; })}},
      {"launch",
       {seconds_field("per_kernel_s", [](EngineProfile& e) -> double& { return e.launch_per_kernel_s; }),
        count_field("kernels_per_layer", [](EngineProfile& e) -> int64_t& { return e.kernels_per_layer; }),
        count_field("kernels_per_iteration", [](EngineProfile& e) -> int64_t& { return e.kernels_per_iteration; })}},
      {"cuda_graphs",
       {count_field("max_tokens", [](EngineProfile& e) -> int64_t& { return e.cuda_graph_max_tokens; }),
        seconds_field("launch_s", [](EngineProfile& e) -> double& { return e.cuda_graph_launch_s; }),
        bool_field("decode_only", [](EngineProfile& e) -> bool& { return e.cuda_graph_decode_only; })}},
      {"allreduce",
       {choice_field<AllReduceImpl>("impl", [](EngineProfile& e) -> AllReduceImpl& { return e.allreduce; },
                                    {{"nccl", AllReduceImpl::nccl}, {"custom", AllReduceImpl::custom}}),
        seconds_field("custom_max_bytes", [](EngineProfile& e) -> double& { return e.custom_allreduce_max_bytes; })}},
      {"residual",
       {seconds_field("per_iteration_s", [](EngineProfile& e) -> double& { return e.residual.per_iteration_s; }),
        seconds_field("per_sequence_s", [](EngineProfile& e) -> double& { return e.residual.per_sequence_s; }),
        seconds_field("per_extra_worker_s",
                      [](EngineProfile& e) -> double& { return e.residual.per_extra_worker_s; })}},
      {"kv_cache",
       {choice_field<KvCacheWrite>("write", [](EngineProfile& e) -> KvCacheWrite& { return e.kv_cache_write; },
                                   {{"in_place", KvCacheWrite::in_place}, {"concat", KvCacheWrite::concat}})}},
      {"moe",
       {bool_field("all_to_all", [](EngineProfile& e) -> bool& { return e.moe_all_to_all; }),
        bool_field("pad_dp_to_max", [](EngineProfile& e) -> bool& { return e.moe_pad_dp_to_max; })}},
  };
  return g;
}

std::string known_keys(const Group& group) {
  std::string names;
  for (const Field& f : group.fields) names += (names.empty() ? "" : ", ") + f.key;
  return names;
}

EngineProfile engine_from_yaml(const YAML::Node& root, const std::string& where, const std::string& default_name,
                               const std::vector<EngineProfile>& bases) {
  if (!root.IsMap()) throw UserError(fmt::format("{}: an engine profile is a map of keys to values", where));
  EngineProfile e;
  // `base` names a built-in engine whose values are the defaults for keys the file leaves out.
  if (const YAML::Node base = root["base"]) {
    const std::string name = read_string(base, where, "base");
    const auto it = std::find_if(bases.begin(), bases.end(), [&](const EngineProfile& b) { return b.name == name; });
    if (it == bases.end()) {
      std::string names;
      for (const auto& b : bases) names += (names.empty() ? "" : ", ") + b.name;
      bad_value(at_line(where, base), "base", fmt::format("names unknown engine '{}' (known: {})", name, names));
    }
    e = *it;
  }
  e.name = default_name;
  const bool based = !e.family.empty();
  for (const auto& kv : root) {
    const std::string key = key_text(kv.first, where);
    const YAML::Node& value = kv.second;
    if (key == "base") continue;
    if (key == "name" || key == "description" || key == "sources") {
      (key == "name" ? e.name : key == "description" ? e.description : e.sources) = read_string(value, where, key);
      continue;
    }
    const auto group = std::find_if(groups().begin(), groups().end(), [&](const Group& g) { return g.name == key; });
    if (group == groups().end()) {
      throw UserError(
          fmt::format("{}: unknown key '{}' in engine profile (known: base, name, description, "
                      "sources, cpu, launch, cuda_graphs, allreduce, residual, kv_cache, moe; see hwmodel/README.md)",
                      at_line(where, kv.first), key));
    }
    if (!value.IsMap()) bad_value(at_line(where, value), key, fmt::format("must be a map of {}", known_keys(*group)));
    for (const auto& field_kv : value) {
      const std::string field_key = key_text(field_kv.first, where);
      const auto field =
          std::find_if(group->fields.begin(), group->fields.end(), [&](const Field& f) { return f.key == field_key; });
      if (field == group->fields.end()) {
        bad_value(at_line(where, field_kv.first), key + "." + field_key,
                  fmt::format("is unknown (known: {})", known_keys(*group)));
      }
      field->read(e, field_kv.second, where);
    }
  }
  if (e.name.empty()) bad_value(where, "name", "must not be empty");
  if (!based) e.family = e.name;
  return e;
}

std::vector<EngineProfile> make_builtin_engines() {
  // A shipped engine may name another as its `base`, whatever the files' order: each pass loads
  // those whose base is loaded, until none is left.
  std::vector<std::size_t> pending(detail::kNumShippedEngines);
  for (std::size_t i = 0; i < pending.size(); ++i) pending[i] = i;
  std::vector<EngineProfile> engines;
  while (!pending.empty()) {
    std::vector<std::size_t> later;
    for (const std::size_t i : pending) {
      const auto& shipped = detail::kShippedEngines[i];
      const std::string file = shipped.file_name;
      try {
        const YAML::Node root = YAML::Load(shipped.yaml);
        if (const YAML::Node base = root["base"];
            base && base.IsScalar() && std::none_of(engines.begin(), engines.end(), [&](const EngineProfile& e) {
              return e.name == base.as<std::string>();
            })) {
          later.push_back(i);
          continue;
        }
        engines.push_back(engine_from_yaml(root, "hwmodel/engines/" + file, file.substr(0, file.rfind('.')), engines));
      } catch (const std::exception& ex) {
        // A shipped engine that does not load is a bug in the build, not a user error.
        throw std::logic_error(std::string("shipped engine profile broken: ") + ex.what());
      }
    }
    if (later.size() == pending.size()) {
      throw std::logic_error(
          fmt::format("shipped engine profile broken: hwmodel/engines/{} names a base that is "
                      "not shipped",
                      detail::kShippedEngines[later.front()].file_name));
    }
    pending = std::move(later);
  }
  return engines;
}

}  // namespace

const std::vector<EngineProfile>& builtin_engines() {
  static const std::vector<EngineProfile> engines = make_builtin_engines();
  return engines;
}

EngineProfile load_engine_profile(const std::filesystem::path& path) {
  const YAML::Node root = yaml_fields::load_file(path, "engine profile");
  return engine_from_yaml(root, path.string(), path.stem().string(), builtin_engines());
}

namespace {

// The shipped engine whose file is `<name>.yaml` and whose name is `name`, parsed alone with its
// chain of bases (once, then kept): what resolve_engine finds most often, without parsing every
// shipped engine. Null when there is none (the catalogue decides).
const EngineProfile* shipped_engine_named(std::string_view name, int depth = 0) {
  static std::recursive_mutex mutex;
  static std::map<std::string, EngineProfile, std::less<>> loaded;
  const std::lock_guard<std::recursive_mutex> lock(mutex);
  if (const auto it = loaded.find(name); it != loaded.end()) return &it->second;
  if (depth > static_cast<int>(detail::kNumShippedEngines)) return nullptr;  // a cycle: the catalogue says so
  for (std::size_t i = 0; i < detail::kNumShippedEngines; ++i) {
    const auto& shipped = detail::kShippedEngines[i];
    const std::string file = shipped.file_name;
    const std::string stem = file.substr(0, file.rfind('.'));
    if (stem != name) continue;
    std::vector<EngineProfile> bases;
    try {
      const YAML::Node root = YAML::Load(shipped.yaml);
      if (const YAML::Node base = root["base"]; base && base.IsScalar()) {
        const EngineProfile* b = shipped_engine_named(base.as<std::string>(), depth + 1);
        if (b == nullptr) return nullptr;
        bases.push_back(*b);
      }
      EngineProfile engine = engine_from_yaml(root, "hwmodel/engines/" + file, stem, bases);
      if (engine.name != name) return nullptr;
      return &loaded.emplace(std::string(name), std::move(engine)).first->second;
    } catch (const std::exception&) {
      return nullptr;  // builtin_engines() reports a broken shipped engine
    }
  }
  return nullptr;
}

}  // namespace

EngineProfile resolve_engine(std::string_view name_or_path) {
  // The catalogue's answer without parsing it all: names are unique (tests/hwmodel checks), so
  // the shipped engine whose file's stem is the name, if it has that name, is the one.
  if (const EngineProfile* shipped = shipped_engine_named(name_or_path)) return *shipped;
  for (const auto& e : builtin_engines()) {
    if (e.name == name_or_path) return e;
  }
  const std::filesystem::path path(name_or_path);
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return load_engine_profile(path);
  std::string names;
  for (const auto& e : builtin_engines()) names += (names.empty() ? "" : ", ") + e.name;
  throw UserError(
      fmt::format("--engine: unknown engine '{}': not a built-in engine ({}) nor an engine "
                  "profile file",
                  name_or_path, names));
}

std::string engine_profile_yaml(const EngineProfile& engine) {
  YAML::Emitter out;
  out.SetDoublePrecision(17);
  out << YAML::Comment("batchsim engine profile (format: hwmodel/README.md, \"Engine profiles\")");
  EngineProfile copy = engine;  // the fields' getters hand out mutable references
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << engine.name;
  if (!engine.description.empty()) out << YAML::Key << "description" << YAML::Value << engine.description;
  for (const Group& group : groups()) {
    out << YAML::Key << group.name << YAML::Value << YAML::BeginMap;
    for (const Field& f : group.fields) {
      out << YAML::Key << f.key << YAML::Value;
      f.write(copy, out);
    }
    out << YAML::EndMap;
  }
  if (!engine.sources.empty()) {
    out << YAML::Key << "sources" << YAML::Value;
    if (engine.sources.find('\n') != std::string::npos) {
      out << (engine.sources.back() == '\n' ? YAML::Literal : YAML::DoubleQuoted);
    }
    out << engine.sources;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace batchsim
