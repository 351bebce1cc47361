// batchsim — the cost model's prediction for one measured row.
//
// Each function answers "what does the roofline say this measurement should have taken?" with
// the same roofline.h functions CostModel::iteration sums, so the fit (hwmodel/fit/) fits, and
// `batchsim validate` checks, exactly the model the simulator runs.
#pragma once

#include <string>
#include <string_view>

#include "hwmodel/engine_profile.h"
#include "hwmodel/fit/measurements.h"
#include "hwmodel/hardware_profile.h"
#include "hwmodel/roofline.h"

namespace batchsim {

// Seconds one token-level operator of `row` takes under `gpu`.
double predict_token_op(const HardwareProfile& gpu, const TokenOpRow& row, TokenOp op);
// Seconds of a prefill or decode attention row (one layer, one GPU).
double predict_attention(const HardwareProfile& gpu, const AttentionRow& row);
double predict_all_reduce(const HardwareProfile& gpu, const AllReduceRow& row);
// An engine's CPU time (engine_profile.h) for the batch and TP degree of a CPU-overhead row.
double predict_cpu_overhead(const CpuOverhead& cpu, const CpuOverheadRow& row);

// The elementwise kind a token-level operator is (norm, rope, ...), or false for the GEMMs.
bool token_op_elementwise(TokenOp op, ElementwiseOp& kind);
// The layer GEMM a GEMM operator of Vidur's is (attn_pre_proj -> qkv, ..., mlp_down_proj ->
// mlp_down); the elementwise operators are not GEMMs (std::logic_error).
LayerGemm token_op_gemm(TokenOp op);

// "llama-2-7b" for Vidur's "meta-llama/Llama-2-7b-hf", "llama-3-8b" for "Meta-Llama-3-8B",
// "codellama-34b" for "CodeLlama-34b-Instruct-hf": lower case, organisation, "meta-" and the
// "-hf"/"-instruct" suffixes dropped, so that rows can be matched to built-in model names.
std::string canonical_model_name(std::string_view measured_model);

}  // namespace batchsim
