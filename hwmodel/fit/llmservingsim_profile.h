// batchsim — reading LLMServingSim's per-layer GPU profile as measurements to fit on (issue 44).
//
// LLMServingSim 2.0's profiler (casys-kaist/LLMServingSim, profiler/; MIT) times vLLM's own
// kernels for one transformer layer and writes, per GPU:
//   profiler/perf/<GPU>/<org>/<model>/<dtype>/meta.yaml          how it was measured (model,
//       hf_overrides with the layer's shape, vllm_version, hardware)
//   profiler/perf/<GPU>/<org>/<model>/<dtype>/tp<N>/dense.csv    layer,tokens,time_us: each
//       non-attention op of a layer (embedding, layernorm, qkv_proj, rotary_emb, o_proj,
//       gate_up_proj, act_fn, down_proj, final_layernorm)
//   .../tp<N>/attention.csv   prefill_chunk,kv_prefill,n_decode,kv_decode,time_us: one attention
//       call of prefill chunks and decodes (either may be 0)
//   .../tp<N>/per_sequence.csv  layer,sequences,time_us: lm_head and sampler per batch
//   .../tp<N>/skew.csv, moe.csv  mixed batches of unequal contexts; expert layers
// read_llmservingsim_profile maps them onto Vidur's schema (measurements.h), which the fit and
// the validation already read: qkv_proj -> attn_pre_proj, o_proj -> attn_post_proj,
// gate_up_proj -> mlp_up_proj, down_proj -> mlp_down_proj, act_fn -> mlp_act, rotary_emb ->
// attn_rope, embedding -> emb, layernorm -> input_layernorm and post_attention_layernorm (vLLM's
// Llama layer calls the one RMSNorm kernel twice, the residual add fused into it, so `add` stays
// unmeasured); pure prefill and pure decode attention rows -> AttentionRow; the sampler ->
// a CPU-overhead row's sampler time (an engine's cost, not the GPU's). Left out, and said in
// `files_skipped`: final_layernorm (once per step, not per layer), lm_head (costed as a GEMM by
// the cost model), mixed attention rows, skew.csv and moe.csv. Times are in microseconds.
#pragma once

#include <filesystem>
#include <string_view>

#include "hwmodel/fit/measurements.h"

namespace batchsim {

// Whether `dir` holds an LLMServingSim profile (a meta.yaml of its profiler with a tp<N> folder
// beside it, anywhere below).
bool is_llmservingsim_profile(const std::filesystem::path& dir);

// The measurements of one GPU's folder below `dir` (`device`: the folder name, e.g. RTX4090;
// empty when there is one). Measurements::device is the GPU folder's name. Throws UserError
// naming the file and line for malformed rows, a model whose shape is unknown, or several GPUs
// without `device`.
Measurements read_llmservingsim_profile(const std::filesystem::path& dir, std::string_view device = "");

// A held-out check for a profile of one model: its rows split by shape, every other token count
// (dense ops and per-sequence rows by count; attention rows by their (chunk, context) or
// (sequences, context) in turn) kept under the model's name to fit on, the rest renamed
// "<model> (held-out shapes)" so that validate_cost_model scores them as held out.
Measurements holdout_by_shape(const Measurements& m);

}  // namespace batchsim
