// kernels/cuda/ops.cu — the two CUDA Ops tables (kernels/ops.h; fp32 or bf16 Linear GEMM inputs):
// every entry queues its work on the one stream of common.cuh (created on first use: call
// cuda_select_device before anything else), memory entries through cudaMalloc / cudaMemsetAsync /
// cudaMemcpyAsync on that stream. Host<->device copies return when the copy is complete; kernels
// and device-to-device copies return at once. Kernel entries are the cuda:: twins behind one
// generic adapter (OnStream) that appends the stream; their working memory is kernels/cuda/scratch.h's.
// Also the device queries of ops.h.
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/graphs.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/staging.cuh"
#include "kernels/ops.h"

namespace sftdp {
namespace {

using cuda::stream;

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  cuda::memset_async(p, 0, bytes, stream());
  // Zero-filled for whoever touches it next, on any stream (the NCCL communicator has its own).
  CHECK_CUDA(cudaStreamSynchronize(stream()));
  return p;
}

void device_free(void* p) {
  if (!p) return;
  CHECK_CUDA(cudaStreamSynchronize(stream()));  // queued kernels may still use it
  CHECK_CUDA(cudaFree(p));
}

void device_zero(void* p, size_t bytes) { cuda::memset_async(p, 0, bytes, stream()); }

void host_to_device(void* dst, const void* src, size_t bytes) {
  cuda::memcpy_async(dst, src, bytes, cudaMemcpyHostToDevice, stream());
  CHECK_CUDA(cudaStreamSynchronize(stream()));  // the caller may free or reuse src on return
}

void host_to_device_async(void* dst, const void* src, size_t bytes) { cuda::stage_to_device(dst, src, bytes, stream()); }

void device_to_host(void* dst, const void* src, size_t bytes) {
  cuda::memcpy_async(dst, src, bytes, cudaMemcpyDeviceToHost, stream());
  CHECK_CUDA(cudaStreamSynchronize(stream()));
}

void* pinned_alloc(size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMallocHost(&p, bytes));
  return p;
}

void pinned_free(void* p) { CHECK_CUDA(cudaFreeHost(p)); }

void device_to_device(void* dst, const void* src, size_t bytes) {
  cuda::memcpy_async(dst, src, bytes, cudaMemcpyDeviceToDevice, stream());
}

void synchronize() { CHECK_CUDA(cudaStreamSynchronize(stream())); }

void* table_stream() { return stream(); }

// One adapter for every kernel entry: the CUDA table's entry for op has the cpu:: twin's type R(Args...)
// and calls the cuda:: twin with the same arguments plus the table's stream. The cuda:: twin must take
// exactly (Args..., cudaStream_t): anything else fails to compile here, naming the op.
template <class CpuFn>
struct OnStream;
template <class R, class... Args>
struct OnStream<R (*)(Args...)> {
  using CudaFn = R (*)(Args..., cudaStream_t);
  template <CudaFn cuda_fn>
  static R run(Args... args) {
    return cuda_fn(args..., stream());
  }
};

template <auto cpu_fn, auto cuda_fn>
constexpr decltype(cpu_fn) on_stream() {
  using Adapter = OnStream<decltype(cpu_fn)>;
  static_assert(std::is_same_v<decltype(cuda_fn), typename Adapter::CudaFn>,
                "a sftdp::cuda:: twin must take the sftdp::cpu:: twin's arguments plus a trailing cudaStream_t");
  return &Adapter::template run<cuda_fn>;
}

// The two tables differ only in the Linear layers' (and LoRA adapters') GEMM inputs (GemmInputs in kernels/ops.h) and
// attention: the bf16 table's runs on tensor cores (kernels/cuda/attention/tensor_cores.cu) with bf16 q, k, v, dO, P and dS.
template <GemmInputs inputs>
constexpr Ops make_cuda_ops() {
  constexpr bool bf16 = inputs == GemmInputs::kBf16;
  return Ops{
      .name = bf16 ? "cuda-bf16" : "cuda",
      .alloc = device_alloc,
      .free = device_free,
      .zero = device_zero,
      .to_device = host_to_device,
      .to_host = device_to_host,
      .host_alloc = pinned_alloc,
      .host_free = pinned_free,
      .to_device_async = host_to_device_async,
      .copy = device_to_device,
      .synchronize = synchronize,
      .stream = table_stream,
      .encoder_fwd = on_stream<&cpu::encoder_fwd, &cuda::encoder_fwd>(),
      .encoder_bwd = on_stream<&cpu::encoder_bwd, &cuda::encoder_bwd>(),
      .layernorm_fwd = on_stream<&cpu::layernorm_fwd, &cuda::layernorm_fwd>(),
      .layernorm_bwd = on_stream<&cpu::layernorm_bwd, &cuda::layernorm_bwd>(),
      .matmul_fwd = bf16 ? on_stream<&cpu::matmul_fwd, &cuda::matmul_fwd_bf16>()
                         : on_stream<&cpu::matmul_fwd, &cuda::matmul_fwd>(),
      .matmul_bwd = bf16 ? on_stream<&cpu::matmul_bwd, &cuda::matmul_bwd_bf16>()
                         : on_stream<&cpu::matmul_bwd, &cuda::matmul_bwd>(),
      .attention_fwd = bf16 ? on_stream<&cpu::attention_fwd, &cuda::attention_tc_fwd>()
                            : on_stream<&cpu::attention_fwd, &cuda::attention_fwd>(),
      .attention_bwd = bf16 ? on_stream<&cpu::attention_bwd, &cuda::attention_tc_bwd>()
                            : on_stream<&cpu::attention_bwd, &cuda::attention_bwd>(),
      .gelu_fwd = on_stream<&cpu::gelu_fwd, &cuda::gelu_fwd>(),
      .gelu_bwd = on_stream<&cpu::gelu_bwd, &cuda::gelu_bwd>(),
      .residual_fwd = on_stream<&cpu::residual_fwd, &cuda::residual_fwd>(),
      .rmsnorm_fwd = on_stream<&cpu::rmsnorm_fwd, &cuda::rmsnorm_fwd>(),
      .rmsnorm_bwd = on_stream<&cpu::rmsnorm_bwd, &cuda::rmsnorm_bwd>(),
      .qk_rmsnorm_fwd = on_stream<&cpu::qk_rmsnorm_fwd, &cuda::qk_rmsnorm_fwd>(),
      .qk_rmsnorm_bwd = on_stream<&cpu::qk_rmsnorm_bwd, &cuda::qk_rmsnorm_bwd>(),
      .rope_fwd = on_stream<&cpu::rope_fwd, &cuda::rope_fwd>(),
      .rope_bwd = on_stream<&cpu::rope_bwd, &cuda::rope_bwd>(),
      .swiglu_fwd = on_stream<&cpu::swiglu_fwd, &cuda::swiglu_fwd>(),
      .swiglu_bwd = on_stream<&cpu::swiglu_bwd, &cuda::swiglu_bwd>(),
      .cross_entropy_fwd_bwd = on_stream<&cpu::cross_entropy_fwd_bwd, &cuda::cross_entropy_fwd_bwd>(),
      .gather_rows = on_stream<&cpu::gather_rows, &cuda::gather_rows>(),
      .scatter_rows = on_stream<&cpu::scatter_rows, &cuda::scatter_rows>(),
      .copy_strided_rows = on_stream<&cpu::copy_strided_rows, &cuda::copy_strided_rows>(),
      // context parallelism: the bf16 table's on tensor cores (as its whole-row attention), the fp32 table's on
      // CUDA cores
      .attention_cp_fwd = bf16 ? on_stream<&cpu::attention_cp_fwd, &cuda::attention_tc_cp_fwd>()
                               : on_stream<&cpu::attention_cp_fwd, &cuda::attention_cp_fwd>(),
      .attention_cp_bwd = bf16 ? on_stream<&cpu::attention_cp_bwd, &cuda::attention_tc_cp_bwd>()
                               : on_stream<&cpu::attention_cp_bwd, &cuda::attention_cp_bwd>(),
      .adamw_update = on_stream<&cpu::adamw_update, &cuda::adamw_update>(),
      .sum_squares = on_stream<&cpu::sum_squares, &cuda::sum_squares>(),
      .adamw_step = on_stream<&cpu::adamw_step, &cuda::adamw_step>(),
      .bf16_pack = on_stream<&cpu::bf16_pack, &cuda::bf16_pack>(),
      .bf16_unpack = on_stream<&cpu::bf16_unpack, &cuda::bf16_unpack>(),
      .bf16_mirror = on_stream<&cpu::bf16_mirror, &cuda::bf16_mirror>(),
      .lora_fwd =
          bf16 ? on_stream<&cpu::lora_fwd, &cuda::lora_fwd_bf16>() : on_stream<&cpu::lora_fwd, &cuda::lora_fwd>(),
      .lora_bwd =
          bf16 ? on_stream<&cpu::lora_bwd, &cuda::lora_bwd_bf16>() : on_stream<&cpu::lora_bwd, &cuda::lora_bwd>(),
      .lora_dropout = on_stream<&cpu::lora_dropout, &cuda::lora_dropout>(),
      .kv_append = on_stream<&cpu::kv_append, &cuda::kv_append>(),
      .kv_attention_fwd = on_stream<&cpu::kv_attention_fwd, &cuda::kv_attention_fwd>(),
      .act16 =  // the bf16 activation path (kernels/act16.h)
          {
              .layernorm_fwd = on_stream<&cpu::act16::layernorm_fwd, &cuda::act16::layernorm_fwd>(),
              .layernorm_bwd = on_stream<&cpu::act16::layernorm_bwd, &cuda::act16::layernorm_bwd>(),
              .rmsnorm_fwd = on_stream<&cpu::act16::rmsnorm_fwd, &cuda::act16::rmsnorm_fwd>(),
              .rmsnorm_bwd = on_stream<&cpu::act16::rmsnorm_bwd, &cuda::act16::rmsnorm_bwd>(),
              .qk_rmsnorm_fwd = on_stream<&cpu::act16::qk_rmsnorm_fwd, &cuda::act16::qk_rmsnorm_fwd>(),
              .qk_rmsnorm_bwd = on_stream<&cpu::act16::qk_rmsnorm_bwd, &cuda::act16::qk_rmsnorm_bwd>(),
              .rope_fwd = on_stream<&cpu::act16::rope_fwd, &cuda::act16::rope_fwd>(),
              .rope_bwd = on_stream<&cpu::act16::rope_bwd, &cuda::act16::rope_bwd>(),
              .swiglu_fwd = on_stream<&cpu::act16::swiglu_fwd, &cuda::act16::swiglu_fwd>(),
              .swiglu_bwd = on_stream<&cpu::act16::swiglu_bwd, &cuda::act16::swiglu_bwd>(),
              .attention_fwd = on_stream<&cpu::act16::attention_fwd, &cuda::act16::attention_fwd>(),
              .attention_bwd = on_stream<&cpu::act16::attention_bwd, &cuda::act16::attention_bwd>(),
              .linear_fwd = on_stream<&cpu::act16::linear_fwd, &cuda::act16::linear_fwd>(),
              .linear_bwd = on_stream<&cpu::act16::linear_bwd, &cuda::act16::linear_bwd>(),
              .cross_entropy_fwd_bwd =
                  on_stream<&cpu::act16::cross_entropy_fwd_bwd, &cuda::act16::cross_entropy_fwd_bwd>(),
              .gather_rows = on_stream<&cpu::act16::gather_rows, &cuda::act16::gather_rows>(),
              .scatter_rows = on_stream<&cpu::act16::scatter_rows, &cuda::act16::scatter_rows>(),
              .attention_cp_fwd = on_stream<&cpu::act16::attention_cp_fwd, &cuda::act16::attention_cp_fwd>(),
              .attention_cp_bwd = on_stream<&cpu::act16::attention_cp_bwd, &cuda::act16::attention_cp_bwd>(),
              .copy_strided_rows = on_stream<&cpu::act16::copy_strided_rows, &cuda::act16::copy_strided_rows>(),
          },
      .graphs = {cuda::graph_usable, cuda::graph_begin, cuda::graph_end, cuda::graph_launch, cuda::graph_destroy},
      .scratch_bytes = &cuda::scratch_bytes<inputs>,
  };
}

constexpr Ops kCudaFp32 = make_cuda_ops<GemmInputs::kFp32>();
constexpr Ops kCudaBf16 = make_cuda_ops<GemmInputs::kBf16>();

}  // namespace

ScratchBytes cuda_scratch_bytes(GemmInputs inputs) { return cuda::scratch_entry(inputs); }

bool cuda_device_available() {
  // Not CHECK_CUDA: failure is the answer here. cudaErrorNoDevice and
  // cudaErrorInsufficientDriver (a toolkit newer than the driver) both mean "no usable device".
  static const bool available = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
      return false;
    }
    return count > 0;
  }();
  return available;
}

const Ops* cuda_ops(GemmInputs inputs) {
  if (!cuda_device_available()) return nullptr;
  return inputs == GemmInputs::kBf16 ? &kCudaBf16 : &kCudaFp32;
}

int cuda_select_device(int local_rank) {
  SFTDP_ASSERT(cuda_device_available(), "cuda_select_device: no usable CUDA device");
  SFTDP_ASSERT(local_rank >= 0, "cuda_select_device: negative local rank");
  int count = 0;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  // One visible device (CUDA_VISIBLE_DEVICES narrowed by srun --gpus-per-task): that one.
  const int device = count == 1 ? 0 : local_rank % count;
  CHECK_CUDA(cudaSetDevice(device));
  return device;
}

}  // namespace sftdp
