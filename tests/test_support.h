// Helpers shared by every test suite.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace batchsim::testing {

// The real data the repository ships: traces beside the experiments that replay them
// (experiments/data/traces/), measurement tables beside the fits that read them (hwmodel/measured/).
// $BATCHSIM_DATA_DIR, when set, replaces both by DIR/traces and DIR/measured, so the tests can
// run on a user's own copy of the same layout. A missing folder fails with a clear message.
std::filesystem::path traces_dir();
std::filesystem::path measured_dir();
// dir/relative, or dir/relative.gz where only the gzip-compressed file exists (the repository
// stores its large tables compressed; a user's copy may not be).
std::filesystem::path data_file(const std::filesystem::path& dir, const std::string& relative);
// The repository root (for shipped experiment files, profiles, plots).
std::filesystem::path source_dir();
// A fresh empty directory under the build tree for a test's outputs, inside a folder of the
// running test's own (test-scratch/<Suite>.<Test>/name), so tests run in parallel never share one.
std::filesystem::path scratch_dir(const std::string& name);

// Writes `contents` byte for byte (no newline translation) to dir/name, creating `dir`, and
// returns the path. Throws std::runtime_error when the file cannot be written, so that a test
// of a reader never silently reads a file that is not there.
std::filesystem::path write_text_file(const std::filesystem::path& dir, const std::string& name,
                                      const std::string& contents);

// Writes `contents` gzip-compressed to dir/name (as `gzip` would) and returns the path.
std::filesystem::path write_gzip_file(const std::filesystem::path& dir, const std::string& name,
                                      const std::string& contents);

// The message of the UserError that `f` throws. When `f` returns normally the current test
// fails and the result is "" (any other exception propagates and fails the test too).
std::string user_error_of(const std::function<void()>& f);

// The header line of aiconfigurator's silicon files (hwmodel/measured/README.md), for tests that
// write their own rows of measured serving benchmarks.
inline const std::string kSiliconHeader =
    "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,"
    "moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,"
    "prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,"
    "prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,"
    "decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n";

// The whole file as it is on disk (empty when it cannot be read: the assertion on it then fails).
std::string read_text_file(const std::filesystem::path& path);

}  // namespace batchsim::testing
