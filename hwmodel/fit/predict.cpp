// batchsim — predictions for measured rows (see predict.h).
#include "hwmodel/fit/predict.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "hwmodel/roofline.h"

namespace batchsim {

bool token_op_elementwise(TokenOp op, ElementwiseOp& kind) {
  switch (op) {
    case TokenOp::emb:
      kind = ElementwiseOp::embedding;
      return true;
    case TokenOp::input_layernorm:
    case TokenOp::post_attention_layernorm:
      kind = ElementwiseOp::norm;
      return true;
    case TokenOp::attn_rope:
      kind = ElementwiseOp::rope;
      return true;
    case TokenOp::mlp_act:
      kind = ElementwiseOp::activation;
      return true;
    case TokenOp::add:
      kind = ElementwiseOp::residual_add;
      return true;
    case TokenOp::attn_pre_proj:
    case TokenOp::attn_post_proj:
    case TokenOp::mlp_up_proj:
    case TokenOp::mlp_down_proj:
      return false;
  }
  throw std::logic_error("token_op_elementwise: bad TokenOp");
}

LayerGemm token_op_gemm(TokenOp op) {
  switch (op) {
    case TokenOp::attn_pre_proj:
      return LayerGemm::qkv;
    case TokenOp::attn_post_proj:
      return LayerGemm::o;
    case TokenOp::mlp_up_proj:
      return LayerGemm::mlp_up;
    case TokenOp::mlp_down_proj:
      return LayerGemm::mlp_down;
    default:
      break;
  }
  throw std::logic_error("token_op_gemm: not a GEMM operator");
}

double predict_token_op(const HardwareProfile& gpu, const TokenOpRow& row, TokenOp op) {
  const ModelSpec model = row.shape.as_model_spec();
  ElementwiseOp kind{};
  if (token_op_elementwise(op, kind)) {
    return elementwise_time_s(gpu, kind, elementwise_bytes(model, row.tp, kind, row.num_tokens));
  }
  const GemmShape shape = layer_gemm_shapes(model, row.tp)[static_cast<int>(token_op_gemm(op))];
  return gemm_time_s(gpu, shape, row.num_tokens, model.weight_format);
}

double predict_attention(const HardwareProfile& gpu, const AttentionRow& row) {
  const ModelSpec model = row.as_model_spec();
  if (row.is_prefill) {
    return prefill_attention_time_s(gpu,
                                    prefill_attention_work(model, row.tp, row.prefill_chunk_size, row.kv_cache_size));
  }
  // Each decode reads its cached context plus the K/V it just wrote (BatchShape::add_decode).
  const int64_t context_sum = row.batch_size * (row.kv_cache_size + 1);
  return decode_attention_time_s(
      gpu, decode_attention_work(model, row.tp, row.batch_size, context_sum, row.kv_cache_size + 1), row.batch_size);
}

double predict_all_reduce(const HardwareProfile& gpu, const AllReduceRow& row) {
  return allreduce_time_s(gpu, row.size_bytes, row.num_workers);
}

double predict_cpu_overhead(const CpuOverhead& cpu, const CpuOverheadRow& row) {
  return cpu.seconds(row.batch_size, row.tp);
}

std::string canonical_model_name(std::string_view measured_model) {
  std::string name(measured_model.substr(measured_model.rfind('/') + 1));
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto strip_suffix = [&name](std::string_view suffix) {
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      name.resize(name.size() - suffix.size());
    }
  };
  strip_suffix("-hf");
  strip_suffix("-instruct");
  if (name.rfind("meta-", 0) == 0) name = name.substr(5);
  return name;
}

}  // namespace batchsim
