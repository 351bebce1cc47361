// batchsim — fitting the fused-MoE kernel model (see fit_moe.h).
#include "hwmodel/fit/fit_moe.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <stdexcept>

#include "hwmodel/base/random.h"
#include "hwmodel/fit/solvers.h"
#include "hwmodel/roofline.h"

namespace batchsim {

namespace {

// The constants in the order of the parameter vector, and the scale each is fitted in (its
// logarithm plus log(scale) is the value's): microseconds, TB/s, TFLOP/s, picoseconds.
enum Param { kLaunch, kEpLaunch, kPerExpert, kBandwidth, kFlops, kOut, kRow, kToken, kExponent, kSlowdown, kNumParams };
constexpr std::array<double, kNumParams> kScale = {1e-6, 1e-6, 1e-6, 1e12, 1e12, 1e-12, 1e-12, 1e-12, 1, 1};
// Where the fit starts (in those units; the exponent is 1 + e^0 = 2). Bandwidth and FLOP/s
// start below their ceilings: 0.9 x HBM and 0.6 x the 16-bit peak.
constexpr std::array<double, kNumParams> kStart = {20, 10, 0.3, 0, 0, 1, 1, 1, 1, 0.5};
constexpr double kSoftL1Scale = 0.1;

// What the model needs of one sample, computed once (moe_kernel.cpp, fused_moe_time, is the
// same formula; tests/hwmodel/moe_kernel_test.cpp checks that the two agree).
struct Features {
  double ep = 0, touched = 0, weight_bytes = 0, flops = 0, out = 0, act = 0, tok = 0, misaligned = 0;
  double seconds = 0;
};

Features features(const MoeSample& s, MoeKernel kernel) {
  const FusedMoeCall& c = s.call;
  Features f;
  const double g = c.gated ? 2 : 1;
  const double hidden = static_cast<double>(c.hidden), inter = static_cast<double>(c.intermediate);
  const double expert_weights = (g + 1) * inter * hidden;
  const double bytes = c.weight_bytes > 0 ? c.weight_bytes : weight_format_bytes(c.format);
  const bool all_rows = moe_kernel_uses_all_rows(kernel);
  f.ep = c.ep > 1 ? 1 : 0;
  f.touched = s.load.touched_experts;
  f.weight_bytes = s.load.touched_experts * expert_weights * bytes;
  f.flops = 2 * s.load.padded_rows(moe_kernel_tile_rows(kernel)) * expert_weights;
  f.out = s.load.padded_rows(64, all_rows) * (g * inter + hidden);
  f.act = (all_rows ? s.load.routed_rows : s.load.local_rows) * ((g + 1) * inter + hidden);
  f.tok = static_cast<double>(c.tokens) * hidden;
  f.misaligned = c.intermediate % 16 != 0 ? 1 : 0;
  f.seconds = s.seconds;
  return f;
}

double softplus(double z) { return z > 30 ? z : std::log1p(std::exp(z)); }

// The constants a parameter vector stands for. `ceiling` holds log(bound / scale) of the
// bandwidth and the FLOP rate, which approach their bound smoothly: log v = c - softplus(c - q).
MoeKernelFit constants(MoeKernel kernel, const Eigen::VectorXd& q, const std::array<bool, kNumParams>& free,
                       const std::array<double, kNumParams>& ceiling) {
  std::array<double, kNumParams> v{};
  for (int i = 0; i < kNumParams; ++i) {
    if (!free[static_cast<size_t>(i)]) continue;  // switched off: 0
    double x = q(i);
    if (i == kBandwidth || i == kFlops)
      x = ceiling[static_cast<size_t>(i)] - softplus(ceiling[static_cast<size_t>(i)] - x);
    v[static_cast<size_t>(i)] = std::exp(x) * kScale[static_cast<size_t>(i)];
  }
  MoeKernelFit f;
  f.kernel = kernel;
  f.launch_s = v[kLaunch];
  f.ep_launch_s = v[kEpLaunch];
  f.per_expert_s = v[kPerExpert];
  f.weight_bytes_per_s = v[kBandwidth];
  f.flops_per_s = v[kFlops];
  f.out_element_s = v[kOut];
  f.row_element_s = v[kRow];
  f.token_element_s = v[kToken];
  f.roofline_exponent = 1 + v[kExponent];
  f.misaligned_slowdown = v[kSlowdown];
  return f;
}

double predict(const MoeKernelFit& k, const Features& f) {
  const double slow = 1 + k.misaligned_slowdown * f.misaligned;
  return k.launch_s + k.ep_launch_s * f.ep + k.per_expert_s * f.touched +
         roofline_combine(f.weight_bytes / k.weight_bytes_per_s, slow * f.flops / k.flops_per_s, k.roofline_exponent) +
         slow * (k.out_element_s * f.out + k.row_element_s * f.act) + k.token_element_s * f.tok;
}

// The FLOP ceiling of the MMA the kernel issues (fit_moe.h).
double peak_flops_of(MoeKernel kernel, const HardwareProfile& gpu) {
  const bool fp8 = kernel == MoeKernel::fp8_flashinfer_cutlass || kernel == MoeKernel::fp8_block_triton ||
                   kernel == MoeKernel::fp8_block_flashinfer_cutlass;
  return fp8 && gpu.peak_fp8_flops > 0 ? gpu.peak_fp8_flops : gpu.peak_flops;
}

// Routings the table names: balanced (or uniform), power_law_<alpha>.
std::optional<MoeRouting> parse_routing(const std::string& text) {
  if (text == "balanced" || text == "uniform") return MoeRouting{};
  const std::string prefix = "power_law_";
  if (text.rfind(prefix, 0) != 0) return std::nullopt;
  try {
    size_t used = 0;
    const double alpha = std::stod(text.substr(prefix.size()), &used);
    if (used != text.size() - prefix.size() || !(alpha > 0) || !std::isfinite(alpha)) return std::nullopt;
    return MoeRouting{MoeRoutingKind::power_law, alpha};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// NVIDIA Nemotron-H MoE shapes (hidden, inter, top-k, experts) of the H100 table: relu^2
// experts, w13 one I x H matrix (config.json mlp_hidden_act relu2; aiconfigurator's collector
// runs them as "relu2_no_mul", collector/vllm/collect_moe.py l.141-146).
constexpr std::array<std::array<int64_t, 4>, 3> kNonGatedShapes = {{
    {2048, 5120, 22, 512},
    {1024, 2688, 22, 512},
    {2688, 1856, 6, 128},
}};

}  // namespace

std::optional<FusedMoeCall> kernel_moe_row_call(const KernelMoeRow& r, std::string* why) {
  auto fail = [why](std::string reason) -> std::optional<FusedMoeCall> {
    if (why != nullptr) *why = std::move(reason);
    return std::nullopt;
  };
  FusedMoeCall c;
  c.tokens = r.tokens;
  c.hidden = r.hidden;
  c.top_k = r.topk;
  c.experts = r.experts;
  c.ep = r.ep;
  if (r.tp <= 0 || r.inter % r.tp != 0) return fail("intermediate size not divisible by the TP degree");
  if (r.tp > 1 && r.ep > 1) return fail("TP and EP together: the collector times one or the other");
  c.intermediate = r.inter / r.tp;
  const std::string& d = r.dtype;
  const std::string& source = r.kernel;
  if (d == "bfloat16" || d == "float16") {
    c.format = WeightFormat::bf16;
  } else if (d == "fp8") {
    c.format = WeightFormat::fp8;
  } else if (d == "fp8_block") {
    c.format = WeightFormat::fp8_block;
  } else if (d == "w4a16_mxfp4" || d == "mxfp4") {
    c.format = WeightFormat::mxfp4;
  } else if (d == "nvfp4") {
    c.format = WeightFormat::nvfp4;
  } else if (d == "int4_wo") {
    c.format = WeightFormat::mxfp4;
    c.weight_bytes = 0.5 + 2.0 / 32;
    c.kernel = MoeKernel::w4a16_marlin;
  } else {
    return fail(fmt::format("{} experts: no kernel modelled", d));
  }
  // What ran, where the row says (vLLM's experts class in kernel_source).
  if (source.find("marlin") != std::string::npos) {
    c.kernel = MoeKernel::w4a16_marlin;
  } else if (source.find("oaitriton") != std::string::npos) {
    c.kernel = MoeKernel::mxfp4_oai_triton;
  } else if (source.find("flashinfer_cutlass") != std::string::npos) {
    if (c.format == WeightFormat::fp8) c.kernel = MoeKernel::fp8_flashinfer_cutlass;
    if (c.format == WeightFormat::fp8_block) c.kernel = MoeKernel::fp8_block_flashinfer_cutlass;
  } else if (source.find("triton") != std::string::npos) {
    if (c.format == WeightFormat::bf16) c.kernel = MoeKernel::bf16_triton;
    if (c.format == WeightFormat::fp8_block) c.kernel = MoeKernel::fp8_block_triton;
  }
  for (const auto& shape : kNonGatedShapes) {
    if (shape == std::array<int64_t, 4>{r.hidden, r.inter, r.topk, r.experts}) c.gated = false;
  }
  const std::optional<MoeRouting> routing = parse_routing(r.distribution);
  if (!routing) return fail(fmt::format("routing '{}': not balanced nor power_law_<alpha>", r.distribution));
  c.routing = *routing;
  if (const std::string_view problem = fused_moe_call_problem(c); !problem.empty()) return fail(std::string(problem));
  return c;
}

std::optional<GroupedTopK> kernel_moe_row_grouping(const KernelMoeRow& r) {
  if (r.hidden == 7168 && r.inter == 2048 && r.topk == 8 && r.experts == 256) return GroupedTopK{8, 4};
  return std::nullopt;
}

namespace {

// x rounded to bfloat16 (to nearest, ties to even), as torch rounds a float32 into the
// collector's default dtype: its balanced routing computes expert indices in bfloat16.
float round_to_bf16(double x) {
  float f = static_cast<float>(x);
  uint32_t b = 0;
  std::memcpy(&b, &f, sizeof b);
  b = (b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// One collector routing of a grouped-top-k model (collector_grouped_load, fit_moe.h) as a
// pipeline over the per-expert row counts: a generator fills `picked` with each token's experts
// as the collector's logits mark them, route() re-selects them through vLLM's grouped top-k into
// `counts_`, and add_features() adds one routing's counts to the measured rank's loads. The
// scratch vectors live here so that each token reuses them.
class CollectorRouting {
 public:
  CollectorRouting(const FusedMoeCall& c, GroupedTopK grouping)
      : c_(c),
        grouping_(grouping),
        tokens_(c.tokens),
        experts_(c.experts),
        k_(c.top_k),
        ep_(c.ep),
        local_(experts_ / ep_),
        group_size_(experts_ / grouping.groups),
        rows_(tokens_ * k_),
        counts_(static_cast<size_t>(experts_)),
        picked_(static_cast<size_t>(k_)),
        group_score_(static_cast<size_t>(grouping.groups)),
        group_order_(static_cast<size_t>(grouping.groups)),
        chosen_(static_cast<size_t>(experts_), 0),
        kept_(static_cast<size_t>(grouping.groups), 0) {
    load_.routed_rows = static_cast<double>(rows_);
  }

  MoeRankLoad load() && {
    if (c_.routing.kind == MoeRoutingKind::balanced) {
      route_balanced();
    } else {
      route_power_law();
    }
    return load_;
  }

 private:
  // One routing's loads of the measured rank (experts 0 .. local - 1) and of every expert,
  // `weight` being that routing's share of the mean.
  void add_features(double weight) {
    for (int64_t e = 0; e < experts_; ++e) {
      const int64_t n = counts_[static_cast<size_t>(e)];
      for (size_t i = 0; i < kMoeTileRows.size(); ++i) {
        const int64_t b = kMoeTileRows[i];
        const double padded = weight * static_cast<double>((n + b - 1) / b * b);
        load_.all_padded_rows[i] += padded;
        if (e < local_) load_.local_padded_rows[i] += padded;
      }
      if (e < local_) {
        load_.local_rows += weight * static_cast<double>(n);
        load_.touched_experts += n > 0 ? weight : 0;
      }
    }
  }

  // vLLM's grouped top-k of one token whose one-hot logits mark `picked_` (k distinct experts):
  // adds the experts it routes to into `counts_`.
  void route() {
    std::fill(group_score_.begin(), group_score_.end(), 0);
    for (int64_t e : picked_) {
      chosen_[static_cast<size_t>(e)] = 1;
      int64_t& g = group_score_[static_cast<size_t>(e / group_size_)];
      g = std::min<int64_t>(g + 1, 2);  // the sum of the group's top-2 scores
    }
    std::iota(group_order_.begin(), group_order_.end(), 0);
    std::stable_sort(group_order_.begin(), group_order_.end(), [&](int64_t a, int64_t b) {
      return group_score_[static_cast<size_t>(a)] > group_score_[static_cast<size_t>(b)];
    });
    std::fill(kept_.begin(), kept_.end(), 0);
    for (int64_t i = 0; i < grouping_.top_groups; ++i)
      kept_[static_cast<size_t>(group_order_[static_cast<size_t>(i)])] = 1;
    int64_t routed = 0;
    for (int64_t e : picked_) {
      if (kept_[static_cast<size_t>(e / group_size_)]) {
        ++counts_[static_cast<size_t>(e)];
        ++routed;
      }
    }
    // The rest: the lowest-index unchosen experts of the kept groups (score 0, ties to the lowest).
    for (int64_t e = 0; e < experts_ && routed < k_; ++e) {
      if (kept_[static_cast<size_t>(e / group_size_)] && !chosen_[static_cast<size_t>(e)]) {
        ++counts_[static_cast<size_t>(e)];
        ++routed;
      }
    }
    for (int64_t e : picked_) chosen_[static_cast<size_t>(e)] = 0;
  }

  // balanced_logits (collector/helper.py l.1051): token t's j-th expert is (t + j stride) mod E,
  // stride = ceil(E / k); for T < stride the index t stride / T + j stride is computed in the
  // collector's default dtype, bfloat16 (collect_moe.py l.359), and truncated. One routing.
  void route_balanced() {
    const int64_t stride = (experts_ + k_ - 1) / k_;
    std::fill(counts_.begin(), counts_.end(), 0);
    for (int64_t t = 0; t < tokens_; ++t) {
      int64_t n = 0;
      for (int64_t j = 0; j < k_; ++j) {
        int64_t e = 0;
        if (tokens_ >= stride) {
          e = (t + j * stride) % experts_;
        } else {
          const float a = round_to_bf16(static_cast<double>(t * stride) / static_cast<double>(tokens_));
          const float b = round_to_bf16(static_cast<double>(a) +
                                        static_cast<double>(round_to_bf16(static_cast<double>(j * stride))));
          e = static_cast<int64_t>(
              std::floor(round_to_bf16(std::fmod(static_cast<double>(b), static_cast<double>(experts_)))));
        }
        // one_hot(...).sum: a repeated expert is one logit; top-k fills the slot with the
        // lowest-index zero-logit expert.
        if (std::find(picked_.begin(), picked_.begin() + n, e) == picked_.begin() + n)
          picked_[static_cast<size_t>(n++)] = e;
      }
      for (int64_t e = 0; n < k_; ++e) {
        if (std::find(picked_.begin(), picked_.begin() + n, e) == picked_.begin() + n)
          picked_[static_cast<size_t>(n++)] = e;
      }
      route();
    }
    add_features(1.0);
  }

  // _generate_power_law_distribution (helper.py l.1343), literally, then
  // _assign_experts_from_counts (l.1288), once per draw; the loads are the mean of the draws.
  void route_power_law() {
    constexpr int kDraws = 16;
    Rng rng(0x67726f75706564);  // "grouped"
    std::vector<double> x(static_cast<size_t>(experts_));
    std::vector<int64_t> n(static_cast<size_t>(experts_)), order(static_cast<size_t>(experts_)), flat;
    for (int draw = 0; draw < kDraws; ++draw) {
      draw_power_law_counts(rng, x, n);
      route_counts(n, order, flat);
      add_features(1.0 / kDraws);
    }
  }

  // One draw's per-expert row counts `n`: weights from x^-alpha by inverse CDF into `x`, scaled
  // to T k rows and rounded, capped at T per expert, the overflow and the rounding residue placed
  // round robin over the ranks, and the busiest rank swapped into rank 0 (l.1424).
  void draw_power_law_counts(Rng& rng, std::vector<double>& x, std::vector<int64_t>& n) const {
    const bool many = rows_ > experts_;
    const double x_min = many ? 1.0 : 0.01, x_max = many ? 0.8 * static_cast<double>(tokens_) : 2.0;
    const double a = 1 - c_.routing.alpha;
    double total_x = 0;
    for (double& v : x) {
      const double u = rng.uniform01();
      v = std::abs(a) < 1e-9 ? x_min * std::pow(x_max / x_min, u)
                             : std::pow((std::pow(x_max, a) - std::pow(x_min, a)) * u + std::pow(x_min, a), 1 / a);
      total_x += v;
    }
    int64_t overflow = 0;
    for (size_t e = 0; e < x.size(); ++e) {
      n[e] = static_cast<int64_t>(std::nearbyint(x[e] / total_x * static_cast<double>(rows_)));
      if (n[e] > tokens_) {
        overflow += n[e] - tokens_;
        n[e] = tokens_;
      }
    }
    round_robin_adjust(n, overflow, 1);
    const int64_t delta = rows_ - std::accumulate(n.begin(), n.end(), int64_t{0});
    if (delta > 0) round_robin_adjust(n, delta, 1);
    if (delta < 0) round_robin_adjust(n, -delta, -1);
    int64_t busiest = 0, most = -1;
    for (int64_t r = 0; r < ep_; ++r) {
      const int64_t s = std::accumulate(n.begin() + r * local_, n.begin() + (r + 1) * local_, int64_t{0});
      if (s > most) {
        most = s;
        busiest = r;
      }
    }
    std::swap_ranges(n.begin(), n.begin() + local_, n.begin() + busiest * local_);
  }

  // _round_robin_adjust_per_rank (l.1314): `remaining` rows added (step 1) or taken (step -1),
  // one per rank in turn, on the rank's least (most) loaded expert that can take it.
  void round_robin_adjust(std::vector<int64_t>& n, int64_t remaining, int step) const {
    while (remaining > 0) {
      bool progressed = false;
      for (int64_t r = 0; r < ep_ && remaining > 0; ++r) {
        int64_t pick = -1;
        for (int64_t j = r * local_; j < (r + 1) * local_; ++j) {
          const int64_t v = n[static_cast<size_t>(j)];
          if (step > 0 ? v >= tokens_ : v <= 0) continue;
          if (pick < 0 || (step > 0 ? v < n[static_cast<size_t>(pick)] : v > n[static_cast<size_t>(pick)])) pick = j;
        }
        if (pick < 0) continue;
        n[static_cast<size_t>(pick)] += step;
        --remaining;
        progressed = true;
      }
      if (!progressed) return;
    }
  }

  // _assign_experts_from_counts (l.1288): experts by count, descending, each repeated by its
  // count, laid out as [k, T] and transposed; each token's k experts then routed.
  void route_counts(const std::vector<int64_t>& n, std::vector<int64_t>& order, std::vector<int64_t>& flat) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t p, int64_t q) { return n[static_cast<size_t>(p)] > n[static_cast<size_t>(q)]; });
    flat.clear();
    for (int64_t e : order) flat.insert(flat.end(), static_cast<size_t>(n[static_cast<size_t>(e)]), e);
    std::fill(counts_.begin(), counts_.end(), 0);
    for (int64_t t = 0; t < tokens_; ++t) {
      for (int64_t j = 0; j < k_; ++j) picked_[static_cast<size_t>(j)] = flat[static_cast<size_t>(j * tokens_ + t)];
      route();
    }
  }

  const FusedMoeCall& c_;
  const GroupedTopK grouping_;
  const int64_t tokens_, experts_, k_, ep_, local_, group_size_, rows_;
  std::vector<int64_t> counts_;  // rows per expert of the routing in progress
  std::vector<int64_t> picked_;  // one token's experts as the collector's logits mark them
  std::vector<int64_t> group_score_, group_order_;
  std::vector<char> chosen_, kept_;
  MoeRankLoad load_;
};

}  // namespace

MoeRankLoad collector_grouped_load(const FusedMoeCall& c, GroupedTopK grouping) {
  if (const std::string_view why = fused_moe_call_problem(c); !why.empty()) {
    throw std::invalid_argument("collector_grouped_load: " + std::string(why));
  }
  if (grouping.groups < 1 || c.experts % grouping.groups != 0 || grouping.top_groups < 1 ||
      grouping.top_groups > grouping.groups || grouping.top_groups * (c.experts / grouping.groups) < c.top_k) {
    throw std::invalid_argument(
        "collector_grouped_load: groups must divide the experts and the kept groups hold top_k");
  }
  return CollectorRouting(c, grouping).load();
}

const MoeRankLoad& MoeLoadCache::load(const FusedMoeCall& c, std::optional<GroupedTopK> grouping) {
  const auto key = std::tuple(c.tokens, c.experts, c.top_k, c.ep, static_cast<int>(c.routing.kind),
                              c.routing.kind == MoeRoutingKind::power_law ? c.routing.alpha : 0.0,
                              grouping ? grouping->groups : 0, grouping ? grouping->top_groups : 0);
  auto it = loads_.find(key);
  if (it == loads_.end()) {
    it = loads_.emplace(key, grouping ? collector_grouped_load(c, *grouping) : expected_moe_load(c)).first;
  }
  return it->second;
}

MoeKernelFit fit_moe_kernel(MoeKernel kernel, const std::vector<const MoeSample*>& samples,
                            const HardwareProfile& gpu) {
  std::vector<Features> rows;
  rows.reserve(samples.size());
  std::array<bool, kNumParams> free{};
  free.fill(true);
  bool any_ep = false, any_misaligned = false;
  for (const MoeSample* s : samples) {
    rows.push_back(features(*s, kernel));
    any_ep = any_ep || rows.back().ep > 0;
    any_misaligned = any_misaligned || rows.back().misaligned > 0;
  }
  free[kEpLaunch] = any_ep;
  free[kSlowdown] = any_misaligned;
  std::array<double, kNumParams> ceiling{};
  ceiling[kBandwidth] = std::log(gpu.hbm_bytes_per_s / kScale[kBandwidth]);
  ceiling[kFlops] = std::log(peak_flops_of(kernel, gpu) / kScale[kFlops]);
  std::vector<int> index;  // the free parameters' places in the full vector
  for (int i = 0; i < kNumParams; ++i) {
    if (free[static_cast<size_t>(i)]) index.push_back(i);
  }
  Eigen::VectorXd full(kNumParams);
  for (int i = 0; i < kNumParams; ++i) full(i) = std::log(kStart[static_cast<size_t>(i)]);
  // The bounded two start below their ceilings; q such that c - softplus(c - q) = log(start).
  auto bounded_start = [&](int i, double start) {
    const double gap = ceiling[static_cast<size_t>(i)] - std::log(start / kScale[static_cast<size_t>(i)]);
    full(i) = ceiling[static_cast<size_t>(i)] - std::log(std::expm1(gap));
  };
  bounded_start(kBandwidth, 0.9 * gpu.hbm_bytes_per_s);
  bounded_start(kFlops, 0.6 * gpu.peak_flops);
  Eigen::VectorXd x0(static_cast<Eigen::Index>(index.size()));
  for (size_t j = 0; j < index.size(); ++j) x0(static_cast<Eigen::Index>(j)) = full(index[j]);
  auto expand = [&](const Eigen::VectorXd& x) {
    Eigen::VectorXd q = full;
    for (size_t j = 0; j < index.size(); ++j) q(index[j]) = x(static_cast<Eigen::Index>(j));
    return q;
  };
  // Soft-L1 on log(predicted / measured): residual f sign(r) sqrt(2 (sqrt(1 + (r/f)^2) - 1)), whose
  // square is f^2 rho((r/f)^2) with rho(z) = 2 (sqrt(1 + z) - 1) (scipy's soft_l1).
  const fit::ResidualFunction residuals = [&](const Eigen::VectorXd& x, Eigen::VectorXd& r) {
    const MoeKernelFit k = constants(kernel, expand(x), free, ceiling);
    for (size_t i = 0; i < rows.size(); ++i) {
      const double e = std::log(predict(k, rows[i]) / rows[i].seconds) / kSoftL1Scale;
      const double soft = std::sqrt(2 * (std::sqrt(1 + e * e) - 1));
      r(static_cast<Eigen::Index>(i)) = kSoftL1Scale * (e < 0 ? -soft : soft);
    }
  };
  fit::LmOptions options;
  options.max_iterations = 300;
  const fit::LmResult result = fit::levenberg_marquardt(residuals, x0, static_cast<int>(rows.size()), options);
  return constants(kernel, expand(result.x), free, ceiling);
}

MoeFitResult fit_moe_kernels(const std::vector<MoeSample>& samples, const HardwareProfile& gpu) {
  std::array<std::vector<const MoeSample*>, kNumMoeKernels> by_kernel;
  for (const MoeSample& s : samples) {
    const MoeKernel k = s.call.kernel.value_or(default_moe_kernel(s.call.format, s.call.ep));
    by_kernel[static_cast<size_t>(k)].push_back(&s);
  }
  MoeFitResult result;
  for (int i = 0; i < kNumMoeKernels; ++i) {
    const auto kernel = static_cast<MoeKernel>(i);
    const auto& mine = by_kernel[static_cast<size_t>(i)];
    if (mine.empty()) continue;
    if (mine.size() < static_cast<size_t>(kMinMoeSamples)) {
      result.notes.push_back(fmt::format("fused MoE {}: {} calls, fewer than {}: not fitted (costed by its roofline)",
                                         moe_kernel_name(kernel), mine.size(), kMinMoeSamples));
      continue;
    }
    result.fits.push_back(fit_moe_kernel(kernel, mine, gpu));
  }
  return result;
}

}  // namespace batchsim
