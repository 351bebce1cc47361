// batchsim — engine profiles: what the serving software costs, apart from what the GPU can do.
//
// The same GPU runs the same model at very different speeds under HF transformers in eager
// mode, FasterTransformer, or vLLM with CUDA graphs. A hardware profile (hardware_profile.h)
// says what the GPU's kernels take; an engine profile says what the engine adds around them:
//   - CPU work per iteration (scheduling, input preparation, sampling, output processing), per
//     sequence and per tensor-parallel worker, and whether the engine overlaps it with the GPU
//     (SGLang's and TensorRT-LLM's overlap schedulers) or runs it in series (vLLM);
//   - kernel launches: host time per launch outside CUDA graphs, how many kernels a layer and an
//     iteration launch, and which iterations replay a captured CUDA graph instead;
//   - which all-reduce it calls (NCCL, or its own custom all-reduce for small messages);
//   - how it writes the KV cache (in place, or by concatenation as HF's DynamicCache does).
// Built-in engines are the files in hwmodel/engines/ (compiled in); each number there cites
// its source. `--engine NAME|FILE` picks one; every policy preset names its engine.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace batchsim {

// CPU seconds of one iteration outside the GPU's kernels.
struct CpuOverhead {
  double per_iteration_s = 0;
  double per_sequence_s = 0;      // per sequence in the iteration's batch
  double per_extra_worker_s = 0;  // per tensor-parallel worker beyond the first
  double seconds(int64_t sequences, int tp) const;
};

enum class AllReduceImpl { nccl, custom };
enum class KvCacheWrite { in_place, concat };

struct EngineProfile {
  std::string name = "bare";  // the default: kernels only, nothing of an engine
  std::string description;    // one line
  std::string sources;        // where the numbers come from (the file's comments say per number)
  // The built-in engine it is a variant of (the `base:` of its file: vllm for vllm-async and
  // vllm-h100-fitted), or its own name: `plan` reruns its answer on each profile of the family.
  std::string family;

  CpuOverhead cpu;
  // Whether the CPU work of the next iteration runs while the GPU computes this one, so that an
  // iteration takes max(GPU, CPU) instead of their sum.
  bool cpu_overlaps_gpu = false;

  // Host seconds to launch one kernel outside a CUDA graph (Python + framework dispatch + the
  // driver). Launches are asynchronous: the GPU waits only when they fall behind its kernels.
  double launch_per_kernel_s = 0;
  int64_t kernels_per_layer = 0;      // launched per transformer layer
  int64_t kernels_per_iteration = 0;  // outside the layers: embedding, final norm, LM head, sampling
  // Iterations of at most this many tokens replay a captured CUDA graph: one launch of
  // cuda_graph_launch_s instead of one per kernel. 0: no CUDA graphs.
  int64_t cuda_graph_max_tokens = 0;
  double cuda_graph_launch_s = 0;
  // Whether only decode-only iterations replay a graph, a prefill or mixed one running eager
  // whatever its size: TensorRT-LLM's PyTorch backend captures generation-only batches
  // (cuda_graph_config), and its piecewise graphs for context and mixed iterations are off unless
  // torch_compile_config asks (docs: features/torch_compile_and_piecewise_cuda_graph.md, "Piecewise
  // CUDA Graph only handles context-only and mixed context+generation iterations, while the
  // generation-only CUDA graph handles generation-only"). vLLM v1 and SGLang graph any small step.
  bool cuda_graph_decode_only = false;

  AllReduceImpl allreduce = AllReduceImpl::nccl;
  // Messages up to this size use the custom all-reduce (where the GPU profile has its fit);
  // larger ones, NCCL.
  double custom_allreduce_max_bytes = 0;

  KvCacheWrite kv_cache_write = KvCacheWrite::in_place;
  // With attention data parallelism (parallel_layout.h), how a step's tokens reach the experts:
  // all-to-all dispatch and combine (DeepEP, TensorRT-LLM's alltoall) when true, else an
  // all-gather before the experts and a reduce-scatter after (vLLM's default all2all backend
  // allgather_reducescatter, SGLang's moe_a2a_backend none); and whether every rank's batch is
  // padded to the largest rank's tokens for the MoE layers (vLLM's _post_process_dp_padding under
  // CUDA graphs, v1/worker/dp_utils.py; SGLang's dp_padding_mode max_len).
  bool moe_all_to_all = false;
  bool moe_pad_dp_to_max = false;
  // Time on every iteration's critical path that neither the GPU profile's kernels nor the
  // costs above account for, whatever its cause (host-device synchronisation for the sampled
  // tokens, the sampler, input copies, ranks reaching an all-reduce at different times):
  // measured as the gap between closed-loop serving benchmarks and the prediction, and fitted
  // by `batchsim calibrate engine` (experiments/fidelity/engine_fit.h). Never overlapped with the GPU.
  // 0 in the engines whose numbers all cite a source.
  CpuOverhead residual;

  // Host seconds the iteration's kernel launches take (graph or eager); `prefill`: the iteration
  // computes a prompt chunk (cuda_graph_decode_only).
  double launch_s(int64_t num_layers, int64_t tokens, bool prefill) const;
};

const char* allreduce_impl_name(AllReduceImpl impl);  // "nccl", "custom"
const char* kv_cache_write_name(KvCacheWrite w);      // "in_place", "concat"

// The engines of hwmodel/engines/*.yaml, by name.
const std::vector<EngineProfile>& builtin_engines();
// A built-in engine by name, or an engine profile file (YAML or JSON) when the text names a file.
EngineProfile resolve_engine(std::string_view name_or_path);
EngineProfile load_engine_profile(const std::filesystem::path& path);
// The profile as YAML that load_engine_profile reads back to an equal profile.
std::string engine_profile_yaml(const EngineProfile& engine);

}  // namespace batchsim
