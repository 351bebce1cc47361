// Experiment files, their expansion, capacity bisection, results folders, shard + merge, and
// the figure scripts.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "experiments/cli/cli.h"
#include "experiments/study/compare.h"
#include "experiments/study/experiment.h"
#include "experiments/study/report.h"
#include "hwmodel/base/error.h"
#include "test_support.h"

namespace batchsim {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::vector<std::string>> read_csv_rows(const fs::path& p) {
  // Our CSVs quote only cells with commas or quotes; the files read here have none inside
  // the columns the tests look at, but keep quoted cells whole anyway.
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::string cell;
    bool quoted = false;
    for (size_t i = 0; i < line.size(); ++i) {
      const char ch = line[i];
      if (quoted) {
        if (ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
          cell += '"';
          ++i;
        } else if (ch == '"')
          quoted = false;
        else
          cell += ch;
      } else if (ch == '"') {
        quoted = true;
      } else if (ch == ',') {
        cells.push_back(cell);
        cell.clear();
      } else {
        cell += ch;
      }
    }
    cells.push_back(cell);
    rows.push_back(std::move(cells));
  }
  return rows;
}

std::string parse_error(const std::string& yaml) {
  try {
    parse_experiment_text(yaml, "bad.yaml");
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

// A small, fast experiment: 40 requests of a 7B model, two policies, a rate axis, two seeds.
constexpr const char* kSmall = R"(
name: small
base: {model: llama-2-7b, gpu: a100-80gb, num-requests: 40, prompt-len: "uniform:64:256", output-len: "uniform:8:64"}
policies:
  - {policy: static, label: static-4, policy-opt: {batch_size: 4}}
  - continuous
axes:
  rate: [2, 8]
seeds: [0, 1]
slot-timeline:
  base: {num-requests: 6, arrival: offline, output-len: "uniform:2:12"}
  max-iterations: 50
)";

CompareOptions options_for(const fs::path& out, int jobs = 2) {
  CompareOptions o;
  o.out = out;
  o.jobs = jobs;
  o.plots = false;
  return o;
}

TEST(ExperimentParse, ErrorsNameTheFileLineAndKey) {
  EXPECT_THAT(parse_error("bogus: 1\n"), HasSubstr("bad.yaml:1: bogus: unknown key"));
  EXPECT_THAT(parse_error("base: {tp: abc}\n"), HasSubstr("base.tp"));
  EXPECT_THAT(parse_error("base: {modle: opt-13b}\n"), HasSubstr("unknown key 'base.modle'"));
  EXPECT_THAT(parse_error("policies: [tgi, tgi]\n"), HasSubstr("policies[1]: label 'tgi' is used twice"));
  EXPECT_THAT(parse_error("policies: [tgi]\naxes:\n  cap:\n    - {label: a, per-policy: {vllm: {x: 1}}}\n"),
              HasSubstr("bad.yaml:4: axes.cap[0].per-policy.vllm: no policy labelled 'vllm'"));
  EXPECT_THAT(parse_error("axes:\n  cap: [1, 2]\n"), HasSubstr("axes.cap[0]: 'cap' is not a run key"));
  EXPECT_THAT(parse_error("axes:\n  rate: [1, -2]\n"), HasSubstr("axes.rate[1]: a rate must be > 0"));
  EXPECT_THAT(parse_error("axes:\n  seed: [1, 2]\n"), HasSubstr("top-level 'seeds'"));
  EXPECT_THAT(parse_error("capacity: {slo: {latency.ttft_s.p100: 1}}\n"),
              HasSubstr("capacity.slo.latency.ttft_s.p100: not a numeric summary.json figure"));
  EXPECT_THAT(parse_error("capacity: {slo: {latency.ttft_s.p99: 1}}\naxes: {rate: [1]}\n"),
              HasSubstr("a capacity search chooses the rate itself"));
  // An option a policy does not have is found before anything runs, naming the run and option.
  EXPECT_THAT(parse_error("policies: [tgi]\nbase: {policy-opt: {batch_size: 4}}\n"),
              AllOf(HasSubstr("run 0000_tgi_s0"), HasSubstr("batch_size")));
  EXPECT_THAT(parse_error("base: {model: no-such-model}\n"), HasSubstr("no-such-model"));
  EXPECT_THAT(parse_error("base: [1, 2]\n"), HasSubstr("base: expected a mapping"));
  EXPECT_THAT(parse_error("base: {\n"), HasSubstr("not valid YAML"));
  // A shape no key check expected is still a UserError with a line, never an internal error.
  EXPECT_THAT(parse_error("axes:\n  load:\n    - {label: a, [x]: 1}\n"), HasSubstr("bad.yaml:3: unexpected YAML"));
  // An axis value's error names the line the value is written on (its stored copy has none).
  EXPECT_THAT(parse_error("axes:\n  tp:\n    - {value: [1, 2]}\n"),
              HasSubstr("bad.yaml:3: key 'axes.tp[0].tp' has a value of the wrong type"));
  EXPECT_THAT(parse_error("axes:\n  tp:\n    - 1\n    - two\n"),
              HasSubstr("bad.yaml:4: key 'axes.tp[1].tp' has a value of the wrong type"));
  EXPECT_THAT(parse_error("axes:\n  load:\n    - label: a\n      arrival: poisson:4\n      modle: x\n"),
              HasSubstr("bad.yaml:5: unknown key 'axes.load[0].modle'"));
  EXPECT_THAT(parse_error("axes:\n  load:\n    - label: a\n\n      out: somewhere\n"),
              HasSubstr("bad.yaml:5: axes.load[0].out: the output folder is given with --out"));
  // Malformed distributions and arrivals are found before anything runs, naming the file and
  // the run, not only a flag name after the first runs have started.
  EXPECT_THAT(parse_error("base: {output-len: \"capexp:128\"}\n"),
              AllOf(HasSubstr("bad.yaml: run 0000_continuous_s0"), HasSubstr("output-len")));
  EXPECT_THAT(parse_error("axes:\n  prompt-len: [\"fixed:8\", \"uniform:9:3\"]\n"),
              AllOf(HasSubstr("bad.yaml: run 0001_continuous_prompt-len-uniform-9-3_s0"), HasSubstr("prompt-len")));
  EXPECT_THAT(parse_error("base: {arrival: \"poisson:fast\"}\n"),
              AllOf(HasSubstr("bad.yaml: run 0000"), HasSubstr("arrival")));
  EXPECT_THAT(parse_error("base: {arrival: trace}\n"), AllOf(HasSubstr("bad.yaml: run 0000"), HasSubstr("trace")));
  // The slot timeline's own workload is checked as well, and a gamma arrival without its CV is
  // not silently given CV 1 when a rate axis replaces its rate.
  EXPECT_THAT(parse_error("slot-timeline:\n  base: {output-len: \"fixed:0\"}\n"),
              AllOf(HasSubstr("bad.yaml: slot-timeline"), HasSubstr("output-len")));
  EXPECT_THAT(parse_error("base: {arrival: \"gamma:1\"}\naxes:\n  rate: [2]\n"),
              AllOf(HasSubstr("bad.yaml"), HasSubstr("gamma:1")));
  EXPECT_THAT(parse_error("base: {arrival: \"gamma:1\"}\ncapacity: {slo: {latency.tbt_s.p99: 0.1}}\n"),
              AllOf(HasSubstr("bad.yaml: run 0000_continuous_s0"), HasSubstr("gamma:1")));
  // A model that leaves no room for KV at one TP degree is well formed, not a typo: that
  // combination fails in its own row and the sweep goes on (NewUser.OneInfeasiblePoint...).
  EXPECT_EQ(parse_error("base: {model: llama-2-70b, gpu: a100-80gb}\naxes:\n  tp: [2, 1]\n"), "(no error)");
}

TEST(ExperimentParse, CliReportsBadFilesAsUserErrors) {
  const fs::path dir = testing::scratch_dir("experiment_cli_errors");
  std::ofstream(dir / "bad.yaml") << "policies: [nope]\n";
  std::ostringstream out, err;
  EXPECT_THROW(cli_main({"compare", (dir / "bad.yaml").string(), "--out", (dir / "o").string()}, out, err), UserError);
  EXPECT_THROW(cli_main({"compare", (dir / "missing.yaml").string(), "--out", (dir / "o").string()}, out, err),
               UserError);
  EXPECT_THROW(cli_main({"compare", "--policies", "tgi", "--shard", "2/2"}, out, err), UserError);
  EXPECT_THROW(cli_main({"merge", (dir / "o").string()}, out, err), UserError);  // no --out
}

TEST(ExperimentExpand, CartesianProductInFileOrderWithPerPolicyOptions) {
  const Experiment e = parse_experiment_text(R"(
base: {num-requests: 10}
policies:
  - {policy: hf-static, label: hf}
  - vllm-v0
axes:
  tp: [1, 2]
  cap:
    - {label: short, output-len: "fixed:16", per-policy: {hf: {batch_size: 16}, vllm-v0: {max_num_batched_tokens: 8700}}}
    - {label: long, output-len: "fixed:512", per-policy: {hf: {batch_size: 4}}}
  rate: [1.5, 3]
seeds: [7, 8]
)",
                                             "x.yaml");
  const auto runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 2u * 2 * 2 * 2 * 2);
  // Policy fastest, then seed, then the last axis; the first axis slowest.
  EXPECT_EQ(runs[0].policy_label, "hf");
  EXPECT_EQ(runs[1].policy_label, "vllm-v0");
  EXPECT_EQ(runs[2].seed, 8u);
  EXPECT_EQ(runs[4].rate, 3.0);
  EXPECT_EQ(runs[8].axis_labels[1].second, "long");
  EXPECT_EQ(runs[16].config.tp, 2);
  EXPECT_EQ(runs[0].config.tp, 1);
  std::set<std::string> names;
  for (size_t i = 0; i < runs.size(); ++i) {
    const PlannedRun& r = runs[i];
    EXPECT_EQ(r.index, static_cast<int64_t>(i));
    names.insert(r.name);
    const bool is_short = r.axis_labels[1].second == "short";
    EXPECT_EQ(r.config.workload.output_len, is_short ? "fixed:16" : "fixed:512");
    EXPECT_EQ(r.config.workload.arrival, fmt::format("poisson:{}", *r.rate));
    EXPECT_EQ(r.config.workload.seed, r.seed);
    EXPECT_EQ(r.group, fmt::format("tp={} cap={} rate={}", r.config.tp, is_short ? "short" : "long",
                                   *r.rate == 1.5 ? "1.5" : "3"));
    if (r.policy_label == "hf") {
      EXPECT_EQ(r.config.policy, "hf-static");
      EXPECT_EQ(r.config.policy_opts.at("batch_size"), is_short ? "16" : "4");
      EXPECT_EQ(r.config.policy_opts.count("max_num_batched_tokens"), 0u);
    } else {
      EXPECT_EQ(r.config.policy_opts.count("batch_size"), 0u);
      EXPECT_EQ(r.config.policy_opts.count("max_num_batched_tokens"), is_short ? 1u : 0u);
    }
  }
  EXPECT_EQ(names.size(), runs.size());
}

// `replicas` and `router` are run keys an axis may sweep: "how many replicas, which router".
TEST(ExperimentExpand, ReplicasAndRouterAreAxes) {
  const Experiment e = parse_experiment_text(R"(
base: {num-requests: 20, arrival: "poisson:10"}
policies: [vllm]
axes:
  replicas: [1, 4]
  router: [round-robin, least-outstanding]
)",
                                             "cluster.yaml");
  const std::vector<PlannedRun> runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].config.replicas, 1);
  EXPECT_EQ(runs[0].config.router, "round-robin");
  EXPECT_EQ(runs[3].config.replicas, 4);
  EXPECT_EQ(runs[3].config.router, "least-outstanding");
  EXPECT_THAT(parse_error("axes:\n  replicas: [0]\n"), HasSubstr("--replicas 0"));
  EXPECT_THAT(parse_error("axes:\n  router: [nearest]\n"), HasSubstr("nearest"));
}

TEST(ExperimentExpand, SessionTurnsAreAnAxisCheckedBeforeAnythingRuns) {
  const Experiment e = parse_experiment_text(R"(
base: {num-requests: 20, arrival: "poisson:1", think-time: "fixed:2"}
policies: [vllm]
axes:
  session-turns: ["fixed:1", "uniform:2:6"]
)",
                                             "sessions.yaml");
  const std::vector<PlannedRun> runs = expand_runs(e);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].config.workload.session_turns, "fixed:1");
  EXPECT_EQ(runs[1].config.workload.session_turns, "uniform:2:6");
  EXPECT_THAT(parse_error("base: {think-time: \"fixed:1\"}\naxes:\n  session-turns: [\"uniform:0:2\"]\n"),
              AllOf(HasSubstr("bad.yaml: run 0000_continuous_session-turns-uniform-0-2_s0"),
                    HasSubstr("--session-turns: \"uniform:0:2\": A must be an integer >= 1")));
}

TEST(ExperimentExpand, RateKeepsGammaBurstinessAndRejectsOfflineOnlyArrivals) {
  RunConfig c = default_run_config();
  c.workload.arrival = "gamma:1:4";
  EXPECT_EQ(config_at_rate(c, 2.5).workload.arrival, "gamma:2.5:4");
  c.workload.arrival = "offline";
  EXPECT_EQ(config_at_rate(c, 3).workload.arrival, "poisson:3");
}

// latency(rate) = 0.1 / (1 - rate / 10): monotone, infinite at 10 req/s. With an SLO of 1 s the
// capacity is exactly 9 req/s.
TEST(Capacity, BisectionFindsTheLargestRateUnderTheSlo) {
  auto latency = [](double r) { return r >= 10 ? INFINITY : 0.1 / (1 - r / 10); };
  CapacitySpec spec;
  spec.rate_low = 0.5;
  spec.rate_high = 64;
  spec.tolerance = 0.01;
  spec.max_probes = 30;
  const CapacityResult r = find_capacity(spec, [&](double rate) { return latency(rate) <= 1.0; });
  EXPECT_EQ(r.status, "ok");
  EXPECT_LE(r.capacity_rps, 9.0);
  EXPECT_GE(r.capacity_rps, 9.0 / 1.01);
  EXPECT_LE(r.bracket_high / r.bracket_low, 1.01);
  EXPECT_GE(r.bracket_high, 9.0);
  // Geometric bisection of a 128x range to 1%: log2(ln 128 / ln 1.01) ≈ 9 halvings + 2 ends.
  EXPECT_LE(r.probes.size(), 12u);
  for (const CapacityProbe& p : r.probes) EXPECT_EQ(p.meets, latency(p.rate) <= 1.0) << p.rate;

  spec.max_probes = 4;
  const CapacityResult short_budget = find_capacity(spec, [&](double rate) { return latency(rate) <= 1.0; });
  EXPECT_EQ(short_budget.status, "max-probes");
  EXPECT_EQ(short_budget.probes.size(), 4u);
  EXPECT_LE(short_budget.capacity_rps, 9.0);

  const CapacityResult above = find_capacity(spec, [](double) { return true; });
  EXPECT_EQ(above.status, "above-range");
  EXPECT_EQ(above.capacity_rps, 64);
  const CapacityResult below = find_capacity(spec, [](double) { return false; });
  EXPECT_EQ(below.status, "below-range");
  EXPECT_EQ(below.capacity_rps, 0);
}

TEST(Compare, EveryPolicyGetsTheSameRequestSequencePerSeed) {
  const fs::path out = testing::scratch_dir("experiment_same_sequence");
  const Experiment e = parse_experiment_text(kSmall, "small.yaml");
  const ResultSet results = run_experiment(e, options_for(out), std::cerr);
  ASSERT_EQ(results.runs.size(), 8u);
  // (group, seed) -> the request columns of requests.csv (id, arrival, prompt, output).
  std::map<std::pair<std::string, uint64_t>, std::vector<std::string>> sequence;
  std::map<std::pair<std::string, uint64_t>, int> policies_seen;
  for (const auto& run : results.runs) {
    const auto& x = run["experiment"];
    const auto rows = read_csv_rows(out / "runs" / x["run_name"].get<std::string>() / "requests.csv");
    ASSERT_EQ(rows.size(), 41u);
    std::vector<std::string> seq;
    for (const auto& r : rows) seq.push_back(r[0] + "," + r[1] + "," + r[2] + "," + r[3]);
    const auto key = std::make_pair(x["group"].get<std::string>(), x["seed"].get<uint64_t>());
    auto [it, inserted] = sequence.emplace(key, seq);
    if (!inserted) {
      EXPECT_EQ(it->second, seq) << x["run_name"];
    }
    ++policies_seen[key];
  }
  for (const auto& [key, n] : policies_seen) EXPECT_EQ(n, 2) << key.first;
  // And the seeds really differ, so the check above is not vacuous.
  EXPECT_NE(sequence.at({"rate=2", 0}), sequence.at({"rate=2", 1}));
}

TEST(Compare, ResultsCsvColumnsAreSummaryJsonPaths) {
  const fs::path out = testing::scratch_dir("experiment_results_csv");
  const Experiment e = parse_experiment_text(kSmall, "small.yaml");
  run_experiment(e, options_for(out), std::cerr);
  const auto rows = read_csv_rows(out / "results.csv");
  ASSERT_EQ(rows.size(), 9u);
  const auto& header = rows[0];
  for (const char* must :
       {"throughput.output_tokens_per_s", "throughput.total_tokens_per_s", "throughput.requests_per_s",
        "latency.e2e_s.p50", "latency.ttft_s.p99", "latency.tbt_s.p99", "latency.tpot_s.p90", "requests.completed",
        "preemptions", "bubble_fraction", "kv.used_fraction_mean", "experiment.policy", "experiment.rate",
        "config.policy_opts.batch_size"}) {
    EXPECT_NE(std::find(header.begin(), header.end(), must), header.end()) << must;
  }
  EXPECT_EQ(std::set<std::string>(header.begin(), header.end()).size(), header.size());
  for (size_t i = 1; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), header.size());
    std::map<std::string, std::string> cells;
    for (size_t c = 0; c < header.size(); ++c) cells[header[c]] = rows[i][c];
    const fs::path summary_file = out / "runs" / cells.at("experiment.run_name") / "summary.json";
    const auto summary = ordered_json::parse(testing::read_text_file(summary_file));
    std::set<std::string> paths;
    for (const auto& [path, text] : flatten_json(summary)) {
      // Except the GPU profile's `trust`, the same on every run of a GPU (report.md has it).
      if (path.starts_with("trust.")) {
        EXPECT_FALSE(cells.count(path)) << path;
        continue;
      }
      paths.insert(path);
      ASSERT_TRUE(cells.count(path)) << path;
      EXPECT_EQ(cells.at(path), text) << path;
    }
    // A column this run's summary lacks (another policy's option) is empty, never invented;
    // the intervals over seeds beside a figure are the comparison's (Confidence tests).
    for (const auto& [path, text] : cells) {
      const bool interval =
          path.ends_with(".ci_lo") || path.ends_with(".ci_hi") || path.find(".diff") != std::string::npos;
      if (!paths.count(path) && !interval) {
        EXPECT_EQ(text, "") << path;
      }
    }
    // The figures are what the simulation measured, read back as numbers.
    const double tps = std::stod(cells.at("throughput.output_tokens_per_s"));
    EXPECT_DOUBLE_EQ(tps, summary["throughput"]["output_tokens_per_s"].get<double>());
    EXPECT_GT(tps, 0);
  }
}

TEST(Compare, ShardsMergedEqualTheUnshardedRunWhateverTheJobs) {
  const fs::path root = testing::scratch_dir("experiment_shard_merge");
  const Experiment e = parse_experiment_text(kSmall, "small.yaml");
  run_experiment(e, options_for(root / "all", 3), std::cerr);
  CompareOptions s0 = options_for(root / "s0", 1), s1 = options_for(root / "s1", 2);
  s0.shard_count = s1.shard_count = 2;
  s1.shard_index = 1;
  const ResultSet part0 = run_experiment(e, s0, std::cerr);
  const ResultSet part1 = run_experiment(e, s1, std::cerr);
  EXPECT_EQ(part0.runs.size(), 4u);
  EXPECT_EQ(part1.runs.size(), 4u);
  // The slot timeline is drawn once, by shard 0.
  EXPECT_TRUE(fs::exists(root / "s0" / "slot_timeline"));
  EXPECT_FALSE(fs::exists(root / "s1" / "slot_timeline"));
  merge_results({root / "s1", root / "s0"}, root / "merged", false, std::cerr);
  EXPECT_EQ(testing::read_text_file(root / "merged" / "results.csv"),
            testing::read_text_file(root / "all" / "results.csv"));
  EXPECT_EQ(testing::read_text_file(root / "merged" / "report.md"),
            testing::read_text_file(root / "all" / "report.md"));
  for (const auto& entry : fs::directory_iterator(root / "all" / "runs")) {
    const fs::path name = entry.path().filename();
    EXPECT_EQ(testing::read_text_file(root / "merged" / "runs" / name / "summary.json"),
              testing::read_text_file(entry.path() / "summary.json"))
        << name;
  }
  // A shard alone is reported as incomplete; merging a shard twice is refused.
  EXPECT_THAT(testing::read_text_file(root / "s0" / "report.md"), HasSubstr("incomplete"));
  EXPECT_THROW(merge_results({root / "s0", root / "s0"}, root / "twice", false, std::cerr), UserError);
}

// `merge` reads folders a user hands it: a file that is not as batchsim writes it is a UserError
// naming the file and, where one is at fault, the field, and nothing is written. Before, such
// files let nlohmann's type_error and out_of_range escape as internal errors, read a missing
// key past the end of its object, and cast a fractional seed to an integer out of range (seen
// while writing the fuzz harness of `merge`, tests/fuzz/fuzz_results.cpp).
TEST(Compare, MergeNamesTheFileAndFieldOfAMalformedResult) {
  const fs::path root = testing::scratch_dir("merge_malformed");
  const Experiment e = parse_experiment_text(kSmall, "small.yaml");
  run_experiment(e, options_for(root / "good", 1), std::cerr);
  const fs::path run = fs::directory_iterator(root / "good" / "runs")->path().filename();
  // A copy of the good folder with `file` rewritten by `edit`; the message of merging it.
  int copies = 0;
  auto merge_with = [&](const fs::path& file, const std::function<void(ordered_json&)>& edit) {
    const fs::path dir = root / fmt::format("bad{}", copies++);
    fs::copy(root / "good", dir, fs::copy_options::recursive);
    ordered_json j = ordered_json::parse(testing::read_text_file(dir / file));
    edit(j);
    testing::write_text_file(dir / file.parent_path(), file.filename().string(), j.dump());
    const std::string message = testing::user_error_of([&] { merge_results({dir}, dir / "merged", false, std::cerr); });
    EXPECT_FALSE(fs::exists(dir / "merged")) << message;
    return std::make_pair((dir / file).string(), message);
  };
  const fs::path summary = fs::path("runs") / run / "summary.json";
  {
    const auto [file, message] = merge_with(summary, [](ordered_json& j) { j = ordered_json::array({1, 2}); });
    EXPECT_THAT(message, HasSubstr(file + ": expected a JSON object, got array"));
  }
  {
    // Read as a uint64_t seed, -1.5 was undefined behaviour.
    const auto [file, message] = merge_with(summary, [](ordered_json& j) { j["experiment"]["seed"] = -1.5; });
    EXPECT_THAT(message, HasSubstr(file + ": experiment.seed must be an integer"));
  }
  {
    const auto [file, message] = merge_with(summary, [](ordered_json& j) { j["experiment"].erase("run_name"); });
    EXPECT_THAT(message, HasSubstr(file + ": experiment.run_name must be a string"));
  }
  {
    // A missing object the report reads: a read past the end of the summary's keys before.
    const auto [file, message] = merge_with(summary, [](ordered_json& j) { j.erase("config"); });
    EXPECT_THAT(message, HasSubstr("merge: " + file + ": not as batchsim writes it:"));
    EXPECT_THAT(message, HasSubstr("key 'config' not found"));
  }
  {
    const auto [file, message] = merge_with("experiment.json", [](ordered_json& j) { j["policies"][0]["label"] = 7; });
    EXPECT_THAT(message, HasSubstr("merge: " + file + ": not as batchsim writes it:"));
    EXPECT_THAT(message, HasSubstr("type must be string, but is number"));
  }
}

// A `published:` block names policies and groups the experiment runs; the report puts each
// published ratio beside the simulated one, computed from the runs' own summaries.
TEST(Compare, PublishedRatiosAreCheckedAndReportedBesideTheSimulatedOnes) {
  const std::string head = R"(
name: pub
base: {model: llama-2-7b, gpu: a100-80gb, num-requests: 30, arrival: offline, prompt-len: "fixed:128"}
policies: [{policy: static, label: static-4, policy-opt: {batch_size: 4}}, continuous]
axes:
  cap: [{label: "64", output-len: "capexp:32:64"}]
seeds: [0, 1]
)";
  EXPECT_THAT(parse_error(head + "published: {source: s, metric: m, baseline: vllm, ratios: {}}\n"),
              HasSubstr("'vllm' is not a policy label"));
  EXPECT_THAT(
      parse_error(head + "published: {source: s, metric: m, baseline: static-4, ratios: {continuous: {cap=65: 2}}}\n"),
      HasSubstr("'cap=65' is not a group"));
  EXPECT_THAT(
      parse_error(head + "published: {source: s, metric: m, baseline: static-4, ratios: {continuous: {cap=64: -1}}}\n"),
      HasSubstr("must be > 0"));
  EXPECT_THAT(parse_error(head + "published: {source: s, baseline: static-4, ratios: {}}\n"),
              HasSubstr("needs source"));
  const fs::path out = testing::scratch_dir("experiment_published");
  EXPECT_THAT(parse_error(head + "published: {source: s, metric: m, baseline: static-4, ratios: {}, "
                                 "baseline-values: {cap=1: 5}}\n"),
              HasSubstr("'cap=1' is not a group"));
  const Experiment e = parse_experiment_text(
      head +
          "published: {source: A study, metric: throughput.total_tokens_per_s, baseline: static-4, "
          "ratios: {continuous: {cap=64: 3}}, baseline-values: {cap=64: 100}, why: Their baseline was slow.}\n",
      "pub.yaml");
  const ResultSet results = run_experiment(e, options_for(out), std::cerr);
  double continuous = 0, baseline = 0;
  for (const auto& r : results.runs) {
    const double tps = r["throughput"]["total_tokens_per_s"].get<double>();
    (r["experiment"]["policy"] == "continuous" ? continuous : baseline) += tps / 2;  // mean of 2 seeds
  }
  const std::string report = testing::read_text_file(out / "report.md");
  EXPECT_THAT(report, HasSubstr("## Against the published figures"));
  EXPECT_THAT(report, HasSubstr("A study"));
  EXPECT_THAT(report, HasSubstr(fmt::format("| continuous | cap=64 | 3.0x | {:.2f}x | {:.2f} |", continuous / baseline,
                                            continuous / baseline / 3)));
  // Why they differ, in the report itself: the baseline as simulated beside its published value,
  // and the experiment's own account.
  EXPECT_THAT(report, HasSubstr(fmt::format("- `static-4` in cap=64: {:.0f} simulated against 100 published, {:.2f}x",
                                            baseline, baseline / 100)));
  EXPECT_THAT(report, HasSubstr("**Why they differ.** Their baseline was slow."));
}

TEST(Compare, ReportHasTheComparisonTablesWithSeedSpreadAndSpeedup) {
  const fs::path out = testing::scratch_dir("experiment_report");
  const Experiment e = parse_experiment_text(kSmall, "small.yaml");
  run_experiment(e, options_for(out), std::cerr);
  const std::string report = testing::read_text_file(out / "report.md");
  for (const char* must : {"# small", "out tok/s", "total tok/s", "req/s", "e2e p50 s", "e2e p90 s", "e2e p99 s",
                           "TTFT p99 s", "TPOT p50 ms", "TBT p99 ms", "preempt", "KV used mean %", "bubble %",
                           "speedup (out tok/s / static-4's)", "| rate=8 | continuous |", "```yaml"}) {
    EXPECT_THAT(report, HasSubstr(must));
  }
  // Two seeds: cells read "mean ± half-width"; the baseline's speedup is 1.00x.
  EXPECT_THAT(report, ContainsRegex("\\| rate=2 \\| static-4 \\| 40 \\| 0 \\| [0-9.]+ ± [0-9.]+ \\|"));
  EXPECT_THAT(report, HasSubstr("| 1.00x |"));
}

// The Setup section describes the workload every run shares; a part an axis sets is named as
// the axis's, never shown as the base value no run used (a trace replay once read "prompt
// fixed:512, all at t=0").
TEST(Compare, ReportSetupNamesTheWorkloadPartsThatAxesSet) {
  const fs::path out = testing::scratch_dir("experiment_report_setup");
  std::ofstream(out / "t.csv") << "arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.5,20,6\n1.5,30,7\n";
  const Experiment e = parse_experiment_text(R"(
base: {num-requests: 3}
policies: [tgi]
axes:
  trace: [{label: tiny, value: t.csv}]
  output-len: ["fixed:4"]
)",
                                             out / "setup.yaml");
  run_experiment(e, options_for(out / "res"), std::cerr);
  const std::string report = testing::read_text_file(out / "res" / "report.md");
  EXPECT_THAT(report, HasSubstr("lengths and arrivals from the trace of axis `trace`"));
  EXPECT_THAT(report, Not(HasSubstr("fixed:512")));
  EXPECT_THAT(report, Not(HasSubstr("all at t=0")));

  const Experiment rates = parse_experiment_text(kSmall, "small.yaml");
  run_experiment(rates, options_for(out / "rates"), std::cerr);
  const std::string r2 = testing::read_text_file(out / "rates" / "report.md");
  EXPECT_THAT(r2, HasSubstr("40 requests, prompt `uniform:64:256`, output `uniform:8:64`, "
                            "Poisson arrivals at the rates of axis `rate`"));
  EXPECT_THAT(r2, Not(HasSubstr("all at t=0")));

  const Experiment counts = parse_experiment_text(R"(
base: {arrival: offline, prompt-len: "fixed:16", output-len: "fixed:4"}
policies: [tgi]
axes:
  num-requests: [2, 4]
)",
                                                  "counts.yaml");
  run_experiment(counts, options_for(out / "counts"), std::cerr);
  EXPECT_THAT(testing::read_text_file(out / "counts" / "report.md"),
              HasSubstr("workload: requests per axis `num-requests`, prompt `fixed:16`, output `fixed:4`, all at t=0"));
}

// The terminal gets a short table: with several seeds, means only (a 14-column table of
// "mean (min–max)" cells wrapped past 250 characters); report.md keeps the spread.
TEST(Compare, TerminalTableShowsIntervalsOverSeedsAndThePairedDifferences) {
  const fs::path out = testing::scratch_dir("experiment_terminal");
  const Experiment e = parse_experiment_text(kSmall, "small.yaml");
  const ResultSet results = run_experiment(e, options_for(out), std::cerr);
  std::ostringstream text;
  print_result_table(text, results);
  EXPECT_THAT(text.str(), HasSubstr("mean ± half-width of the 95% interval over 2 seeds"));
  EXPECT_THAT(text.str(), ContainsRegex("rate=2 +static-4 +40 +0 +[0-9.]+ ± [0-9.]+ "));
  EXPECT_THAT(text.str(), HasSubstr("against static-4, paired by seed"));
  EXPECT_THAT(text.str(), ContainsRegex("continuous \\(rate=2\\): out tok/s [-+][0-9.]+% ± [0-9.]+%"));
  // Table rows fit a wide terminal (the paired-difference lines wrap as prose does).
  std::istringstream lines(text.str());
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" ± ") != std::string::npos && line.find('%') == std::string::npos) {
      EXPECT_LE(line.size(), 170u) << line;
    }
  }
}

TEST(Compare, CapacityModeSearchesEachCombinationAndItsProbesAreRuns) {
  const fs::path root = testing::scratch_dir("experiment_capacity");
  const Experiment e = parse_experiment_text(R"(
name: cap
base: {num-requests: 60, prompt-len: "uniform:128:512", output-len: "uniform:16:128"}
policies: [vllm-v0, sarathi]
seeds: [0, 1]
capacity:
  slo: {latency.ttft_s.p99: 0.5, latency.tbt_s.p99: 0.1}
  rate-low: 0.5
  rate-high: 200
  tolerance: 0.05
)",
                                             "cap.yaml");
  const ResultSet all = run_experiment(e, options_for(root / "all"), std::cerr);
  ASSERT_EQ(all.capacities.size(), 4u);
  for (const auto& c : all.capacities) {
    const auto& cap = c["capacity"];
    ASSERT_EQ(cap["status"], "ok") << c.dump();
    const double rate = cap["rate_rps"].get<double>();
    EXPECT_LE(cap["bracket_high_rps"].get<double>() / rate, 1.05 + 1e-12);
    // The probe at the reported capacity met both SLOs; the one at the bracket's top did not.
    bool found_ok = false, found_fail = false;
    for (const auto& run : all.runs) {
      if (run["experiment"]["run"] != c["experiment"]["run"]) continue;
      const double r = run["experiment"]["rate"].get<double>();
      const bool meets =
          run["latency"]["ttft_s"]["p99"].get<double>() <= 0.5 && run["latency"]["tbt_s"]["p99"].get<double>() <= 0.1;
      if (r == rate) found_ok = meets;
      if (r == cap["bracket_high_rps"].get<double>()) found_fail = !meets;
    }
    EXPECT_TRUE(found_ok);
    EXPECT_TRUE(found_fail);
  }
  EXPECT_TRUE(fs::exists(root / "all" / "capacity.csv"));
  EXPECT_THAT(testing::read_text_file(root / "all" / "report.md"), HasSubstr("capacity req/s"));
  // Shards of a capacity experiment split the searches and merge back to the same files.
  CompareOptions s0 = options_for(root / "s0"), s1 = options_for(root / "s1");
  s0.shard_count = s1.shard_count = 2;
  s1.shard_index = 1;
  run_experiment(e, s0, std::cerr);
  run_experiment(e, s1, std::cerr);
  merge_results({root / "s0", root / "s1"}, root / "merged", false, std::cerr);
  EXPECT_EQ(testing::read_text_file(root / "merged" / "capacity.csv"),
            testing::read_text_file(root / "all" / "capacity.csv"));
  EXPECT_EQ(testing::read_text_file(root / "merged" / "results.csv"),
            testing::read_text_file(root / "all" / "results.csv"));
}

TEST(Compare, SlotTimelineShowsStaticSlotsIdleUntilTheBatchEnds) {
  const fs::path out = testing::scratch_dir("experiment_slots");
  const Experiment e = parse_experiment_text(R"(
base: {num-requests: 8, output-len: "uniform:2:40", prompt-len: "fixed:64"}
policies:
  - {policy: hf-static, label: static, policy-opt: {batch_size: 4}}
  - {policy: continuous, label: cont, policy-opt: {max_num_seqs: 4}}
slot-timeline: {max-iterations: 1000}
)",
                                             "slots.yaml");
  run_experiment(e, options_for(out), std::cerr);
  for (const char* label : {"static", "cont"}) {
    const auto rows = read_csv_rows(out / "slot_timeline" / (std::string(label) + ".csv"));
    ASSERT_GT(rows.size(), 1u);
    std::map<std::string, int> ends;
    int max_slot = 0;
    for (size_t i = 1; i < rows.size(); ++i) {
      max_slot = std::max(max_slot, std::stoi(rows[i][3]));
      if (rows[i][5] == "end") ++ends[rows[i][4]];
    }
    EXPECT_EQ(ends.size(), 8u) << label;  // every request ends exactly once
    for (const auto& [id, n] : ends) EXPECT_EQ(n, 1) << label << " request " << id;
    EXPECT_LT(max_slot, 4) << label;  // never more rows than slots
  }
  // Static: the second batch's requests (ids 4..7) never run before all of 0..3 ended.
  const auto rows = read_csv_rows(out / "slot_timeline" / "static.csv");
  int last_end_first_batch = -1, first_second_batch = 1 << 30;
  for (size_t i = 1; i < rows.size(); ++i) {
    const int it = std::stoi(rows[i][0]), id = std::stoi(rows[i][4]);
    if (id < 4 && rows[i][5] == "end") last_end_first_batch = std::max(last_end_first_batch, it);
    if (id >= 4) first_second_batch = std::min(first_second_batch, it);
  }
  EXPECT_GT(first_second_batch, last_end_first_batch);
}

// With KV memory for a few requests only, continuous batching preempts: a preempted request
// gives its slot up (one "preempted" cell) and takes the lowest free slot when readmitted, so
// the timeline never shows more slots than max_num_seqs or a slot holding two requests.
TEST(Compare, SlotTimelineFreesThePreemptedRequestsSlot) {
  const fs::path out = testing::scratch_dir("experiment_slots_preempt");
  const Experiment e = parse_experiment_text(R"(
base: {num-requests: 12, prompt-len: "fixed:200", output-len: "fixed:600", gpu-memory-utilization: 0.2}
policies:
  - {policy: vllm-v0, label: recompute, policy-opt: {max_num_seqs: 6}}
  - {policy: vllm-v0, label: swap, policy-opt: {max_num_seqs: 6, preemption: swap}}
slot-timeline: {max-iterations: 100000}
)",
                                             "slots.yaml");
  run_experiment(e, options_for(out), std::cerr);
  for (const char* label : {"recompute", "swap"}) {
    SCOPED_TRACE(label);
    const auto rows = read_csv_rows(out / "slot_timeline" / (std::string(label) + ".csv"));
    ASSERT_GT(rows.size(), 1u);
    std::map<std::string, int> preempted, ends;
    std::map<std::pair<std::string, std::string>, std::string> holder;  // (iteration, slot) -> request
    int max_slot = 0;
    for (size_t i = 1; i < rows.size(); ++i) {
      const auto& r = rows[i];
      max_slot = std::max(max_slot, std::stoi(r[3]));
      if (r[5] == "preempted") ++preempted[r[4]];
      if (r[5] == "end") ++ends[r[4]];
      const auto [it, fresh] = holder.try_emplace({r[0], r[3]}, r[4]);
      EXPECT_TRUE(fresh) << "iteration " << r[0] << " slot " << r[3] << " holds requests " << it->second << " and "
                         << r[4];
    }
    EXPECT_FALSE(preempted.empty());  // KV for 3025 tokens, 6 x 800 wanted
    EXPECT_LT(max_slot, 6);           // a preempted request's slot is reused, not kept
    EXPECT_EQ(ends.size(), 12u);      // every request, preempted or not, ends exactly once
    for (const auto& [id, n] : ends) EXPECT_EQ(n, 1) << "request " << id;
  }
}

// The prefix-cache hit rate is a column of report.md and of the terminal table only when some
// run found anything cached; every other result set keeps the table it had.
TEST(Compare, ReportShowsThePrefixHitRateOnlyWhenSomethingWasCached) {
  const fs::path out = testing::scratch_dir("experiment_prefix_column");
  constexpr const char* kPrefix = R"(
base: {num-requests: 30, arrival: "poisson:20", prompt-len: "uniform:16:64", output-len: "uniform:4:16"}
policies:
  - {policy: vllm, label: no-cache, policy-opt: {prefix_caching: false}}
  - vllm
axes:
  prefix: ["shared:64"]
)";
  const ResultSet cached =
      run_experiment(parse_experiment_text(kPrefix, "prefix.yaml"), options_for(out / "on"), std::cerr);
  std::ostringstream text;
  print_result_table(text, cached);
  const std::string report = testing::read_text_file(out / "on" / "report.md");
  EXPECT_THAT(report, HasSubstr("| prefix hit % |"));
  EXPECT_THAT(report, HasSubstr("`prefix_cache.hit_rate`"));
  // no-cache computes every prompt; vllm finds the 64-token prefix (its 4 full 16-token blocks)
  // cached in all but the first requests, so about half of each ~104-token prompt.
  EXPECT_THAT(report, ContainsRegex("\\| no-cache \\|( [^|]+ \\|){9} 0\\.0 \\| 1\\.00x \\|"));
  EXPECT_THAT(report, ContainsRegex("\\| vllm \\|( [^|]+ \\|){9} [1-9][0-9]\\.[0-9] \\| [0-9.]+x \\|"));
  EXPECT_THAT(text.str(), ContainsRegex("prefix hit %"));
  EXPECT_THAT(text.str(),
              ContainsRegex("vllm +30 +0 .* [1-9][0-9]\\.[0-9] +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x"));

  // The same without a shared prefix: nothing to find in the cache, so no column.
  const std::string no_prefix = std::string(kPrefix).substr(0, std::string(kPrefix).find("axes:"));
  const ResultSet uncached =
      run_experiment(parse_experiment_text(no_prefix, "plain.yaml"), options_for(out / "off"), std::cerr);
  std::ostringstream plain;
  print_result_table(plain, uncached);
  EXPECT_THAT(testing::read_text_file(out / "off" / "report.md"), Not(HasSubstr("prefix hit")));
  EXPECT_THAT(testing::read_text_file(out / "off" / "report.md"), Not(HasSubstr("prefix_cache.hit_rate")));
  EXPECT_THAT(plain.str(), Not(HasSubstr("prefix hit")));
  // results.csv carries the figure either way.
  EXPECT_THAT(testing::read_text_file(out / "off" / "results.csv"), HasSubstr("prefix_cache.hit_rate"));
}

// A `replicas` column appears in the throughput table (report.md and terminal) only when some
// run has more than one replica and the group label does not already show the count: not for
// single-replica result sets (every other experiment keeps its table), nor under an axis named
// `replicas`, whose label reads "replicas=2"; but under a mapping axis with its own labels.
TEST(Compare, ReportShowsTheReplicaCountOnlyForClustersItsGroupsDoNotName) {
  const fs::path out = testing::scratch_dir("experiment_replicas_column");
  const std::string base = R"(
base: {num-requests: 12, arrival: "poisson:20", prompt-len: "uniform:16:64", output-len: "uniform:4:16"BASE}
policies: [vllm]
)";
  auto run = [&](const std::string& name, const std::string& base_extra, const std::string& axes, std::string& table) {
    std::string yaml = base;
    yaml.replace(yaml.find("BASE"), 4, base_extra);
    const ResultSet r =
        run_experiment(parse_experiment_text(yaml + axes, name + ".yaml"), options_for(out / name), std::cerr);
    std::ostringstream text;
    print_result_table(text, r);
    table = text.str();
    return testing::read_text_file(out / name / "report.md");
  };
  std::string table;

  // Two replicas in the base, routers as the axis: the count is nowhere else in the row.
  std::string report = run("base", ", replicas: 2", "axes:\n  router: [round-robin, least-outstanding]\n", table);
  EXPECT_THAT(report, HasSubstr("| group | policy | replicas | done |"));
  EXPECT_THAT(report, HasSubstr("| router=least-outstanding | vllm | 2 | 12 |"));
  EXPECT_THAT(report, HasSubstr("`config.replicas`"));
  EXPECT_THAT(table, ContainsRegex("group +policy +replicas +done"));
  EXPECT_THAT(table, ContainsRegex("router=round-robin +vllm +2 +12 "));

  // A mapping axis that sets replicas under its own labels: the column says how many.
  report =
      run("mapping", "", "axes:\n  size:\n    - {label: one, replicas: 1}\n    - {label: pair, replicas: 2}\n", table);
  EXPECT_THAT(report, HasSubstr("| size=one | vllm | 1 | 12 |"));
  EXPECT_THAT(report, HasSubstr("| size=pair | vllm | 2 | 12 |"));
  EXPECT_THAT(table, ContainsRegex("size=pair +vllm +2 +12 "));

  // An axis named `replicas`: "replicas=2" is the group label, so no column.
  report = run("axis", "", "axes:\n  replicas: [1, 2]\n", table);
  EXPECT_THAT(report, HasSubstr("| replicas=2 | vllm | 12 |"));
  EXPECT_THAT(report, Not(HasSubstr("| replicas |")));
  EXPECT_THAT(report, Not(HasSubstr("`config.replicas`")));
  EXPECT_THAT(table, Not(ContainsRegex("policy +replicas")));

  // One replica everywhere: the table it always had.
  report = run("single", "", "axes:\n  router: [round-robin, least-outstanding]\n", table);
  EXPECT_THAT(report, HasSubstr("| group | policy | done |"));
  EXPECT_THAT(report, Not(HasSubstr("| replicas |")));
  EXPECT_THAT(table, Not(ContainsRegex("policy +replicas")));
}

// One policy swept over an axis has nothing to compare throughput with: no speedup column
// (it would read 1.00x on every row), in report.md or on the terminal.
TEST(Compare, OnePolicyGetsNoSpeedupColumn) {
  const fs::path out = testing::scratch_dir("experiment_one_policy");
  const Experiment e = parse_experiment_text(R"(
base: {num-requests: 6, prompt-len: "fixed:32", output-len: "fixed:8"}
policies: [vllm]
axes: {tp: [1, 2]}
)",
                                             "one.yaml");
  std::ostringstream table;
  print_result_table(table, run_experiment(e, options_for(out), std::cerr));
  EXPECT_THAT(testing::read_text_file(out / "report.md"), Not(HasSubstr("speedup")));
  EXPECT_THAT(table.str(), Not(HasSubstr("speedup")));
  EXPECT_THAT(table.str(), HasSubstr("vllm"));
}

TEST(Compare, QuickModeComparesPoliciesFromFlags) {
  const fs::path out = testing::scratch_dir("experiment_quick");
  std::ostringstream text, err;
  EXPECT_EQ(cli_main({"compare", "--policies", "hf-static,tgi", "--num-requests", "30", "--out", out.string(),
                      "--no-plots", "--jobs", "2"},
                     text, err),
            0);
  EXPECT_THAT(text.str(), HasSubstr("speedup (out tok/s / hf-static's)"));
  EXPECT_THAT(text.str(), ContainsRegex("tgi +30 +0 "));
  // Each policy runs on its preset's engine: the header names them, not the base's, and a
  // comparison across engines says so (issue 45: "engine vllm" was printed for these runs).
  EXPECT_THAT(text.str(), HasSubstr("engines hf-static hf-transformers, tgi tgi"));
  EXPECT_THAT(text.str(), HasSubstr("warning: the policies run on different engines (hf-static on hf-transformers, "
                                    "tgi on tgi)"));
  const std::string report = testing::read_text_file(out / "report.md");
  EXPECT_THAT(report, HasSubstr("- `hf-static`: `hf-static` on engine `hf-transformers`"));
  EXPECT_THAT(report, HasSubstr("- **Engines differ**: the policies run on different engines"));
  // --engine puts them all on one: no warning.
  std::ostringstream one, one_err;
  EXPECT_EQ(cli_main({"compare", "--policies", "hf-static,tgi", "--engine", "vllm", "--num-requests", "10", "--out",
                      (out / "one").string(), "--no-plots", "--jobs", "2"},
                     one, one_err),
            0);
  EXPECT_THAT(one.str(), HasSubstr(", engine vllm,"));
  EXPECT_THAT(one.str(), Not(HasSubstr("different engines")));
  // Progress goes to stderr, one line per finished run; stdout keeps only the table.
  EXPECT_THAT(err.str(), ContainsRegex("\\[1/2\\] 000[01]_"));
  EXPECT_THAT(err.str(), ContainsRegex("\\[2/2\\] 000[01]_"));
  EXPECT_THAT(text.str(), Not(HasSubstr("[1/2]")));
  EXPECT_TRUE(fs::exists(out / "results.csv"));
  EXPECT_TRUE(fs::exists(out / "report.md"));
  EXPECT_FALSE(fs::exists(out / "experiment.yaml"));
}

TEST(ShippedExperiments, ParseAndExpand) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(testing::source_dir() / "experiments" / "data")) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    SCOPED_TRACE(entry.path().string());
    const Experiment e = parse_experiment(entry.path());
    EXPECT_FALSE(expand_runs(e).empty());
    EXPECT_FALSE(e.description.empty());
  }
  EXPECT_GE(files, 8);
  // The cluster experiment sweeps cluster size × router over one trace.
  const std::vector<PlannedRun> cluster =
      expand_runs(parse_experiment(testing::source_dir() / "experiments" / "data" / "cluster-routing.yaml"));
  ASSERT_EQ(cluster.size(), 9u);
  EXPECT_EQ(cluster[0].config.replicas, 2);
  EXPECT_EQ(cluster[0].config.router, "round-robin");
  EXPECT_EQ(cluster[8].config.replicas, 8);
  EXPECT_EQ(cluster[8].config.router, "least-kv");
}

TEST(Plots, FigureScriptsDrawEveryFigureOfATinyResultSet) {
  if (find_plot_python().empty()) {
    GTEST_SKIP() << "no Python 3 with matplotlib (Debian: python3-matplotlib); CI installs it";
  }
  const fs::path out = testing::scratch_dir("experiment_plots");
  Experiment e = parse_experiment_text(kSmall, "small.yaml");
  CompareOptions o = options_for(out);
  o.plots = true;
  run_experiment(e, o, std::cerr);
  for (const char* f : {"throughput.png", "latency_vs_qps.png", "cdf_rate-2.png", "cdf_rate-8.png", "kv_rate-2.png",
                        "slot_timeline.png", "slot_timeline_time.png", "latency_breakdown.png", "figures.json"}) {
    EXPECT_TRUE(fs::exists(out / "figures" / f)) << f << "\n"
                                                 << testing::read_text_file(out / "figures" / "make_figures.log");
    if (fs::exists(out / "figures" / f)) {
      EXPECT_GT(fs::file_size(out / "figures" / f), 1000u) << f;
    }
  }
  // The log names the figures as the folder does, not by this machine's path to it.
  const std::string log = testing::read_text_file(out / "figures" / "make_figures.log");
  EXPECT_THAT(log, HasSubstr("figures/throughput.png"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr(fs::absolute(out).string())));
  const std::string report = testing::read_text_file(out / "report.md");
  EXPECT_THAT(report, HasSubstr("![Slot timeline](figures/slot_timeline.png)"));
  EXPECT_THAT(report, HasSubstr("![Slot timeline on a time axis](figures/slot_timeline_time.png)"));
  EXPECT_THAT(report, HasSubstr("(figures/latency_vs_qps.png)"));
  EXPECT_THAT(report, HasSubstr("![Latency breakdown per policy](figures/latency_breakdown.png)"));
}

// "Where the time went": the p99 requests' shares per row, and each row's diagnosis, the same
// line `batchsim run` writes into the run's summary.json (one seed: the mean shares are its own).
TEST(Compare, ReportSaysWhereTheTimeWentAndWhatWouldHaveHelped) {
  const fs::path out = testing::scratch_dir("experiment_breakdown");
  const Experiment e = parse_experiment_text(R"(
name: breakdown
base: {num-requests: 60, arrival: "poisson:4", prompt-len: "uniform:100:3000", output-len: "fixed:64"}
policies: [vllm-v0, sarathi, {policy: static, label: static-8, policy-opt: {batch_size: 8}}]
)",
                                             "breakdown.yaml");
  const ResultSet results = run_experiment(e, options_for(out), std::cerr);
  const std::string report = testing::read_text_file(out / "report.md");
  EXPECT_THAT(report, HasSubstr("## Where the time went"));
  EXPECT_THAT(report,
              HasSubstr("| group | policy | e2e p99 s | p99 requests | queueing % | prefill % | decode % | stall % |"));
  EXPECT_THAT(report, Not(HasSubstr("kv_transfer %")));  // no run has any: no column of zeros
  ASSERT_EQ(results.runs.size(), 3u);
  for (const auto& run : results.runs) {
    const std::string diagnosis = run["latency_breakdown"]["diagnosis"].get<std::string>();
    EXPECT_THAT(report,
                HasSubstr(fmt::format("- `{}`: {}\n", run["experiment"]["policy"].get<std::string>(), diagnosis)));
  }
  // The rules at work: exclusive prefills stall, chunks less so, static batches queue.
  EXPECT_THAT(report, HasSubstr("- `vllm-v0`: p99 requests spent"));
  EXPECT_THAT(report, ContainsRegex("`vllm-v0`: [^\n]*chunked prefill \\(sarathi / vllm\\) would help"));
  EXPECT_THAT(report, ContainsRegex("`static-8`: [^\n]*continuous batching"));
}

// The time-axis slot timeline: long prompts that join running decodes in one chunked-prefill
// iteration make it many times longer than a decode-only one, the slot timeline's rows carry
// that time, and the figure draws every cell exactly as long as its iteration took.
TEST(Plots, TimeAxisSlotTimelineDrawsIterationsWithTheirDuration) {
  const fs::path out = testing::scratch_dir("experiment_time_axis");
  const Experiment e = parse_experiment_text(R"(
base: {num-requests: 10, arrival: "poisson:20", prompt-len: "uniform:16:3500", output-len: "fixed:40"}
policies:
  - {policy: vllm, label: chunked, policy-opt: {max_num_batched_tokens: 8192}}
slot-timeline: {max-iterations: 100000}
)",
                                             "time_axis.yaml");
  run_experiment(e, options_for(out), std::cerr);
  const fs::path csv = out / "slot_timeline" / "chunked.csv";
  const auto rows = read_csv_rows(csv);
  ASSERT_GT(rows.size(), 1u);
  struct Iteration {
    double duration_s = 0;
    bool prefill = false, decode = false;
  };
  std::map<int, Iteration> iterations;
  for (size_t i = 1; i < rows.size(); ++i) {
    Iteration& it = iterations[std::stoi(rows[i][0])];
    it.duration_s = std::stod(rows[i][2]) - std::stod(rows[i][1]);
    it.prefill |= rows[i][5] == "prefill";
    it.decode |= rows[i][5] == "decode";
  }
  std::vector<double> decode_only;
  double longest_mixed = 0;
  for (const auto& [index, it] : iterations) {
    if (it.decode && !it.prefill) decode_only.push_back(it.duration_s);
    if (it.decode && it.prefill) longest_mixed = std::max(longest_mixed, it.duration_s);
  }
  ASSERT_FALSE(decode_only.empty());
  std::sort(decode_only.begin(), decode_only.end());
  EXPECT_GT(longest_mixed, 3 * decode_only[decode_only.size() / 2]);

  if (find_plot_python().empty()) {
    GTEST_SKIP() << "no Python 3 with matplotlib (Debian: python3-matplotlib); CI installs it";
  }
  // Every row is one cell of the figure, starting at its iteration's start and as wide as it.
  const std::string check = fmt::format(
      "import sys; sys.path.insert(0, '{}'); import batchsim_plots as p\n"
      "rows = p.read_csv('{}'); cells, its = p.time_axis_cells(rows)\n"
      "drawn = {{(k, s, w) for k, spans in cells.items() for s, w in spans}}\n"
      "want = {{((int(r['slot']), r['state']), float(r['start_s']), float(r['end_s']) - float(r['start_s'])) for r in "
      "rows}}\n"
      "sys.exit(0 if drawn == want and len(its) == len({{r['iteration'] for r in rows}}) else 1)\n",
      (testing::source_dir() / "plots").string(), csv.string());
  testing::write_text_file(out, "check.py", check);
  EXPECT_EQ(std::system((find_plot_python() + " " + (out / "check.py").string()).c_str()), 0);
}

// An experiment's chrome-trace is a file name each run writes into its own folder; a path with
// a folder would have every run write the same file, and is refused.
TEST(Compare, ChromeTraceIsWrittenPerRun) {
  const fs::path out = testing::scratch_dir("experiment_chrome_trace");
  const Experiment e = parse_experiment_text(R"(
base: {num-requests: 12, chrome-trace: trace.json, chrome-trace-requests: 4}
policies: [continuous, vllm]
)",
                                             "trace.yaml");
  run_experiment(e, options_for(out), std::cerr);
  int runs = 0;
  for (const auto& entry : fs::directory_iterator(out / "runs")) {
    ++runs;
    const auto trace = nlohmann::json::parse(testing::read_text_file(entry.path() / "trace.json"));
    EXPECT_EQ(trace["otherData"]["traced_requests"], 4) << entry.path();
  }
  EXPECT_EQ(runs, 2);
  const Experiment nested =
      parse_experiment_text("base: {num-requests: 4, chrome-trace: traces/t.json}\n", "nested.yaml");
  EXPECT_THAT(testing::user_error_of([&] { run_experiment(nested, options_for(out), std::cerr); }),
              HasSubstr("chrome-trace traces/t.json: in an experiment give a file name"));
  CompareOptions print_only = options_for(out);
  print_only.out.clear();
  EXPECT_THAT(testing::user_error_of([&] { run_experiment(e, print_only, std::cerr); }), HasSubstr("give --out DIR"));
}

// A --no-plots report says how to put the figures into it later, and that way works: merging
// the folder into itself draws them and rewrites report.md with them.
TEST(Plots, ANoPlotsReportGetsItsFiguresByMergingTheFolderIntoItself) {
  const fs::path out = testing::scratch_dir("experiment_plots_later");
  const Experiment e = parse_experiment_text(kSmall, "small.yaml");
  run_experiment(e, options_for(out), std::cerr);
  EXPECT_THAT(testing::read_text_file(out / "report.md"),
              HasSubstr("batchsim merge <this folder> --out <this folder>"));
  if (find_plot_python().empty()) {
    GTEST_SKIP() << "no Python 3 with matplotlib (Debian: python3-matplotlib); CI installs it";
  }
  std::ostringstream text, err;
  ASSERT_EQ(cli_main({"merge", out.string(), "--out", out.string()}, text, err), 0) << err.str();
  EXPECT_THAT(testing::read_text_file(out / "report.md"), HasSubstr("(figures/throughput.png)"));
  EXPECT_TRUE(fs::exists(out / "figures" / "throughput.png"));
  EXPECT_TRUE(fs::exists(out / "runs"));
}

// The other figure paths: a capacity search (capacity bars, probes vs rate with SLO lines, one
// line per seed) and an experiment without a rate axis (latency bars per policy).
TEST(Plots, FigureScriptsDrawCapacityAndPerPolicyLatencyFigures) {
  if (find_plot_python().empty()) {
    GTEST_SKIP() << "no Python 3 with matplotlib (Debian: python3-matplotlib); CI installs it";
  }
  const fs::path root = testing::scratch_dir("experiment_plots_more");
  const Experiment cap = parse_experiment_text(R"(
base: {num-requests: 40, prompt-len: "uniform:128:512", output-len: "uniform:16:128"}
policies: [vllm-v0, sarathi]
seeds: [0, 1]
capacity:
  slo: {latency.tbt_s.p99: 0.1}
  rate-low: 0.5
  rate-high: 100
  tolerance: 0.1
)",
                                               "cap.yaml");
  CompareOptions o = options_for(root / "cap");
  o.plots = true;
  run_experiment(cap, o, std::cerr);
  for (const char* f : {"capacity.png", "latency_vs_qps.png"}) {
    EXPECT_TRUE(fs::exists(root / "cap" / "figures" / f))
        << f << "\n"
        << testing::read_text_file(root / "cap" / "figures" / "make_figures.log");
  }
  const Experiment lengths = parse_experiment_text(R"(
base: {num-requests: 12, arrival: offline, prompt-len: "fixed:64"}
policies: [hf-static, tgi]
axes:
  cap:
    - {label: "8", output-len: "uniform:1:8"}
    - {label: "32", output-len: "uniform:1:32"}
)",
                                                   "lengths.yaml");
  o = options_for(root / "lengths");
  o.plots = true;
  run_experiment(lengths, o, std::cerr);
  for (const char* f : {"throughput.png", "latency.png", "cdf_cap-8.png", "kv_cap-32.png"}) {
    EXPECT_TRUE(fs::exists(root / "lengths" / "figures" / f))
        << f << "\n"
        << testing::read_text_file(root / "lengths" / "figures" / "make_figures.log");
  }
  EXPECT_THAT(testing::read_text_file(root / "lengths" / "report.md"), HasSubstr("(figures/latency.png)"));
  // Static batching's queueing puts a panel of the latency figure on a log axis: it is drawn with
  // dots, never bars (a bar's length means nothing there), and TBT is in ms as in every figure.
  const Experiment wide = parse_experiment_text(R"(
base: {num-requests: 64, arrival: offline, prompt-len: "fixed:64", output-len: "uniform:1:512"}
policies: [hf-static, vllm]
)",
                                                "wide.yaml");
  o = options_for(root / "wide");
  run_experiment(wide, o, std::cerr);
  const fs::path probe = testing::write_text_file(root, "probe.py", R"(import sys
sys.path.insert(0, sys.argv[1])
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import batchsim_plots as bp
seen = []
save = plt.Figure.savefig
def grab(fig, *a, **k):
    seen.extend((ax.get_ylabel(), ax.get_yscale(), len(ax.patches)) for ax in fig.axes)
    return save(fig, *a, **k)
plt.Figure.savefig = grab
bp.latency_bars(bp.ResultsFolder(sys.argv[2]), sys.argv[3])
for label, scale, bars in seen:
    print(f"{label}|{scale}|{bars}")
)");
  const fs::path printed = root / "probe.txt";
  ASSERT_EQ(std::system(fmt::format("{} {} {} {} {} > {} 2>&1", find_plot_python(), probe.string(),
                                    (testing::source_dir() / "plots").string(), (root / "wide").string(), root.string(),
                                    printed.string())
                            .c_str()),
            0)
      << testing::read_text_file(printed);
  const std::string panels = testing::read_text_file(printed);
  EXPECT_THAT(panels, HasSubstr("p99 TBT (ms)|"));
  EXPECT_THAT(panels, HasSubstr("|log|0\n"));     // a log panel, without bars
  EXPECT_THAT(panels, Not(HasSubstr("|log|1")));  // no log panel with bars (1 bar or more)
  EXPECT_THAT(panels, Not(HasSubstr("|log|2")));
  EXPECT_THAT(panels, ::testing::ContainsRegex("\\|linear\\|[1-9]"));  // the others keep their bars
}

}  // namespace
}  // namespace batchsim
