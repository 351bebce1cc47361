// Google Benchmark micro-benchmarks of the simulator's hot paths. Not part of ctest: run
//   build/tests/batchsim_benchmarks
// to print figures (speed is measured here and by `batchsim bench`, never asserted in tests).
#include <benchmark/benchmark.h>

#include "hwmodel/cost_model.h"
#include "policies/registry.h"
#include "sim/kv_cache.h"
#include "sim/simulation.h"
#include "sim/workload/workload.h"

namespace batchsim {
namespace {

const CostModel& llama_on_a100() {
  static const CostModel cm(resolve_model("llama-2-7b"), resolve_gpu("a100-80gb"), 1);
  return cm;
}

// One decode iteration of `range(0)` sequences at 1k context: what every iteration pays.
void BM_CostModelDecodeIteration(benchmark::State& state) {
  BatchShape shape;
  for (int64_t i = 0; i < state.range(0); ++i) shape.add_decode(1024 + i);
  shape.num_sampled = state.range(0);
  for (auto _ : state) benchmark::DoNotOptimize(llama_on_a100().iteration(shape).total_s);
}
BENCHMARK(BM_CostModelDecodeIteration)->Arg(1)->Arg(64)->Arg(256);

// A mixed iteration: 32 decodes and `range(0)` prefill chunks.
void BM_CostModelMixedIteration(benchmark::State& state) {
  BatchShape shape;
  for (int i = 0; i < 32; ++i) shape.add_decode(800);
  for (int64_t i = 0; i < state.range(0); ++i) shape.add_prefill(512, 1024 * i);
  shape.num_sampled = 32 + state.range(0);
  for (auto _ : state) benchmark::DoNotOptimize(llama_on_a100().iteration(shape).total_s);
}
BENCHMARK(BM_CostModelMixedIteration)->Arg(1)->Arg(4);

// Paged KV growth by one token for 256 sequences, then release: the decode step's KV work.
void BM_PagedKvDecodeGrowth(benchmark::State& state) {
  PagedKvCache kv(256, 100000, 16);
  for (RequestId id = 0; id < 256; ++id) kv.try_admit(id, 500, 500);
  int64_t tokens = 500;
  for (auto _ : state) {
    ++tokens;
    for (RequestId id = 0; id < 256; ++id) benchmark::DoNotOptimize(kv.try_grow(id, tokens));
    if (tokens > 2000) {
      for (RequestId id = 0; id < 256; ++id) kv.release(id);
      for (RequestId id = 0; id < 256; ++id) kv.try_admit(id, 500, 500);
      tokens = 500;
    }
  }
  state.SetItemsProcessed(state.iterations() * 256);
}
BENCHMARK(BM_PagedKvDecodeGrowth);

// A whole run: 2000 Poisson requests through a policy; items = simulated requests.
void BM_SimulateRun(benchmark::State& state, const char* policy_name) {
  WorkloadSpec spec;
  spec.arrival = "poisson:8";
  spec.prompt_len = "uniform:128:1024";
  spec.output_len = "capexp:128:1024";
  spec.num_requests = 2000;
  const Workload w = make_workload(spec);
  for (auto _ : state) {
    auto policy = make_policy(policy_name, PolicyOptions());
    benchmark::DoNotOptimize(Simulation(w, *policy, llama_on_a100()).run().summary.iterations);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(w.size()));
}
BENCHMARK_CAPTURE(BM_SimulateRun, hf_static, "hf-static")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SimulateRun, vllm_v0, "vllm-v0")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SimulateRun, vllm, "vllm")->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace batchsim

BENCHMARK_MAIN();
