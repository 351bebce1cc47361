// batchsim — how one model instance (a replica) is spread over its GPUs.
//
// A replica runs on tp x dp GPUs (docs/DESIGN.md, "Parallelism: TP, DP attention, EP"):
//   tp      attention tensor parallelism inside one attention rank: every layer's attention
//           heads, and the dense MLPs, split over tp GPUs (Megatron-LM; vLLM
//           --tensor-parallel-size, SGLang's attn_tp_size = tp_size / dp_size, TensorRT-LLM's
//           tp_size without attention DP).
//   dp      attention data parallelism: dp ranks, each with its own scheduler, batch and KV
//           cache, whose tokens meet in the MoE layers (vLLM --data-parallel-size, SGLang
//           --dp-size with --enable-dp-attention, TensorRT-LLM enable_attention_dp).
//   ep      expert parallelism: the routed experts sharded whole over ep GPUs (vLLM
//           --enable-expert-parallel makes ep = tp x dp; SGLang --ep-size; TensorRT-LLM
//           moe_expert_parallel_size).
//   moe_tp  the experts' tensor parallelism: each expert's intermediate size split over moe_tp
//           GPUs. ep x moe_tp covers the tp x dp GPUs of the replica (aiconfigurator's width
//           rule, sdk/config.py ModelConfig.resolve_moe_parallelism, "tp_size *
//           attention_dp_size == moe_tp_size * moe_ep_size"; vLLM's FusedMoEParallelConfig.make:
//           without expert parallelism the MoE layers are TP over all tp x dp GPUs).
// A dense model uses tp alone (dp > 1 of a dense model is dp independent replicas: use
// --replicas).
#pragma once

#include <cstdint>
#include <string>

namespace batchsim {

struct ModelSpec;

struct ParallelLayout {
  int tp = 1;
  int dp = 1;
  int ep = 1;
  int moe_tp = 0;  // 0: (tp x dp) / ep

  int gpus() const { return tp * dp; }
  int expert_tp() const { return moe_tp > 0 ? moe_tp : gpus() / ep; }
  bool is_plain_tp() const { return dp == 1 && ep == 1 && expert_tp() == tp; }
  // "TP 8", "TP 1 x DP 8, EP 8", "TP 4, EP 2 x MoE-TP 2".
  std::string text() const;
  bool operator==(const ParallelLayout&) const = default;
};

// Refuses a layout that `model` cannot run, naming the option at fault: a degree below 1; EP
// or DP on a dense model; ep x moe_tp not covering tp x dp; experts not divisible by ep; an
// expert's intermediate size (and the shared experts') not divisible by moe_tp. The heads'
// divisibility by tp is the cost model's check. Throws UserError.
void check_layout(const ModelSpec& model, const ParallelLayout& layout);

}  // namespace batchsim
