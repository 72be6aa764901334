// kernels/ops.h — the one table through which model and optimiser code reach a device
// (ggml's backend vtable, in miniature). Filled once per device in kernels/cpu/ops.cpp and
// kernels/cuda/ops.cu and picked once from `hardware:` (and, on the GPU, the GEMM input type).
// Every pointer argument lives in that device's memory ("device memory" is host memory for the
// CPU table). Kernel entries have exactly the types of the sftdp::cpu:: twins (one signature per
// kernel); the CUDA tables run the sftdp::cuda:: twins, which take the same arguments plus a
// stream, on the table's one stream. All entries are required. Beside the kernels, each table says how
// much working memory of its own they keep (scratch_bytes), so that the memory plan need not know any
// kernel's internals.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/act16.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/cross_entropy.h"
#include "kernels/encoder.h"
#include "kernels/gather.h"
#include "kernels/gelu.h"
#include "kernels/kv_cache.h"
#include "kernels/layernorm.h"
#include "kernels/lora.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace sftdp {

// What a table's own working memory is sized by (Ops::scratch_bytes): the model's shape, the rows
// and tokens of a micro-step, the fused head's chunk of rows and (CPU) the threads of a rank.
struct ScratchShape {
  int B = 1, T = 1;                     // rows and tokens per micro-step
  int C = 0, F = 0, V = 0;              // width, MLP width (mlp_dim), vocabulary
  int NH = 0, KVH = 0, HS = 0;          // query heads, key/value heads, head size
  int qkv_dim = 0, attn_dim = 0;        // widths of the fused q|k|v rows and of attention's output
  int head_rows = 0;                    // rows per chunk of the fused LM head
  int context_T = 0;                    // context parallelism: the gathered keys per row (0 without)
  int threads = 1;                      // CPU: OpenMP threads per rank
};
using ScratchBytes = size_t (*)(const ScratchShape& shape);

struct Ops {
  const char* name;  // "cpu" | "cuda" | "cuda-bf16" (| "cpu-bf16": cpu_bf16_ops, tests)
  // --- memory ---
  void* (*alloc)(size_t bytes);  // zero-filled; throws / dies on failure
  void (*free)(void* p);
  void (*zero)(void* p, size_t bytes);
  void (*to_device)(void* dst, const void* src, size_t bytes);  // host -> device
  void (*to_host)(void* dst, const void* src, size_t bytes);    // device -> host
  // Host memory the device copies to and from at full speed (CUDA: page-locked, cudaMallocHost; the CPU
  // tables: plain memory, which is that already); train::snapshot's checkpoint copy lives in it
  void* (*host_alloc)(size_t bytes);
  void (*host_free)(void* p);
  // host -> device without waiting for the device: src may be reused when it returns (the CUDA tables stage it in
  // pinned memory, kernels/cuda/staging.cu); dst is written when the table's queue reaches the copy
  void (*to_device_async)(void* dst, const void* src, size_t bytes);
  void (*copy)(void* dst, const void* src, size_t bytes);       // device -> device
  void (*synchronize)();                                        // wait for queued work
  // The queue the kernel and memory entries run on, for code that must order its own work after
  // theirs (the NCCL communicator): the cudaStream_t of the CUDA tables (created on first use, on
  // the current device), nullptr for the CPU table (every CPU entry has finished when it returns).
  void* (*stream)();
  // --- kernels (see kernels/<op>.h for shapes and the accumulation contract) ---
  decltype(&cpu::encoder_fwd) encoder_fwd;
  decltype(&cpu::encoder_bwd) encoder_bwd;
  decltype(&cpu::layernorm_fwd) layernorm_fwd;
  decltype(&cpu::layernorm_bwd) layernorm_bwd;
  decltype(&cpu::matmul_fwd) matmul_fwd;
  decltype(&cpu::matmul_bwd) matmul_bwd;
  decltype(&cpu::attention_fwd) attention_fwd;
  decltype(&cpu::attention_bwd) attention_bwd;
  decltype(&cpu::gelu_fwd) gelu_fwd;
  decltype(&cpu::gelu_bwd) gelu_bwd;
  decltype(&cpu::residual_fwd) residual_fwd;
  decltype(&cpu::rmsnorm_fwd) rmsnorm_fwd;
  decltype(&cpu::rmsnorm_bwd) rmsnorm_bwd;
  decltype(&cpu::qk_rmsnorm_fwd) qk_rmsnorm_fwd;
  decltype(&cpu::qk_rmsnorm_bwd) qk_rmsnorm_bwd;
  decltype(&cpu::rope_fwd) rope_fwd;
  decltype(&cpu::rope_bwd) rope_bwd;
  decltype(&cpu::swiglu_fwd) swiglu_fwd;
  decltype(&cpu::swiglu_bwd) swiglu_bwd;
  decltype(&cpu::cross_entropy_fwd_bwd) cross_entropy_fwd_bwd;
  decltype(&cpu::gather_rows) gather_rows;
  decltype(&cpu::scatter_rows) scatter_rows;
  // Context parallelism (issue 37; null where the table has no context-parallel attention yet: the CUDA tables)
  decltype(&cpu::copy_strided_rows) copy_strided_rows;
  decltype(&cpu::attention_cp_fwd) attention_cp_fwd;
  decltype(&cpu::attention_cp_bwd) attention_cp_bwd;
  decltype(&cpu::adamw_update) adamw_update;
  decltype(&cpu::sum_squares) sum_squares;
  decltype(&cpu::adamw_step) adamw_step;  // the update decided on the device (kernels/adamw.h)
  decltype(&cpu::bf16_pack) bf16_pack;  // bf16 activation storage (dtype: bfloat16)
  decltype(&cpu::bf16_unpack) bf16_unpack;
  decltype(&cpu::bf16_mirror) bf16_mirror;  // bf16 copies the bf16 GEMMs read (kernels/bf16.h)
  decltype(&cpu::lora_fwd) lora_fwd;  // LoRA adapters (issue 17): Linear-layer GEMMs, as matmul
  decltype(&cpu::lora_bwd) lora_bwd;
  decltype(&cpu::lora_dropout) lora_dropout;
  decltype(&cpu::kv_append) kv_append;  // generation's key/value cache (src/generate)
  decltype(&cpu::kv_attention_fwd) kv_attention_fwd;
  // --- the bf16 activation path (kernels/act16.h): the cuda-bf16 table's training step stores bf16 between
  // these (Model's act16 path); the CPU table carries their CPU twins, for tests ---
  struct Act16 {
    decltype(&cpu::act16::layernorm_fwd) layernorm_fwd;
    decltype(&cpu::act16::layernorm_bwd) layernorm_bwd;
    decltype(&cpu::act16::rmsnorm_fwd) rmsnorm_fwd;
    decltype(&cpu::act16::rmsnorm_bwd) rmsnorm_bwd;
    decltype(&cpu::act16::qk_rmsnorm_fwd) qk_rmsnorm_fwd;
    decltype(&cpu::act16::qk_rmsnorm_bwd) qk_rmsnorm_bwd;
    decltype(&cpu::act16::rope_fwd) rope_fwd;
    decltype(&cpu::act16::rope_bwd) rope_bwd;
    decltype(&cpu::act16::swiglu_fwd) swiglu_fwd;
    decltype(&cpu::act16::swiglu_bwd) swiglu_bwd;
    decltype(&cpu::act16::attention_fwd) attention_fwd;
    decltype(&cpu::act16::attention_bwd) attention_bwd;
    decltype(&cpu::act16::linear_fwd) linear_fwd;
    decltype(&cpu::act16::linear_bwd) linear_bwd;
    decltype(&cpu::act16::cross_entropy_fwd_bwd) cross_entropy_fwd_bwd;
    decltype(&cpu::act16::gather_rows) gather_rows;
    decltype(&cpu::act16::scatter_rows) scatter_rows;
    // context parallelism (its attention for head sizes on tensor cores; the k/v moves)
    decltype(&cpu::act16::attention_cp_fwd) attention_cp_fwd;
    decltype(&cpu::act16::attention_cp_bwd) attention_cp_bwd;
    decltype(&cpu::act16::copy_strided_rows) copy_strided_rows;
  } act16;
  // --- CUDA graphs (kernels/cuda/graphs.cu; null in the CPU tables, which run every pass as it comes) ---
  // A capture records what the table queues between begin and end without running it; launch queues all of it
  // again, in order, as one operation (src/model/graph_cache.h decides when).
  struct Graphs {
    bool (*usable)();              // graphs may be captured and launched now (not inside a profile window)
    void (*begin)();               // capture what the table's stream queues from now on
    void* (*end)();                // stop capturing: an executable graph of it
    void (*launch)(void* graph);   // queue the graph's work on the table's stream
    void (*destroy)(void* graph);  // after its last launch
  } graphs;
  // --- sizes ---
  // Bytes of working memory the kernels above keep for themselves (grow-only, beside the buffers
  // their callers allocate) at this shape, an estimate from above: what the memory plan counts as
  // kernel scratch (src/train/memory_plan.cpp). CPU: attention's tiles per thread; CUDA: the cuBLASLt
  // workspace and the launchers' scratch slots (cuda_scratch_bytes).
  ScratchBytes scratch_bytes;
};

// What the Linear layers' GEMMs (matmul_fwd / matmul_bwd, lora_fwd / lora_bwd) and attention's q, k, v and dO read on
// the GPU: the fp32 inputs, or copies rounded to bf16. Accumulation, outputs, bias, attention's
// softmax and every other kernel stay fp32 either way.
enum class GemmInputs { kFp32, kBf16 };

// True for the table whose Linear GEMMs read bf16-rounded inputs (the table's name is its identity):
// there, storing what only those GEMMs read as bf16 changes no result (Model's bf16 activations), and with
// bf16 activations the model runs the act16 path (kernels/act16.h). Also "cpu-bf16" (cpu_bf16_ops).
inline bool gemm_inputs_bf16(const Ops& ops) {
  return std::string_view(ops.name) == "cuda-bf16" || std::string_view(ops.name) == "cpu-bf16";
}

const Ops& cpu_ops();
// The CPU table under the bf16 table's identity, for tests: a model made on it with bf16 activations runs the act16
// path on the act16 CPU twins, which round where the CUDA twins do (its fp32 GEMM entries do not round their inputs:
// only the act16 path is the cuda-bf16 table's twin).
const Ops& cpu_bf16_ops();
// The scratch_bytes entry of the CUDA table whose GEMMs read `inputs`, in every build:
// `sft_train --plan` sizes a GPU run on a machine that has no GPU, or a build without CUDA
// (kernels/cuda/scratch.h holds the formula, next to the launchers it counts).
ScratchBytes cuda_scratch_bytes(GemmInputs inputs);
// The CUDA table whose Linear GEMMs read `inputs`, or nullptr when built without CUDA or when no
// CUDA device is usable. Both CUDA tables share one stream and one set of scratch buffers.
const Ops* cuda_ops(GemmInputs inputs);
// True when built with CUDA and cudaGetDeviceCount reports a device ("driver insufficient" = no).
bool cuda_device_available();
// GPU builds only: picks this rank's device. With CUDA_VISIBLE_DEVICES narrowed to one device
// (srun --gpus-per-task) that device; else device local_rank % device_count. Returns its index.
int cuda_select_device(int local_rank);

}  // namespace sftdp
