// `batchsim-calibrate measure`: times GEMMs, attention and streaming kernels on the GPU and
// writes a measurement directory (measurement_csv.h). Each point: one warm-up launch
// (nvbench m_cold_warmup_runs = 1), then cold samples — L2 flushed before each — in batches
// until the stopping rule (sample_stats.h) says the median is trustworthy or the time cap hits.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>

#include "calibration/calibrate.h"
#include "calibration/cuda_kernels.h"
#include "calibration/cuda_runtime_support.h"
#include "calibration/gemm_lt.h"
#include "calibration/kernel_timer.h"
#include "calibration/measurement_csv.h"
#include "calibration/paged_kv_layout.h"
#include "calibration/shape_file.h"
#include "calibration/shape_grid.h"

namespace batchsim::calibration {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSampleBatch = 10;  // samples per CUPTI flush
constexpr int kMaxModelLenTokens = 16384;
constexpr int64_t kBytesPerElement = 2;  // BF16 / FP16
// Leave this much device memory free when sizing a point's buffers.
constexpr size_t kMemoryReserveBytes = size_t{2} << 30;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Shared state of one measurement run.
class Session {
 public:
  Session(const MeasureOptions& options, std::ostream& log)
      : options_(options), log_(log), flusher_(0), start_(Clock::now()) {
    BATCHSIM_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, 0));
    std::string why_not_cupti;
    timer_ = make_kernel_timer(options.allow_cupti, stream_.get(), why_not_cupti);
    if (timer_->kind() != TimerKind::kCupti)
      log_ << "timer: CUDA events (" << why_not_cupti << ")\n";
    else
      log_ << "timer: CUPTI activity (concurrent kernel records)\n";
  }

  TimerKind timer_kind() const { return timer_->kind(); }
  const std::string& gpu_slug() const { return gpu_slug_; }
  void set_gpu_slug(std::string slug) { gpu_slug_ = std::move(slug); }
  cudaStream_t stream() const { return stream_.get(); }
  int sm_count() const { return sm_count_; }
  const MeasureOptions& options() const { return options_; }
  std::ostream& log() { return log_; }

  bool out_of_time() {
    if (options_.time_budget_s > 0 && seconds_since(start_) > options_.time_budget_s) {
      if (!budget_reported_) {
        log_ << "time budget of " << options_.time_budget_s << " s spent: skipping the remaining points\n";
        budget_reported_ = true;
      }
      return true;
    }
    return false;
  }

  // Whether `bytes` more can be allocated with the reserve left over.
  bool fits_in_memory(size_t bytes) const { return bytes <= available_bytes(); }
  // Device memory free for one point's buffers: what the driver reports minus the reserve.
  size_t available_bytes() const {
    size_t free_bytes = 0, total = 0;
    BATCHSIM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return free_bytes > kMemoryReserveBytes ? free_bytes - kMemoryReserveBytes : 0;
  }
  // Points left out because their buffers do not fit: logged now, summed in the report, and
  // the run's exit status says so (calibrate_main.cpp).
  void did_not_fit(const std::string& what, int points) {
    if (points <= 0) return;
    log_ << "  did not fit in GPU memory: " << what << "\n";
    report_.points_not_fitting_memory += points;
    report_.not_fitting_memory.push_back(what);
  }
  const MeasureReport& report() const { return report_; }

  SampleSummary measure(const std::function<void()>& launch) {
    BATCHSIM_CUDA_CHECK(cudaDeviceSynchronize());  // setup (fills, uploads) done before timing
    launch();  // warm-up: first-launch costs (module load, heuristics caches) stay out
    BATCHSIM_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    try {
      return measure_with_current_timer(launch);
    } catch (const CudaError& e) {
      // CUPTI passed its self-test but failed later (dropped or missing records): finish the
      // run with CUDA events rather than lose it. Rows say which timer they used.
      if (timer_->kind() != TimerKind::kCupti) throw;
      log_ << "CUPTI failed (" << e.what() << "); switching to CUDA events\n";
      std::string why;
      timer_ = make_kernel_timer(false, stream_.get(), why);
      return measure_with_current_timer(launch);
    }
  }

  SampleSummary measure_with_current_timer(const std::function<void()>& launch) {
    StoppingCriterion criterion(options_.quick ? StoppingRule::quick() : full_rule());
    const Clock::time_point point_start = Clock::now();
    const auto flush = [this] { flusher_.flush(stream_.get()); };
    while (true) {
      for (double s : timer_->time_samples(stream_.get(), kSampleBatch, flush, launch)) criterion.add_sample(s);
      if (criterion.check(seconds_since(point_start)) != StopReason::kContinue) break;
    }
    return summarize(criterion.samples_s());
  }

  uint32_t next_seed() { return static_cast<uint32_t>(options_.seed * 7919u + seed_counter_++); }

 private:
  // nvbench's defaults, with a shorter minimum time and cap so a full sweep of ~10^4 points
  // finishes in hours rather than a day.
  static StoppingRule full_rule() {
    StoppingRule rule = StoppingRule::nvbench_defaults();
    rule.min_measured_time_s = 0.05;
    rule.time_cap_s = 3.0;
    return rule;
  }

  const MeasureOptions& options_;
  std::ostream& log_;
  CudaStream stream_;
  L2Flusher flusher_;
  std::unique_ptr<KernelTimer> timer_;
  Clock::time_point start_;
  int sm_count_ = 0;
  bool budget_reported_ = false;
  MeasureReport report_;
  std::string gpu_slug_ = "gpu";
  uint32_t seed_counter_ = 0;
};

DeviceBuffer<uint16_t> random_device_16bit(Session& s, size_t count, bool bf16) {
  DeviceBuffer<uint16_t> buffer(count);
  launch_fill_random_16bit(buffer.get(), count, bf16, s.next_seed(), s.stream());
  return buffer;
}

// --- bandwidth -----------------------------------------------------------------------------

void measure_bandwidth(Session& s) {
  BandwidthCsvWriter csv(s.options().out_dir / "bandwidth.csv");
  const std::vector<size_t> sizes_mib =
      s.options().quick ? std::vector<size_t>{64, 256, 1024} : std::vector<size_t>{16, 64, 256, 1024, 4096};
  DeviceBuffer<unsigned> sink(1);
  for (size_t mib : sizes_mib) {
    const size_t bytes = mib << 20;
    if (s.out_of_time() || !s.fits_in_memory(2 * bytes)) continue;
    DeviceBuffer<std::byte> a(bytes), b(bytes);
    launch_fill_random_16bit(a.get(), bytes / 2, true, s.next_seed(), s.stream());
    const SampleSummary read =
        s.measure([&] { launch_stream_read(a.get(), bytes, sink.get(), s.sm_count(), s.stream()); });
    csv.write({"stream_read", static_cast<int64_t>(bytes), s.timer_kind(), read});
    const SampleSummary copy = s.measure([&] { launch_copy(a.get(), b.get(), bytes, s.sm_count(), s.stream()); });
    csv.write({"copy", static_cast<int64_t>(2 * bytes), s.timer_kind(), copy});
    s.log() << "  bandwidth " << mib << " MiB: read " << bytes / read.median_s / 1e12 << " TB/s, copy "
            << 2.0 * bytes / copy.median_s / 1e12 << " TB/s\n";
  }
}

// --- GEMMs ---------------------------------------------------------------------------------

// The largest M of `grid` whose X [groups][M][max_k], W [groups][max_kn] and Y [groups][M][max_n]
// fit in device memory now (2-byte elements), or 0 when not even the smallest does.
int64_t largest_m_that_fits(const Session& s, const std::vector<int>& grid, int64_t max_k, int64_t max_n,
                            int64_t max_kn, int64_t groups) {
  const size_t available = s.available_bytes();
  int64_t best = 0;
  for (int m : grid) {
    const int64_t elements = groups * (int64_t{m} * max_k + max_kn + int64_t{m} * max_n);
    if (static_cast<size_t>(elements * kBytesPerElement) <= available) best = std::max<int64_t>(best, m);
  }
  return best;
}

MlpCsvWriter open_mlp_csv(Session& s, const CalibrationModel& model, GemmDtype dtype) {
  const std::string file = dtype == GemmDtype::kBf16 ? "mlp.csv" : "mlp_fp16.csv";
  return MlpCsvWriter(model_measurement_dir(s.options().out_dir, s.gpu_slug(), model) / file);
}

void measure_gemms(Session& s, const CalibrationModel& model, GemmDtype dtype, MlpCsvWriter& csv,
                   std::span<const int> tensor_parallel_degrees) {
  const bool quick = s.options().quick;
  const std::vector<int> grid =
      quick ? quick_token_count_grid(kMaxModelLenTokens) : token_count_grid(kMaxModelLenTokens);
  CublasLtHandle handle;
  DeviceBuffer<std::byte> workspace(kGemmWorkspaceBytes);
  const bool bf16 = dtype == GemmDtype::kBf16;
  for (int tp : tensor_parallel_degrees) {
    std::vector<GemmShape> shapes;
    try {
      shapes = layer_gemm_shapes(model, tp);
    } catch (const std::invalid_argument& e) {
      s.log() << "  skip TP " << tp << ": " << e.what() << "\n";
      continue;
    }
    int64_t max_k = 0, max_n = 0, max_kn = 0;
    for (const GemmShape& g : shapes) {
      max_k = std::max(max_k, g.k);
      max_n = std::max(max_n, g.n);
      max_kn = std::max(max_kn, g.k * g.n);
    }
    // X, W and Y of the largest shape at the largest M that fits; larger M are left out.
    const int64_t max_m = largest_m_that_fits(s, grid, max_k, max_n, max_kn, 1);
    const int beyond = static_cast<int>(std::count_if(grid.begin(), grid.end(), [&](int m) { return m > max_m; }));
    s.did_not_fit(model.name + " " + dtype_name(dtype) + " GEMMs at TP " + std::to_string(tp) + ": " +
                      (max_m == 0 ? "none" : "M above " + std::to_string(max_m)) + " (" + std::to_string(beyond) +
                      " of " + std::to_string(grid.size()) + " token counts)",
                  beyond);
    if (max_m == 0) continue;
    const DeviceBuffer<uint16_t> x = random_device_16bit(s, static_cast<size_t>(max_m * max_k), bf16);
    const DeviceBuffer<uint16_t> w = random_device_16bit(s, static_cast<size_t>(max_kn), bf16);
    DeviceBuffer<uint16_t> y(static_cast<size_t>(max_m * max_n));
    int rows = 0;
    for (int m : grid) {
      if (s.out_of_time()) return;
      if (m > max_m) break;
      MlpRow row{&model, m, tp, dtype_name(dtype), s.timer_kind(), {}};
      for (const GemmShape& g : shapes) {
        std::optional<LtGemm> gemm;
        try {
          gemm.emplace(handle, dtype, m, g.n, g.k);
        } catch (const std::exception& e) {  // planning only: no kernel has run, nothing is sticky
          s.log() << "  no cuBLASLt plan for " << vidur_op_name(g.op) << " M=" << m << ": " << e.what() << "\n";
          continue;  // the row keeps empty cells for this operator
        }
        row.ops[static_cast<size_t>(g.op)] =
            s.measure([&] { gemm->run(x.get(), w.get(), y.get(), workspace.get(), workspace.bytes(), s.stream()); });
      }
      row.timer = s.timer_kind();
      csv.write(row);
      ++rows;
    }
    s.log() << "  " << model.name << " " << dtype_name(dtype) << " TP " << tp << ": " << rows << " token counts\n";
  }
}

// The GEMMs of a shape file (shape_file.h): each distinct (k, n, groups) of a model over the
// token grid, one gemm.csv row per op that has that shape.
void measure_shape_file(Session& s, const std::vector<ShapeFileGemm>& gemms, GemmDtype dtype) {
  const bool quick = s.options().quick;
  const std::vector<int> grid =
      quick ? quick_token_count_grid(kMaxModelLenTokens) : token_count_grid(kMaxModelLenTokens);
  const bool bf16 = dtype == GemmDtype::kBf16;
  CublasLtHandle handle;
  DeviceBuffer<std::byte> workspace(kGemmWorkspaceBytes);
  for (const std::string& model : shape_file_models(gemms)) {
    const std::vector<DistinctGemm> shapes = distinct_gemms(gemms, model);
    const ShapeFileGemm& first = shapes.front().rows.front();
    GemmCsvWriter csv(model_measurement_dir(s.options().out_dir, s.gpu_slug(), first) /
                      (bf16 ? "gemm.csv" : "gemm_fp16.csv"));
    s.log() << "GEMMs of " << model << " from " << s.options().shapes_file.string() << " (" << dtype_name(dtype)
            << ", TP " << first.tp << (first.ep > 1 ? ", EP " + std::to_string(first.ep) : "") << "): " << shapes.size()
            << " distinct shapes\n";
    for (const DistinctGemm& shape : shapes) {
      if (s.out_of_time()) return;
      std::string ops;
      for (const ShapeFileGemm& g : shape.rows) ops += (ops.empty() ? "" : "/") + g.op;
      const std::string what = ops + " (K " + std::to_string(shape.k) + ", N " + std::to_string(shape.n) +
                               (shape.groups > 1 ? ", " + std::to_string(shape.groups) + " groups" : "") + ")";
      const int64_t max_m = largest_m_that_fits(s, grid, shape.k, shape.n, shape.k * shape.n, shape.groups);
      const int beyond = static_cast<int>(std::count_if(grid.begin(), grid.end(), [&](int m) { return m > max_m; }));
      s.did_not_fit(
          model + " " + what + ": " +
              (max_m == 0 ? "not even at M " + std::to_string(grid.front()) : "M above " + std::to_string(max_m)),
          beyond);
      if (max_m == 0) continue;
      const DeviceBuffer<uint16_t> x =
          random_device_16bit(s, static_cast<size_t>(shape.groups * max_m * shape.k), bf16);
      const DeviceBuffer<uint16_t> w =
          random_device_16bit(s, static_cast<size_t>(shape.groups * shape.k * shape.n), bf16);
      DeviceBuffer<uint16_t> y(static_cast<size_t>(shape.groups * max_m * shape.n));
      int rows = 0;
      for (int m : grid) {
        if (m > max_m || s.out_of_time()) break;
        std::optional<LtGemm> gemm;
        try {
          gemm.emplace(handle, dtype, m, shape.n, shape.k, shape.groups);
        } catch (const std::exception& e) {  // planning only: no kernel has run, nothing is sticky
          s.log() << "  no cuBLASLt plan for " << what << " M=" << m << ": " << e.what() << "\n";
          continue;
        }
        const SampleSummary stats =
            s.measure([&] { gemm->run(x.get(), w.get(), y.get(), workspace.get(), workspace.bytes(), s.stream()); });
        for (const ShapeFileGemm& g : shape.rows) csv.write({&g, m, dtype_name(dtype), s.timer_kind(), stats});
        ++rows;
      }
      s.log() << "  " << what << ": " << rows << " token counts\n";
    }
  }
}

// --- attention -----------------------------------------------------------------------------

// K/V caches, block tables and lengths of one decode batch with scattered physical blocks.
struct DeviceDecodeBatch {
  DeviceBuffer<uint16_t> q, k, v, out;
  DeviceBuffer<int32_t> tables, lens;
  DeviceBuffer<float> tmp_out, max_logits, exp_sums;
  DecodeAttentionArgs args;
  int partition_size_tokens = 0;
};

int64_t kv_cache_bytes(int64_t blocks, int kv_heads, int head_dim) {
  return 2 * blocks * kDefaultBlockSizeTokens * kv_heads * head_dim * kBytesPerElement;
}

std::optional<DeviceDecodeBatch> make_decode_batch(Session& s, const DecodeAttentionPoint& p, int heads, int kv_heads,
                                                   int head_dim, std::mt19937_64& rng) {
  const int max_len = p.max_context_tokens();
  const int max_blocks = ceil_div(max_len, kDefaultBlockSizeTokens);
  int64_t total_blocks = 0;
  for (int len : p.context_lens_tokens) total_blocks += ceil_div(len, kDefaultBlockSizeTokens);
  const bool single_pass = use_single_pass_decode(p.batch_size, heads, max_len);
  const int parts = single_pass ? 1 : ceil_div(max_len, kDecodePartitionSizeTokens);
  const size_t slots = static_cast<size_t>(p.batch_size) * heads * parts;
  if (!s.fits_in_memory(static_cast<size_t>(kv_cache_bytes(total_blocks, kv_heads, head_dim)) +
                        slots * (head_dim + 2) * sizeof(float))) {
    return std::nullopt;
  }
  // vLLM hands out blocks from a free list that fragments over time: scatter them.
  std::vector<int32_t> physical(static_cast<size_t>(total_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  std::vector<int32_t> tables(static_cast<size_t>(p.batch_size) * max_blocks, 0);
  size_t next = 0;
  for (int seq = 0; seq < p.batch_size; ++seq) {
    for (int b = 0; b < ceil_div(p.context_lens_tokens[static_cast<size_t>(seq)], kDefaultBlockSizeTokens); ++b) {
      tables[static_cast<size_t>(seq) * max_blocks + b] = physical[next++];
    }
  }
  DeviceDecodeBatch d;
  const size_t cache_elems = static_cast<size_t>(total_blocks) * kDefaultBlockSizeTokens * kv_heads * head_dim;
  d.q = random_device_16bit(s, static_cast<size_t>(p.batch_size) * heads * head_dim, true);
  d.k = random_device_16bit(s, cache_elems, true);
  d.v = random_device_16bit(s, cache_elems, true);
  d.out = DeviceBuffer<uint16_t>(static_cast<size_t>(p.batch_size) * heads * head_dim);
  d.tables = DeviceBuffer<int32_t>(tables.size());
  d.tables.copy_from_host(tables.data(), tables.size());
  d.lens = DeviceBuffer<int32_t>(p.context_lens_tokens.size());
  d.lens.copy_from_host(p.context_lens_tokens.data(), p.context_lens_tokens.size());
  d.partition_size_tokens = single_pass ? 0 : kDecodePartitionSizeTokens;
  if (!single_pass) {
    d.tmp_out = DeviceBuffer<float>(slots * head_dim);
    d.max_logits = DeviceBuffer<float>(slots);
    d.exp_sums = DeviceBuffer<float>(slots);
  }
  d.args = {d.q.get(),
            d.k.get(),
            d.v.get(),
            d.tables.get(),
            d.lens.get(),
            d.out.get(),
            p.batch_size,
            heads,
            kv_heads,
            head_dim,
            kDefaultBlockSizeTokens,
            max_blocks,
            max_len,
            1.0f / std::sqrt(static_cast<float>(head_dim)),
            d.tmp_out.get(),
            d.max_logits.get(),
            d.exp_sums.get()};
  return d;
}

AttentionRow attention_row(const CalibrationModel& model, int tp) {
  AttentionRow row;
  row.model = &model;
  row.tensor_parallel = tp;
  row.block_size_tokens = kDefaultBlockSizeTokens;
  row.max_model_len_tokens = kMaxModelLenTokens;
  row.dtype = "bf16";
  return row;
}

// Uniform decode and prefill rows go to attention.csv (Vidur's file), mixed-length decode
// batches to attention_mixed.csv; TP degrees share a file, told apart by
// num_tensor_parallel_workers as in Vidur.
struct AttentionWriters {
  AttentionCsvWriter uniform, mixed;
};

void measure_attention(Session& s, const CalibrationModel& model, int tp, AttentionWriters& csv) {
  const int heads = heads_per_gpu(model, tp), kv_heads = kv_heads_per_gpu(model, tp), d = model.head_dim;
  const AttentionGridOptions grid = s.options().quick ? AttentionGridOptions::quick(kMaxModelLenTokens)
                                                      : AttentionGridOptions::full(kMaxModelLenTokens);
  std::mt19937_64 rng(s.options().seed);
  int decode_rows = 0, prefill_rows = 0, skipped = 0;

  for (const DecodeAttentionPoint& p : decode_attention_grid(grid)) {
    if (s.out_of_time()) break;
    std::optional<DeviceDecodeBatch> batch = make_decode_batch(s, p, heads, kv_heads, d, rng);
    if (!batch) {
      ++skipped;
      continue;
    }
    AttentionRow row = attention_row(model, tp);
    row.batch_size = p.batch_size;
    row.kv_cache_size_tokens =
        static_cast<int>(std::lround(static_cast<double>(p.total_context_tokens()) / p.batch_size));
    row.kv_cache_size_max_tokens = p.max_context_tokens();
    row.kv_cache_size_sum_tokens = p.total_context_tokens();
    row.is_prefill = false;
    row.attention_backend = batch->partition_size_tokens ? "batchsim_paged_v2" : "batchsim_paged_v1";
    row.num_partitions =
        batch->partition_size_tokens ? ceil_div(p.max_context_tokens(), batch->partition_size_tokens) : 1;
    row.stats =
        s.measure([&] { launch_paged_decode_attention(batch->args, batch->partition_size_tokens, s.stream()); });
    row.timer = s.timer_kind();
    (p.mixed ? csv.mixed : csv.uniform).write(row);
    ++decode_rows;
  }

  for (const PrefillAttentionPoint& p : prefill_attention_grid(grid)) {
    if (s.out_of_time()) break;
    const int total = p.prior_tokens + p.chunk_tokens;
    const int blocks = ceil_div(total, kDefaultBlockSizeTokens);
    if (!s.fits_in_memory(static_cast<size_t>(kv_cache_bytes(blocks, kv_heads, d)))) {
      ++skipped;
      continue;
    }
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    const size_t cache_elems = static_cast<size_t>(blocks) * kDefaultBlockSizeTokens * kv_heads * d;
    const DeviceBuffer<uint16_t> q = random_device_16bit(s, static_cast<size_t>(p.chunk_tokens) * heads * d, true);
    const DeviceBuffer<uint16_t> k = random_device_16bit(s, cache_elems, true);
    const DeviceBuffer<uint16_t> v = random_device_16bit(s, cache_elems, true);
    DeviceBuffer<uint16_t> out(static_cast<size_t>(p.chunk_tokens) * heads * d);
    DeviceBuffer<int32_t> dtable(table.size());
    dtable.copy_from_host(table.data(), table.size());
    const PrefillAttentionArgs args{q.get(),
                                    k.get(),
                                    v.get(),
                                    dtable.get(),
                                    out.get(),
                                    heads,
                                    kv_heads,
                                    d,
                                    kDefaultBlockSizeTokens,
                                    p.prior_tokens,
                                    p.chunk_tokens,
                                    1.0f / std::sqrt(static_cast<float>(d))};
    AttentionRow row = attention_row(model, tp);
    row.batch_size = 1;
    row.prefill_chunk_size_tokens = p.chunk_tokens;
    row.kv_cache_size_tokens = p.prior_tokens;
    row.kv_cache_size_max_tokens = total;
    row.kv_cache_size_sum_tokens = total;
    row.is_prefill = true;
    row.attention_backend = prefill_kernel_name(PrefillKernel::kTensorCore);
    row.stats = s.measure([&] { launch_prefill_attention(args, PrefillKernel::kTensorCore, s.stream()); });
    row.timer = s.timer_kind();
    csv.uniform.write(row);
    ++prefill_rows;
  }
  s.log() << "  " << model.name << " attention TP " << tp << ": " << decode_rows << " decode, " << prefill_rows
          << " prefill points\n";
  s.did_not_fit(model.name + " attention at TP " + std::to_string(tp) + ": " + std::to_string(skipped) +
                    " points (their K/V caches)",
                skipped);
}

}  // namespace

MeasureReport run_measurements(const MeasureOptions& options, std::ostream& log) {
  // Read before the GPU does anything: a bad file is a usage error, not a lost measurement.
  const std::vector<ShapeFileGemm> shape_file_gemms =
      options.shapes_file.empty() ? std::vector<ShapeFileGemm>{} : read_shape_file(options.shapes_file);
  BATCHSIM_CUDA_CHECK(cudaSetDevice(0));
  Session s(options, log);
  DeviceInfo info = query_device_info(0);
  info.timer = s.timer_kind() == TimerKind::kCupti ? "cupti" : "cuda_event";
  info.cupti_api_version = cupti_api_version();
  write_device_info_json(info, options.out_dir / "device.json");
  s.set_gpu_slug(device_slug(info.name));
  log << "device: " << info.name << ", " << info.sm_count << " SMs, " << info.memory_bytes / (1 << 20)
      << " MiB, SM clock " << info.sm_clock_khz / 1000 << " MHz\n";

  log << "bandwidth\n";
  measure_bandwidth(s);
  // Order for a run cut short by --time-budget-s: what a single-GPU fit needs first (each
  // built-in model's first TP degree's GEMMs and its attention kernels), then the shape file's
  // GEMMs, then the other TP degrees and FP16.
  const std::span<const int> tps(options.tensor_parallel_degrees);
  std::vector<MlpCsvWriter> mlp;
  mlp.reserve(options.models.size());
  for (const std::string& name : options.models) {
    const CalibrationModel& model = find_calibration_model(name);
    mlp.push_back(open_mlp_csv(s, model, GemmDtype::kBf16));
    log << "GEMMs " << model.name << " (bf16), TP " << tps.front() << "\n";
    measure_gemms(s, model, GemmDtype::kBf16, mlp.back(), tps.first(1));
    log << "attention " << model.name << "\n";
    const std::filesystem::path dir = model_measurement_dir(options.out_dir, s.gpu_slug(), model);
    AttentionWriters csv{AttentionCsvWriter(dir / "attention.csv", AttentionFileKind::kVidur),
                         AttentionCsvWriter(dir / "attention_mixed.csv", AttentionFileKind::kMixedDecode)};
    // Attention per GPU depends on TP only through the heads; quick runs measure TP 1.
    for (int tp : options.quick ? std::vector<int>{1} : options.tensor_parallel_degrees) {
      try {
        heads_per_gpu(model, tp);
        kv_heads_per_gpu(model, tp);
      } catch (const std::invalid_argument&) {
        continue;
      }
      measure_attention(s, model, tp, csv);
    }
  }
  if (!shape_file_gemms.empty()) measure_shape_file(s, shape_file_gemms, GemmDtype::kBf16);
  for (size_t i = 0; i < options.models.size(); ++i) {
    const CalibrationModel& model = find_calibration_model(options.models[i]);
    if (tps.size() > 1) {
      log << "GEMMs " << model.name << " (bf16), other TP degrees\n";
      measure_gemms(s, model, GemmDtype::kBf16, mlp[i], tps.subspan(1));
    }
    if (options.fp16) {
      log << "GEMMs " << model.name << " (fp16)\n";
      MlpCsvWriter mlp_fp16 = open_mlp_csv(s, model, GemmDtype::kFp16);
      measure_gemms(s, model, GemmDtype::kFp16, mlp_fp16, tps);
    }
  }
  if (!shape_file_gemms.empty() && options.fp16) measure_shape_file(s, shape_file_gemms, GemmDtype::kFp16);
  // Again at the end: the timer may have fallen back to CUDA events during the run.
  info.timer = s.timer_kind() == TimerKind::kCupti ? "cupti" : "cuda_event";
  write_device_info_json(info, options.out_dir / "device.json");
  log << "measurements written to " << options.out_dir.string() << "\n";
  return s.report();
}

}  // namespace batchsim::calibration
