// tests/model/test_units.cpp — ZeRO-2/3's units (model::units_of) and a pass's schedule
// (Model::unit_schedule): the units tile the layout in offset order, each wholly decayed or not; a
// block's unit holds exactly that block's >= 2-D weights; the schedule uses every block once forward
// and once backward, the head between, and reports every trainable unit's gradients final exactly
// once, in the order backward finishes them (head, blocks last to first, embeddings, vectors).
#include <gtest/gtest.h>

#include <set>

#include "kernels/ops.h"
#include "model/model_fixtures.h"
#include "sftdp/model.h"

using namespace sftdp;
using model::Unit;
using model::UnitEvent;
using model::UnitSet;

namespace {

void expect_tiling(const model::ParamLayout& lay, const std::vector<Unit>& units) {
  size_t next = 0;
  for (const auto& u : units) {
    EXPECT_EQ(u.begin, next);
    EXPECT_TRUE(u.end <= lay.n_decay || u.begin >= lay.n_decay) << "a unit partly decayed";
    next = u.end;
  }
  EXPECT_EQ(next, lay.total);
  for (const auto& t : lay.tensors) {
    const auto& u = units[model::unit_at(units, t.offset)];
    EXPECT_LE(t.offset + t.numel, u.end) << t.name << " crosses its unit's end";
    if (u.kind == Unit::kBlock) { EXPECT_EQ(t.name.rfind("h." + std::to_string(u.layer) + ".", 0), 0u) << t.name; }
    if (u.kind == Unit::kVectors) { EXPECT_FALSE(t.decay) << t.name; }
    if (t.name == "lm_head.weight") { EXPECT_EQ(u.kind, Unit::kHead); }
  }
}

}  // namespace

TEST(Units, TileTheLayoutOfEveryFamily) {
  auto untied = test::tiny_llama_dims();
  untied.tied = false, untied.qk_norm = true;
  for (const auto& d : {test::tiny_dims(), test::tiny_llama_dims(), untied}) {
    const auto lay = model::param_layout(d);
    const auto units = model::units_of(lay, d.L);
    expect_tiling(lay, units);
    ASSERT_EQ(units.front().kind, Unit::kEmbed);
    EXPECT_EQ(units.back().kind, Unit::kVectors);
    int blocks = 0, heads = 0;
    for (const auto& u : units) blocks += u.kind == Unit::kBlock, heads += u.kind == Unit::kHead;
    EXPECT_EQ(blocks, d.L);
    EXPECT_EQ(heads, d.tied ? 0 : 1);
  }
  auto none = test::tiny_dims();
  none.L = 0;
  const auto lay = model::param_layout(none);
  expect_tiling(lay, model::units_of(lay, 0));
}

TEST(Units, ScheduleUsesEachBlockTwiceAndFinishesEveryUnitOnce) {
  auto d = test::tiny_llama_dims();
  d.tied = false;
  for (bool lora : {false, true}) {
    model::LoraSpec spec;
    if (lora) spec.rank = 2, spec.modules = {"self_attn.q_proj", "mlp.down_proj"};
    const auto m = model::make_model(d, cpu_ops(), 1, 4, false, false, spec);
    const auto train = m->unit_schedule(true), eval = m->unit_schedule(false);
    const auto& base = m->base_units();
    std::vector<int> base_uses(base.size(), 0);
    std::vector<size_t> finished;
    for (const auto& e : train) {
      if (e.kind == UnitEvent::kUse && e.set == UnitSet::kBase) ++base_uses[e.unit];
      if (e.kind == UnitEvent::kGradsFinal) finished.push_back(e.unit);
    }
    for (size_t u = 0; u < base.size(); ++u) {
      const int want = base[u].kind == Unit::kBlock ? 2 : base[u].kind == Unit::kVectors ? 0 : 1;
      EXPECT_EQ(base_uses[u], want) << "base unit " << u << (lora ? " (LoRA)" : "");
    }
    const auto& tu = m->trainable_units();
    EXPECT_EQ(std::set<size_t>(finished.begin(), finished.end()).size(), tu.size()) << "each unit once";
    EXPECT_EQ(finished.size(), tu.size());
    if (!lora) {
      EXPECT_EQ(tu[finished.front()].kind, Unit::kHead);
      EXPECT_EQ(tu[finished[1]].layer, d.L - 1);
      EXPECT_EQ(tu[finished.back()].kind, Unit::kVectors);
    }
    // Forward-only: the training schedule's prefix up to the head.
    ASSERT_LE(eval.size(), train.size());
    EXPECT_TRUE(std::equal(eval.begin(), eval.end(), train.begin()));
    EXPECT_EQ(eval.back().unit, model::unit_at(base, base[eval.back().unit].begin));
  }
}
