// tests/checkpoint/hand_layout.h — a parameter layout made by hand for the checkpoint tests,
// independent of model::gpt2_layout: tensors packed in the given order, >= 2-D ones decayed.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sftdp/model.h"

namespace sftdp::test {

using Specs = std::vector<std::pair<std::string, std::vector<int64_t>>>;

inline model::ParamLayout make_layout(const Specs& specs) {
  model::ParamLayout layout;
  for (const auto& [name, shape] : specs) {
    model::ParamInfo t;
    t.name = name;
    t.shape = shape;
    t.numel = 1;
    for (int64_t d : shape) t.numel *= static_cast<size_t>(d);
    t.offset = layout.total;
    t.decay = shape.size() >= 2;
    layout.total += t.numel;
    if (t.decay) layout.n_decay = layout.total;  // decayed tensors come first in these layouts
    layout.tensors.push_back(t);
  }
  return layout;
}

}  // namespace sftdp::test
