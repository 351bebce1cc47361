#include "calibration/kernel_timer.h"

#include <cupti.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "calibration/cuda_kernels.h"
#include "calibration/cuda_runtime_support.h"

namespace batchsim::calibration {
namespace {

// --- CUPTI activity collection -------------------------------------------------------------
// Buffers complete on CUPTI's worker thread, hence the mutex. Records are packed structs, so
// fields are copied into locals before use (GCC cannot bind packed fields to references).

struct KernelSpan {
  uint32_t correlation_id;
  uint64_t start_ns, end_ns;
};
struct ExternalTag {
  uint32_t correlation_id;
  uint64_t external_id;
};

struct ActivitySink {
  std::mutex mutex;
  std::vector<KernelSpan> kernels;
  std::vector<ExternalTag> tags;
  size_t dropped = 0;
};
ActivitySink& sink() {
  static ActivitySink s;
  return s;
}

constexpr size_t kActivityBufferBytes = size_t{8} << 20;

void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = kActivityBufferBytes;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, kActivityBufferBytes));
  *max_records = 0;  // fill the buffer
}

void CUPTIAPI on_buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid_bytes) {
  std::vector<KernelSpan> kernels;
  std::vector<ExternalTag> tags;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      const uint64_t start = k->start, end = k->end;
      const uint32_t correlation = k->correlationId;
      if (start != 0 && end >= start) kernels.push_back({correlation, start, end});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
      const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
      const uint32_t correlation = e->correlationId;
      const uint64_t external = e->externalId;
      tags.push_back({correlation, external});
    }
  }
  // Dropped records, from this buffer's queue and from the global one (each count resets when
  // read). Earlier code read only the global queue, which misses per-stream buffers. A failed
  // query counts 0: the per-sample kernel counts below still catch lost kernel records.
  size_t dropped = 0;
  for (const auto& [ctx, stream] : {std::pair{context, stream_id}, std::pair{CUcontext{}, uint32_t{0}}}) {
    size_t n = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &n) == CUPTI_SUCCESS) dropped += n;
    if (ctx == nullptr) break;  // the buffer was the global queue's: counted once
  }
  std::free(buffer);
  std::lock_guard lock(sink().mutex);
  sink().kernels.insert(sink().kernels.end(), kernels.begin(), kernels.end());
  sink().tags.insert(sink().tags.end(), tags.begin(), tags.end());
  sink().dropped += dropped;
}

class CuptiTimer final : public KernelTimer {
 public:
  CuptiTimer() {
    try {
      BATCHSIM_CUDA_CHECK(cuptiActivityRegisterCallbacks(on_buffer_requested, on_buffer_completed));
      BATCHSIM_CUDA_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
      // External-correlation records are emitted alongside API activity records ("when a CUPTI
      // activity API record is created while within an external API region", cupti_activity.h),
      // so the runtime and driver API kinds must be on too; their records are ignored.
      BATCHSIM_CUDA_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME));
      BATCHSIM_CUDA_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
      BATCHSIM_CUDA_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION));
    } catch (...) {
      // The destructor does not run for a half-built object: whatever kinds were enabled
      // would stay on (tracing overhead, unbounded record buffers) under the event timer.
      disable_all();
      throw;
    }
  }
  ~CuptiTimer() override {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    disable_all();
    std::lock_guard lock(sink().mutex);  // nothing will read them any more
    sink().kernels.clear();
    sink().tags.clear();
    sink().dropped = 0;
  }
  CuptiTimer(const CuptiTimer&) = delete;
  CuptiTimer& operator=(const CuptiTimer&) = delete;

  TimerKind kind() const override { return TimerKind::kCupti; }

  std::vector<double> time_samples(cudaStream_t stream, int count, const std::function<void()>& prepare,
                                   const std::function<void()>& launch) override {
    const uint64_t first_id = next_external_id_;
    next_external_id_ += static_cast<uint64_t>(count);
    for (int i = 0; i < count; ++i) {
      prepare();
      BATCHSIM_CUDA_CHECK(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                                                 first_id + static_cast<uint64_t>(i)));
      uint64_t popped = 0;
      try {
        launch();
      } catch (...) {  // keep CUPTI's per-thread id stack balanced for the next point
        cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped);
        throw;
      }
      BATCHSIM_CUDA_CHECK(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped));
    }
    BATCHSIM_CUDA_CHECK(cudaStreamSynchronize(stream));
    BATCHSIM_CUDA_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));

    std::vector<KernelSpan> kernels;
    std::vector<ExternalTag> tags;
    size_t dropped = 0;
    {
      std::lock_guard lock(sink().mutex);
      kernels.swap(sink().kernels);
      tags.swap(sink().tags);
      dropped = std::exchange(sink().dropped, 0);
    }
    if (dropped != 0) throw CudaError("CUPTI dropped " + std::to_string(dropped) + " activity records");
    std::unordered_map<uint32_t, uint64_t> sample_of_correlation;
    for (const ExternalTag& t : tags) {
      if (t.external_id >= first_id && t.external_id < first_id + static_cast<uint64_t>(count)) {
        sample_of_correlation[t.correlation_id] = t.external_id - first_id;
      }
    }
    std::vector<double> seconds(static_cast<size_t>(count), 0.0);
    std::vector<int> kernels_per_sample(static_cast<size_t>(count), 0);
    for (const KernelSpan& k : kernels) {
      const auto it = sample_of_correlation.find(k.correlation_id);
      if (it == sample_of_correlation.end()) continue;  // e.g. the L2 flush
      seconds[it->second] += static_cast<double>(k.end_ns - k.start_ns) * 1e-9;
      ++kernels_per_sample[it->second];
    }
    for (int i = 0; i < count; ++i) {
      if (kernels_per_sample[static_cast<size_t>(i)] == 0) {
        throw CudaError("CUPTI recorded no kernel for sample " + std::to_string(i) + " of a point");
      }
    }
    return seconds;
  }

 private:
  static void disable_all() noexcept {
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  }

  uint64_t next_external_id_ = 1;
};

// --- CUDA events with a blocking kernel ----------------------------------------------------

constexpr int kBlockingTimeoutMs = 2000;

class EventTimer final : public KernelTimer {
 public:
  TimerKind kind() const override { return TimerKind::kCudaEvent; }

  std::vector<double> time_samples(cudaStream_t stream, int count, const std::function<void()>& prepare,
                                   const std::function<void()>& launch) override {
    std::vector<double> seconds;
    seconds.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      prepare();
      flag_.set(0);
      launch_blocking_kernel(flag_.device_ptr(), kBlockingTimeoutMs, stream);
      BATCHSIM_CUDA_CHECK(cudaEventRecord(start_.get(), stream));
      try {
        launch();
      } catch (...) {
        flag_.set(1);  // always release the stream
        throw;
      }
      BATCHSIM_CUDA_CHECK(cudaEventRecord(stop_.get(), stream));
      flag_.set(1);
      BATCHSIM_CUDA_CHECK(cudaEventSynchronize(stop_.get()));
      float ms = 0;
      BATCHSIM_CUDA_CHECK(cudaEventElapsedTime(&ms, start_.get(), stop_.get()));
      seconds.push_back(static_cast<double>(ms) * 1e-3);
    }
    return seconds;
  }

 private:
  MappedHostFlag flag_;
  CudaEvent start_, stop_;
};

}  // namespace

int cupti_api_version() {
  uint32_t version = 0;
  return cuptiGetVersion(&version) == CUPTI_SUCCESS ? static_cast<int>(version) : 0;
}

std::unique_ptr<KernelTimer> make_kernel_timer(bool allow_cupti, cudaStream_t stream, std::string& why) {
  if (!allow_cupti) {
    why = "CUPTI disabled by --timer event";
    return std::make_unique<EventTimer>();
  }
  try {
    auto timer = std::make_unique<CuptiTimer>();
    // Self-test: a 1 MiB copy kernel must show up as exactly timed samples.
    DeviceBuffer<std::byte> a(1 << 20), b(1 << 20);
    const std::vector<double> t = timer->time_samples(
        stream, 3, [] {}, [&] { launch_copy(a.get(), b.get(), a.bytes(), 1, stream); });
    for (double s : t) {
      if (!(s > 0)) throw CudaError("CUPTI self-test recorded a zero-length kernel");
    }
    return timer;
  } catch (const CudaError& e) {
    why = e.what();
    return std::make_unique<EventTimer>();
  }
}

}  // namespace batchsim::calibration
