// batchsim — vLLM's own option names, read as batchsim's (see vllm_spellings.h).
#include "experiments/cli/vllm_spellings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>
#include <tuple>

#include "hwmodel/base/error.h"
#include "hwmodel/base/parse.h"

namespace batchsim {

namespace {

// The vLLM options that take a value (vllm/engine/arg_utils.py, vllm/benchmarks/serve.py and
// datasets.py), and the flags.
constexpr std::string_view kValued[] = {"num-prompts",          "request-rate",      "burstiness",
                                        "tensor-parallel-size", "max-num-seqs",      "max-num-batched-tokens",
                                        "random-input-len",     "random-output-len", "random-range-ratio",
                                        "dataset-path"};
constexpr std::string_view kFlags[] = {"enable-prefix-caching", "no-enable-prefix-caching", "enable-chunked-prefill"};

bool one_of(std::string_view name, const auto& names) {
  for (std::string_view n : names) {
    if (name == n) return true;
  }
  return false;
}

// A length of vLLM's random dataset: N, or with --random-range-ratio R the integers from
// int(N x (1 - R)) to int(N x (1 + R)) (RandomDataset.sample, vllm/benchmarks/datasets.py).
std::string random_length(const std::string& len, const std::optional<std::string>& ratio, const char* option) {
  const int64_t n = parse_int(len, option, 1, int64_t{1} << 30);
  const double r = ratio ? parse_double(*ratio, "--random-range-ratio", 0, 0.999999) : 0;
  if (r == 0) return fmt::format("fixed:{}", n);
  const auto low = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(n) * (1 - r)));
  const auto high = static_cast<int64_t>(static_cast<double>(n) * (1 + r));
  return fmt::format("uniform:{}:{}", low, high);
}

}  // namespace

namespace {

// One command-line word as a vLLM option: its long name ("" if it is none), how the user spelled
// it, and a value given with "=". "-tp N" is vLLM's short form of --tensor-parallel-size.
struct SpelledOption {
  std::string name, spelled;
  std::optional<std::string> inline_value;
};

SpelledOption spelled_option(const std::string& arg) {
  SpelledOption o;
  if (arg == "-tp" || arg.starts_with("-tp=")) {
    o.name = "tensor-parallel-size";
    o.spelled = "-tp";
    if (arg.size() > 3) o.inline_value = arg.substr(4);
  } else if (arg.starts_with("--")) {
    const size_t eq = arg.find('=');
    o.name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    o.spelled = "--" + o.name;
    if (eq != std::string::npos) o.inline_value = arg.substr(eq + 1);
  }
  return o;
}

// vLLM's workload options, which become batchsim's only together (a rate with its burstiness, a
// length with the range ratio).
struct VllmWorkload {
  std::optional<std::string> rate, burstiness, input_len, output_len, range_ratio;
  std::string rate_text;  // vLLM's text of the arrival options, for the note ("--request-rate 4 --burstiness 0.5")
};

void add_workload_args(const VllmWorkload& w, VllmSpellings& out) {
  const auto note = [&](const std::string& theirs, const std::string& ours) {
    out.notes.push_back(fmt::format("read vLLM's {} as {}", theirs, ours));
  };
  if (w.burstiness && !w.rate)
    throw UserError("--burstiness: give --request-rate too (vLLM's burstiness shapes its arrivals)");
  if (w.rate) {
    // vLLM's arrivals (vllm/benchmarks/serve.py get_request): inf sends every request at once;
    // else gaps from a gamma distribution of shape `burstiness` (default 1: Poisson) and mean
    // 1 / rate, whose coefficient of variation is 1 / sqrt(burstiness).
    std::string arrival;
    if (*w.rate == "inf") {
      arrival = "offline";
    } else {
      const double r = parse_double(*w.rate, "--request-rate", 1e-9);
      const double b = w.burstiness ? parse_double(*w.burstiness, "--burstiness", 1e-6) : 1.0;
      arrival = b == 1.0 ? fmt::format("poisson:{:g}", r) : fmt::format("gamma:{:g}:{:g}", r, 1 / std::sqrt(b));
    }
    out.args.insert(out.args.end(), {"--arrival", arrival});
    note(w.rate_text, "--arrival " + arrival);
  }
  if (w.range_ratio && !w.input_len && !w.output_len) {
    throw UserError("--random-range-ratio: give --random-input-len or --random-output-len too");
  }
  for (auto [len, theirs, ours] : {std::tuple{&w.input_len, "--random-input-len", "--prompt-len"},
                                   std::tuple{&w.output_len, "--random-output-len", "--output-len"}}) {
    if (!*len) continue;
    const std::string spec = random_length(**len, w.range_ratio, theirs);
    out.args.insert(out.args.end(), {ours, spec});
    note(fmt::format("{} {}{}", theirs, **len, w.range_ratio ? " --random-range-ratio " + *w.range_ratio : ""),
         fmt::format("{} {}", ours, spec));
  }
}

}  // namespace

VllmSpellings read_vllm_spellings(const std::vector<std::string>& args) {
  VllmSpellings out;
  VllmWorkload workload;
  const auto note = [&](const std::string& theirs, const std::string& ours) {
    out.notes.push_back(fmt::format("read vLLM's {} as {}", theirs, ours));
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const auto [name, spelled, inline_value] = spelled_option(arg);
    if (one_of(name, kFlags)) {
      if (inline_value) throw UserError(fmt::format("--{}: takes no value (it is vLLM's flag)", name));
      if (name == "enable-chunked-prefill") {
        out.chunked_prefill_required = true;
        out.notes.push_back(
            "read vLLM's --enable-chunked-prefill as a check that the policy chunks prefills "
            "(in batchsim the policy does: vllm, sarathi and the chunked presets)");
        continue;
      }
      const std::string value = name == "enable-prefix-caching" ? "true" : "false";
      out.args.insert(out.args.end(), {"--policy-opt", "prefix_caching=" + value});
      note("--" + name, "--policy-opt prefix_caching=" + value);
      continue;
    }
    if (!one_of(name, kValued)) {
      out.args.push_back(arg);
      continue;
    }
    std::string value;
    if (inline_value) {
      value = *inline_value;
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      throw UserError(fmt::format("{}: needs a value (vLLM's option, read as batchsim's)", spelled));
    }
    const std::string theirs = fmt::format("{} {}", spelled, value);
    const auto plain = [&](const char* ours, const std::string& ours_value) {
      out.args.insert(out.args.end(), {ours, ours_value});
      note(theirs, fmt::format("{} {}", ours, ours_value));
    };
    if (name == "num-prompts")
      plain("--num-requests", value);
    else if (name == "tensor-parallel-size")
      plain("--tp", value);
    else if (name == "max-num-seqs")
      plain("--policy-opt", "max_num_seqs=" + value);
    else if (name == "max-num-batched-tokens")
      plain("--policy-opt", "max_num_batched_tokens=" + value);
    else if (name == "dataset-path")
      plain("--trace", value);
    else if (name == "random-range-ratio")
      workload.range_ratio = value;
    else if (name == "random-input-len")
      workload.input_len = value;
    else if (name == "random-output-len")
      workload.output_len = value;
    else {
      (name == "request-rate" ? workload.rate : workload.burstiness) = value;  // composed below, in the order given
      workload.rate_text += (workload.rate_text.empty() ? "" : " ") + theirs;
    }
  }
  add_workload_args(workload, out);
  return out;
}

}  // namespace batchsim
