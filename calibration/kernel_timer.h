// batchsim calibration — GPU time of one measured point's kernels.
//
// A KernelTimer runs `count` cold samples of a point: before each, an untimed `prepare`
// (the L2 flush); then `launch`, which may start several kernels (cuBLASLt's GEMM plus its
// split-K reduction, the partitioned decode plus its reduce). Each sample's time is the sum of
// the durations of every kernel `launch` started, in seconds.
//
// Two implementations behind this one interface:
//  * CUPTI Activity API (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUpti_ActivityKernel10): GPU
//    start/end timestamps per kernel; each sample's launches are tagged with an external
//    correlation id (cuptiActivityPushExternalCorrelationId), and kernels are summed per id.
//    No launch gaps or host jitter enter the sum. (KIND_KERNEL would serialise kernels.)
//  * CUDA events, the fallback where CUPTI is unavailable or records nothing (e.g. sandboxed
//    drivers): a blocking kernel holds the stream while the start event, the launches and the
//    stop event queue up behind it, as nvbench's measure_cold does, so the interval covers the
//    kernels back to back rather than launch latency. Gaps between several kernels of one
//    sample are included, so it reads slightly higher than CUPTI for multi-kernel points.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "calibration/measurement_csv.h"

namespace batchsim::calibration {

class KernelTimer {
 public:
  virtual ~KernelTimer() = default;
  virtual TimerKind kind() const = 0;
  virtual std::vector<double> time_samples(cudaStream_t stream, int count, const std::function<void()>& prepare,
                                           const std::function<void()>& launch) = 0;
};

// CUPTI if it can be enabled and passes a self-test on `stream` (it times a trivial kernel
// and must record it), otherwise CUDA events. `why` receives the reason when CUPTI is not used.
std::unique_ptr<KernelTimer> make_kernel_timer(bool allow_cupti, cudaStream_t stream, std::string& why);

// CUPTI's API version (cuptiGetVersion), 0 if unavailable.
int cupti_api_version();

}  // namespace batchsim::calibration
