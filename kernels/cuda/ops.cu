// kernels/cuda/ops.cu — the CUDA Ops table (kernels/ops.h): every entry queues its work on the one
// stream of common.cuh (created on first use: call cuda_select_device before anything else), memory
// entries through cudaMalloc / cudaMemsetAsync / cudaMemcpyAsync on that stream. Host<->device
// copies return when the copy is complete; kernels and device-to-device copies return at once.
// Also the device queries of ops.h. cuda_set_bf16_gemm lives with the GEMM (gemm.cu).
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda/common.cuh"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/residual.h"

namespace sftdp {
namespace {

using cuda::stream;

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, stream()));
  // Zero-filled for whoever touches it next, on any stream (the NCCL communicator has its own).
  CHECK_CUDA(cudaStreamSynchronize(stream()));
  return p;
}

void device_free(void* p) {
  if (!p) return;
  CHECK_CUDA(cudaStreamSynchronize(stream()));  // queued kernels may still use it
  CHECK_CUDA(cudaFree(p));
}

void device_zero(void* p, size_t bytes) { CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, stream())); }

void host_to_device(void* dst, const void* src, size_t bytes) {
  CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()));
  CHECK_CUDA(cudaStreamSynchronize(stream()));  // the caller may free or reuse src on return
}

void device_to_host(void* dst, const void* src, size_t bytes) {
  CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
  CHECK_CUDA(cudaStreamSynchronize(stream()));
}

void device_to_device(void* dst, const void* src, size_t bytes) {
  CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
}

void synchronize() { CHECK_CUDA(cudaStreamSynchronize(stream())); }

const Ops kCudaOps = {
    .name = "cuda",
    .alloc = device_alloc,
    .free = device_free,
    .zero = device_zero,
    .to_device = host_to_device,
    .to_host = device_to_host,
    .copy = device_to_device,
    .synchronize = synchronize,
    .encoder_fwd = [](float* out, const int32_t* inp, const int32_t* pos, const float* wte, const float* wpe, int B,
                      int T, int C) { cuda::encoder_fwd(out, inp, pos, wte, wpe, B, T, C, stream()); },
    .encoder_bwd = [](float* dwte, float* dwpe, const float* dout, const int32_t* inp, const int32_t* pos, int B,
                      int T, int C) { cuda::encoder_bwd(dwte, dwpe, dout, inp, pos, B, T, C, stream()); },
    .layernorm_fwd = [](float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C) {
      cuda::layernorm_fwd(out, mean, rstd, inp, weight, bias, N, C, stream());
    },
    .layernorm_bwd = [](float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
      cuda::layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, stream());
    },
    .matmul_fwd = [](float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                     int OC) { cuda::matmul_fwd(out, inp, weight, bias, N, IC, OC, stream()); },
    .matmul_bwd = [](float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
      cuda::matmul_bwd(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, stream());
    },
    .attention_fwd = [](float* out, float* att, const float* qkv, const int32_t* seg, int B, int T, int C,
                        int NH) { cuda::attention_fwd(out, att, qkv, seg, B, T, C, NH, stream()); },
    .attention_bwd = [](float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B,
                        int T, int C, int NH) {
      cuda::attention_bwd(dqkv, datt, dout, qkv, att, B, T, C, NH, stream());
    },
    .gelu_fwd = [](float* out, const float* inp, size_t N) { cuda::gelu_fwd(out, inp, N, stream()); },
    .gelu_bwd = [](float* dinp, const float* inp, const float* dout, size_t N) {
      cuda::gelu_bwd(dinp, inp, dout, N, stream());
    },
    .residual_fwd = [](float* out, const float* a, const float* b, size_t N) {
      cuda::residual_fwd(out, a, b, N, stream());
    },
    .cross_entropy_fwd_bwd = [](float* sums, float* dlogits, const float* logits, const int32_t* targets,
                                const float* weights, int N, int V) {
      cuda::cross_entropy_fwd_bwd(sums, dlogits, logits, targets, weights, N, V, stream());
    },
    .adamw_update = [](float* params, float* m, float* v, const float* grads, size_t N, size_t n_decay, float lr,
                       float b1, float b2, float eps, float weight_decay, int t, float grad_scale) {
      cuda::adamw_update(params, m, v, grads, N, n_decay, lr, b1, b2, eps, weight_decay, t, grad_scale, stream());
    },
    .sum_squares = [](float* out, const float* x, size_t N) { cuda::sum_squares(out, x, N, stream()); },
};

}  // namespace

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

const Ops* cuda_ops() { return cuda_device_available() ? &kCudaOps : nullptr; }

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
