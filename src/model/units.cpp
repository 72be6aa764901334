// src/model/units.cpp — the units of ZeRO-2/3 (sftdp/model.h): contiguous ranges of a flat layout
// that are gathered, used and reduced whole, and the order in which a pass uses them.
#include <algorithm>
#include <string>

#include "sftdp/check.h"
#include "sftdp/model.h"

namespace sftdp::model {

namespace {
size_t padded_end(const ParamInfo& t) { return t.offset + (t.numel + 15) / 16 * 16; }
}  // namespace

std::vector<Unit> units_of(const ParamLayout& lay, int L) {
  std::vector<Unit> units;
  auto add = [&](Unit::Kind kind, int layer, size_t begin, size_t end) {
    if (end > begin) units.push_back({kind, layer, begin, end});
  };
  if (L == 0) {
    add(Unit::kEmbed, -1, 0, lay.n_decay);
    add(Unit::kVectors, -1, lay.n_decay, lay.total);
    return units;
  }
  // Block l's >= 2-D weights: from its first one's offset to the padded end of its last one; the
  // layout's order (decayed tensors first, each group in SPEC order) keeps them contiguous.
  std::vector<std::pair<size_t, size_t>> blocks(L, {SIZE_MAX, 0});
  const ParamInfo* head = nullptr;
  for (const auto& t : lay.tensors) {
    if (t.name == "lm_head.weight") head = &t;
    if (!t.decay || t.name.rfind("h.", 0) != 0) continue;
    const int l = std::stoi(t.name.substr(2));
    SFTDP_ASSERT(l >= 0 && l < L, "a block tensor of a layer the model does not have: " + t.name);
    blocks[l].first = std::min(blocks[l].first, t.offset);
    blocks[l].second = std::max(blocks[l].second, padded_end(t));
  }
  for (int l = 0; l < L; ++l) {
    SFTDP_ASSERT(blocks[l].first < blocks[l].second && (l == 0 || blocks[l - 1].second == blocks[l].first),
                 "layer weights are not contiguous in the parameter layout");
    for (const auto& t : lay.tensors)
      SFTDP_ASSERT(t.name.rfind("h." + std::to_string(l) + ".", 0) == 0 || padded_end(t) <= blocks[l].first ||
                       t.offset >= blocks[l].second,
                   "a tensor outside block " + std::to_string(l) + " lies inside its unit");
  }
  add(Unit::kEmbed, -1, 0, blocks[0].first);
  for (int l = 0; l < L; ++l) add(Unit::kBlock, l, blocks[l].first, blocks[l].second);
  size_t rest = blocks[L - 1].second;
  if (head) {  // an untied head follows the last block's weights (the last >= 2-D tensor)
    SFTDP_ASSERT(head->offset == rest, "lm_head.weight does not follow the last block's weights");
    add(Unit::kHead, -1, rest, padded_end(*head));
    rest = padded_end(*head);
  }
  SFTDP_ASSERT(rest == lay.n_decay, "the decayed weights do not end where the vectors begin");
  add(Unit::kVectors, -1, rest, lay.total);
  return units;
}

size_t unit_at(const std::vector<Unit>& units, size_t offset) {
  const auto it = std::upper_bound(units.begin(), units.end(), offset,
                                   [](size_t off, const Unit& u) { return off < u.end; });
  SFTDP_ASSERT(it != units.end() && it->begin <= offset, "no unit holds offset " + std::to_string(offset));
  return static_cast<size_t>(it - units.begin());
}

std::vector<UnitEvent> Model::unit_schedule(bool training) const {
  std::vector<UnitEvent> s;
  auto use_base = [&](size_t u) { s.push_back({UnitEvent::kUse, UnitSet::kBase, u}); };
  auto use_block = [&](int l) {
    use_base(block_base_unit_[l]);
    if (lora()) s.push_back({UnitEvent::kUse, UnitSet::kTrainable, block_unit_[l]});
  };
  use_base(embed_unit_);
  for (int l = 0; l < d_.L; ++l) use_block(l);
  use_base(head_unit());
  if (!training) return s;
  const auto& tu = trainable_units();
  auto final_of = [&](size_t u) { s.push_back({UnitEvent::kGradsFinal, UnitSet::kTrainable, u}); };
  if (!lora() && tu[head_unit()].kind == Unit::kHead) final_of(head_unit());
  for (int l = d_.L - 1; l >= 0; --l) {
    use_block(l);
    final_of(block_unit_[l]);
  }
  // What is final only at the end of backward: the embeddings (the encoder's backward comes last)
  // and the vectors (every block's norms and biases); for L = 0 everything.
  for (size_t u = 0; u < tu.size(); ++u)
    if (tu[u].kind == Unit::kEmbed || tu[u].kind == Unit::kVectors) final_of(u);
  return s;
}

}  // namespace sftdp::model
