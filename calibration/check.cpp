// `batchsim-calibrate check`: each CUDA kernel's output on random inputs against the CPU
// reference (attention_reference.h) fed the identical BF16-rounded inputs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "calibration/attention_reference.h"
#include "calibration/bf16.h"
#include "calibration/calibrate.h"
#include "calibration/cuda_kernels.h"
#include "calibration/cuda_runtime_support.h"
#include "calibration/gemm_lt.h"

namespace batchsim::calibration {
namespace {

// BF16 output rounding is 2^-9 relative; __expf and a different summation order add a little.
constexpr double kAttentionAtol = 1e-2, kAttentionRtol = 1e-2;

std::vector<uint16_t> to_bf16(const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  std::transform(values.begin(), values.end(), bits.begin(), float_to_bf16_bits);
  return bits;
}

std::vector<float> from_bf16(const std::vector<uint16_t>& bits) {
  std::vector<float> values(bits.size());
  std::transform(bits.begin(), bits.end(), values.begin(), bf16_bits_to_float);
  return values;
}

template <class T>
DeviceBuffer<T> upload(const std::vector<T>& host) {
  DeviceBuffer<T> d(host.size());
  d.copy_from_host(host.data(), host.size());
  return d;
}

bool report(std::ostream& log, const std::string& what, double scaled_error) {
  const bool ok = scaled_error <= 1.0;
  log << (ok ? "  ok    " : "  FAIL  ") << what << "  (max error / tolerance = " << scaled_error << ")\n";
  return ok;
}

int check_decode(std::ostream& log, std::mt19937_64& rng) {
  struct Case {
    AttentionShape shape;
    std::vector<int> lens;
  };
  const std::vector<Case> cases = {
      {{32, 8, 128, 0}, {1, 16, 17, 100, 513, 1500}},
      {{32, 32, 128, 0}, {7, 2048, 300}},
      {{8, 1, 64, 0}, {9000, 33}},  // > 8192: several partitions, 36 KiB of logits single-pass
      {{16, 4, 64, 0}, {512, 1024, 5}},
  };
  int failures = 0;
  CudaStream stream;
  for (const Case& c : cases) {
    const DecodeCase d = make_random_decode_case(c.shape, c.lens, kDefaultBlockSizeTokens, true, rng);
    std::vector<float> expected(d.q.size());
    decode_attention_reference(d.shape, d.cache, d.batch, d.q, expected);
    const auto q = upload(to_bf16(d.q));
    const auto k = upload(to_bf16(d.cache.k));
    const auto v = upload(to_bf16(d.cache.v));
    const auto tables = upload(d.batch.block_tables);
    const auto lens = upload(d.batch.seq_lens_tokens);
    DeviceBuffer<uint16_t> out(d.q.size());
    const int max_len = *std::max_element(c.lens.begin(), c.lens.end());
    const int max_parts = ceil_div(max_len, kDecodePartitionSizeTokens);
    const size_t slots = static_cast<size_t>(d.batch.num_seqs()) * c.shape.num_heads * max_parts;
    DeviceBuffer<float> tmp_out(slots * c.shape.head_dim), max_logits(slots), exp_sums(slots);
    DecodeAttentionArgs args{q.get(),
                             k.get(),
                             v.get(),
                             tables.get(),
                             lens.get(),
                             out.get(),
                             d.batch.num_seqs(),
                             c.shape.num_heads,
                             c.shape.num_kv_heads,
                             c.shape.head_dim,
                             kDefaultBlockSizeTokens,
                             d.batch.max_blocks_per_seq,
                             max_len,
                             c.shape.softmax_scale(),
                             tmp_out.get(),
                             max_logits.get(),
                             exp_sums.get()};
    for (const int partition : {0, kDecodePartitionSizeTokens}) {
      BATCHSIM_CUDA_CHECK(cudaMemsetAsync(out.get(), 0xff, out.bytes(), stream.get()));  // NaN-fill
      launch_paged_decode_attention(args, partition, stream.get());
      stream.synchronize();
      std::vector<uint16_t> got(d.q.size());
      out.copy_to_host(got.data(), got.size());
      const std::string what = std::string(partition ? "decode partitioned" : "decode single-pass") + " heads " +
                               std::to_string(c.shape.num_heads) + "/" + std::to_string(c.shape.num_kv_heads) + " d " +
                               std::to_string(c.shape.head_dim) + " max ctx " + std::to_string(max_len);
      failures += !report(log, what, max_scaled_error(from_bf16(got), expected, kAttentionAtol, kAttentionRtol));
    }
  }
  return failures;
}

int check_prefill(std::ostream& log, std::mt19937_64& rng) {
  struct Case {
    AttentionShape shape;
    int prior, chunk;
  };
  const std::vector<Case> cases = {
      // One partial row tile; several tiles with prior context; one query; a tile boundary
      // of the tensor-core kernel (64 rows, 64 keys) crossed by both chunk and prior.
      {{32, 8, 128, 0}, 0, 100},    {{32, 8, 128, 0}, 700, 300}, {{8, 2, 64, 0}, 37, 1},
      {{16, 16, 128, 0}, 1000, 65}, {{8, 4, 64, 0}, 64, 129},
  };
  int failures = 0;
  CudaStream stream;
  for (const Case& c : cases) {
    const PrefillCase p = make_random_prefill_case(c.shape, c.prior, c.chunk, kDefaultBlockSizeTokens, true, rng);
    std::vector<float> expected(p.q.size());
    prefill_attention_reference(p.shape, p.cache, p.block_table, p.prior_tokens, p.chunk_tokens, p.q, expected);
    const auto q = upload(to_bf16(p.q));
    const auto k = upload(to_bf16(p.cache.k));
    const auto v = upload(to_bf16(p.cache.v));
    const auto table = upload(p.block_table);
    DeviceBuffer<uint16_t> out(p.q.size());
    for (const PrefillKernel kernel : {PrefillKernel::kTensorCore, PrefillKernel::kSimt}) {
      BATCHSIM_CUDA_CHECK(cudaMemsetAsync(out.get(), 0xff, out.bytes(), stream.get()));  // NaN-fill
      launch_prefill_attention(
          {q.get(), k.get(), v.get(), table.get(), out.get(), c.shape.num_heads, c.shape.num_kv_heads, c.shape.head_dim,
           kDefaultBlockSizeTokens, c.prior, c.chunk, c.shape.softmax_scale()},
          kernel, stream.get());
      stream.synchronize();
      std::vector<uint16_t> got(p.q.size());
      out.copy_to_host(got.data(), got.size());
      const std::string what = std::string(prefill_kernel_name(kernel)) + " heads " +
                               std::to_string(c.shape.num_heads) + "/" + std::to_string(c.shape.num_kv_heads) + " d " +
                               std::to_string(c.shape.head_dim) + " prior " + std::to_string(c.prior) + " chunk " +
                               std::to_string(c.chunk);
      failures += !report(log, what, max_scaled_error(from_bf16(got), expected, kAttentionAtol, kAttentionRtol));
    }
  }
  return failures;
}

// The GEMM layout trick (row-major Y = X·Wᵀ as column-major cuBLASLt) is easy to get
// transposed, and a batched GEMM's strides easy to get wrong; small BF16 GEMMs against a float
// loop catch both (the batched case is MLA's per-head uk / uv of a shape file).
int check_gemm(std::ostream& log, std::mt19937_64& rng) {
  int failures = 0;
  CublasLtHandle handle;
  CudaStream stream;
  DeviceBuffer<std::byte> workspace(kGemmWorkspaceBytes);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const auto& [m, n, k, groups] : {std::tuple{1, 96, 256, 1}, std::tuple{37, 160, 512, 1},
                                        std::tuple{256, 64, 128, 1}, std::tuple{5, 64, 128, 3}}) {
    const size_t mk = static_cast<size_t>(m) * k, nk = static_cast<size_t>(n) * k, mn = static_cast<size_t>(m) * n;
    std::vector<float> x(groups * mk), w(groups * nk);
    for (float& e : x) e = round_to_bf16(dist(rng));
    for (float& e : w) e = round_to_bf16(dist(rng));
    std::vector<float> expected(groups * mn, 0.0f);
    for (size_t g = 0; g < static_cast<size_t>(groups); ++g) {
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          float sum = 0;
          for (int kk = 0; kk < k; ++kk) {
            sum += x[g * mk + static_cast<size_t>(i) * k + kk] * w[g * nk + static_cast<size_t>(j) * k + kk];
          }
          expected[g * mn + static_cast<size_t>(i) * n + j] = sum;
        }
      }
    }
    const auto dx = upload(to_bf16(x));
    const auto dw = upload(to_bf16(w));
    DeviceBuffer<uint16_t> dy(expected.size());
    const LtGemm gemm(handle, GemmDtype::kBf16, m, n, k, groups);
    gemm.run(dx.get(), dw.get(), dy.get(), workspace.get(), workspace.bytes(), stream.get());
    stream.synchronize();
    std::vector<uint16_t> got(expected.size());
    dy.copy_to_host(got.data(), got.size());
    // |y| ~ sqrt(k/9); BF16 output rounding dominates: 2^-8 relative plus a small absolute.
    failures += !report(log,
                        "cuBLASLt bf16 GEMM M=" + std::to_string(m) + " N=" + std::to_string(n) +
                            " K=" + std::to_string(k) + (groups > 1 ? " x" + std::to_string(groups) + " batched" : ""),
                        max_scaled_error(from_bf16(got), expected, 0.05, 0.01));
  }
  return failures;
}

int check_copy(std::ostream& log, std::mt19937_64& rng) {
  std::vector<uint32_t> host((size_t{16} << 20) / 4);
  for (uint32_t& e : host) e = static_cast<uint32_t>(rng());
  const auto src = upload(host);
  DeviceBuffer<uint32_t> dst(host.size());
  int sm_count = 0;
  BATCHSIM_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  CudaStream stream;
  launch_copy(src.get(), dst.get(), src.bytes(), sm_count, stream.get());
  stream.synchronize();
  std::vector<uint32_t> got(host.size());
  dst.copy_to_host(got.data(), got.size());
  return report(log, "copy kernel, 16 MiB", got == host ? 0.0 : 2.0) ? 0 : 1;
}

}  // namespace

int run_kernel_checks(std::ostream& log, uint64_t seed) {
  std::mt19937_64 rng(seed);
  log << "checking CUDA kernels against the CPU reference (seed " << seed << ")\n";
  const int failures = check_decode(log, rng) + check_prefill(log, rng) + check_gemm(log, rng) + check_copy(log, rng);
  log << (failures == 0 ? "all kernel checks passed\n" : std::to_string(failures) + " kernel check(s) FAILED\n");
  return failures;
}

}  // namespace batchsim::calibration
