// kernels/cpu/ops.cpp — the CPU device table: host memory and the sftdp::cpu kernel twins.
// Memory from alloc is 64-byte aligned and zero-filled; copies are memcpy; synchronize is a
// no-op and there is no stream, because every CPU kernel has finished when it returns. The GPU
// queries of ops.h live in kernels/cuda/ops.cu, or kernels/no_cuda.cpp in a build without CUDA.
#include "kernels/ops.h"

#include <cstdlib>
#include <new>
#include <cstring>
#include <string>

#include "sftdp/check.h"

namespace sftdp {

namespace {

constexpr size_t kAlignment = 64;  // one cache line; also the widest vector register

void* host_alloc(size_t bytes) {
  // aligned_alloc wants a size that is a positive multiple of the alignment
  const size_t rounded = bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (!p)
    die_internal("libc", "aligned_alloc", "out of host memory for " + std::to_string(bytes) + " bytes",
                 __FILE__, __LINE__);
  std::memset(p, 0, rounded);
  return p;
}
void host_free(void* p) { std::free(p); }
// Ops::host_alloc: a CPU rank's host memory is plain memory (not zero-filled: the caller writes it).
void* plain_alloc(size_t bytes) { return ::operator new(bytes); }
void plain_free(void* p) { ::operator delete(p); }
void host_zero(void* p, size_t bytes) { std::memset(p, 0, bytes); }
void host_copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void host_synchronize() {}
void* no_stream() { return nullptr; }
// The CPU kernels' own working memory: attention's tiles and strips per thread and its per-head k/v
// gradients (AdamW's and the cross-entropy's per-row partial sums are small beside them).
size_t host_scratch_bytes(const ScratchShape& s) {
  return cpu::attention_scratch_bytes(s.B, s.T, s.NH, s.KVH, s.HS, s.threads);
}

}  // namespace

const Ops& cpu_ops() {
  static const Ops ops{
      .name = "cpu",
      .alloc = host_alloc,
      .free = host_free,
      .zero = host_zero,
      .to_device = host_copy,
      .to_host = host_copy,
      .host_alloc = plain_alloc,
      .host_free = plain_free,
      .to_device_async = host_copy,
      .copy = host_copy,
      .synchronize = host_synchronize,
      .stream = no_stream,
      .encoder_fwd = cpu::encoder_fwd,
      .encoder_bwd = cpu::encoder_bwd,
      .layernorm_fwd = cpu::layernorm_fwd,
      .layernorm_bwd = cpu::layernorm_bwd,
      .matmul_fwd = cpu::matmul_fwd,
      .matmul_bwd = cpu::matmul_bwd,
      .attention_fwd = cpu::attention_fwd,
      .attention_bwd = cpu::attention_bwd,
      .gelu_fwd = cpu::gelu_fwd,
      .gelu_bwd = cpu::gelu_bwd,
      .residual_fwd = cpu::residual_fwd,
      .rmsnorm_fwd = cpu::rmsnorm_fwd,
      .rmsnorm_bwd = cpu::rmsnorm_bwd,
      .qk_rmsnorm_fwd = cpu::qk_rmsnorm_fwd,
      .qk_rmsnorm_bwd = cpu::qk_rmsnorm_bwd,
      .rope_fwd = cpu::rope_fwd,
      .rope_bwd = cpu::rope_bwd,
      .swiglu_fwd = cpu::swiglu_fwd,
      .swiglu_bwd = cpu::swiglu_bwd,
      .cross_entropy_fwd_bwd = cpu::cross_entropy_fwd_bwd,
      .gather_rows = cpu::gather_rows,
      .scatter_rows = cpu::scatter_rows,
      .copy_strided_rows = cpu::copy_strided_rows,
      .attention_cp_fwd = cpu::attention_cp_fwd,
      .attention_cp_bwd = cpu::attention_cp_bwd,
      .adamw_update = cpu::adamw_update,
      .sum_squares = cpu::sum_squares,
      .adamw_step = cpu::adamw_step,
      .bf16_pack = cpu::bf16_pack,
      .bf16_unpack = cpu::bf16_unpack,
      .bf16_mirror = cpu::bf16_mirror,
      .lora_fwd = cpu::lora_fwd,
      .lora_bwd = cpu::lora_bwd,
      .lora_dropout = cpu::lora_dropout,
      .kv_append = cpu::kv_append,
      .kv_attention_fwd = cpu::kv_attention_fwd,
      .act16 =  // the bf16 activation path's CPU twins (kernels/act16.h): tests run it on the CPU
          {
              .layernorm_fwd = cpu::act16::layernorm_fwd,
              .layernorm_bwd = cpu::act16::layernorm_bwd,
              .rmsnorm_fwd = cpu::act16::rmsnorm_fwd,
              .rmsnorm_bwd = cpu::act16::rmsnorm_bwd,
              .qk_rmsnorm_fwd = cpu::act16::qk_rmsnorm_fwd,
              .qk_rmsnorm_bwd = cpu::act16::qk_rmsnorm_bwd,
              .rope_fwd = cpu::act16::rope_fwd,
              .rope_bwd = cpu::act16::rope_bwd,
              .swiglu_fwd = cpu::act16::swiglu_fwd,
              .swiglu_bwd = cpu::act16::swiglu_bwd,
              .attention_fwd = cpu::act16::attention_fwd,
              .attention_bwd = cpu::act16::attention_bwd,
              .linear_fwd = cpu::act16::linear_fwd,
              .linear_bwd = cpu::act16::linear_bwd,
              .cross_entropy_fwd_bwd = cpu::act16::cross_entropy_fwd_bwd,
              .gather_rows = cpu::act16::gather_rows,
              .scatter_rows = cpu::act16::scatter_rows,
              .attention_cp_fwd = cpu::act16::attention_cp_fwd,
              .attention_cp_bwd = cpu::act16::attention_cp_bwd,
              .copy_strided_rows = cpu::act16::copy_strided_rows,
          },
      .graphs = {},  // every pass runs as it comes
      .scratch_bytes = host_scratch_bytes,
  };
  return ops;
}

const Ops& cpu_bf16_ops() {
  static const Ops ops = [] {
    Ops o = cpu_ops();
    o.name = "cpu-bf16";
    return o;
  }();
  return ops;
}

}  // namespace sftdp
