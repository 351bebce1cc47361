// batchsim — fitting the fused-MoE kernel model (hwmodel/moe_kernel.h) on measured fused-MoE
// calls, and reading NVIDIA's kernel-table rows as such calls.
//
// What is fitted: the ten constants of a MoeKernelFit, separately for each kernel library
// (moe_kernel.h, MoeKernel), on the calls that library ran. Each fit minimises the soft-L1 loss
// (scale 0.1, so that a row 10% off counts nearly quadratically and one 50% off nearly linearly)
// of log(predicted / measured) by Levenberg–Marquardt (solvers.h), every constant fitted as its
// logarithm so that it stays positive, the roofline exponent as 1 + e^q. Two ceilings bound it:
// weights stream at most at the GPU's HBM bandwidth, and FLOPs run at most at the dense peak of
// the MMA the kernel issues (FP8 for the FP8 paths, 16-bit otherwise: Marlin and triton_kernels
// dequantise 4-bit weights to 16 bits). A term no sample exercises is switched off (0), not left
// at its start: ep_launch_s without EP samples, misaligned_slowdown without samples whose
// intermediate per rank is not a multiple of 16. A kernel with fewer than kMinMoeSamples samples
// is not fitted (the profile then costs it by its roofline) and a note says so. The fit is a pure
// function of the samples and the ceilings: same inputs, same constants, bit for bit.
//
// The prototype of this model and fit (numpy/scipy, its figures and the analysis of why the
// roofline's grouped GEMMs were 50.7% off) is issue 43's fit_moe.py; this is its port.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "hwmodel/fit/kernel_tables.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/moe_kernel.h"

namespace batchsim {

// One measured call: what the model takes, and the time.
struct MoeSample {
  FusedMoeCall call;
  MoeRankLoad load;  // the loads the model is evaluated at (expected_moe_load(call))
  double seconds = 0;
};

inline constexpr int kMinMoeSamples = 30;

struct MoeFitResult {
  std::vector<MoeKernelFit> fits;  // in MoeKernel order, one per kernel with enough samples
  std::vector<std::string> notes;
};

// Fits every kernel that has samples (a sample's kernel: call.kernel, else default_moe_kernel),
// bounded by the ceilings of `gpu` (hbm_bytes_per_s, peak_flops, peak_fp8_flops).
MoeFitResult fit_moe_kernels(const std::vector<MoeSample>& samples, const HardwareProfile& gpu);
// One kernel on its samples (every sample must run `kernel`).
MoeKernelFit fit_moe_kernel(MoeKernel kernel, const std::vector<const MoeSample*>& samples, const HardwareProfile& gpu);

// A kernel-table row (aiconfigurator's moe_perf, kernel_tables.h) as the call it timed, or
// nullopt with the reason in *why. The collector (ai-dynamo/aiconfigurator @095f58a,
// collector/vllm/collect_moe.py run_moe_torch l.322) builds vLLM's FusedMoE on one GPU as rank 0
// of tp_size = ep if ep > 1 else tp (l.542) and feeds it all num_tokens tokens: the call has
// tokens = num_tokens, intermediate = inter_size / moe_tp_size, ep = moe_ep_size.
//   moe_dtype   bfloat16 -> bf16; fp8 -> fp8 (per tensor, ModelOpt); fp8_block -> fp8_block;
//               w4a16_mxfp4 -> mxfp4; int4_wo (compressed-tensors INT4 W4A16, group 32, a 16-bit
//               scale per 32 weights) -> 0.5 + 2/32 bytes per weight on Marlin (no WeightFormat
//               names INT4; the call says mxfp4, another 4-bit format, with its own bytes).
//   kernel      from kernel_source where it names one (compressed-tensors MXFP4 runs on Marlin,
//               not on the triton_kernels path vLLM picks for gpt-oss's MXFP4), else
//               default_moe_kernel.
//   gated       false for the table's NVIDIA Nemotron-H shapes, whose experts are relu^2
//               (mlp_hidden_act relu2: the collector's "relu2_no_mul", collect_moe.py l.141-146).
//   routing     balanced -> balanced; power_law_<alpha> -> power law.
std::optional<FusedMoeCall> kernel_moe_row_call(const KernelMoeRow& row, std::string* why = nullptr);

// A router's expert-grouped top-k (vLLM grouped_topk): `groups` groups of E / groups experts, and
// each token's top-k chosen inside its `top_groups` best groups.
struct GroupedTopK {
  int64_t groups = 1, top_groups = 1;
  auto operator<=>(const GroupedTopK&) const = default;
};

// The table's models whose router groups its experts (more than one group): DeepSeek-V3 (its
// config.json: n_group 8, topk_group 4, topk_method noaux_tc), whose shape (hidden 7168, inter
// 2048, top-8 of 256) no other model of the table has. Kimi-K2 and the others route in one group.
std::optional<GroupedTopK> kernel_moe_row_grouping(const KernelMoeRow& row);

// The loads of the measured rank (rank 0, experts 0 .. E/ep - 1) under the routing NVIDIA's
// collector gives a grouped-top-k model. The collector injects its routing as router logits that
// are the softmax of a one-hot sum (balanced_logits, power_law_logits_v3), and vLLM re-selects
// through grouped top-k: almost every group ties (one chosen expert each, or none), the ties go to
// the lowest indices, and a token's experts outside its kept groups are replaced by the lowest
// unchosen experts of the kept groups. So the tokens pile onto the first experts of the first
// groups, the ones rank 0 holds. No serving router does this (real logits do not tie); it is what
// the table's DeepSeek-V3 rows measured (scored this way they are 6-7% off, with the simulator's
// routings 21-28%, issue 43's prototype). A literal port of the collector's generators (balanced:
// its one routing, including its bfloat16 index arithmetic for T < E / k; power law: the mean of
// 16 draws of our own seeded generator, the collector timing 5) and of the re-selection, ties to
// the lowest index. O(draws x T k): for fits and scores, not for the simulator.
MoeRankLoad collector_grouped_load(const FusedMoeCall& call, GroupedTopK grouping);

// The loads a table row is evaluated at, once per distinct (tokens, experts, top_k, ep, routing,
// grouping): expected_moe_load, or collector_grouped_load for a grouped-top-k model. The H100
// table's 49,862 rows have 9,882 of them.
class MoeLoadCache {
 public:
  const MoeRankLoad& load(const FusedMoeCall& call, std::optional<GroupedTopK> grouping = std::nullopt);

 private:
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int, double, int64_t, int64_t>, MoeRankLoad> loads_;
};

}  // namespace batchsim
