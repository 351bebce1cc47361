#include "sim/workload/workload.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "hwmodel/base/error.h"
#include "sim/workload/trace_sessions.h"

namespace batchsim {

namespace {

constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();

// Streams of the workload seed (Rng::for_stream): one per random quantity, so that e.g. a new
// output-length distribution leaves arrival times and prompt lengths sample-for-sample equal.
constexpr uint32_t kArrivalStream = 0;
constexpr uint32_t kPromptStream = 1;
constexpr uint32_t kOutputStream = 2;
constexpr uint32_t kPrefixStream = 3;
constexpr uint32_t kMaxTokensStream = 4;
constexpr uint32_t kPriorityStream = 5;
constexpr uint32_t kThinkTimeStream = 6;
constexpr uint32_t kResampleStream = 7;
constexpr uint32_t kSessionTurnsStream = 8;
constexpr uint32_t kSessionHashStream = 9;
// A session's conversation is one stream of tokens; one hash per this many of them (any size
// serves: a hash names the conversation up to the end of its span, which every turn of the
// session that reaches there shares).
constexpr int32_t kSessionHashTokens = 64;
// The longest think time: beyond it a closed loop's sends would run out of simulated time.
constexpr double kMaxThinkTimeS = 1e9;

constexpr SpecSyntax kArrivalSyntaxes[] = {
    {"offline", "every request at t = 0 (a batch job)"},
    {"poisson:RATE", "Poisson arrivals, RATE requests/s (exponential gaps)"},
    {"gamma:RATE:CV",
     "gamma-distributed gaps, mean 1/RATE s, coefficient of variation CV "
     "(CV > 1 bursty; CV = 1 is Poisson)"},
    {"trace", "the trace's own timestamps (the default with --trace)"},
};

constexpr SpecSyntax kLengthSyntaxes[] = {
    {"fixed:N", "always N tokens"},
    {"uniform:A:B", "uniform integer in [A, B], inclusive"},
    {"capexp:MEAN:CAP",
     "exponential with mean MEAN, samples above CAP redrawn (the Anyscale "
     "continuous-batching benchmark), rounded to the nearest integer >= 1"},
    {"lognormal:MEDIAN:SIGMA", "MEDIAN * exp(SIGMA * N(0,1)), rounded to the nearest integer >= 1"},
};

constexpr SpecSyntax kPrefixSyntaxes[] = {
    {"shared:TOKENS",
     "every prompt starts with the same TOKENS tokens (a system prompt), "
     "added to its sampled length"},
    {"groups:TOKENS:N",
     "N distinct prefixes of TOKENS tokens, each request drawing one "
     "uniformly, added to its sampled length"},
};

constexpr SpecSyntax kThinkTimeSyntaxes[] = {
    {"fixed:S", "every client waits S seconds"},
    {"uniform:A:B", "uniform in [A, B] seconds"},
    {"exponential:MEAN", "exponential with mean MEAN seconds (a memoryless user)"},
};

constexpr SpecSyntax kPrioritySyntaxes[] = {
    {"fixed:P", "every request has priority P"},
    {"uniform:A:B", "uniform integer in [A, B], inclusive"},
    {"classes:P=W,P=W,...",
     "priority P with relative weight W (W > 0), e.g. classes:0=1,1=4: "
     "a fifth of the requests at priority 0"},
};

// A spec split at ':' with the option it came from, for parsing and for error messages of the
// form  --arrival: "poisson:abc": RATE must be a positive number
class SpecText {
 public:
  SpecText(std::string_view spec, std::string_view option) : spec_(spec), option_(option) {
    std::string_view rest = spec;
    for (;;) {
      const size_t colon = rest.find(':');
      parts_.push_back(rest.substr(0, colon));
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }

  std::string_view kind() const { return parts_.front(); }
  std::string_view spec() const { return spec_; }
  std::string_view option() const { return option_; }

  [[noreturn]] void fail(std::string_view what) const {
    throw UserError(fmt::format("{}: \"{}\": {}", option_, spec_, what));
  }

  void expect_parameters(size_t count, std::string_view syntax) const {
    if (parts_.size() != count + 1) {
      fail(fmt::format("expected {} ({} parameter{} after \"{}:\")", syntax, count, count == 1 ? "" : "s", kind()));
    }
  }

  // Parameter i (1-based after the kind) as a finite number > 0.
  double positive(size_t i, std::string_view name) const {
    const std::optional<double> value = number(parts_[i]);
    if (!value || !(*value > 0.0)) fail(fmt::format("{} must be a positive number", name));
    return *value;
  }
  double non_negative(size_t i, std::string_view name) const {
    const std::optional<double> value = number(parts_[i]);
    if (!value || !(*value >= 0.0)) fail(fmt::format("{} must be a number >= 0", name));
    return *value;
  }
  // Parameter i as an integer in [min_value, max_value]; `min_text` names the lower bound in the
  // message ("1", or another parameter's name).
  int64_t integer(size_t i, std::string_view name, int64_t min_value, std::string_view min_text,
                  int64_t max_value = kMaxTokens) const {
    return integer_text(parts_[i], name, min_value, min_text, max_value);
  }
  int64_t integer_text(std::string_view text, std::string_view name, int64_t min_value, std::string_view min_text,
                       int64_t max_value = kMaxTokens) const {
    const std::optional<int64_t> value = whole_number(text);
    if (!value || *value < min_value) fail(fmt::format("{} must be an integer >= {}", name, min_text));
    if (*value > max_value) fail(fmt::format("{} must be at most {}", name, max_value));
    return *value;
  }
  std::string_view part(size_t i) const { return parts_[i]; }

  static std::optional<int64_t> whole_number(std::string_view text) {
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return value;
  }
  static std::optional<double> number(std::string_view text) {
    double value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
      return std::nullopt;
    }
    return value;
  }

 private:
  std::string_view spec_;
  std::string_view option_;
  std::vector<std::string_view> parts_;
};

// Nearest integer, raised to 1 and clamped to int32: a length is at least one token.
int32_t round_length(double tokens) {
  if (!(tokens < static_cast<double>(kMaxTokens))) return static_cast<int32_t>(kMaxTokens);
  return static_cast<int32_t>(std::max<int64_t>(1, std::llround(tokens)));
}

// ---- length distributions --------------------------------------------------------------------

class FixedLength final : public LengthDistribution {
 public:
  explicit FixedLength(int32_t tokens) : tokens_(tokens) {}
  int32_t sample(Rng&) const override { return tokens_; }
  std::string describe() const override { return fmt::format("fixed:{}", tokens_); }

 private:
  int32_t tokens_;
};

class UniformLength final : public LengthDistribution {
 public:
  UniformLength(int32_t min_tokens, int32_t max_tokens) : min_tokens_(min_tokens), max_tokens_(max_tokens) {}
  int32_t sample(Rng& rng) const override {
    const uint64_t span = static_cast<uint64_t>(max_tokens_ - min_tokens_) + 1;
    return min_tokens_ + static_cast<int32_t>(sample_below(rng, span));
  }
  std::string describe() const override { return fmt::format("uniform:{}:{}", min_tokens_, max_tokens_); }

 private:
  int32_t min_tokens_;
  int32_t max_tokens_;
};

// The Anyscale continuous-batching benchmark draws output lengths from an exponential of mean
// 128 and redraws those above a cap. We sample the truncated law directly (same distribution,
// see sample_truncated_exponential), then round. Note the mean of the result is below MEAN:
// MEAN − CAP·e^(−CAP/MEAN)/(1 − e^(−CAP/MEAN)).
class CappedExponentialLength final : public LengthDistribution {
 public:
  CappedExponentialLength(double mean_tokens, int32_t cap_tokens)
      : mean_tokens_(mean_tokens), cap_tokens_(cap_tokens) {}
  int32_t sample(Rng& rng) const override {
    return round_length(sample_truncated_exponential(rng, mean_tokens_, cap_tokens_));
  }
  std::string describe() const override { return fmt::format("capexp:{}:{}", mean_tokens_, cap_tokens_); }

 private:
  double mean_tokens_;
  int32_t cap_tokens_;
};

class LognormalLength final : public LengthDistribution {
 public:
  LognormalLength(double median_tokens, double sigma) : median_tokens_(median_tokens), sigma_(sigma) {}
  int32_t sample(Rng& rng) const override {
    return round_length(median_tokens_ * std::exp(sigma_ * sample_standard_normal(rng)));
  }
  std::string describe() const override { return fmt::format("lognormal:{}:{}", median_tokens_, sigma_); }

 private:
  double median_tokens_;
  double sigma_;
};

// ---- priorities ------------------------------------------------------------------------------

constexpr int64_t kMinPriority = std::numeric_limits<int32_t>::min();
constexpr int64_t kMaxPriority = std::numeric_limits<int32_t>::max();

class FixedPriority final : public PriorityDistribution {
 public:
  explicit FixedPriority(int32_t priority) : priority_(priority) {}
  int32_t sample(Rng&) const override { return priority_; }
  std::string describe() const override { return fmt::format("fixed:{}", priority_); }

 private:
  int32_t priority_;
};

class UniformPriority final : public PriorityDistribution {
 public:
  UniformPriority(int32_t lowest, int32_t highest) : lowest_(lowest), highest_(highest) {}
  int32_t sample(Rng& rng) const override {
    // Up to 2^32 values: the span is computed in 64 bits.
    const uint64_t span = static_cast<uint64_t>(static_cast<int64_t>(highest_) - lowest_) + 1;
    return static_cast<int32_t>(lowest_ + static_cast<int64_t>(sample_below(rng, span)));
  }
  std::string describe() const override { return fmt::format("uniform:{}:{}", lowest_, highest_); }

 private:
  int32_t lowest_;
  int32_t highest_;
};

// Priority classes with relative weights: one uniform draw, scaled to the weights' sum, picks
// the class whose cumulative weight first exceeds it (inverse CDF), so each sample consumes
// exactly one number of the stream.
class PriorityClasses final : public PriorityDistribution {
 public:
  struct Class {
    int32_t priority;
    double weight;
  };
  explicit PriorityClasses(std::vector<Class> classes) : classes_(std::move(classes)) {
    for (const Class& c : classes_) total_weight_ += c.weight;
  }
  int32_t sample(Rng& rng) const override {
    const double u = rng.uniform01() * total_weight_;
    double cumulative = 0;
    for (const Class& c : classes_) {
      cumulative += c.weight;
      if (u < cumulative) return c.priority;
    }
    return classes_.back().priority;  // u within rounding of the total
  }
  std::string describe() const override {
    std::string text = "classes:";
    for (size_t i = 0; i < classes_.size(); ++i) {
      text += fmt::format("{}{}={}", i > 0 ? "," : "", classes_[i].priority, classes_[i].weight);
    }
    return text;
  }

 private:
  std::vector<Class> classes_;
  double total_weight_ = 0;
};

// ---- arrival processes -----------------------------------------------------------------------

// Gaps are drawn in seconds and rounded to the nearest ns here; make_workload adds the integer
// gaps. Integer accumulation is exact, so the k-th arrival is the same on every platform
// whatever the summation order, and per-gap rounding is unbiased (a gap's rounding error is
// within ±0.5 ns and averages to ~0, so 1e6 requests drift by well under a microsecond).
class GapSampler : public ArrivalProcess {
 protected:
  GapSampler(std::string_view option, std::string description)
      : option_(option), description_(std::move(description)) {}
  SimTime to_sim_time(double gap_s) const {
    if (!(gap_s <= 1e9)) {
      throw UserError(
          fmt::format("{}: \"{}\": a gap of {:g} s between arrivals is beyond the simulated time range; is "
                      "RATE too small?",
                      option_, description_, gap_s));
    }
    return SimTime::from_seconds(gap_s);
  }

 public:
  std::string describe() const override { return description_; }

 private:
  std::string option_;
  std::string description_;
};

class OfflineArrivals final : public ArrivalProcess {
 public:
  SimTime next_gap(Rng&) override { return SimTime::zero(); }
  std::string describe() const override { return "offline"; }
};

class PoissonArrivals final : public GapSampler {
 public:
  PoissonArrivals(std::string_view option, double rate_per_s)
      : GapSampler(option, fmt::format("poisson:{}", rate_per_s)), mean_gap_s_(1.0 / rate_per_s) {}
  SimTime next_gap(Rng& rng) override { return to_sim_time(sample_exponential(rng, mean_gap_s_)); }

 private:
  double mean_gap_s_;
};

// Gamma renewal process: gap ~ Gamma(k = 1/CV², θ = CV²/RATE), so E[gap] = kθ = 1/RATE and
// sd/mean = 1/sqrt(k) = CV. The bursty arrival process of AlpaServe's evaluation (OSDI'23).
class GammaArrivals final : public GapSampler {
 public:
  GammaArrivals(std::string_view option, double rate_per_s, double cv)
      : GapSampler(option, fmt::format("gamma:{}:{}", rate_per_s, cv)),
        shape_(1.0 / (cv * cv)),
        scale_s_(cv * cv / rate_per_s) {}
  SimTime next_gap(Rng& rng) override { return to_sim_time(sample_gamma(rng, shape_, scale_s_)); }

 private:
  double shape_;
  double scale_s_;
};

std::string list_syntaxes(std::span<const SpecSyntax> syntaxes) {
  std::string out;
  for (size_t i = 0; i < syntaxes.size(); ++i) {
    if (i > 0) out += i + 1 == syntaxes.size() ? " or " : ", ";
    out += syntaxes[i].syntax;
  }
  return out;
}

// The arrival after one at `now`: one gap of `process` later.
SimTime next_arrival(SimTime now, ArrivalProcess& process, Rng& rng, std::string_view option) {
  const SimTime gap = process.next_gap(rng);
  if (gap.ns() > SimTime::max().ns() - now.ns()) {
    throw UserError(
        fmt::format("{}: \"{}\": arrival times exceed the simulated time range "
                    "(about 292 years)",
                    option, process.describe()));
  }
  return now + gap;
}

// Overwrites arrivals with 0, gap, gap+gap, ... (first request at t = 0).
void assign_arrivals(Workload& requests, ArrivalProcess& process, Rng& rng, std::string_view option) {
  SimTime now = SimTime::zero();
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i > 0) now = next_arrival(now, process, rng, option);
    requests[i].arrival = now;
  }
}

}  // namespace

std::span<const SpecSyntax> arrival_process_syntaxes() { return kArrivalSyntaxes; }
std::span<const SpecSyntax> length_distribution_syntaxes() { return kLengthSyntaxes; }
std::span<const SpecSyntax> prefix_syntaxes() { return kPrefixSyntaxes; }
std::span<const SpecSyntax> priority_syntaxes() { return kPrioritySyntaxes; }
std::span<const SpecSyntax> think_time_syntaxes() { return kThinkTimeSyntaxes; }

SimTime ThinkTime::sample(Rng& rng) const {
  switch (kind) {
    case Kind::kFixed:
      return SimTime::from_seconds(a_s);
    case Kind::kUniform:
      return SimTime::from_seconds(a_s + (b_s - a_s) * rng.uniform01());
    case Kind::kExponential:
      return SimTime::from_seconds(std::min(sample_exponential(rng, a_s), kMaxThinkTimeS));
  }
  throw std::logic_error("unknown think time kind");
}

std::string ThinkTime::describe() const {
  switch (kind) {
    case Kind::kFixed:
      return fmt::format("fixed:{}", a_s);
    case Kind::kUniform:
      return fmt::format("uniform:{}:{}", a_s, b_s);
    case Kind::kExponential:
      return fmt::format("exponential:{}", a_s);
  }
  throw std::logic_error("unknown think time kind");
}

ThinkTime parse_think_time(std::string_view spec, std::string_view option) {
  const SpecText text(spec, option);
  const std::string_view kind = text.kind();
  // Parameter i, a time in seconds: >= 0 (> 0 where `positive`), at most kMaxThinkTimeS.
  const auto seconds = [&](size_t i, std::string_view name, bool positive = false) {
    const double value = positive ? text.positive(i, name) : text.non_negative(i, name);
    if (value > kMaxThinkTimeS) text.fail(fmt::format("{} must be at most {:g} s", name, kMaxThinkTimeS));
    return value;
  };
  ThinkTime think;
  if (kind == "fixed") {
    text.expect_parameters(1, "fixed:S");
    think.a_s = seconds(1, "S");
    return think;
  }
  if (kind == "uniform") {
    text.expect_parameters(2, "uniform:A:B");
    think.kind = ThinkTime::Kind::kUniform;
    think.a_s = seconds(1, "A");
    think.b_s = seconds(2, "B");
    if (think.b_s < think.a_s) text.fail("B must be a number >= A");
    return think;
  }
  if (kind == "exponential") {
    text.expect_parameters(1, "exponential:MEAN");
    think.kind = ThinkTime::Kind::kExponential;
    think.a_s = seconds(1, "MEAN", /*positive=*/true);
    return think;
  }
  text.fail(fmt::format("unknown think time \"{}\"; expected {}", kind, list_syntaxes(kThinkTimeSyntaxes)));
}

std::unique_ptr<PriorityDistribution> parse_priority_distribution(std::string_view spec, std::string_view option) {
  const SpecText text(spec, option);
  const std::string_view kind = text.kind();
  const std::string min_text = std::to_string(kMinPriority);
  if (kind == "fixed") {
    text.expect_parameters(1, "fixed:P");
    return std::make_unique<FixedPriority>(
        static_cast<int32_t>(text.integer(1, "P", kMinPriority, min_text, kMaxPriority)));
  }
  if (kind == "uniform") {
    text.expect_parameters(2, "uniform:A:B");
    const int64_t a = text.integer(1, "A", kMinPriority, min_text, kMaxPriority);
    const int64_t b = text.integer(2, "B", a, "A", kMaxPriority);
    return std::make_unique<UniformPriority>(static_cast<int32_t>(a), static_cast<int32_t>(b));
  }
  if (kind == "classes") {
    text.expect_parameters(1, "classes:P=W,P=W,...");
    std::vector<PriorityClasses::Class> classes;
    std::string_view rest = text.part(1);
    for (;;) {
      const size_t comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      const size_t eq = item.find('=');
      if (eq == std::string_view::npos) {
        text.fail(fmt::format("\"{}\" is not P=W (a priority and its weight)", item));
      }
      const int64_t priority =
          text.integer_text(item.substr(0, eq), "a class's priority P", kMinPriority, min_text, kMaxPriority);
      const std::string_view weight_text = item.substr(eq + 1);
      double weight = 0;
      const auto [end, ec] = std::from_chars(weight_text.data(), weight_text.data() + weight_text.size(), weight);
      if (weight_text.empty() || ec != std::errc() || end != weight_text.data() + weight_text.size() ||
          !std::isfinite(weight) || !(weight > 0)) {
        text.fail(
            fmt::format("the weight of priority {} must be a positive number, got \"{}\"", priority, weight_text));
      }
      for (const PriorityClasses::Class& c : classes) {
        if (c.priority == priority) text.fail(fmt::format("priority {} is listed twice", priority));
      }
      classes.push_back({static_cast<int32_t>(priority), weight});
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    return std::make_unique<PriorityClasses>(std::move(classes));
  }
  text.fail(fmt::format("unknown priority distribution \"{}\"; expected {}", kind, list_syntaxes(kPrioritySyntaxes)));
}

PrefixSpec parse_prefix_spec(std::string_view spec, std::string_view option) {
  const SpecText text(spec, option);
  const std::string_view kind = text.kind();
  PrefixSpec prefix;
  if (kind == "shared") {
    text.expect_parameters(1, "shared:TOKENS");
    prefix.tokens = static_cast<int32_t>(text.integer(1, "TOKENS", 1, "1"));
    prefix.groups = 1;
    return prefix;
  }
  if (kind == "groups") {
    text.expect_parameters(2, "groups:TOKENS:N");
    prefix.tokens = static_cast<int32_t>(text.integer(1, "TOKENS", 1, "1"));
    prefix.groups = static_cast<int32_t>(text.integer(2, "N", 1, "1"));
    return prefix;
  }
  text.fail(fmt::format("unknown prefix \"{}\"; expected {}", kind, list_syntaxes(kPrefixSyntaxes)));
}

int32_t parse_resample_block(std::string_view spec, std::string_view option) {
  const SpecText text(spec, option);
  if (text.kind() != "block-bootstrap") {
    text.fail("expected block-bootstrap or block-bootstrap:B (B requests per block)");
  }
  if (spec == "block-bootstrap") return 0;
  text.expect_parameters(1, "block-bootstrap:B");
  return static_cast<int32_t>(text.integer(1, "B", 1, "1"));
}

namespace {

// Prepends `prefix` to request `r`'s prompt and returns the hash of its prompt block: the
// index of its prefix group, drawn from `rng` (stream 3 of the seed, one draw per request in id
// order when there is more than one group).
uint64_t prepend_prefix(const PrefixSpec& prefix, Rng& rng, std::string_view option, Request& r) {
  const int64_t prompt = static_cast<int64_t>(r.prompt_tokens) + prefix.tokens;
  if (prompt > kMaxTokens) {
    throw UserError(
        fmt::format("{}: request {} would have a prompt of {} tokens, more than "
                    "{}",
                    option, r.id, prompt, kMaxTokens));
  }
  r.prompt_tokens = static_cast<int32_t>(prompt);
  return prefix.groups > 1 ? sample_below(rng, static_cast<uint64_t>(prefix.groups)) : 0;
}

// Prepends `prefix` to every prompt and describes it in `built.prefix_blocks`: one hash per
// request, the index of its prefix group, covering block_tokens = TOKENS tokens.
void add_prefix(const PrefixSpec& prefix, uint64_t seed, std::string_view option, BuiltWorkload& built) {
  Rng rng = Rng::for_stream(seed, kPrefixStream);
  PrefixBlockHashes& blocks = built.prefix_blocks;
  blocks.block_tokens = prefix.tokens;
  blocks.offsets.reserve(built.requests.size() + 1);
  blocks.hashes.reserve(built.requests.size());
  blocks.offsets.push_back(0);
  for (Request& r : built.requests) {
    blocks.hashes.push_back(prepend_prefix(prefix, rng, option, r));
    blocks.offsets.push_back(static_cast<int64_t>(blocks.hashes.size()));
  }
}

// A trace that brings its own prompt-block hashes takes no --prefix.
[[noreturn]] void refuse_prefix_with_hashes(const WorkloadSpec& spec) {
  throw UserError(
      fmt::format("--prefix {}: the trace {} brings its own prompt-block hashes "
                  "(hash_ids), which say what its requests share; drop --prefix",
                  spec.prefix, spec.trace.string()));
}

// Ends a request's output at its client limit: `limit` becomes max_tokens, and the output, so
// far the EOS length, becomes the smaller of the two, or the limit itself with ignore_eos (a
// benchmark's request never stops early).
void apply_max_tokens(int32_t limit, bool ignore_eos, Request& r) {
  r.max_tokens = limit;
  r.output_tokens = ignore_eos ? limit : std::min(r.output_tokens, limit);
}

}  // namespace

std::unique_ptr<LengthDistribution> parse_length_distribution(std::string_view spec, std::string_view option) {
  const SpecText text(spec, option);
  const std::string_view kind = text.kind();
  if (kind == "fixed") {
    text.expect_parameters(1, "fixed:N");
    return std::make_unique<FixedLength>(static_cast<int32_t>(text.integer(1, "N", 1, "1")));
  }
  if (kind == "uniform") {
    text.expect_parameters(2, "uniform:A:B");
    const int64_t a = text.integer(1, "A", 1, "1");
    const int64_t b = text.integer(2, "B", a, "A");
    return std::make_unique<UniformLength>(static_cast<int32_t>(a), static_cast<int32_t>(b));
  }
  if (kind == "capexp") {
    text.expect_parameters(2, "capexp:MEAN:CAP");
    const double mean = text.positive(1, "MEAN");
    const int64_t cap = text.integer(2, "CAP", 1, "1");
    return std::make_unique<CappedExponentialLength>(mean, static_cast<int32_t>(cap));
  }
  if (kind == "lognormal") {
    text.expect_parameters(2, "lognormal:MEDIAN:SIGMA");
    const double median = text.positive(1, "MEDIAN");
    const double sigma = text.non_negative(2, "SIGMA");
    return std::make_unique<LognormalLength>(median, sigma);
  }
  text.fail(fmt::format("unknown length distribution \"{}\"; expected {}", kind, list_syntaxes(kLengthSyntaxes)));
}

std::unique_ptr<ArrivalProcess> parse_arrival_process(std::string_view spec, std::string_view option) {
  const SpecText text(spec, option);
  const std::string_view kind = text.kind();
  if (kind == "offline") {
    text.expect_parameters(0, "offline");
    return std::make_unique<OfflineArrivals>();
  }
  if (kind == "poisson") {
    text.expect_parameters(1, "poisson:RATE");
    return std::make_unique<PoissonArrivals>(option, text.positive(1, "RATE"));
  }
  if (kind == "gamma") {
    text.expect_parameters(2, "gamma:RATE:CV");
    const double rate = text.positive(1, "RATE");
    const double cv = text.positive(2, "CV");
    return std::make_unique<GammaArrivals>(option, rate, cv);
  }
  if (kind == "trace") {
    text.fail("\"trace\" replays a trace's own timestamps; give a trace file (--trace FILE)");
  }
  text.fail(fmt::format("unknown arrival process \"{}\"; expected {}", kind, list_syntaxes(kArrivalSyntaxes)));
}

namespace {

TraceReadResult read_spec_trace(const WorkloadSpec& spec, double speedup) {
  if (spec.trace_columns != nullptr) {
    return read_trace_columns(*spec.trace_columns, spec.trace.string(), spec.num_requests, speedup);
  }
  return read_trace_detailed(spec.trace, spec.num_requests, speedup);
}

}  // namespace

namespace {

// The parts of a WorkloadSpec, parsed and checked in the order build_workload reports errors.
struct ParsedWorkloadSpec {
  std::unique_ptr<LengthDistribution> prompt_len, output_len, max_tokens;
  std::unique_ptr<PriorityDistribution> priority;
  PrefixSpec prefix;  // tokens 0: none
  std::optional<ThinkTime> think_time;
};

ParsedWorkloadSpec parse_workload_spec(const WorkloadSpec& spec) {
  if (spec.num_requests < 0) {
    throw UserError(fmt::format("--num-requests: must be >= 0, got {}", spec.num_requests));
  }
  if (spec.num_requests > std::numeric_limits<RequestId>::max()) {
    throw UserError(
        fmt::format("--num-requests: at most {}, got {}", std::numeric_limits<RequestId>::max(), spec.num_requests));
  }
  if (!(std::isfinite(spec.trace_speedup) && spec.trace_speedup > 0.0)) {
    throw UserError(fmt::format("--trace-speedup: must be a number > 0, got {}", spec.trace_speedup));
  }
  // Validated first, even when a trace brings its lengths: a typo is reported, not ignored.
  ParsedWorkloadSpec parsed;
  parsed.prompt_len = parse_length_distribution(spec.prompt_len, "--prompt-len");
  parsed.output_len = parse_length_distribution(spec.output_len, "--output-len");
  parsed.max_tokens = spec.max_tokens.empty() ? nullptr : parse_length_distribution(spec.max_tokens, "--max-tokens");
  parsed.priority = spec.priority.empty() ? nullptr : parse_priority_distribution(spec.priority, "--priority");
  parsed.prefix = spec.prefix.empty() ? PrefixSpec{} : parse_prefix_spec(spec.prefix, "--prefix");
  if (!spec.think_time.empty()) parsed.think_time = parse_think_time(spec.think_time, "--think-time");
  return parsed;
}

// A spec's client settings, drawn one request at a time, each from its own stream of the seed
// (so the other samples are the same with and without them): the --max-tokens limit, which
// replaces a trace's max_tokens column (`column_limit`; 0: none), ending the output there
// (with --ignore-eos, at the limit itself), and the --priority, which replaces a trace's.
class ClientSettings {
 public:
  ClientSettings(const WorkloadSpec& spec, const ParsedWorkloadSpec& parsed)
      : max_tokens_(parsed.max_tokens.get()),
        priority_(parsed.priority.get()),
        ignore_eos_(spec.ignore_eos),
        max_tokens_rng_(Rng::for_stream(spec.seed, kMaxTokensStream)),
        priority_rng_(Rng::for_stream(spec.seed, kPriorityStream)) {}
  void apply(Request& r, int32_t column_limit) {
    const int32_t limit = max_tokens_ != nullptr ? max_tokens_->sample(max_tokens_rng_) : column_limit;
    if (limit > 0) apply_max_tokens(limit, ignore_eos_, r);
    if (priority_ != nullptr) r.priority = priority_->sample(priority_rng_);
  }
  // ", max_tokens uniform:1:60, ignoring EOS, priority fixed:1": what they set, and what the
  // trace's columns set where they do not.
  std::string describe(bool trace_limits, bool trace_priorities) const {
    std::string text;
    if (max_tokens_ != nullptr) {
      text += fmt::format(", max_tokens {}", max_tokens_->describe());
    } else if (trace_limits) {
      text += ", max_tokens from the trace";
    }
    if (ignore_eos_) text += ", ignoring EOS";
    if (priority_ != nullptr) {
      text += fmt::format(", priority {}", priority_->describe());
    } else if (trace_priorities) {
      text += ", priorities from the trace";
    }
    return text;
  }

 private:
  const LengthDistribution* max_tokens_;
  const PriorityDistribution* priority_;
  bool ignore_eos_;
  Rng max_tokens_rng_, priority_rng_;
};

// Synthetic arrivals and lengths (no trace), one request at a time: each quantity from its own
// stream of the seed (see build_workload in workload.h), each request's samples drawn in id
// order, so the requests are those build_workload materializes, sample for sample.
class SyntheticRequestSource final : public RequestSource {
 public:
  SyntheticRequestSource(const WorkloadSpec& spec, ParsedWorkloadSpec parsed, std::unique_ptr<ArrivalProcess> arrival)
      : parsed_(std::move(parsed)),
        client_(spec, parsed_),
        arrival_(std::move(arrival)),
        count_(spec.num_requests),
        arrival_rng_(Rng::for_stream(spec.seed, kArrivalStream)),
        prompt_rng_(Rng::for_stream(spec.seed, kPromptStream)),
        output_rng_(Rng::for_stream(spec.seed, kOutputStream)) {
    if (count_ == 0) {
      throw UserError("--num-requests: a synthetic workload needs --num-requests > 0 (or --trace FILE)");
    }
    description_ = fmt::format("{} requests: {} arrivals, prompt {}, output {}, seed {}", count_, arrival_->describe(),
                               parsed_.prompt_len->describe(), parsed_.output_len->describe(), spec.seed);
    description_ += client_.describe(false, false);
  }

  std::optional<Request> next() override {
    if (next_id_ == count_) return std::nullopt;
    Request r;
    r.id = static_cast<RequestId>(next_id_);
    r.prompt_tokens = parsed_.prompt_len->sample(prompt_rng_);
    r.output_tokens = parsed_.output_len->sample(output_rng_);
    if (next_id_ > 0) now_ = next_arrival(now_, *arrival_, arrival_rng_, "--arrival");
    r.arrival = now_;
    client_.apply(r, 0);
    ++next_id_;
    return r;
  }

  const std::string& description() const { return description_; }

 private:
  ParsedWorkloadSpec parsed_;
  ClientSettings client_;  // reads parsed_
  std::unique_ptr<ArrivalProcess> arrival_;
  int64_t count_;
  Rng arrival_rng_, prompt_rng_, output_rng_;
  int64_t next_id_ = 0;
  SimTime now_ = SimTime::zero();
  std::string description_;
};

// The moving-block bootstrap of a trace's requests (workload.h, "resample"): `block` requests
// per block (0: ceil(sqrt(n))). Each request's max_tokens column entry (`limits`, empty when
// the trace has none) and prompt-block hashes travel with it. Returns the block length used.
int32_t block_bootstrap(BuiltWorkload& built, std::vector<int32_t>& limits, int32_t block, uint64_t seed) {
  const Workload& trace = built.requests;
  const auto n = static_cast<int64_t>(trace.size());
  if (n < 2) return 1;  // one request has one replicate: itself
  const int64_t b =
      std::min<int64_t>(n, block > 0 ? block : static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(n)))));
  // The gap before a block's first request: the trace's own gap before it, or for the trace's
  // first request (which has none) the trace's mean gap.
  const SimTime mean_gap = SimTime::from_ns((trace.back().arrival - trace.front().arrival).ns() / (n - 1));
  Rng rng = Rng::for_stream(seed, kResampleStream);
  Workload out;
  out.reserve(trace.size());
  std::vector<int32_t> out_limits;
  PrefixBlockHashes out_blocks;
  out_blocks.block_tokens = built.prefix_blocks.block_tokens;
  const bool hashes = !built.prefix_blocks.offsets.empty();
  if (hashes) out_blocks.offsets.push_back(0);
  SimTime now = SimTime::zero();
  while (static_cast<int64_t>(out.size()) < n) {
    // Moving blocks: any of the n - b + 1 runs of b consecutive requests, equally likely.
    const auto start = static_cast<int64_t>(sample_below(rng, static_cast<uint64_t>(n - b + 1)));
    for (int64_t i = start; i < start + b && static_cast<int64_t>(out.size()) < n; ++i) {
      const SimTime gap = i > 0 ? trace[i].arrival - trace[i - 1].arrival : mean_gap;
      if (!out.empty()) now = now + gap;
      Request r = trace[i];
      r.id = static_cast<RequestId>(out.size());
      r.arrival = now;
      out.push_back(r);
      if (!limits.empty()) out_limits.push_back(limits[i]);
      if (hashes) {
        const auto h = built.prefix_blocks.of(static_cast<RequestId>(i));
        out_blocks.hashes.insert(out_blocks.hashes.end(), h.begin(), h.end());
        out_blocks.offsets.push_back(static_cast<int64_t>(out_blocks.hashes.size()));
      }
    }
  }
  built.requests = std::move(out);
  limits = std::move(out_limits);
  if (hashes) built.prefix_blocks = std::move(out_blocks);
  return static_cast<int32_t>(b);
}

}  // namespace

bool replays_trace_timestamps(const WorkloadSpec& spec) {
  return !spec.trace.empty() && (spec.arrival.empty() || spec.arrival == "trace");
}

std::string seed_variation(const WorkloadSpec& spec) {
  std::vector<std::string> parts;
  const bool trace = !spec.trace.empty() || spec.trace_columns != nullptr;
  if (!spec.resample.empty() && trace) {
    const int32_t block = parse_resample_block(spec.resample, "--resample");
    parts.push_back(fmt::format("a block-bootstrap replicate of {} (blocks of {} requests; Kuensch 1989)",
                                spec.trace.filename().string(),
                                block > 0 ? fmt::to_string(block) : std::string("ceil(sqrt(n))")));
  }
  const std::string arrival = spec.arrival.empty() ? (trace ? "trace" : "offline") : spec.arrival;
  if (arrival != "offline" && arrival != "trace") parts.push_back("arrival times");
  if (!trace) {
    // A fixed length draws the same value for every seed.
    if (spec.prompt_len.rfind("fixed:", 0) != 0) parts.push_back("prompt lengths");
    if (spec.output_len.rfind("fixed:", 0) != 0) parts.push_back("output lengths");
  }
  if (!spec.prefix.empty() && spec.prefix.rfind("shared:", 0) != 0) parts.push_back("prefix groups");
  if (!spec.max_tokens.empty() && spec.max_tokens.rfind("fixed:", 0) != 0) parts.push_back("max_tokens");
  if (!spec.priority.empty() && spec.priority.rfind("fixed:", 0) != 0) parts.push_back("priorities");
  if (!spec.think_time.empty() && spec.think_time.rfind("fixed:", 0) != 0) parts.push_back("think times");
  return fmt::format("{}", fmt::join(parts, ", "));
}

namespace {

// The arrival process of a workload without a trace's timestamps (build_workload's checks).
std::unique_ptr<ArrivalProcess> parse_spec_arrival(const WorkloadSpec& spec) {
  const std::string arrival_spec = spec.arrival.empty() ? "offline" : spec.arrival;
  // Parsed before a trace is read: a malformed option is reported without reading the file.
  std::unique_ptr<ArrivalProcess> arrival = parse_arrival_process(arrival_spec, "--arrival");
  if (spec.trace_speedup != 1.0) {
    throw UserError(fmt::format("--trace-speedup: {} scales trace timestamps, but arrivals come from --arrival {}",
                                spec.trace_speedup, arrival_spec));
  }
  return arrival;
}

// A trace read one request at a time (TraceStream): the requests build_workload materializes
// for the same spec, sample for sample — the trace's arrivals (or the --arrival process's, drawn
// in trace order from the same stream), its lengths, and max_tokens and priorities from the
// trace's columns or from the spec's own streams, which replace them.
class TraceRequestSource final : public RequestSource {
 public:
  TraceRequestSource(const WorkloadSpec& spec, ParsedWorkloadSpec parsed)
      : parsed_(std::move(parsed)),
        client_(spec, parsed_),
        // Parsed before the trace is opened: a malformed option is reported without reading it.
        arrival_(replays_trace_timestamps(spec) ? nullptr : parse_spec_arrival(spec)),
        stream_(spec.trace, spec.num_requests, arrival_ ? 1.0 : spec.trace_speedup),
        arrival_rng_(Rng::for_stream(spec.seed, kArrivalStream)) {}

  std::optional<Request> next() override {
    std::optional<TraceStream::Row> row = stream_.next();
    if (!row) return std::nullopt;
    hashes_ = row->hashes;
    Request& r = row->request;
    if (arrival_ != nullptr) {
      if (r.id > 0) now_ = next_arrival(now_, *arrival_, arrival_rng_, "--arrival");
      r.arrival = now_;
    }
    client_.apply(r, row->max_tokens);
    return r;
  }

  std::vector<std::string> warnings() const override { return stream_.warnings(); }
  int32_t prefix_block_tokens() const override { return stream_.prefix_block_tokens(); }
  std::span<const uint64_t> prefix_hashes() const override { return hashes_; }

 private:
  ParsedWorkloadSpec parsed_;
  ClientSettings client_;                    // reads parsed_
  std::unique_ptr<ArrivalProcess> arrival_;  // null: the trace's own timestamps
  TraceStream stream_;
  Rng arrival_rng_;
  SimTime now_ = SimTime::zero();
  std::span<const uint64_t> hashes_;  // the last request's, in stream_'s buffer
};

// --prefix on a source read one request at a time: each request's prompt grows by the prefix
// and carries its group's hash, as add_prefix does for a built workload, draw for draw.
class PrefixedSource final : public RequestSource {
 public:
  PrefixedSource(std::unique_ptr<RequestSource> inner, PrefixSpec prefix, uint64_t seed)
      : inner_(std::move(inner)), prefix_(prefix), rng_(Rng::for_stream(seed, kPrefixStream)) {}
  std::optional<Request> next() override {
    std::optional<Request> r = inner_->next();
    if (r) hash_ = prepend_prefix(prefix_, rng_, "--prefix", *r);
    return r;
  }
  std::vector<std::string> warnings() const override { return inner_->warnings(); }
  int32_t prefix_block_tokens() const override { return prefix_.tokens; }
  std::span<const uint64_t> prefix_hashes() const override { return {&hash_, 1}; }

 private:
  std::unique_ptr<RequestSource> inner_;
  PrefixSpec prefix_;
  Rng rng_;
  uint64_t hash_ = 0;
};

// Invariants of request.h, relied on by the simulation.
void check_workload_invariants(const Workload& requests) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    if (r.id != static_cast<RequestId>(i) || r.prompt_tokens < 1 || r.output_tokens < 1 ||
        (r.max_tokens != 0 && r.max_tokens < r.output_tokens) || (i > 0 && r.arrival < requests[i - 1].arrival)) {
      throw std::logic_error(
          fmt::format("build_workload: request {} breaks the Workload "
                      "invariants (dense ids, sorted arrivals, lengths >= 1, "
                      "output <= max_tokens)",
                      i));
    }
  }
}

// Synthetic multi-turn sessions (workload.h, "session_turns"): spec.num_requests sessions, each
// starting at an arrival of the arrival process, with a number of turns from spec.session_turns
// (stream 8). Turn k brings new input (prompt_len) and gets an answer (output_len, then the
// client's max_tokens); its prompt is every earlier turn's input and answer plus its own input.
// Turns after the first are sent a think time (stream 6; 0 without --think-time) after the
// previous answer ends. The conversation's hashes cover prompt and answer (covers_outputs),
// unique to the session, so a later turn finds the earlier turns' KV where it is still cached.
void build_sessions(const WorkloadSpec& spec, const ParsedWorkloadSpec& parsed, BuiltWorkload& built) {
  const auto refuse = [&](std::string_view what, std::string_view why) {
    throw UserError(fmt::format("--session-turns {} with {}: not supported ({})", spec.session_turns, what, why));
  };
  if (!spec.trace.empty()) refuse("--trace", "synthetic sessions draw their turns; a trace's rows are its own");
  if (!spec.prefix.empty()) refuse("--prefix", "each session's conversation is its own prefix");
  if (!spec.resample.empty()) refuse("--resample", "it resamples a trace's requests");
  if (spec.num_requests <= 0) {
    throw UserError("--num-requests: sessions (--session-turns) need --num-requests N > 0: the number of sessions");
  }
  const std::unique_ptr<LengthDistribution> turns = parse_length_distribution(spec.session_turns, "--session-turns");
  std::unique_ptr<ArrivalProcess> arrival = parse_spec_arrival(spec);
  Rng arrival_rng = Rng::for_stream(spec.seed, kArrivalStream);
  Rng prompt_rng = Rng::for_stream(spec.seed, kPromptStream);
  Rng output_rng = Rng::for_stream(spec.seed, kOutputStream);
  Rng turns_rng = Rng::for_stream(spec.seed, kSessionTurnsStream);
  Rng think_rng = Rng::for_stream(spec.seed, kThinkTimeStream);
  Rng hash_rng = Rng::for_stream(spec.seed, kSessionHashStream);
  ClientSettings client(spec, parsed);
  PrefixBlockHashes& blocks = built.prefix_blocks;
  blocks.block_tokens = kSessionHashTokens;
  blocks.covers_outputs = true;
  blocks.offsets.push_back(0);
  SessionLinks& links = built.sessions;
  SimTime start = SimTime::zero();
  for (int64_t session = 0; session < spec.num_requests; ++session) {
    if (session > 0) start = next_arrival(start, *arrival, arrival_rng, "--arrival");
    const int32_t count = turns->sample(turns_rng);
    uint64_t hash_state = hash_rng.next_u64();  // the session's conversation
    std::vector<uint64_t> conversation;         // its hashes so far
    int64_t history = 0;                        // tokens of the earlier turns, inputs and answers
    for (int32_t turn = 0; turn < count; ++turn) {
      if (built.requests.size() >= static_cast<size_t>(std::numeric_limits<RequestId>::max())) {
        throw UserError(fmt::format("--session-turns {}: more than {} turns in all", spec.session_turns,
                                    std::numeric_limits<RequestId>::max()));
      }
      Request r;
      r.id = static_cast<RequestId>(built.requests.size());
      r.arrival = start;
      const int32_t input = parsed.prompt_len->sample(prompt_rng);
      r.output_tokens = parsed.output_len->sample(output_rng);
      const int64_t prompt = history + input;
      if (prompt + r.output_tokens > std::numeric_limits<int32_t>::max()) {
        throw UserError(fmt::format("--session-turns {}: session {} grows beyond {} tokens by turn {}",
                                    spec.session_turns, session, std::numeric_limits<int32_t>::max(), turn + 1));
      }
      r.prompt_tokens = static_cast<int32_t>(prompt);
      client.apply(r, 0);
      history = prompt + r.output_tokens;
      const auto spans = static_cast<size_t>((history + kSessionHashTokens - 1) / kSessionHashTokens);
      while (conversation.size() < spans) conversation.push_back(splitmix64(hash_state));
      blocks.hashes.insert(blocks.hashes.end(), conversation.begin(), conversation.end());
      blocks.offsets.push_back(static_cast<int64_t>(blocks.hashes.size()));
      links.predecessor.push_back(turn == 0 ? -1 : r.id - 1);
      links.delay.push_back(turn > 0 && parsed.think_time ? parsed.think_time->sample(think_rng) : SimTime::zero());
      built.requests.push_back(r);
    }
  }
  built.description = fmt::format(
      "{} sessions ({} turns): {} session arrivals, {} turns each, new input {}, answers {}{}, seed {}",
      spec.num_requests, built.requests.size(), arrival->describe(), turns->describe(), parsed.prompt_len->describe(),
      parsed.output_len->describe(),
      parsed.think_time ? fmt::format(", think time {} between turns", parsed.think_time->describe()) : std::string(),
      spec.seed);
  built.description += client.describe(false, false);
}

// --trace-sessions: what cannot go with it, refused by name before the trace is read.
void refuse_beside_trace_sessions(const WorkloadSpec& spec) {
  const auto refuse = [](std::string_view what, std::string_view why) {
    throw UserError(fmt::format("--trace-sessions with {}: not supported ({})", what, why));
  };
  if (spec.trace.empty()) {
    throw UserError(
        "--trace-sessions: needs --trace FILE, a trace whose rows carry hash_ids (Mooncake JSONL): it links "
        "each row to the earlier row it continues");
  }
  if (!spec.session_turns.empty()) {
    refuse(fmt::format("--session-turns {}", spec.session_turns), "the trace's rows are the turns");
  }
  if (!replays_trace_timestamps(spec)) {
    refuse(fmt::format("--arrival {}", spec.arrival), "a conversation's turns keep the trace's own times");
  }
  if (!spec.resample.empty()) refuse("--resample", "a replicate's blocks would cut the conversations");
  if (!spec.think_time.empty()) {
    refuse("--think-time",
           "the trace's times pace the turns: each is sent at its recorded time, or when its predecessor's "
           "answer ends if that is later");
  }
}

// --trace-sessions: links the trace's rows into sessions by their hash_ids (trace_sessions.h).
void link_sessions(const WorkloadSpec& spec, const std::vector<int64_t>& lines, BuiltWorkload& built) {
  if (built.prefix_blocks.empty()) {
    throw UserError(
        fmt::format("--trace-sessions: {} has no hash_ids: its rows cannot be linked into conversations (a Mooncake "
                    "JSONL trace's hash_ids say which rows continue which)",
                    spec.trace.string()));
  }
  const TraceSessionStats stats =
      link_trace_sessions(built.requests, built.prefix_blocks, lines, spec.trace.string(), built.sessions);
  built.description += fmt::format(
      "; sessions from hash_ids: {} rows continue an earlier row: {} sessions, {} of 2 turns or more "
      "(at most {})",
      stats.linked, stats.sessions, stats.multi_turn, stats.longest);
  if (stats.branches > 0) {
    built.description += fmt::format(
        ", {} branches made first turns (rows continuing a row that an earlier one continues)", stats.branches);
  }
}

}  // namespace

std::unique_ptr<RequestSource> stream_workload(const WorkloadSpec& spec) {
  if (!spec.resample.empty())
    throw UserError("--streaming with --resample: not supported (a replicate draws from the whole trace)");
  ParsedWorkloadSpec parsed = parse_workload_spec(spec);
  if (spec.trace_columns != nullptr) {
    throw UserError(
        fmt::format("--streaming with the in-memory workload {}: not supported (it is in memory "
                    "already; run without streaming)",
                    spec.trace.string()));
  }
  if (parsed.think_time) {
    throw UserError("--streaming with --think-time: not supported (closed-loop clients need the workload in memory)");
  }
  if (!spec.session_turns.empty()) {
    throw UserError("--streaming with --session-turns: not supported (a turn waits on its predecessor's answer)");
  }
  if (spec.trace_sessions) {
    throw UserError("--streaming with --trace-sessions: not supported (a turn waits on its predecessor's answer)");
  }
  const PrefixSpec prefix = parsed.prefix;
  std::unique_ptr<RequestSource> source;
  if (!spec.trace.empty()) {
    source = std::make_unique<TraceRequestSource>(spec, std::move(parsed));
    if (prefix.tokens > 0 && source->prefix_block_tokens() > 0) refuse_prefix_with_hashes(spec);
  } else {
    source = std::make_unique<SyntheticRequestSource>(spec, std::move(parsed), parse_spec_arrival(spec));
  }
  if (prefix.tokens == 0) return source;
  return std::make_unique<PrefixedSource>(std::move(source), prefix, spec.seed);
}

BuiltWorkload build_workload(const WorkloadSpec& spec) {
  ParsedWorkloadSpec parsed = parse_workload_spec(spec);
  const PrefixSpec prefix = parsed.prefix;
  const std::optional<ThinkTime> think_time = parsed.think_time;

  BuiltWorkload built;
  if (spec.trace_sessions) refuse_beside_trace_sessions(spec);
  if (!spec.session_turns.empty()) {
    build_sessions(spec, parsed, built);
    check_workload_invariants(built.requests);
    return built;
  }
  bool synthetic = false;         // no trace: the requests came whole from a SyntheticRequestSource
  std::vector<int32_t> limits;    // each request's max_tokens; empty: none given
  bool trace_priorities = false;  // a trace's priority column set them
  const bool replay_timestamps = replays_trace_timestamps(spec);
  if (replay_timestamps) {
    TraceReadResult trace = read_spec_trace(spec, spec.trace_speedup);
    built.description =
        fmt::format("{} requests: arrivals{} and lengths from {} ({})", trace.requests.size(),
                    spec.trace_speedup != 1.0 ? fmt::format(" / {}", spec.trace_speedup) : std::string(),
                    spec.trace.filename().string(), trace_format_name(trace.format));
    built.requests = std::move(trace.requests);
    built.warnings = std::move(trace.warnings);
    built.prefix_blocks = std::move(trace.prefix_blocks);
    limits = std::move(trace.max_tokens);
    trace_priorities = trace.priority_column;
    if (spec.trace_sessions) link_sessions(spec, trace.lines, built);
  } else {
    std::unique_ptr<ArrivalProcess> arrival = parse_spec_arrival(spec);
    Rng arrival_rng = Rng::for_stream(spec.seed, kArrivalStream);
    if (spec.trace.empty()) {
      // The requests a streaming run reads one by one, all of them (limits and priorities too).
      SyntheticRequestSource source(spec, std::move(parsed), std::move(arrival));
      built.requests.reserve(static_cast<size_t>(spec.num_requests));
      while (std::optional<Request> r = source.next()) built.requests.push_back(*r);
      built.description = source.description();
      synthetic = true;
    } else {
      // Trace lengths in trace arrival order (ids unchanged), new arrival times.
      TraceReadResult trace = read_spec_trace(spec, 1.0);
      built.requests = std::move(trace.requests);
      built.warnings = std::move(trace.warnings);
      built.prefix_blocks = std::move(trace.prefix_blocks);
      limits = std::move(trace.max_tokens);
      trace_priorities = trace.priority_column;
      assign_arrivals(built.requests, *arrival, arrival_rng, "--arrival");
      built.description =
          fmt::format("{} requests: {} arrivals, seed {}; lengths from {} ({})", built.requests.size(),
                      arrival->describe(), spec.seed, spec.trace.filename().string(), trace_format_name(trace.format));
    }
  }

  if (!spec.resample.empty()) {
    const int32_t block = parse_resample_block(spec.resample, "--resample");
    if (synthetic) {
      throw UserError(
          fmt::format("--resample {}: resamples a trace's requests; a synthetic workload draws new "
                      "ones from each seed already (give --trace FILE)",
                      spec.resample));
    }
    const int32_t used = block_bootstrap(built, limits, block, spec.seed);
    built.description += fmt::format(", block-bootstrap replicate (blocks of {} requests, seed {})", used, spec.seed);
  } else if (replay_timestamps && spec.seed != 0 && seed_variation(spec).empty()) {
    built.warnings.push_back(
        fmt::format("--seed {}: changes nothing in a trace replayed as recorded ({}); --resample block-bootstrap "
                    "draws a replicate of the trace from each seed",
                    spec.seed, spec.trace.filename().string()));
  }

  if (!synthetic) {  // (a synthetic source applied them as it drew each request)
    ClientSettings client(spec, parsed);
    for (size_t i = 0; i < built.requests.size(); ++i) client.apply(built.requests[i], limits.empty() ? 0 : limits[i]);
    built.description += client.describe(!limits.empty(), trace_priorities);
  }

  if (prefix.tokens > 0) {
    if (!built.prefix_blocks.empty()) refuse_prefix_with_hashes(spec);
    add_prefix(prefix, spec.seed, "--prefix", built);
    built.description += fmt::format(", prefix {} added to each prompt", spec.prefix);
  }

  if (think_time) {
    Rng rng = Rng::for_stream(spec.seed, kThinkTimeStream);
    built.think_times.reserve(built.requests.size());
    for (size_t i = 0; i < built.requests.size(); ++i) built.think_times.push_back(think_time->sample(rng));
    built.description += fmt::format(", think time {}", think_time->describe());
  }

  check_workload_invariants(built.requests);
  return built;
}

Workload make_workload(const WorkloadSpec& spec) { return build_workload(spec).requests; }

Workload read_trace(const std::filesystem::path& path, int64_t max_requests, double speedup) {
  return read_trace_detailed(path, max_requests, speedup).requests;
}

}  // namespace batchsim
