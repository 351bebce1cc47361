// batchsim — `batchsim calibrate shapes`: the GEMMs a model runs on one GPU, for the GPU side.
//
// batchsim-calibrate (calibration/) builds with the standard library and CUDA alone, so it
// knows three models by heart and none of hwmodel's families. This command writes, for any
// model `batchsim run --model` accepts (built-in, Hugging Face id, config.json), the per-GPU
// GEMMs that the cost model times at one parallel layout — attention projections (MLA's
// down-, up- and absorbed per-head projections included), the dense MLP, the router, one routed
// expert at the experts' own split, the shared experts, the LM head — from hwmodel's own shape
// functions (hwmodel/roofline.h), into the shape file that `batchsim-calibrate measure --shapes`
// times. Its format is calibration/shape_file.h's; tests/calibration/shape_file_test.cpp writes
// one with this command and reads it back with that reader.
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <fmt/ostream.h>

#include "experiments/cli/command_line.h"
#include "hwmodel/base/error.h"
#include "hwmodel/model_spec.h"
#include "hwmodel/parallel_layout.h"
#include "hwmodel/roofline.h"

namespace po = boost::program_options;

namespace batchsim {

namespace {

struct ShapeRow {
  std::string op;
  GemmShape shape;
  int64_t groups = 1;
  int layers = 0;
  WeightFormat format = WeightFormat::bf16;
};

// The per-GPU GEMMs of one forward pass, in execution order, as CostModel times them
// (hwmodel/cost_model.cpp): the same shape functions and the same splits.
std::vector<ShapeRow> model_gemms(const ModelSpec& m, const ParallelLayout& layout) {
  const int tp = layout.tp;
  const auto layer = layer_gemm_shapes(m, tp);
  const auto at = [&](LayerGemm g) { return layer[static_cast<int>(g)]; };
  const WeightFormat w = m.weight_format;
  std::vector<ShapeRow> rows;
  rows.push_back({"attn_pre_proj", at(LayerGemm::qkv), 1, m.num_layers, w});
  if (m.is_mla()) {
    const MlaGemmShapes mla = mla_gemm_shapes(m, tp);
    rows.push_back({"mla_q_b_proj", mla.q_b, 1, m.num_layers, w});
    rows.push_back({"mla_kv_b_proj", mla.kv_b, 1, m.num_layers, w});
    // Decode's absorbed halves of kv_b: one small matrix per head, a batched GEMM (16-bit).
    rows.push_back({"mla_uk", mla.uk, mla.heads_per_gpu, m.num_layers, WeightFormat::bf16});
    rows.push_back({"mla_uv", mla.uv, mla.heads_per_gpu, m.num_layers, WeightFormat::bf16});
  }
  rows.push_back({"attn_post_proj", at(LayerGemm::o), 1, m.num_layers, w});
  if (!m.is_moe()) {
    rows.push_back({"mlp_up_proj", at(LayerGemm::mlp_up), 1, m.num_layers, w});
    rows.push_back({"mlp_down_proj", at(LayerGemm::mlp_down), 1, m.num_layers, w});
  } else {
    if (m.dense_layers > 0) {
      ModelSpec dense = m;
      dense.num_experts = dense.experts_per_token = dense.shared_expert_ffn_size = dense.dense_layers = 0;
      dense.ffn_size = m.dense_ffn_size;
      const auto d = layer_gemm_shapes(dense, tp);
      rows.push_back({"mlp_up_proj", d[static_cast<int>(LayerGemm::mlp_up)], 1, m.dense_layers, w});
      rows.push_back({"mlp_down_proj", d[static_cast<int>(LayerGemm::mlp_down)], 1, m.dense_layers, w});
    }
    const MoeGemmShapes moe = moe_gemm_shapes(m, tp);
    // The router stays 16-bit (vLLM quantises LinearBase and FusedMoE only); one routed expert's
    // w13 (gate and up) and w2 at the experts' split, intermediate / expert_tp (moe_kernel.h).
    rows.push_back({"moe_router", moe.router, 1, m.moe_layers(), WeightFormat::bf16});
    const int64_t inter = m.ffn_size / layout.expert_tp();
    const int64_t d = m.hidden_size;
    rows.push_back({"expert_up_proj", {d, inter * (m.gated_mlp ? 2 : 1)}, 1, m.moe_layers(), m.expert_weight_format});
    rows.push_back({"expert_down_proj", {inter, d}, 1, m.moe_layers(), m.expert_weight_format});
    if (m.shared_expert_ffn_size > 0) {
      rows.push_back({"shared_expert_up_proj", moe.shared_up, 1, m.moe_layers(), w});
      rows.push_back({"shared_expert_down_proj", moe.shared_down, 1, m.moe_layers(), w});
    }
  }
  rows.push_back({"lm_head", lm_head_shape(m, tp), 1, 1, WeightFormat::bf16});
  return rows;
}

// The checks CostModel makes of a model on a layout (vLLM refuses the same), so that a shape
// file is never written for a layout that `batchsim run` would refuse.
void check_model_on_layout(const ModelSpec& m, const ParallelLayout& layout) {
  const int tp = layout.tp;
  if (tp < 1) throw UserError(fmt::format("--tp {}: must be at least 1", tp));
  if (m.num_heads % tp != 0) {
    throw UserError(
        fmt::format("model '{}': {} attention heads are not divisible by --tp {}", m.name, m.num_heads, tp));
  }
  if (m.num_kv_heads % tp != 0 && tp % m.num_kv_heads != 0) {
    throw UserError(fmt::format("model '{}': {} KV heads cannot be split over --tp {}", m.name, m.num_kv_heads, tp));
  }
  if (!m.is_moe() && m.ffn_size % tp != 0) {
    throw UserError(fmt::format("model '{}': FFN size {} is not divisible by --tp {}", m.name, m.ffn_size, tp));
  }
  if (m.is_moe() && (m.shared_expert_ffn_size % tp != 0 || m.dense_ffn_size % tp != 0)) {
    throw UserError(
        fmt::format("model '{}': the shared experts' FFN {} and the dense layers' {} must be divisible by "
                    "--tp {}",
                    m.name, m.shared_expert_ffn_size, m.dense_ffn_size, tp));
  }
  if (m.vocab_size % tp != 0) {
    throw UserError(fmt::format("model '{}': vocabulary {} is not divisible by --tp {}", m.name, m.vocab_size, tp));
  }
  check_layout(m, layout);
  if (m.is_moe() && m.ffn_size % layout.expert_tp() != 0) {
    throw UserError(fmt::format("model '{}': expert FFN {} is not divisible by the experts' TP {}", m.name, m.ffn_size,
                                layout.expert_tp()));
  }
}

// CSV cells are ours or numbers; a name from a config.json could hold a separator.
std::string cell(std::string text) {
  for (char& c : text) {
    if (c == ',' || c == '\n' || c == '\r' || c == '"') c = '_';
  }
  return text;
}

}  // namespace

int calibrate_shapes_command(const std::vector<std::string>& args, std::ostream& out) {
  std::string model_name, weight_dtype = "auto", file;
  ParallelLayout layout;
  po::options_description d("batchsim calibrate shapes options");
  // One option a line, as --help lists them.
  // clang-format off
  d.add_options()
      ("model", po::value(&model_name), "the model: built-in name, Hugging Face id or config.json (as run --model)")
      ("tp", po::value(&layout.tp), "tensor-parallel degree of attention (default 1)")
      ("dp", po::value(&layout.dp), "attention data-parallel ranks of an MoE model (default 1)")
      ("ep", po::value(&layout.ep), "expert parallelism: experts sharded whole over EP GPUs (default 1)")
      ("moe-tp", po::value(&layout.moe_tp), "the experts' tensor parallelism (default TP x DP / EP)")
      ("weight-dtype", po::value(&weight_dtype), "auto | bf16 | fp8 | fp8-block | mxfp4 | nvfp4: recorded per GEMM "
       "(batchsim-calibrate times 16-bit GEMMs)")
      ("out", po::value(&file), "the shape file to write (default: print it)")
      ("help,h", "show this help");
  // clang-format on
  const po::variables_map vm = parse_command_line(args, d, nullptr, "calibrate shapes");
  if (vm.count("help")) {
    out << "usage: batchsim calibrate shapes --model MODEL [--tp N] [--dp N] [--ep N] [--moe-tp N] --out SHAPES.csv\n\n"
           "Writes the GEMMs one GPU runs for MODEL at that layout (attention projections, MLA's, the dense\n"
           "MLP, router, one routed expert, shared experts, LM head) as the shape file that\n"
           "`batchsim-calibrate measure --shapes SHAPES.csv` times on a GPU (calibration/README.md).\n\n"
        << d << '\n';
    return 0;
  }
  if (model_name.empty()) throw UserError("calibrate shapes: give --model (any model `batchsim run --model` accepts)");
  const ModelSpec model = with_dtypes(resolve_model(model_name), parse_weight_dtype(weight_dtype, "--weight-dtype"), 0);
  check_model_on_layout(model, layout);
  const std::vector<ShapeRow> rows = model_gemms(model, layout);

  std::ofstream file_out;
  if (!file.empty()) {
    const std::filesystem::path parent = std::filesystem::path(file).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    file_out.open(file);
    if (!file_out) throw UserError(fmt::format("calibrate shapes: cannot write --out {}", file));
  }
  std::ostream& csv = file.empty() ? out : file_out;
  const std::string hf_id = cell(model.hf_id);
  fmt::print(csv, "# batchsim calibrate shapes: the GEMMs of {}{} on one GPU at {} ({} layers{})\n", model.name,
             hf_id.empty() ? "" : " (" + hf_id + ")", layout.text(), model.num_layers,
             model.is_moe() ? fmt::format(": {} MoE, {} dense", model.moe_layers(), model.dense_layers) : "");
  fmt::print(csv,
             "# Y[M, N] = X[M, K] W[K, N]; groups: a batched GEMM of that many (K, N). Measure them on a GPU:\n"
             "#   batchsim-calibrate measure --shapes FILE --out DIR   (calibration/shape_file.h)\n");
  csv << "model,hf_id,tp,dp,ep,moe_tp,op,k,n,groups,layers,weight_format\n";
  for (const ShapeRow& r : rows) {
    fmt::print(csv, "{},{},{},{},{},{},{},{},{},{},{},{}\n", cell(model.name), hf_id, layout.tp, layout.dp, layout.ep,
               layout.expert_tp(), r.op, r.shape.k, r.shape.n, r.groups, r.layers, weight_format_name(r.format));
  }
  if (!file.empty()) {
    file_out.close();
    if (!file_out) throw UserError(fmt::format("calibrate shapes: writing {} failed", file));
    const double weights_per_gpu_gb =
        (layout.dp == 1 ? static_cast<double>(model.weight_bytes()) / layout.tp
                        : (static_cast<double>(model.weight_bytes()) - model.routed_expert_weight_bytes()) / layout.tp +
                              model.routed_expert_weight_bytes() / layout.gpus()) /
        1e9;
    fmt::print(out, "wrote {} GEMMs of {} at {} to {}\n", rows.size(), model.name, layout.text(), file);
    fmt::print(out, "(serving it takes {:.1f} GB of weights per GPU; calibration needs one GEMM's buffers at a time)\n",
               weights_per_gpu_gb);
  }
  return 0;
}

}  // namespace batchsim
