// src/train/flops.cpp — see flops.h.
#include "train/flops.h"

#ifdef SFTDP_WITH_CUDA
#include "sftdp/check_cuda.h"
#endif

namespace sftdp::train {

double train_flops(const config::ModelDims& d, int64_t B, int T) {
  const double C = d.C, F = d.F, V = d.V, tokens = double(B) * T;
  if (d.block == config::Block::kLlama) {
    const double QKV = d.qkv_dim(), A = d.attn_dim();
    const double gemm_weights = d.L * (C * QKV + A * C + C * 2 * F + F * C) + C * V;
    return (6.0 * gemm_weights + 12.0 * d.L * A * T) * tokens;
  }
  const double gemm_weights = d.L * (3 * C * C + C * C + 2 * C * F) + C * V;
  return (6.0 * gemm_weights + 12.0 * d.L * C * T) * tokens;
}

double peak_bf16_tflops(const std::string& name) {
  const bool h100_sxm = name.find("H100") != std::string::npos &&
                        (name.find("HBM3") != std::string::npos || name.find("SXM") != std::string::npos);
  const bool h200 = name.find("H200") != std::string::npos;
  return h100_sxm || h200 ? 989.0 : 0.0;
}

std::string current_device_name() {
#ifdef SFTDP_WITH_CUDA
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  return prop.name;
#else
  return "";
#endif
}

}  // namespace sftdp::train
