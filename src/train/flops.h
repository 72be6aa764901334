// src/train/flops.h — the model FLOPs of a training step and the peak they are measured against: the
// one count the training log's TFLOP/s and MFU (SPEC §6) and every bench's GFLOP/s and MFU use
// (bench/harness.h takes it from here), and the dense bf16 peak of the GPUs the cost model
// (bench/gpu_cost.py) knows.
#pragma once
#include <cstdint>
#include <string>

#include "sftdp/config.h"

namespace sftdp::train {

// Training FLOPs of one optimizer step of model `d` on B×T tokens (llm.c's and PaLM's convention):
// 6 per GEMM weight per token (2 forward, 4 backward; every Linear and the LM head; embeddings,
// biases and norms are no GEMM work) plus 12·L·T·(attention width) per token for attention (q·kᵀ and
// att·v, 4·T·width forward per layer, ×3), counting the full T×T although the causal mask zeroes half
// of it.
//   GPT-2:        6·[L·(3C·C + C·C + 2·C·F) + C·V] + 12·L·C·T                 per token
//   Llama family: 6·[L·(C·QKV + A·C + C·2F + F·C) + C·V] + 12·L·NH·HS·T      per token
// with QKV = (NH + 2·KVH)·HS (fused q|k|v rows) and A = NH·HS; the Llama MLP is gate|up (C·2F)
// then down (F·C); the LM head counts C·V tied or untied. RMSNorm, RoPE, SwiGLU and the Qwen3
// q/k norms are elementwise (no GEMM) and not counted. The same count for LoRA runs (which skip
// the frozen weights' gradients, a third of it) and with remat (whose extra forward is not counted).
double train_flops(const config::ModelDims& d, int64_t B, int T);

// Dense bf16 tensor-core peak of a CUDA device, TFLOP/s, from its name (cudaDeviceProp::name): the
// cost model's figure for the H100 SXM ("NVIDIA H100 80GB HBM3", 989) and the H200, which has the
// same tensor cores ("NVIDIA H200"); 0 for any other device (its MFU is then not reported).
double peak_bf16_tflops(const std::string& device_name);

// The name of this process's current CUDA device ("" in a build without CUDA).
std::string current_device_name();

}  // namespace sftdp::train
