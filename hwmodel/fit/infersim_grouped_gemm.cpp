// batchsim — InferSim's grouped GEMMs (see infersim_grouped_gemm.h).
#include "hwmodel/fit/infersim_grouped_gemm.h"

#include <fmt/format.h>

#include <cmath>

#include "hwmodel/base/csv_table.h"

namespace batchsim {

namespace {

constexpr int64_t kMax = int64_t{1} << 40;
constexpr double kUs = 1e-6;
// DeepGEMM's grouped GEMMs align every expert's rows to 128 (deep_gemm get_m_alignment_for_contiguous_layout).
constexpr int kDeepGemmTileRows = 128;

}  // namespace

std::vector<GroupedGemmRow> read_infersim_grouped_gemm(const std::filesystem::path& dir) {
  std::vector<GroupedGemmRow> rows;
  for (const bool prefill : {true, false}) {
    CsvTable csv(dir / (prefill ? "prefill" : "decode") / "data.csv");
    while (csv.next()) {
      GroupedGemmRow r;
      r.prefill = prefill;
      r.experts = csv.integer("num_experts", 1, 1 << 20);
      r.gpus = csv.integer("num_gpus", 1, 1 << 20);
      r.local_experts = csv.integer("num_local_experts", 1, 1 << 20);
      r.top_k = csv.integer("topk", 1, 1 << 16);
      r.hidden = csv.integer("hidden_size", 1, kMax);
      r.intermediate = csv.integer("intermediate_size", 1, kMax);
      r.tokens_per_gpu = csv.integer(prefill ? "seq_len_per_gpu" : "batch_size_per_gpu", 1, kMax);
      r.tokens_per_expert = csv.integer("tokens_per_expert", 1, kMax);
      r.up_s = csv.number("up_proj_us") * kUs;
      r.down_s = csv.number("down_proj_us") * kUs;
      if (!(r.up_s > 0 && r.down_s > 0)) csv.fail("up_proj_us and down_proj_us must be > 0");
      if (r.local_experts * r.gpus != r.experts) csv.fail("num_local_experts x num_gpus must be num_experts");
      rows.push_back(r);
    }
  }
  return rows;
}

double grouped_gemm_part_s(const MoeKernelFit& fit, const GroupedGemmRow& r) {
  FusedMoeCall call;
  call.hidden = r.hidden;
  call.intermediate = r.intermediate;
  call.experts = r.experts;
  call.top_k = r.top_k;
  call.ep = r.gpus;
  call.tokens = r.tokens_per_expert * r.experts / r.top_k;  // the T whose T k rows fill every expert
  call.format = WeightFormat::fp8_block;
  call.kernel = fit.kernel;
  // InferSim gives every local expert the same rows.
  const double n = static_cast<double>(r.tokens_per_expert), local = static_cast<double>(r.local_experts);
  MoeRankLoad load;
  load.routed_rows = n * static_cast<double>(r.experts);
  load.local_rows = n * local;
  load.touched_experts = local;
  for (size_t i = 0; i < kMoeTileRows.size(); ++i) {
    // The GEMMs pad to DeepGEMM's 128 whatever tile the fitted kernel pads to.
    const double padded = std::ceil(n / kDeepGemmTileRows) * kDeepGemmTileRows;
    load.local_padded_rows[i] = local * padded;
    load.all_padded_rows[i] = static_cast<double>(r.experts) * padded;
  }
  const FusedMoeTime t = fused_moe_time(fit, call, load);
  return fit.per_expert_s * load.touched_experts + t.gemm_s;
}

GroupedGemmScore score_infersim_grouped_gemm(const std::vector<GroupedGemmRow>& rows, const MoeKernelFit& fit) {
  GroupedGemmScore score;
  for (const GroupedGemmRow& r : rows) {
    const std::string what = fmt::format("{} GPUs x {} experts, {} rows each ({} tokens per GPU)", r.gpus,
                                         r.local_experts, r.tokens_per_expert, r.tokens_per_gpu);
    (r.prefill ? score.prefill : score.decode).add(grouped_gemm_part_s(fit, r), r.seconds(), what);
  }
  return score;
}

}  // namespace batchsim
