// src/model/gpt2_layer.h — a GPT-2 block's twelve tensors by name, where they are now: what both of its
// passes (src/model/gpt2.cpp, the fp32 and bf16-GEMM path; src/model/gpt2_act16.cpp, the act16 path) read.
#pragma once
#include <array>
#include <cstddef>

namespace sftdp::model {

struct Gpt2LayerParams {
  const float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};
// off: Gpt2's layer_offsets_[l]; at(offset): where the tensor at that offset is now (Model::param, or
// base_grad: null under LoRA).
template <class At>
Gpt2LayerParams layer_params(const std::array<size_t, 12>& off, At at) {
  return {at(off[0]), at(off[1]), at(off[2]), at(off[3]), at(off[4]),  at(off[5]),
          at(off[6]), at(off[7]), at(off[8]), at(off[9]), at(off[10]), at(off[11])};
}

}  // namespace sftdp::model
