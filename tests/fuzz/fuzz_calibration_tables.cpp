// libFuzzer harness: the readers of calibration tables a user hands `validate` and `calibrate`:
// an aiconfigurator system folder (read_kernel_tables, hwmodel/fit/kernel_tables.h), InferSim's
// MLA attention tables (read_mla_tables, hwmodel/fit/mla_tables.h) and its expert grouped-GEMM
// tables (read_infersim_grouped_gemm, hwmodel/fit/infersim_grouped_gemm.h). The first byte picks
// the file the rest becomes; the folder's other files are one-row tables of the shipped layout.
// Seeds: tests/fuzz/seeds/calibration_tables (the shipped tables' first lines; scripts/fuzz.sh).
#include <filesystem>
#include <string>

#include "fuzz_input.h"
#include "hwmodel/base/error.h"
#include "hwmodel/fit/infersim_grouped_gemm.h"
#include "hwmodel/fit/kernel_tables.h"
#include "hwmodel/fit/mla_tables.h"

namespace fs = std::filesystem;

namespace {

// The aiconfigurator tables by the first byte (0-5) and system.yaml (6), each with one row of
// the shipped files (hwmodel/measured/aiconfigurator/h100_sxm).
struct KernelFile {
  const char* path;
  const char* text;
};
constexpr KernelFile kKernelFiles[] = {
    {"gemm/vllm/0.24.0/gemm_perf.csv",
     "framework,version,device,op_name,kernel_source,gemm_dtype,m,n,k,latency\n"
     "VLLM,0.24.0,NVIDIA H100 80GB HBM3,gemm,torch.nn.functional.linear,bfloat16,32768,65536,12288,60.3\n"},
    {"attention/vllm/0.24.0/context_attention_perf.csv",
     "framework,version,device,op_name,kernel_source,batch_size,isl,num_heads,num_key_value_heads,head_dim,"
     "beam_width,attn_dtype,kv_cache_dtype,step,window_size,latency\n"
     "VLLM,0.24.0,NVIDIA H100 80GB HBM3,context_attention,vllm_flash_attn_fa3,4,16384,64,64,64,1,bfloat16,fp8,0,0,"
     "17.4\n"},
    {"attention/vllm/0.24.0/generation_attention_perf.csv",
     "framework,version,device,op_name,kernel_source,batch_size,isl,num_heads,num_key_value_heads,head_dim,"
     "beam_width,attn_dtype,kv_cache_dtype,step,window_size,latency\n"
     "VLLM,0.24.0,NVIDIA H100 80GB HBM3,generation_attention,vllm_flash_attn_fa3,32,1,64,1,64,1,bfloat16,bfloat16,1,"
     "0,0.011\n"},
    {"comm/nccl/2.27.3/nccl_perf.csv",
     "framework,version,device,op_name,kernel_source,nccl_dtype,num_gpus,message_size,latency\n"
     "TRTLLM,2.27.3,NVIDIA H100 80GB HBM3,all_gather,NCCL,half,2,256,0.0055\n"},
    {"comm/vllm/0.24.0/custom_allreduce_perf.csv",
     "framework,version,device,op_name,kernel_source,allreduce_dtype,num_gpus,message_size,latency,backend\n"
     "vLLM,0.24.0,NVIDIA H100 80GB HBM3,all_reduce,vLLM_custom_graph,bfloat16,2,128,0.0043,vllm_graph\n"},
    {"moe/vllm/0.24.0/moe_perf.csv",
     "framework,version,device,op_name,kernel_source,moe_dtype,num_tokens,hidden_size,inter_size,topk,num_experts,"
     "moe_tp_size,moe_ep_size,distribution,latency\n"
     "VLLM,0.24.0,NVIDIA H100 80GB HBM3,moe,vllm_fp8moe_triton_tritonexperts,fp8_block,1,4096,2048,6,256,1,1,"
     "balanced,0.082\n"},
    {"system.yaml", "misc:\n  nccl_version: '2.27.3'\n"},
};
constexpr int kKernelFileCount = sizeof(kKernelFiles) / sizeof(kKernelFiles[0]);

// What every reader promises of a row it keeps: a time > 0.
template <typename Rows>
void check_times(const Rows& rows) {
  for (const auto& r : rows) {
    if (!(r.seconds > 0)) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const fs::path root = batchsim::fuzz::as_file(data, 0, "unused").parent_path() / "calibration";
  fs::remove_all(root);
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int which = data[0] % (kKernelFileCount + 4);
  try {
    if (which < kKernelFileCount) {
      const fs::path system = root / "h100_sxm";
      for (int i = 0; i < kKernelFileCount; ++i)
        batchsim::fuzz::write_file(system / kKernelFiles[i].path, i == which ? text : kKernelFiles[i].text);
      const batchsim::KernelTables t = batchsim::read_kernel_tables(system, "vllm");
      if (t.files_read.empty()) __builtin_trap();
      check_times(t.gemm);
      check_times(t.attention);
      check_times(t.collectives);
      check_times(t.moe);
    } else if (which < kKernelFileCount + 2) {
      const bool decode = which == kKernelFileCount;
      const fs::path mla = root / "h800" / "mla";
      batchsim::fuzz::write_file(
          mla / "decode/128-512-64.csv",
          decode ? text : "dtype,kv_dtype,batch_size,kv_len,latency_us,mfu\nbf16,bf16,1,1024,20.91,0.014\n");
      batchsim::fuzz::write_file(mla / "prefill/128-128-64.csv",
                                 decode ? "dtype,seq_len,latency_us,mfu\nbf16,1024,116.880,0.372\n" : text);
      const batchsim::MlaTables t = batchsim::read_mla_tables(mla);
      if (t.decode.empty() && t.prefill.empty()) __builtin_trap();  // no table is a UserError
      check_times(t.decode);
      check_times(t.prefill);
    } else {
      const bool prefill = which == kKernelFileCount + 2;
      const fs::path dir = root / "h800" / "grouped_gemm";
      batchsim::fuzz::write_file(
          dir / "prefill/data.csv",
          prefill ? text
                  : "num_experts,num_gpus,num_local_experts,topk,hidden_size,intermediate_size,seq_len_per_gpu,"
                    "tokens_per_expert,up_proj_us,up_mfu,down_proj_us,down_mfu\n"
                    "256,1,256,8,7168,2048,1024,32,3249.0,0.074494,1541.0,0.077847\n");
      batchsim::fuzz::write_file(
          dir / "decode/data.csv",
          prefill ? "num_experts,num_gpus,num_local_experts,topk,hidden_size,intermediate_size,batch_size_per_gpu,"
                    "tokens_per_expert,up_proj_us,up_mfu,down_proj_us,down_mfu\n"
                    "256,1,256,8,7168,2048,32,1,1297.0,0.002905,721.665,0.002796\n"
                  : text);
      for (const batchsim::GroupedGemmRow& r : batchsim::read_infersim_grouped_gemm(dir)) {
        if (!(r.up_s > 0 && r.down_s > 0)) __builtin_trap();
      }
    }
  } catch (const batchsim::UserError&) {
  }
  return 0;
}
