#include "experiments/study/experiment.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <type_traits>

#include <fmt/format.h>

#include "experiments/run/output.h"
#include "experiments/run/runner.h"
#include "experiments/study/report.h"
#include "hwmodel/base/error.h"
#include "hwmodel/cost_model.h"
#include "policies/registry.h"
#include "sim/workload/workload.h"

namespace batchsim {

namespace {

// Context for error messages: "FILE:LINE: KEY.PATH: what".
struct Where {
  const std::filesystem::path& file;
  [[noreturn]] void fail(const YAML::Node& node, const std::string& key, const std::string& what) const {
    const auto mark = node.Mark();
    if (mark.line >= 0) {
      throw UserError(fmt::format("{}:{}: {}: {}", file.string(), mark.line + 1, key, what));
    }
    throw UserError(fmt::format("{}: {}: {}", file.string(), key, what));
  }
};

// Run keys an axis may be named after (RunConfig keys, see run_config.h). `policy` and `seed`
// have their own top-level lists; `out` comes from --out.
bool is_axis_run_key(const std::string& key) {
  static const std::set<std::string> keys = {"model",
                                             "gpu",
                                             "engine",
                                             "tp",
                                             "dp",
                                             "ep",
                                             "moe-tp",
                                             "moe-routing",
                                             "eplb",
                                             "replicas",
                                             "router",
                                             "weight-dtype",
                                             "kv-cache-dtype",
                                             "arrival",
                                             "trace",
                                             "num-requests",
                                             "prompt-len",
                                             "output-len",
                                             "prefix",
                                             "trace-speedup",
                                             "gpu-memory-utilization",
                                             "iteration-log",
                                             "max-concurrency",
                                             "max-tokens",
                                             "ignore-eos",
                                             "num-gpu-blocks",
                                             "priority",
                                             "think-time",
                                             "session-turns",
                                             "trace-sessions",
                                             "client-connections",
                                             "resample",
                                             "prefill-replicas",
                                             "decode-replicas",
                                             "prefill-gpu",
                                             "decode-gpu",
                                             "prefill-tp",
                                             "decode-tp",
                                             "prefill-policy",
                                             "decode-policy",
                                             "decode-router",
                                             "kv-link",
                                             "kv-link-gbps",
                                             "kv-link-latency-us",
                                             "kv-transfer",
                                             "prefill-num-gpu-blocks",
                                             "decode-num-gpu-blocks",
                                             "prefill-engine",
                                             "decode-engine"};
  return keys.count(key) > 0;
}

void reject_reserved_keys(const std::string& raw, const YAML::Node& key_node, const Where& where,
                          const std::string& path) {
  const std::string key = normalize_key(raw);
  if (key == "policy") where.fail(key_node, path + "policy", "list policies under the top-level 'policies' key");
  if (key == "seed" || key == "seeds") where.fail(key_node, path + key, "list seeds under the top-level 'seeds' key");
  if (key == "out") where.fail(key_node, path + "out", "the output folder is given with --out");
}

void reject_reserved_keys(const YAML::Node& mapping, const Where& where, const std::string& path) {
  for (const auto& kv : mapping) reject_reserved_keys(kv.first.as<std::string>(), kv.first, where, path);
}

template <typename T>
T as(const YAML::Node& node, const Where& where, const std::string& key, const char* expected) {
  T value{};
  try {
    value = node.as<T>();
  } catch (const YAML::Exception&) {
    where.fail(node, key, fmt::format("expected {}", expected));
  }
  if constexpr (std::is_floating_point_v<T>) {
    // yaml-cpp reads .nan and .inf: a NaN SLO bound is met by every rate, an infinite rate
    // never ends a run.
    if (!std::isfinite(value)) where.fail(node, key, fmt::format("expected {}, a finite number", expected));
  }
  return value;
}

std::map<std::string, std::string> option_map(const YAML::Node& node, const Where& where, const std::string& key) {
  if (!node.IsMap()) where.fail(node, key, "expected a mapping of option: value");
  std::map<std::string, std::string> out;
  for (const auto& o : node) {
    const std::string name = o.first.as<std::string>();
    out[name] = as<std::string>(o.second, where, key + "." + name, "a scalar value");
  }
  return out;
}

PolicyVariant parse_policy_variant(const YAML::Node& node, const Where& where, const std::string& key) {
  PolicyVariant v;
  if (node.IsScalar()) {
    v.policy = node.as<std::string>();
    v.label = v.policy;
    return v;
  }
  if (!node.IsMap()) where.fail(node, key, "expected a policy name or a mapping {policy, label, policy-opt}");
  for (const auto& kv : node) {
    const std::string k = normalize_key(kv.first.as<std::string>());
    if (k == "policy")
      v.policy = as<std::string>(kv.second, where, key + ".policy", "a policy name");
    else if (k == "label")
      v.label = as<std::string>(kv.second, where, key + ".label", "a string");
    else if (k == "policy-opt")
      v.options = option_map(kv.second, where, key + ".policy-opt");
    else
      where.fail(kv.first, key + "." + kv.first.as<std::string>(), "unknown key (expected policy, label, policy-opt)");
  }
  if (v.policy.empty()) where.fail(node, key + ".policy", "missing");
  if (v.label.empty()) v.label = v.policy;
  return v;
}

// The `published:` block: {source, metric, baseline, ratios: {POLICY: {GROUP: RATIO}}}, every
// policy label and group one the experiment runs, so that a typo cannot leave a row empty.
PublishedSpec parse_published(const YAML::Node& node, const Where& where, const Experiment& e,
                              const std::vector<PlannedRun>& runs) {
  if (!node.IsMap()) where.fail(node, "published", "expected a mapping {source, metric, baseline, ratios}");
  PublishedSpec p;
  std::set<std::string> labels, groups;
  for (const PolicyVariant& v : e.policies) labels.insert(v.label);
  for (const PlannedRun& r : runs) groups.insert(r.group);
  auto label_of = [&](const YAML::Node& n, const std::string& key) {
    const std::string label = as<std::string>(n, where, key, "a policy label");
    if (!labels.count(label)) {
      where.fail(n, key,
                 fmt::format("'{}' is not a policy label of this experiment ({})", label, fmt::join(labels, ", ")));
    }
    return label;
  };
  // {GROUP: positive number} under `key`, every group one the experiment runs.
  auto group_values = [&](const YAML::Node& n, const std::string& key, const char* example, const char* what) {
    if (!n.IsMap()) where.fail(n, key, fmt::format("expected {}", example));
    std::vector<std::pair<std::string, double>> values;
    for (const auto& g : n) {
      const std::string group = g.first.as<std::string>();
      if (!groups.count(group)) {
        where.fail(g.first, key,
                   fmt::format("'{}' is not a group this experiment runs ({})", group, fmt::join(groups, ", ")));
      }
      const double value = as<double>(g.second, where, key + "." + group, what);
      if (!(value > 0)) where.fail(g.second, key + "." + group, "must be > 0");
      values.emplace_back(group, value);
    }
    return values;
  };
  std::optional<YAML::Node> ratios;
  for (const auto& kv : node) {
    const std::string raw = kv.first.as<std::string>();
    const std::string key = "published." + raw;
    if (raw == "source")
      p.source = as<std::string>(kv.second, where, key, "a citation");
    else if (raw == "metric")
      p.metric = as<std::string>(kv.second, where, key, "a summary.json path");
    else if (raw == "baseline")
      p.baseline = label_of(kv.second, key);
    else if (raw == "ratios")
      ratios = kv.second;
    else if (raw == "why")
      p.why = as<std::string>(kv.second, where, key, "a paragraph");
    else if (raw == "baseline-values") {
      p.baseline_values = group_values(kv.second, key, "{GROUP: VALUE}, e.g. {cap=1536: 83}", "a value of the metric");
    } else {
      where.fail(kv.first, key, "unknown key (expected source, metric, baseline, ratios, baseline-values, why)");
    }
  }
  if (p.source.empty() || p.metric.empty() || p.baseline.empty() || !ratios) {
    where.fail(node, "published", "needs source, metric, baseline and ratios");
  }
  if (!ratios->IsMap()) where.fail(*ratios, "published.ratios", "expected {POLICY: {GROUP: RATIO}}");
  for (const auto& per_policy : *ratios) {
    const std::string label = label_of(per_policy.first, "published.ratios");
    const std::string key = "published.ratios." + label;
    for (const auto& [group, ratio] :
         group_values(per_policy.second, key, "{GROUP: RATIO}, e.g. {cap=1536: 23}", "a ratio")) {
      p.ratios.emplace_back(label, group, ratio);
    }
  }
  return p;
}

std::vector<PolicyVariant> parse_policies(const YAML::Node& node, const Where& where, const std::string& key) {
  if (!node.IsSequence() || node.size() == 0) where.fail(node, key, "expected a non-empty list of policies");
  std::vector<PolicyVariant> out;
  std::set<std::string> labels;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string k = fmt::format("{}[{}]", key, i);
    PolicyVariant v = parse_policy_variant(node[i], where, k);
    if (!labels.insert(v.label).second) {
      where.fail(node[i], k, fmt::format("label '{}' is used twice (give each variant its own label)", v.label));
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::string scalar_label(const YAML::Node& node) { return node.as<std::string>(); }

// A copy of `node` with memory of its own. Assigning a node of the parsed file into another
// document makes yaml-cpp merge the two documents' memory (every node of the file), so that
// storing each axis value as it is costs the file's size per value: a 9,000-value experiment
// took minutes and 10 GB to be refused as too large. A clone costs only the value's size.
YAML::Node detached(const YAML::Node& node) { return YAML::Clone(node); }

AxisValue parse_axis_value(const std::string& axis, const YAML::Node& node, const Where& where, const std::string& key,
                           const std::set<std::string>& policy_labels) {
  AxisValue v;
  v.settings = YAML::Node(YAML::NodeType::Map);
  const bool is_rate = axis == "rate";
  // A run key the value sets: checked on the file's own nodes (the stored copy has no lines, so
  // an error found later could not say where the value is written), then stored detached.
  RunConfig scratch;
  const auto set = [&](const std::string& raw, const YAML::Node& key_node, const YAML::Node& value) {
    reject_reserved_keys(raw, key_node, where, key + ".");
    apply_yaml_key(raw, key_node, value, where.file, scratch, key + ".");  // unknown keys, wrong types
    v.settings[raw] = detached(value);
  };
  if (node.IsScalar()) {
    if (is_rate) {
      v.rate = as<double>(node, where, key, "a request rate (requests/s)");
    } else if (is_axis_run_key(axis)) {
      set(axis, node, node);
    } else {
      where.fail(node, key,
                 fmt::format("'{}' is not a run key, so its values must be mappings "
                             "with a label and the run keys they set",
                             axis));
    }
    v.label = scalar_label(node);
  } else if (node.IsMap()) {
    for (const auto& kv : node) {
      const std::string raw = kv.first.as<std::string>();
      const std::string k = normalize_key(raw);
      const std::string sub = key + "." + raw;
      if (k == "label") {
        v.label = as<std::string>(kv.second, where, sub, "a string");
      } else if (k == "value") {
        if (is_rate)
          v.rate = as<double>(kv.second, where, sub, "a request rate (requests/s)");
        else if (is_axis_run_key(axis))
          set(axis, kv.first, kv.second);
        else
          where.fail(kv.first, sub, fmt::format("'{}' is not a run key: set run keys by name", axis));
        if (v.label.empty()) v.label = scalar_label(kv.second);
      } else if (k == "rate") {
        v.rate = as<double>(kv.second, where, sub, "a request rate (requests/s)");
      } else if (k == "per-policy") {
        if (!kv.second.IsMap()) where.fail(kv.second, sub, "expected a mapping of policy label: {option: value}");
        for (const auto& p : kv.second) {
          const std::string label = p.first.as<std::string>();
          if (!policy_labels.count(label)) {
            where.fail(p.first, sub + "." + label, fmt::format("no policy labelled '{}' in 'policies'", label));
          }
          v.per_policy[label] = option_map(p.second, where, sub + "." + label);
        }
      } else {
        set(raw, kv.first, kv.second);
      }
    }
    if (v.label.empty()) where.fail(node, key, "a mapping value needs a 'label' (or a 'value')");
  } else {
    where.fail(node, key, "expected a scalar or a mapping");
  }
  if (v.rate && !(*v.rate > 0)) where.fail(node, key, "a rate must be > 0 requests/s");
  return v;
}

void resolve_relative_trace(RunConfig& config, const std::filesystem::path& file) {
  if (!config.workload.trace.empty() && config.workload.trace.is_relative()) {
    config.workload.trace = (file.parent_path() / config.workload.trace).lexically_normal();
  }
}

std::string sanitize(const std::string& text) {
  std::string out;
  for (char ch : text) {
    const bool ok = std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == '_';
    out += ok ? ch : '-';
  }
  return out;
}

// `fallback`: the experiment's own `slo:` bounds, searched under when the capacity block gives
// none.
CapacitySpec parse_capacity(const YAML::Node& node, const Where& where, const SloBounds& fallback) {
  if (!node.IsMap()) where.fail(node, "capacity", "expected a mapping {slo, search, rate-low, rate-high, ...}");
  CapacitySpec c;
  bool rate_range = false, speedup_range = false, replicas_max = false;
  for (const auto& kv : node) {
    const std::string raw = kv.first.as<std::string>();
    const std::string k = normalize_key(raw);
    const std::string key = "capacity." + raw;
    if (k == "slo") {
      if (!kv.second.IsMap() || kv.second.size() == 0) {
        where.fail(kv.second, key,
                   "expected a mapping of summary.json path: upper bound, "
                   "e.g. latency.ttft_s.p99: 2.0");
      }
      for (const auto& s : kv.second) {
        const std::string name = s.first.as<std::string>();
        // The SLO keys of --slo (experiments/run/slo.h): a summary.json path, or ttft_p99_s.
        const auto resolved = resolve_slo_key(name);
        if (!resolved) {
          where.fail(s.first, key + "." + name,
                     fmt::format("not a numeric summary.json figure (expected {})", kSloKeyHelp));
        }
        const double bound = as<double>(s.second, where, key + "." + name, "a number");
        if (bound < 0) where.fail(s.second, key + "." + name, "an upper bound must be >= 0");
        c.slo.emplace_back(resolved->path, bound * resolved->bound_scale);
      }
    } else if (k == "search") {
      c.search = normalize_key(as<std::string>(kv.second, where, key, "rate, trace-speedup or replicas"));
      if (c.search != "rate" && c.search != "trace-speedup" && c.search != "replicas") {
        where.fail(kv.second, key, fmt::format("'{}': expected rate, trace-speedup or replicas", c.search));
      }
    } else if (k == "rate-low" || k == "rate-high") {
      (k == "rate-low" ? c.rate_low : c.rate_high) = as<double>(kv.second, where, key, "a rate (requests/s)");
      rate_range = true;
    } else if (k == "speedup-low" || k == "speedup-high") {
      (k == "speedup-low" ? c.rate_low : c.rate_high) = as<double>(kv.second, where, key, "a speedup factor");
      speedup_range = true;
    } else if (k == "max-replicas") {
      c.max_replicas = as<int>(kv.second, where, key, "an integer");
      if (c.max_replicas < 1) where.fail(kv.second, key, "must be >= 1");
      replicas_max = true;
    } else if (k == "tolerance") {
      c.tolerance = as<double>(kv.second, where, key, "a relative tolerance");
      if (!(c.tolerance > 0 && c.tolerance < 1)) where.fail(kv.second, key, "must be in (0, 1)");
    } else if (k == "max-probes") {
      c.max_probes = as<int>(kv.second, where, key, "an integer");
      if (c.max_probes < 2 || c.max_probes > 64) where.fail(kv.second, key, "must be in [2, 64]");
    } else {
      where.fail(kv.first, key,
                 "unknown key (expected slo, search, rate-low, rate-high, speedup-low, "
                 "speedup-high, max-replicas, tolerance, max-probes)");
    }
  }
  if (c.slo.empty()) c.slo = fallback;
  if (c.slo.empty())
    where.fail(node, "capacity.slo", "missing: give at least one bound (here or in the top-level slo)");
  // A range key of another search is a mistake worth naming: it would be silently ignored.
  if (rate_range && c.search != "rate")
    where.fail(node, "capacity", fmt::format("rate-low/rate-high belong to search: rate, not {}", c.search));
  if (speedup_range && c.search != "trace-speedup")
    where.fail(node, "capacity",
               fmt::format("speedup-low/speedup-high belong to search: trace-speedup, not {}", c.search));
  if (replicas_max && c.search != "replicas")
    where.fail(node, "capacity", fmt::format("max-replicas belongs to search: replicas, not {}", c.search));
  if (c.search == "trace-speedup" && !speedup_range) {
    c.rate_low = 0.25;  // a quarter to 64 times the trace's own rate
    c.rate_high = 64;
  }
  if (!(c.rate_low > 0 && c.rate_high > c.rate_low)) {
    where.fail(node, "capacity",
               fmt::format("need 0 < {0}-low < {0}-high (got {1} and {2})", c.search == "rate" ? "rate" : "speedup",
                           c.rate_low, c.rate_high));
  }
  return c;
}

// A workload's specs, checked before anything runs (build_workload would find them only once
// runs have started, and name no file): the same parsers, without generating anything.
void check_workload_spec(const WorkloadSpec& w) {
  parse_length_distribution(w.prompt_len, "--prompt-len");
  parse_length_distribution(w.output_len, "--output-len");
  if (!w.prefix.empty()) parse_prefix_spec(w.prefix, "--prefix");
  if (!w.max_tokens.empty()) parse_length_distribution(w.max_tokens, "--max-tokens");
  if (!w.priority.empty()) parse_priority_distribution(w.priority, "--priority");
  if (!w.think_time.empty()) parse_think_time(w.think_time, "--think-time");
  if (!w.session_turns.empty()) parse_length_distribution(w.session_turns, "--session-turns");
  if (w.arrival == "trace" && w.trace.empty()) {
    throw UserError("--arrival trace replays a trace's own timestamps: set a trace");
  }
  if (!w.arrival.empty() && w.arrival != "trace") parse_arrival_process(w.arrival, "--arrival");
}

// Checks a config the way a run would, before any run starts, so a typo in the 40th
// combination does not surface after 39 simulations. A combination that is well formed but
// cannot run (a model too large for the GPU at that TP degree, a TP degree the model's heads do
// not divide by) is not a typo: it fails in its own row when the sweep reaches it, and the
// other combinations still run (compare.cpp).
void check_planned(const Experiment& e, const PlannedRun& run) {
  try {
    validate(run.config);
    resolve_run_model(run.config);
    resolve_gpu(run.config.gpu);
    if (!e.policy_factories.count(run.config.policy))
      make_policy(run.config.policy, PolicyOptions(run.config.policy_opts));
    check_run_pools(run.config);
    check_workload_spec(run.config.workload);
    // A trace given in memory (trace_columns) has a name, not a file.
    if (!run.config.workload.trace.empty() && run.config.workload.trace_columns == nullptr &&
        !std::filesystem::exists(run.config.workload.trace)) {
      throw UserError(
          fmt::format("trace {} does not exist (relative paths are relative to the "
                      "experiment file)",
                      run.config.workload.trace.string()));
    }
  } catch (const UserError& err) {
    throw UserError(fmt::format("{}: run {}: {}", e.file.string(), run.name, err.what()));
  }
}

}  // namespace

RunConfig config_at_rate(const RunConfig& config, double rate) {
  RunConfig c = config;
  const std::string& a = c.workload.arrival;
  if (a.rfind("gamma:", 0) == 0) {
    // Keep the burstiness (CV), change the rate. "gamma:1" has no CV to keep: refuse it rather
    // than read its rate as the CV.
    if (std::count(a.begin(), a.end(), ':') != 2) {
      throw UserError(fmt::format("arrival '{}': expected gamma:RATE:CV", a));
    }
    const auto last = a.rfind(':');
    c.workload.arrival = fmt::format("gamma:{}:{}", rate, a.substr(last + 1));
  } else if (a.empty() || a == "offline" || a.rfind("poisson:", 0) == 0 || a == "trace") {
    // With a trace, Poisson arrivals keep the trace's lengths (see build_workload).
    c.workload.arrival = fmt::format("poisson:{}", rate);
  } else {
    throw UserError(
        fmt::format("arrival '{}': a rate axis or capacity search needs poisson or gamma "
                    "arrivals",
                    a));
  }
  return c;
}

Experiment parse_experiment(const std::filesystem::path& file, const std::function<void(RunConfig&)>& adjust_base,
                            int64_t max_runs) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw UserError(fmt::format("{}: cannot read the experiment file", file.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_experiment_text(ss.str(), file, adjust_base, max_runs);
}

namespace {

Experiment parse_experiment_node(const YAML::Node& root, const std::string& text, const std::filesystem::path& file,
                                 const std::function<void(RunConfig&)>& adjust_base, int64_t max_runs);

}  // namespace

Experiment parse_experiment_text(const std::string& text, const std::filesystem::path& file,
                                 const std::function<void(RunConfig&)>& adjust_base, int64_t max_runs) {
  try {
    return parse_experiment_node(YAML::Load(text), text, file, adjust_base, max_runs);
  } catch (const YAML::ParserException& e) {
    throw UserError(fmt::format("{}:{}: not valid YAML: {}", file.string(), e.mark.line + 1, e.msg));
  } catch (const YAML::Exception& e) {
    // A shape no key check expected (a list where a scalar belongs, a mapping as a key): still
    // the user's file, so still a message with its line, not an internal error.
    throw UserError(fmt::format("{}:{}: unexpected YAML here: {}", file.string(), e.mark.line + 1, e.msg));
  }
}

namespace {

// The top-level keys of an experiment file that parse_experiment_node reads after the others
// (they depend on the base, the policies or each other). Default-constructed YAML nodes count as
// defined: presence is tracked separately.
struct LaterKeys {
  std::optional<YAML::Node> policies, axes, capacity, slot_timeline, published, slo;
};

// Reads the keys that stand alone (name, description, base, seeds, budgets) into `e` and keeps
// the others for later; an unknown key is an error naming its line.
LaterKeys read_top_level_keys(const YAML::Node& root, const Where& where, const std::filesystem::path& file,
                              Experiment& e) {
  LaterKeys later;
  auto& policies_node = later.policies;
  auto& axes_node = later.axes;
  auto& capacity_node = later.capacity;
  auto& slot_node = later.slot_timeline;
  auto& published_node = later.published;
  auto& slo_node = later.slo;
  for (const auto& kv : root) {
    const std::string raw = kv.first.as<std::string>();
    const std::string k = normalize_key(raw);
    if (k == "name")
      e.name = as<std::string>(kv.second, where, raw, "a string");
    else if (k == "description") {
      e.description = as<std::string>(kv.second, where, raw, "a string");
      // A folded YAML block (`>`) ends in a newline the report should not repeat.
      while (!e.description.empty() && std::isspace(static_cast<unsigned char>(e.description.back()))) {
        e.description.pop_back();
      }
    } else if (k == "base") {
      if (!kv.second.IsMap()) where.fail(kv.second, raw, "expected a mapping of run keys");
      reject_reserved_keys(kv.second, where, "base.");
      apply_yaml_mapping(kv.second, file, e.base, "base.");
    } else if (k == "policies")
      policies_node = kv.second;
    else if (k == "axes")
      axes_node = kv.second;
    else if (k == "seeds") {
      if (kv.second.IsScalar()) {
        e.seeds.push_back(as<uint64_t>(kv.second, where, raw, "a seed or a list of seeds"));
      } else if (kv.second.IsSequence() && kv.second.size() > 0) {
        for (size_t i = 0; i < kv.second.size(); ++i) {
          e.seeds.push_back(as<uint64_t>(kv.second[i], where, fmt::format("seeds[{}]", i), "a non-negative integer"));
        }
      } else {
        where.fail(kv.second, raw, "expected a seed or a non-empty list of seeds");
      }
    } else if (k == "capacity")
      capacity_node = kv.second;
    else if (k == "slo")
      slo_node = kv.second;
    else if (k == "published")
      published_node = kv.second;
    else if (k == "slot-timeline")
      slot_node = kv.second;
    else if (k == "iteration-budget") {
      e.iteration_budget = as<int64_t>(kv.second, where, raw, "an iteration count");
      if (e.iteration_budget < 1) where.fail(kv.second, raw, "must be >= 1");
    } else if (k == "max-runs") {
      e.max_runs = as<int64_t>(kv.second, where, raw, "a number of runs");
      if (e.max_runs < 1) where.fail(kv.second, raw, "must be >= 1");
    } else {
      where.fail(kv.first, raw,
                 "unknown key (expected name, description, base, policies, axes, "
                 "seeds, slo, capacity, slot-timeline, iteration-budget, max-runs, published)");
    }
  }
  return later;
}

// `slo:` judges every run: the bounds become the base's `slo` run key, a `goodput` entry its
// `goodput` (experiments/run/slo.h); they win over the same keys in `base`.
void apply_slo_node(const YAML::Node& slo, const Where& where, const std::filesystem::path& file, Experiment& e) {
  if (!slo.IsMap()) where.fail(slo, "slo", "expected a mapping of SLO key: upper bound (and goodput: {ttft: MS, ...})");
  YAML::Node bounds(YAML::NodeType::Map), keys(YAML::NodeType::Map);
  for (const auto& kv : slo) {
    if (normalize_key(kv.first.as<std::string>()) == "goodput")
      keys.force_insert(kv.first, kv.second);
    else
      bounds.force_insert(kv.first, kv.second);
  }
  if (bounds.size() > 0) keys.force_insert("slo", bounds);
  apply_yaml_mapping(keys, file, e.base);
}

void read_axes(const YAML::Node& axes, const Where& where, Experiment& e) {
  std::set<std::string> labels;
  for (const auto& p : e.policies) labels.insert(p.label);
  if (!axes.IsMap()) where.fail(axes, "axes", "expected a mapping of axis name: [values]");
  for (const auto& kv : axes) {
    Axis axis;
    axis.name = normalize_key(kv.first.as<std::string>());
    const std::string key = "axes." + kv.first.as<std::string>();
    if (axis.name == "policy" || axis.name == "policies")
      where.fail(kv.first, key, "list policies under the top-level 'policies' key");
    if (axis.name == "seed" || axis.name == "seeds")
      where.fail(kv.first, key, "list seeds under the top-level 'seeds' key");
    if (!kv.second.IsSequence() || kv.second.size() == 0)
      where.fail(kv.second, key, "expected a non-empty list of values");
    std::set<std::string> value_labels;
    for (size_t i = 0; i < kv.second.size(); ++i) {
      const std::string vkey = fmt::format("{}[{}]", key, i);
      AxisValue v = parse_axis_value(axis.name, kv.second[i], where, vkey, labels);
      if (!value_labels.insert(v.label).second)
        where.fail(kv.second[i], vkey, fmt::format("label '{}' is used twice", v.label));
      axis.values.push_back(std::move(v));
    }
    e.axes.push_back(std::move(axis));
  }
}

// A capacity search chooses its own rate (or trace speedup, or replicas): no axis may set it.
void read_capacity(const YAML::Node& capacity, const Where& where, Experiment& e) {
  e.capacity = parse_capacity(capacity, where, e.base.slo);
  for (const Axis& a : e.axes) {
    for (const AxisValue& v : a.values) {
      if (v.rate)
        where.fail(capacity, "capacity",
                   fmt::format("axis '{}' sets a rate, but a capacity search chooses the rate itself", a.name));
      if (e.capacity->search != "rate" && (a.name == e.capacity->search || v.settings[e.capacity->search])) {
        where.fail(capacity, "capacity",
                   fmt::format("axis '{}' sets {}, but this capacity search chooses it", a.name, e.capacity->search));
      }
    }
  }
}

SlotTimelineSpec read_slot_timeline(const YAML::Node& slot, const Where& where, const std::filesystem::path& file,
                                    const Experiment& e) {
  if (!slot.IsMap()) where.fail(slot, "slot-timeline", "expected a mapping {policies, base, max-iterations}");
  SlotTimelineSpec s;
  s.base = e.base;
  for (const auto& kv : slot) {
    const std::string raw = kv.first.as<std::string>();
    const std::string k = normalize_key(raw);
    const std::string key = "slot-timeline." + raw;
    if (k == "policies")
      s.policies = parse_policies(kv.second, where, key);
    else if (k == "base") {
      if (!kv.second.IsMap()) where.fail(kv.second, key, "expected a mapping of run keys");
      reject_reserved_keys(kv.second, where, key + ".");
      apply_yaml_mapping(kv.second, file, s.base, key + ".");
    } else if (k == "max-iterations") {
      s.max_iterations = as<int64_t>(kv.second, where, key, "an iteration count");
      if (s.max_iterations < 1) where.fail(kv.second, key, "must be >= 1");
    } else {
      where.fail(kv.first, key, "unknown key (expected policies, base, max-iterations)");
    }
  }
  if (s.policies.empty()) s.policies = e.policies;
  resolve_relative_trace(s.base, file);
  for (const PolicyVariant& p : s.policies) {
    try {
      make_policy(p.policy, PolicyOptions(p.options));
    } catch (const UserError& err) {
      throw UserError(fmt::format("{}: slot-timeline policy {}: {}", file.string(), p.label, err.what()));
    }
  }
  try {
    check_workload_spec(s.base.workload);
  } catch (const UserError& err) {
    throw UserError(fmt::format("{}: slot-timeline: {}", file.string(), err.what()));
  }
  return s;
}

// Every run the file plans must be one that can run: checked before any does.
std::vector<PlannedRun> check_runs(const Experiment& e, const std::filesystem::path& file) {
  std::vector<PlannedRun> runs;
  try {
    runs = expand_runs(e);  // a rate axis rewrites the arrival, which can fail (config_at_rate)
  } catch (const UserError& err) {
    throw UserError(fmt::format("{}: {}", file.string(), err.what()));
  }
  for (const PlannedRun& run : runs) {
    check_planned(e, run);
    // Speeding up a trace's timestamps needs a trace replayed with them.
    const WorkloadSpec& w = run.config.workload;
    if (e.capacity && e.capacity->search == "trace-speedup" &&
        (w.trace.empty() || !(w.arrival.empty() || w.arrival == "trace"))) {
      throw UserError(
          fmt::format("{}: run {}: capacity search trace-speedup replays a trace with its own "
                      "timestamps: set `trace` and no other arrival (got arrival '{}'{})",
                      file.string(), run.name, w.arrival, w.trace.empty() ? ", no trace" : ""));
    }
  }
  return runs;
}

Experiment parse_experiment_node(const YAML::Node& root, const std::string& text, const std::filesystem::path& file,
                                 const std::function<void(RunConfig&)>& adjust_base, int64_t max_runs) {
  const Where where{file};
  if (!root.IsMap())
    throw UserError(fmt::format("{}: expected a mapping with base, policies, axes, ...", file.string()));

  Experiment e;
  e.file = file;
  e.source_text = text;
  e.name = file.stem().string();
  e.base = default_run_config();
  const LaterKeys later = read_top_level_keys(root, where, file, e);
  if (later.slo) apply_slo_node(*later.slo, where, file, e);
  if (max_runs > 0) e.max_runs = max_runs;
  // e.base keeps its trace as written: expand_runs resolves it (once) with the axes' values.
  if (adjust_base) adjust_base(e.base);
  if (e.seeds.empty()) e.seeds.push_back(e.base.workload.seed);
  if (later.policies)
    e.policies = parse_policies(*later.policies, where, "policies");
  else
    e.policies.push_back({e.base.policy, e.base.policy, {}});
  if (later.axes) read_axes(*later.axes, where, e);
  if (later.capacity) read_capacity(*later.capacity, where, e);
  if (later.slot_timeline) e.slot_timeline = read_slot_timeline(*later.slot_timeline, where, file, e);
  const std::vector<PlannedRun> runs = check_runs(e, file);
  if (later.published) e.published = parse_published(*later.published, where, e, runs);
  return e;
}

}  // namespace

Experiment experiment_from_policies(const RunConfig& base, const std::vector<std::string>& policies,
                                    std::map<std::string, std::function<std::unique_ptr<Policy>()>> policy_factories) {
  Experiment e;
  e.file = "compare --policies";
  e.name = "compare";
  e.base = base;
  e.policy_factories = std::move(policy_factories);
  e.seeds = consecutive_seeds(base.workload.seed, base.seeds);
  std::set<std::string> seen;
  for (const std::string& p : policies) {
    if (!seen.insert(p).second) throw UserError(fmt::format("--policies: '{}' is listed twice", p));
    e.policies.push_back({p, p, {}});
  }
  for (const PlannedRun& run : expand_runs(e)) check_planned(e, run);
  return e;
}

namespace {
double count_runs_exactly(const Experiment& e) {
  double runs = static_cast<double>(e.policies.size()) * static_cast<double>(e.seeds.size());
  for (const Axis& a : e.axes) runs *= static_cast<double>(a.values.size());
  return runs;
}
}  // namespace

int64_t count_runs(const Experiment& e) {
  const double runs = count_runs_exactly(e);
  return runs >= 9.2e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(runs);
}

std::vector<PlannedRun> expand_runs(const Experiment& e) {
  // Counted before anything is expanded: three axes of 3,000 values are 2.7e10 runs. (The
  // parser calls this too, and names the file.)
  if (const double runs = count_runs_exactly(e); runs > static_cast<double>(e.max_runs)) {
    std::string sizes;
    for (const Axis& a : e.axes) sizes += fmt::format(" x {} ({})", a.values.size(), a.name);
    throw UserError(fmt::format(
        "expands to {:.4g} {} ({} policies x {} seeds{}), more than the limit of {}; raise it with "
        "`max-runs: N` in the file or `compare --max-runs N`, or shorten the axes",
        runs, e.capacity ? "capacity searches" : "runs", e.policies.size(), e.seeds.size(), sizes, e.max_runs));
  }
  // Odometer over the axes, first axis slowest.
  std::vector<size_t> pick(e.axes.size(), 0);
  std::vector<PlannedRun> runs;
  size_t combinations = 1;
  for (const Axis& a : e.axes) combinations *= a.values.size();
  for (size_t c = 0; c < combinations; ++c) {
    size_t rest = c;
    for (size_t i = e.axes.size(); i-- > 0;) {
      pick[i] = rest % e.axes[i].values.size();
      rest /= e.axes[i].values.size();
    }
    for (uint64_t seed : e.seeds) {
      for (const PolicyVariant& variant : e.policies) {
        PlannedRun run;
        run.index = static_cast<int64_t>(runs.size());
        run.config = e.base;
        run.config.out.clear();
        run.config.policy = variant.policy;
        // A policy built by code has no preset to take an engine from: current vLLM's, as a
        // Python policy's single run gets.
        if (e.policy_factories.count(variant.policy) && run.config.engine.empty()) run.config.engine = "vllm";
        run.policy_label = variant.label;
        run.seed = seed;
        for (const auto& [k, v] : variant.options) run.config.policy_opts[k] = v;
        std::vector<std::string> group_parts;
        std::string name_parts;
        for (size_t i = 0; i < e.axes.size(); ++i) {
          const AxisValue& v = e.axes[i].values[pick[i]];
          apply_yaml_mapping(v.settings, e.file, run.config, "axes." + e.axes[i].name + ".");
          if (v.rate) run.rate = *v.rate;
          auto it = v.per_policy.find(variant.label);
          if (it != v.per_policy.end()) {
            for (const auto& [k, val] : it->second) run.config.policy_opts[k] = val;
          }
          run.axis_labels.emplace_back(e.axes[i].name, v.label);
          group_parts.push_back(e.axes[i].name + "=" + v.label);
          name_parts += '_';
          name_parts += sanitize(e.axes[i].name + "-" + v.label);
        }
        resolve_relative_trace(run.config, e.file);
        run.config.workload.seed = seed;
        if (run.rate) run.config = config_at_rate(run.config, *run.rate);
        // Several seeds of a trace replayed as recorded would be one run repeated: each seed
        // replays a block-bootstrap replicate of it (sim/workload/workload.h, "resample"). A
        // capacity search over the Poisson rate draws its arrivals from the seed already.
        const bool rate_search = e.capacity && e.capacity->search == "rate";
        if (e.seeds.size() > 1 && !rate_search && run.config.workload.resample.empty() &&
            replays_trace_timestamps(run.config.workload)) {
          run.config.workload.resample = "block-bootstrap";
        }
        run.group = fmt::format("{}", fmt::join(group_parts, " "));
        run.name = fmt::format("{:04d}_{}{}_s{}", run.index, sanitize(variant.label), name_parts, seed);
        runs.push_back(std::move(run));
      }
    }
  }
  return runs;
}

double mean_arrival_rate(const Workload& requests) {
  if (requests.size() < 2) return 0;
  const double span_s = (requests.back().arrival - requests.front().arrival).seconds();
  return span_s > 0 ? static_cast<double>(requests.size() - 1) / span_s : 0;
}

CountSearch find_fewest(int max_n, const std::function<bool(int)>& meets, int first) {
  CountSearch r;
  auto probe = [&](int n) {
    const bool ok = meets(n);
    r.probes.push_back({n, ok});
    return ok;
  };
  first = std::clamp(first, 1, std::max(1, max_n));
  int fail = first - 1, pass = 0;  // invariant: !meets(fail) (0: none), meets(pass) when pass > 0
  for (int n = first;; n = std::min(max_n, 2 * n)) {
    if (probe(n)) {
      pass = n;
      break;
    }
    fail = n;
    if (n >= max_n) return r;
  }
  while (pass - fail > 1) {
    const int mid = fail + (pass - fail) / 2;
    if (probe(mid))
      pass = mid;
    else
      fail = mid;
  }
  r.count = pass;
  return r;
}

CapacityResult find_capacity(const CapacitySpec& spec, const std::function<bool(double)>& meets) {
  CapacityResult r;
  auto probe = [&](double rate) {
    const bool ok = meets(rate);
    r.probes.push_back({rate, ok});
    return ok;
  };
  double lo = spec.rate_low, hi = spec.rate_high;
  if (probe(hi)) {
    r.status = "above-range";
    r.capacity_rps = hi;
    r.bracket_low = r.bracket_high = hi;
    return r;
  }
  if (!probe(lo)) {
    r.status = "below-range";
    r.capacity_rps = 0;
    r.bracket_low = 0;
    r.bracket_high = lo;
    return r;
  }
  // Invariant: meets(lo) and !meets(hi).
  while (static_cast<int>(r.probes.size()) < spec.max_probes && hi / lo > 1 + spec.tolerance) {
    const double mid = std::sqrt(lo * hi);
    if (probe(mid))
      lo = mid;
    else
      hi = mid;
  }
  r.status = hi / lo > 1 + spec.tolerance ? "max-probes" : "ok";
  r.capacity_rps = lo;
  r.bracket_low = lo;
  r.bracket_high = hi;
  return r;
}

}  // namespace batchsim
