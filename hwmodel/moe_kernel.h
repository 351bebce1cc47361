// batchsim — the fused-MoE kernel: one MoE layer's routed experts on one GPU, as vLLM runs them.
//
// vLLM runs a layer's routed experts as one "fused MoE" call (FusedMoE.forward): top-k routing,
// sorting the (token, expert) rows by expert, the w13 (gate and up) grouped GEMM, the activation,
// the w2 (down) grouped GEMM and the top-k combine: 6 to 8 kernels even under CUDA graphs. Its
// time is not two GEMMs of the roofline. NVIDIA's aiconfigurator tables of vLLM 0.24 on the H100
// (hwmodel/measured/aiconfigurator/h100_sxm/moe, 49,862 rows) show a launch floor of 16-39 us,
// a cost per expert the tokens touch, per-row traffic that the Triton and Marlin paths pay for
// every routed row even under expert parallelism, FLOPs over rows padded to the kernel's M tile,
// and kernel libraries whose weight streaming differs by 3x (FlashInfer's per-tensor FP8 path
// reaches 1.2 TB/s, Triton's 16-bit path the HBM peak). This file models that call:
//
//   Il   = intermediate (per rank)          We = (g + 1) Il H   weights of one expert (w13 + w2;
//                                                               g = 2 gated, 1 not)
//   W    = touched_experts x We x bytes per weight               read once per touched expert
//   FL   = 2 x padded_rows(tile) x We                            rows padded to the kernel's M tile
//   m    = 1 + misaligned_slowdown x [Il % 16 != 0]              a slow path the table shows
//   gemm = roofline_combine(W / weight_bytes_per_s, m FL / flops_per_s, roofline_exponent)
//   OUT  = out_rows x (g Il + H)      ACT = act_rows x ((g + 1) Il + H)      TOK = T x H
//   t    = launch + ep_launch [ep > 1] + per_expert x touched_experts + gemm
//          + m (out_element x OUT + row_element x ACT) + token_element x TOK
//
// with the ten constants of a MoeKernelFit per kernel library (a profile's `moe_kernels` block,
// fitted by hwmodel/fit/fit_moe.h), and the loads of MoeRankLoad. Which rows the per-row terms
// count is the kernel's: vLLM's Triton and Marlin paths size their intermediate caches and run
// the activation and the combine over all T k routed rows, writing zeros for the rows of other
// ranks' experts under EP (out_rows: every expert's rows padded to 64; act_rows: T k), while the
// FlashInfer CUTLASS and OpenAI triton_kernels paths permute and compute the local rows only.
// A profile without a fit for the kernel gets a roofline from its GEMM efficiencies instead
// (moe_kernel_roofline).
//
// The loads are those of the busiest rank (every rank runs the MoE layer in lockstep, so the step
// lasts as long as the rank whose experts got the most rows), in expectation under the routing:
// balanced (every expert T k / E rows) or power law (per-expert loads drawn from a power law, as
// NVIDIA's collector generates them). expected_moe_load is cheap (closed form for balanced; for a
// power law O(E) plus a fixed number of O(E) random partitions) and deterministic: same call,
// same loads, on every platform.
//
// Units: seconds, bytes, FLOP, elements. Thread-safe: no state but per-thread scratch buffers.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "hwmodel/weight_format.h"

namespace batchsim {

struct HardwareProfile;

// The kernel library vLLM 0.24 runs a layer's routed experts with on Hopper. The names are the
// `moe_kernels` keys of a profile file.
//   bf16_triton                   16-bit experts: Triton fused_moe (TritonExperts; oracle/unquantized.py)
//   fp8_flashinfer_cutlass        per-tensor FP8 (ModelOpt): FlashInfer's CUTLASS fused MoE
//                                 (FlashInferExperts; oracle/fp8.py, FLASHINFER_CUTLASS first on SM90)
//   fp8_block_triton              128x128 block FP8 without EP: Triton fused_moe, W8A8 block
//   fp8_block_flashinfer_cutlass  128x128 block FP8 with EP: FlashInfer CUTLASS ("On Hopper for
//                                 Block Fp8, prefer Triton for TP and FI CUTLASS for EP",
//                                 vllm/model_executor/layers/fused_moe/oracle/fp8.py,
//                                 _get_priority_backends)
//   mxfp4_oai_triton              OCP MXFP4 (gpt-oss): OpenAI's triton_kernels matmul_ogs
//                                 (OAITritonMxfp4ExpertsMonolithic; oracle/gpt_oss_mxfp4.py)
//   w4a16_marlin                  4-bit weights with 16-bit activations: Marlin MoE (MarlinExperts;
//                                 INT4 W4A16 of compressed-tensors, oracle/int_wna16.py; NVFP4 and
//                                 compressed-tensors MXFP4 on Hopper, which has no FP4 tensor cores:
//                                 oracle/nvfp4.py falls through to MARLIN)
enum class MoeKernel : uint8_t {
  bf16_triton,
  fp8_flashinfer_cutlass,
  fp8_block_triton,
  fp8_block_flashinfer_cutlass,
  mxfp4_oai_triton,
  w4a16_marlin,
};
inline constexpr int kNumMoeKernels = 6;
std::string_view moe_kernel_name(MoeKernel kernel);
// The kernel a name means, or nullopt.
std::optional<MoeKernel> parse_moe_kernel(std::string_view name);
// The kernel vLLM 0.24 picks on Hopper for experts of `format` with expert parallelism `ep`.
MoeKernel default_moe_kernel(WeightFormat format, int64_t ep);
// The M tile each expert's rows are padded to in the FLOP count: Triton's fused_moe configs
// use BLOCK_SIZE_M 16-64 (64 fits best), FlashInfer's CUTLASS grouped GEMM 128-row tiles (its
// time doubles when an expert passes 128 rows), Marlin and triton_kernels pad little (16).
int moe_kernel_tile_rows(MoeKernel kernel);
// Whether the kernel runs its activation, output writes and combine over every routed row of
// the layer (Triton, Marlin), not only the rank's own rows (FlashInfer CUTLASS, triton_kernels).
bool moe_kernel_uses_all_rows(MoeKernel kernel);

// How the tokens choose their experts.
//   balanced   every expert receives T k / E rows (T k < E: T k distinct experts, spread evenly
//              over the ranks); aiconfigurator's balanced_logits (collector/helper.py l.1051)
//   power_law  per-expert loads drawn from x^-alpha, scaled to T k and capped at T per expert,
//              the busiest EP rank measured (see expected_moe_load)
enum class MoeRoutingKind : uint8_t { balanced, power_law };
struct MoeRouting {
  MoeRoutingKind kind = MoeRoutingKind::balanced;
  double alpha = 0;  // power law: the exponent (> 0; aiconfigurator's tables use 1.01 and 1.2)
  bool operator==(const MoeRouting&) const = default;
};

// One MoE layer's fused-MoE call on ONE GPU (rank).
struct FusedMoeCall {
  // Tokens entering the MoE module on this rank: every token whose routing this rank's experts
  // see. Without EP, the rank's batch. With EP, the tokens of the whole EP group that the
  // dispatch brings (with vLLM's naive/all-gather dispatch, every token of every DP rank; the
  // collector measures one EP rank fed all T tokens, collector/vllm/collect_moe.py l.542): the
  // rows of the rank's own experts come from these T tokens' routing, and the Triton and Marlin
  // paths pay their per-row work over all T k of them.
  int64_t tokens = 0;
  int64_t hidden = 0;        // H
  int64_t intermediate = 0;  // per rank: the expert's intermediate size / moe_tp (moe_tp = 1 with EP)
  int64_t top_k = 0;         // k: experts per token
  int64_t experts = 0;       // E: routed experts of the layer, all ranks together
  int64_t ep = 1;            // expert-parallel degree: this rank holds E / ep whole experts
  WeightFormat format = WeightFormat::bf16;
  // The kernel that runs; unset: default_moe_kernel(format, ep).
  std::optional<MoeKernel> kernel;
  // Bytes per weight element, scales included; 0: weight_format_bytes(format). For weights no
  // WeightFormat names, e.g. INT4 with a 16-bit scale per 32 (W4A16 group 32): 0.5 + 2 / 32.
  double weight_bytes = 0;
  bool gated = true;  // w13 holds gate and up (SwiGLU...); false: one matrix (relu^2, gelu)
  MoeRouting routing;
};

// Why a call cannot be costed ("" when it can): non-positive sizes, ep not dividing experts,
// top_k above experts, a power law without a positive exponent.
std::string_view fused_moe_call_problem(const FusedMoeCall& call);

// The tiles MoeRankLoad pads rows to.
inline constexpr std::array<int, 4> kMoeTileRows = {16, 32, 64, 128};

// What the busiest rank's experts receive in one call (expected values, so not integers).
struct MoeRankLoad {
  double routed_rows = 0;      // T k: every (token, expert) row of the layer, all ranks
  double local_rows = 0;       // the rows of this rank's experts
  double touched_experts = 0;  // this rank's experts with at least one row
  // sum over this rank's experts e of ceil(n_e / B) B, B = kMoeTileRows[i]
  std::array<double, 4> local_padded_rows{};
  // the same over every expert of the layer
  std::array<double, 4> all_padded_rows{};
  // local_padded_rows (or all_padded_rows) at tile B, which must be one of kMoeTileRows.
  double padded_rows(int tile_rows, bool all_experts = false) const;
};

// The loads of the busiest rank under the call's routing (call must be valid).
//   balanced: closed form (above).
//   power law: what aiconfigurator's collector generates (collector/helper.py @095f58a,
//     _generate_power_law_distribution l.1343): E per-expert weights by inverse CDF from x^-alpha
//     on [1, 0.8 T] (on [0.01, 2] when T k <= E; sample_power_law l.1070), scaled to T k and
//     rounded, capped at T rows per expert (l.1375), the overflow and the rounding residue placed
//     one row per rank in turn on the least-loaded expert (_round_robin_adjust_per_rank l.1314),
//     and the busiest EP rank swapped into rank 0, the one measured (l.1424). Here the E weights
//     are the distribution's E stratified quantiles (u = (i + 1/2) / E): one deterministic set
//     with the sampler's spread. What stays random is which experts share a rank, and the busiest
//     rank of a random split is what matters under EP, so its loads are averaged over a fixed
//     set of 32 random splits (a fixed seed, the same for every T: smooth in T). Against the
//     collector's own draws this is within 1% on average (2-6% per point) on the H100 table's
//     keys. Work: O(E) for the quantiles, then 32 splits of O(E) each; no allocation but a
//     per-thread scratch buffer that only grows and the splits, made once per (E, ep) and kept.
MoeRankLoad expected_moe_load(const FusedMoeCall& call);

// The power-law loads as a simulation reads them, step after step at thousands of distinct token
// counts (a DP 8 replay of the Azure conversation trace: about 3,000): exact (expected_moe_load)
// up to kExactLoadTokens tokens and at the points of a grid above it, 2^(1/kLoadGridPerOctave)
// apart, and linear between two points. The exact loads themselves jump at isolated counts
// (where the cap of T rows per expert or a rounding moves a row between experts), so the
// interpolated call time differs from the exact one by 0.03-0.22% on average over T = 1,025 to
// 65,536 (DeepSeek-R1, Qwen3, gpt-oss and MiniMax shapes) and by at most 2.8% (DeepSeek-R1 EP 8,
// at T = 1,286; MoeLoadGrid tests), less than the
// quantile loads' own 2-6% per point against the collector's random draws (above). It saves
// three quarters of the exact evaluations of such a replay.
inline constexpr int64_t kExactLoadTokens = 1024;
inline constexpr int kLoadGridPerOctave = 32;
// The grid points around T > kExactLoadTokens: lo <= T < hi, consecutive.
std::pair<int64_t, int64_t> moe_load_grid_bracket(int64_t tokens);
// The loads at T between the grid points lo <= T < hi (their exact loads): linear in T, with
// routed_rows T k exactly.
MoeRankLoad interpolate_moe_load(const MoeRankLoad& lo_load, int64_t lo, const MoeRankLoad& hi_load, int64_t hi,
                                 int64_t tokens, int64_t top_k);

// A kernel library's fitted constants (the model above); seconds, bytes/s, FLOP/s.
struct MoeKernelFit {
  MoeKernel kernel = MoeKernel::bf16_triton;
  double launch_s = 0;             // the call's fixed floor: its 6-8 kernels
  double ep_launch_s = 0;          // added under EP (the expert map, zeroing the other ranks' rows)
  double per_expert_s = 0;         // per touched local expert
  double weight_bytes_per_s = 0;   // weight streaming of the grouped GEMMs
  double flops_per_s = 0;          // their FLOP rate over tile-padded rows
  double out_element_s = 0;        // per element of OUT (output writes)
  double row_element_s = 0;        // per element of ACT (activation, routed rows' traffic)
  double token_element_s = 0;      // per element of TOK (routing, combine per token)
  double roofline_exponent = 0;    // p of roofline_combine (0: max)
  double misaligned_slowdown = 0;  // mu: compute and per-row work (1 + mu)x slower when Il is not a
                                   // multiple of 16 (the table's Triton bf16 rows: about 5x; why
                                   // in the kernel is not established here)
  bool operator==(const MoeKernelFit&) const = default;
};

// The numbers of a MoeKernelFit by their profile-file key (the member names), in file order:
// reading, writing and the list of known keys share this table.
struct MoeKernelKey {
  const char* key;
  double MoeKernelFit::*member;
};
const std::array<MoeKernelKey, 10>& moe_kernel_keys();

// The fit the profile has for `kernel`, or null.
const MoeKernelFit* find_moe_kernel_fit(const HardwareProfile& gpu, MoeKernel kernel);
// What a profile without a fit for the kernel is costed with: its GEMM roofline. launch 3 x
// kernel_launch_s (w13, activation, w2); weights at hbm_bytes_per_s x hbm_efficiency; FLOPs at
// gemm_peak_flops(format) x gemm_eta_max; each ACT element written and read once in 16 bits at
// hbm_efficiency (row_element_s = 4 bytes / (hbm x hbm_efficiency)); p = gemm_roofline_exponent;
// no per-expert, per-output, per-token or EP terms and no slowdown. Datasheet profiles and
// Blackwell (whose FP4 kernels no table measures) use this.
MoeKernelFit moe_kernel_roofline(const HardwareProfile& gpu, MoeKernel kernel, WeightFormat format);

// The call's time and its parts.
struct FusedMoeTime {
  MoeKernel kernel = MoeKernel::bf16_triton;
  bool fitted = false;   // the profile's fit for the kernel (else moe_kernel_roofline)
  double fixed_s = 0;    // launch + ep_launch + per_expert x touched
  double weights_s = 0;  // W / weight_bytes_per_s
  double compute_s = 0;  // m FL / flops_per_s
  double gemm_s = 0;     // roofline_combine(weights_s, compute_s, p)
  double rows_s = 0;     // m (out + act terms) + token term
  double total_s = 0;
  bool compute_bound() const { return compute_s > weights_s; }
};

// The time of the call under `gpu` with the given loads (expected_moe_load, or measured ones).
// Throws std::invalid_argument when the call is invalid (fused_moe_call_problem).
FusedMoeTime fused_moe_time(const HardwareProfile& gpu, const FusedMoeCall& call, const MoeRankLoad& load);
FusedMoeTime fused_moe_time(const HardwareProfile& gpu, const FusedMoeCall& call);
double fused_moe_time_s(const HardwareProfile& gpu, const FusedMoeCall& call);
// The model with explicit constants (what the fit evaluates).
FusedMoeTime fused_moe_time(const MoeKernelFit& fit, const FusedMoeCall& call, const MoeRankLoad& load);

}  // namespace batchsim
