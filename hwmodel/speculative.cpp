// batchsim — speculative decoding (see speculative.h).
#include "hwmodel/speculative.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "hwmodel/base/error.h"
#include "hwmodel/base/parse.h"

namespace batchsim {

namespace {

constexpr int kMaxDraftTokens = 32;  // vLLM caps nothing; beyond this no drafter gains

struct MethodName {
  DraftMethod method;
  std::string_view name;
};
constexpr MethodName kMethods[] = {{DraftMethod::ngram, "ngram"},
                                   {DraftMethod::eagle, "eagle"},
                                   {DraftMethod::eagle3, "eagle3"},
                                   {DraftMethod::mtp, "mtp"},
                                   {DraftMethod::draft_model, "draft"}};

std::string preset_names() {
  std::string names;
  for (const SpeculativePreset& p : speculative_presets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

}  // namespace

std::string_view draft_method_name(DraftMethod method) {
  for (const MethodName& m : kMethods) {
    if (m.method == method) return m.name;
  }
  return "?";
}

double SpeculativeDecoding::expected_accepted() const { return std::accumulate(accept.begin(), accept.end(), 0.0); }

std::vector<double> SpeculativePreset::rates(int k) const {
  // alpha with sum_{i=1..K} alpha^i = tau - 1, by bisection (the sum grows with alpha).
  const double target = mean_accepted_length - 1;
  auto accepted = [&](double a) {
    double sum = 0, term = 1;
    for (int i = 0; i < measured_k; ++i) sum += term *= a;
    return sum;
  };
  double lo = 0, hi = 1;
  for (int i = 0; i < 100; ++i) {
    const double mid = (lo + hi) / 2;
    (accepted(mid) < target ? lo : hi) = mid;
  }
  const double alpha = (lo + hi) / 2;
  std::vector<double> out(static_cast<size_t>(k));
  double term = 1;
  for (double& r : out) r = term *= alpha;
  return out;
}

const std::vector<SpeculativePreset>& speculative_presets() {
  // The figures of docs/REFERENCE-moe-spec-offload.md section 5.4.
  static const std::vector<SpeculativePreset> presets = {
      {"deepseek-v3-mtp", DraftMethod::mtp, 1.875, 1,
       "DeepSeek-V3 Technical Report (arXiv 2412.19437) 5.4.3: the second token's acceptance rate is 85-90% "
       "with one MTP module (the midpoint, 0.875)"},
      {"deepseek-v3-mtp-k7", DraftMethod::mtp, 3.20, 7,
       "third-party measurement (Nebius MTP card, docs/REFERENCE-moe-spec-offload.md 5.4): mean acceptance "
       "length 3.20 at k = 7, temperature 0, mean "
       "over MT-bench, HumanEval and GSM8K"},
      {"eagle3-llama3.1-8b-mtbench", DraftMethod::eagle3, 2.77, 7,
       "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, third-party measurement: mean acceptance length 2.77 on "
       "MT-bench at k = 7, temperature 1"},
      {"eagle3-llama3.1-8b-humaneval", DraftMethod::eagle3, 3.49, 7,
       "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, third-party measurement: mean acceptance length 3.49 on "
       "HumanEval at k = 7, temperature 1"},
      {"eagle3-llama3.1-8b-gsm8k", DraftMethod::eagle3, 3.34, 7,
       "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, third-party measurement: mean acceptance length 3.34 on GSM8K "
       "at k = 7, temperature 1"},
  };
  return presets;
}

SpeculativeDecoding parse_speculative_decoding(std::string_view spec, std::string_view option) {
  const auto fail = [&](const std::string& why) -> UserError {
    return UserError(
        fmt::format("{} '{}': {} (expected METHOD:k=K:accept=RATES, METHOD one of ngram, eagle, "
                    "eagle3, mtp, draft:MODEL; RATES A1,A2,... per draft position, one rate for "
                    "all, or a preset: {})",
                    option, spec, why, preset_names()));
  };
  const std::vector<std::string_view> parts = split_fields(spec, ':');
  SpeculativeDecoding s;
  size_t next = 1;
  bool method_found = false;
  for (const MethodName& m : kMethods) {
    if (parts[0] == m.name) {
      s.method = m.method;
      method_found = true;
    }
  }
  if (!method_found) throw fail(fmt::format("unknown method '{}'", parts[0]));
  if (s.method == DraftMethod::draft_model) {
    if (parts.size() < 2 || parts[1].empty() || parts[1].find('=') != std::string_view::npos) {
      throw fail("draft needs the draft model's name or config.json (draft:MODEL)");
    }
    s.draft_model = std::string(parts[1]);
    next = 2;
    // A Hugging Face id holds no ':'; a path may (on Windows), which is not supported.
  }
  std::string_view accept_text;
  bool has_k = false;
  for (size_t i = next; i < parts.size(); ++i) {
    const std::string_view part = parts[i];
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos) throw fail(fmt::format("'{}' is not KEY=VALUE", part));
    const std::string_view key = part.substr(0, eq), value = part.substr(eq + 1);
    if (key == "k") {
      s.k = static_cast<int>(parse_int(value, fmt::format("{} k", option), 1, kMaxDraftTokens));
      has_k = true;
    } else if (key == "accept") {
      accept_text = value;
    } else {
      throw fail(fmt::format("unknown key '{}'", key));
    }
  }
  if (!has_k) throw fail("k=K (the draft tokens per step) is required");
  if (accept_text.empty()) throw fail("accept=RATES is required");
  const auto preset = std::find_if(speculative_presets().begin(), speculative_presets().end(),
                                   [&](const SpeculativePreset& p) { return p.name == accept_text; });
  if (preset != speculative_presets().end()) {
    if (preset->method != s.method) {
      throw fail(fmt::format("preset '{}' was measured with {}, not {}", preset->name,
                             draft_method_name(preset->method), draft_method_name(s.method)));
    }
    s.accept = preset->rates(s.k);
    s.accept_source = fmt::format("preset {}: {}", preset->name, preset->source);
    return s;
  }
  std::vector<double> rates;
  for (const std::string_view r : split_fields(accept_text, ',')) {
    rates.push_back(parse_double(r, fmt::format("{} accept", option), 0, 1));
  }
  if (rates.size() == 1 && s.k > 1) {
    // One rate: Leviathan et al.'s per-token acceptance alpha, position i accepted with alpha^i.
    for (int i = 1; i < s.k; ++i) rates.push_back(rates.back() * rates.front());
  }
  if (static_cast<int>(rates.size()) != s.k) {
    throw fail(
        fmt::format("{} acceptance rates for k={} (give one per draft position, or one for all)", rates.size(), s.k));
  }
  for (size_t i = 1; i < rates.size(); ++i) {
    if (rates[i] > rates[i - 1]) {
      throw fail(
          fmt::format("the rates must not increase (position {}: {} after {}): each is the share of "
                      "steps that accept that position at all",
                      i + 1, rates[i], rates[i - 1]));
    }
  }
  s.accept = std::move(rates);
  s.accept_source = "given";
  return s;
}

}  // namespace batchsim
