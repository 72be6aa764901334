// sftdp/model.h — GPT-2 (SPEC §5) on any device through the Ops table. Parameters live in one
// flat buffer, >= 2-D weights first (they take weight decay), then vectors. The gradient buffer
// has the same layout plus two trailing floats: [P] = loss sum, [P+1] = weight sum, so one
// allreduce carries gradient sums and both counts (SPEC §1).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "sftdp/config.h"
#include "sftdp/data.h"

namespace sftdp {
struct Ops;
}

namespace sftdp::model {

struct ParamInfo {
  std::string name;            // SPEC §5 name, e.g. "h.0.attn.qkv.weight"
  std::vector<int64_t> shape;  // e.g. {3C, C}
  size_t offset = 0;           // into the flat buffer, in floats
  size_t numel = 0;
  bool decay = false;          // >= 2-D: decoupled weight decay applies
};

struct ParamLayout {
  std::vector<ParamInfo> tensors;  // in SPEC order (wte, wpe, h.0..., ln_f)
  size_t total = 0;                // floats
  size_t n_decay = 0;              // [0, n_decay) are the decayed weights
  const ParamInfo& find(const std::string& name) const;  // dies if absent
};

ParamLayout gpt2_layout(const config::ModelDims& d);

// GPT-2 initialisation into a host buffer of layout.total floats: weights N(0, 0.02), the two
// residual projections N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1. Deterministic in seed.
void init_params(std::vector<float>& params, const ParamLayout& layout,
                 const config::ModelDims& d, uint64_t seed);

struct LossSums {
  double loss_sum = 0, weight_sum = 0;
};

class Gpt2 {
 public:
  // max_B rows of T tokens per micro-batch; activations are sized for that once.
  Gpt2(const config::ModelDims& d, const Ops& ops, int max_B, int T);
  ~Gpt2();
  Gpt2(const Gpt2&) = delete;
  Gpt2& operator=(const Gpt2&) = delete;

  const ParamLayout& layout() const { return layout_; }
  const config::ModelDims& dims() const { return d_; }
  const Ops& ops() const { return ops_; }
  float* params() { return params_; }            // device, layout().total
  float* grads() { return grads_; }              // device, layout().total + 2
  size_t grad_buffer_floats() const { return layout_.total + 2; }

  void set_params_from_host(const std::vector<float>& host);
  std::vector<float> params_to_host() const;
  std::vector<float> grads_to_host() const;      // includes the two trailing sums

  void zero_grads();  // gradient sums and the two trailing sums
  // Forward and backward on one micro-batch (B <= max_B rows): gradient sums += and the
  // trailing loss/weight sums +=. Nothing is divided.
  void forward_backward(const data::Batch& batch);
  // Forward only: the micro-batch's loss sum and weight sum.
  LossSums forward(const data::Batch& batch);

 private:
  struct Acts;
  void upload(const data::Batch& b);
  void run_forward(int B);
  void run_backward(int B);

  config::ModelDims d_;
  const Ops& ops_;
  int max_B_, T_;
  ParamLayout layout_;
  // Offsets (in floats) of the tensors the passes touch, looked up by name once, not per pass.
  std::vector<std::array<size_t, 12>> layer_offsets_;  // per layer: ln_1 w,b, qkv w,b, proj w,b, ln_2 w,b, fc w,b, mlp.proj w,b
  size_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  Acts* acts_ = nullptr;
};

}  // namespace sftdp::model
