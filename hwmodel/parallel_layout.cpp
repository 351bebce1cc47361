// batchsim — a replica's parallel layout (see parallel_layout.h).
#include "hwmodel/parallel_layout.h"

#include <fmt/format.h>

#include "hwmodel/base/error.h"
#include "hwmodel/model_spec.h"

namespace batchsim {

std::string ParallelLayout::text() const {
  std::string s = fmt::format("TP {}", tp);
  if (dp > 1) s += fmt::format(" x DP {}", dp);
  if (ep > 1) s += fmt::format(", EP {}", ep);
  if (ep > 1 && expert_tp() > 1) s += fmt::format(" x MoE-TP {}", expert_tp());
  if (ep == 1 && expert_tp() != tp) s += fmt::format(", MoE-TP {}", expert_tp());
  return s;
}

void check_layout(const ModelSpec& model, const ParallelLayout& layout) {
  for (const auto& [option, value] :
       {std::pair<const char*, int>{"--tp", layout.tp}, {"--dp", layout.dp}, {"--ep", layout.ep}}) {
    if (value < 1) throw UserError(fmt::format("{} {}: must be at least 1", option, value));
  }
  if (layout.moe_tp < 0) throw UserError(fmt::format("--moe-tp {}: must be at least 1", layout.moe_tp));
  if (!model.is_moe()) {
    if (layout.dp > 1) {
      throw UserError(
          fmt::format("--dp {}: model '{}' has no experts, so its data-parallel ranks never meet; run "
                      "--replicas {} instead",
                      layout.dp, model.name, layout.dp));
    }
    if (layout.ep > 1 || layout.moe_tp > 0) {
      throw UserError(fmt::format("--ep/--moe-tp: model '{}' has no experts to shard", model.name));
    }
    return;
  }
  const int gpus = layout.gpus();
  if (layout.moe_tp > 0 ? layout.ep * layout.moe_tp != gpus : gpus % layout.ep != 0) {
    throw UserError(fmt::format(
        "--ep {}{}: expert parallelism x expert tensor parallelism must cover the replica's --tp {} x --dp {} = {} "
        "GPUs (every GPU runs the MoE layers)",
        layout.ep, layout.moe_tp > 0 ? fmt::format(" x --moe-tp {}", layout.moe_tp) : "", layout.tp, layout.dp, gpus));
  }
  if (model.num_experts % layout.ep != 0) {
    throw UserError(fmt::format("--ep {}: model '{}' has {} experts, which EP {} does not divide", layout.ep,
                                model.name, model.num_experts, layout.ep));
  }
  const int moe_tp = layout.expert_tp();
  if (model.ffn_size % moe_tp != 0 || model.shared_expert_ffn_size % moe_tp != 0) {
    throw UserError(fmt::format("--moe-tp {}: model '{}''s expert FFN {} (shared {}) cannot be split {} ways", moe_tp,
                                model.name, model.ffn_size, model.shared_expert_ffn_size, moe_tp));
  }
}

}  // namespace batchsim
