// tests/train/test_flops.cpp — train::train_flops (src/train/flops.h), the model FLOPs the training log's
// TFLOP/s and the benches' GFLOP/s and MFU share, on dimensions small enough to count by hand; and
// which GPUs have a known dense bf16 peak (an MFU in the log): the cost model's H100 SXM and the H200.
#include <gtest/gtest.h>

#include "train/flops.h"

namespace sftdp::train {
namespace {

TEST(TrainFlops, Gpt2CountsEveryGemmWeightSixTimesPlusAttention) {
  config::ModelDims d{1, 1, 2, 4, 3, 8};  // L=1 NH=1 C=2 F=4 V=3
  // GEMM weights: qkv 3·C·C = 12, proj C·C = 4, fc and proj 2·C·F = 16, head C·V = 6: 38, ×6 = 228;
  // attention 12·L·C·T = 12·1·2·2 = 48. 276 per token, 2 tokens.
  EXPECT_DOUBLE_EQ(train_flops(d, 1, 2), 552.0);
}

TEST(TrainFlops, LlamaCountsGroupedQueryAttentionAndTheGatedMlp) {
  config::ModelDims d{1, 2, 4, 3, 5, 8};  // L=1 NH=2 C=4 F=3 V=5
  d.block = config::Block::kLlama, d.KVH = 1, d.HS = 2;
  // q|k|v rows (NH + 2·KVH)·HS = 8: C·8 = 32; o_proj A·C = 4·4 = 16; gate|up C·2F = 24; down F·C = 12;
  // head C·V = 20: 104, ×6 = 624; attention 12·L·A·T = 12·1·4·2 = 96. 720 per token, 3 rows × 2 tokens.
  EXPECT_DOUBLE_EQ(train_flops(d, 3, 2), 4320.0);
  d.tied = false;  // an untied head is the same GEMM
  EXPECT_DOUBLE_EQ(train_flops(d, 3, 2), 4320.0);
}

TEST(TrainFlops, LargeBatchesDoNotOverflow) {
  config::ModelDims d{1, 1, 2, 4, 3, 8};
  EXPECT_DOUBLE_EQ(train_flops(d, int64_t{1} << 40, 2), 276.0 * 2 * double(int64_t{1} << 40));
}

TEST(PeakBf16Tflops, KnownOnlyForTheCostModelsGpus) {
  EXPECT_EQ(peak_bf16_tflops("NVIDIA H100 80GB HBM3"), 989.0);  // H100 SXM, bench/gpu_cost.py's device
  EXPECT_EQ(peak_bf16_tflops("NVIDIA H200"), 989.0);
  EXPECT_EQ(peak_bf16_tflops("NVIDIA H100 PCIe"), 0.0);  // other clocks and power: unknown here
  EXPECT_EQ(peak_bf16_tflops("NVIDIA A100-SXM4-80GB"), 0.0);
  EXPECT_EQ(peak_bf16_tflops("sft-dp CUDA simulator (sm_90 limits)"), 0.0);
  EXPECT_EQ(peak_bf16_tflops(""), 0.0);  // a build without CUDA
}

}  // namespace
}  // namespace sftdp::train
