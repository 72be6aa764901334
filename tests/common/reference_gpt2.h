// tests/common/reference_gpt2.h — the independent float64 PyTorch GPT-2 of tests/model/reference_gpt2.py
// (SPEC §5's model, §1's loss sums), run on given fp32 parameters and one batch: the loss sum, the
// weight sum and the gradient of the loss sum for every parameter, in the layout's flat order.
#pragma once
#include <vector>

#include "sftdp/config.h"
#include "sftdp/data.h"
#include "sftdp/model.h"

namespace sftdp::test {

struct Gpt2Reference {
  double loss_sum = 0, weight_sum = 0;
  std::vector<float> grads;  // layout.total floats
};
// A test failure (and an empty result) if the reference does not run.
Gpt2Reference reference_gpt2(const config::ModelDims& d, const model::ParamLayout& layout,
                             const std::vector<float>& params, const data::Batch& batch);

}  // namespace sftdp::test
