// src/model/decoder.h — the one transformer block, over family traits (block_traits.h) and activation type: every
// family's model (make_model). Its passes stop at the final norm's output: Model runs the LM head and the
// cross-entropy on the loss SUM (model.cpp) and hands backward d(loss sum)/d final-norm output; gradient sums
// accumulate (+=). The fp32 and bf16-GEMM tables run src/model/decoder.cpp; the act16 path (bf16 activations on
// the bf16-GEMM table, ActivationStorage::kBf16 in sftdp/model.h) runs src/model/decoder_act16.cpp.
#pragma once
#include <array>
#include <vector>

#include "model/block_traits.h"
#include "sftdp/model.h"

namespace sftdp::model {

class Decoder final : public Model {
 public:
  Decoder(const config::ModelDims& d, const Ops& ops, int max_B, int T, bool remat, bool bf16_activations,
          const LoraSpec& lora, int zero_stage, bool bf16_weights);
  ~Decoder() override;

 private:
  struct Acts;
  struct Acts16;
  void run_forward(int B) override;
  void run_backward(int B) override;
  // Block l's forward from its input (the embedding's or block l-1's output); with through_output = false it
  // stops before the MLP's output projection (what backward needs).
  void block_forward(int l, int B, bool through_output);
  // The norm of the family: LayerNorm (mean, bias) or RMSNorm (eps; mean and bias null).
  void norm_fwd(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b, int N) const;
  void norm_bwd(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w, const float* mean,
                const float* rstd, int N) const;
  // The same on the act16 path (src/model/decoder_act16.cpp).
  void make_acts16();
  void destroy_acts16();
  void block_forward16(int l, int B, bool through_output);
  void run_forward16(int B);
  void run_backward16(int B);
  void norm_fwd16(uint16_t* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                  int N) const;
  void norm_bwd16(float* dres, uint16_t* dres16, float* dw, float* db, float* dres_sum, const float* dres_in,
                  const uint16_t* dout, const float* x, const float* w, const float* mean, const float* rstd,
                  int N) const;
  // The embedding: wte, and wpe with learned positions (null with RoPE).
  const float* wpe() { return traits_.positions == Positions::kLearned ? param(wpe_) : nullptr; }
  float* dwpe() { return traits_.positions == Positions::kLearned ? base_grad(wpe_) : nullptr; }
  const int32_t* embedding_positions() const {
    return traits_.positions == Positions::kLearned ? io_.pos() : nullptr;
  }
  const float* rope_table() const { return inv_freq_; }  // null with learned positions

  BlockTraits traits_;
  // Offsets (in floats) of the tensors the passes touch, looked up by name once, not per pass (kAbsent: the family
  // has none).
  std::vector<LayerOffsets> layer_offsets_;
  size_t wte_ = 0, wpe_ = kAbsent, lnf_w_ = 0, lnf_b_ = kAbsent;
  float* inv_freq_ = nullptr;  // (HS/2): RoPE's inverse frequencies, a constant table (RoPE only)
  Acts* acts_ = nullptr;
  Acts16* acts16_ = nullptr;
};

}  // namespace sftdp::model
