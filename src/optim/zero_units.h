// src/optim/zero_units.h — ZeRO-2 and ZeRO-3 (zero_stage 2 and 3, issue 25): the model's
// residency (model::Residency) and the optimiser's shard, over the units of model::units_of and
// the pieces of optim::UnitShards.
//
// Gradient sums (stages 2 and 3): backward writes each trainable unit's sums into a slot of
// world·piece floats (zeroed when the unit is first touched in the pass); when the model reports the
// unit final, the slot is reduce-scattered (non-blocking) into the slot's piece buffer while backward
// goes on, and before the slot is reused (or at the end of the pass) the piece is added into this
// rank's shard of the gradient sums. So every micro-step reduces its own sums and the shard sums them
// over the micro-steps; no full-size gradient buffer exists. Slots per class of unit: one for the
// embeddings or the head (they are never summed at the same time, except the tied embeddings, which
// are then the only large unit), two for blocks (one summing, one draining), one for the vectors.
//
// Parameters: stage 2 keeps the model's full buffers (replicated), and after each update the
// master shard is all-gathered into them unit by unit. Stage 3 keeps only the shard (the masters;
// under LoRA also the frozen base's shard): each unit is all-gathered into a parameter slot when the
// model announces it (use), the next use of the same set prefetched into another slot while the
// current one computes; slots keep their unit until another needs them, so units used again soon
// (the last blocks after the head, the vectors, a tied embedding) are not gathered twice. On the
// bf16-GEMM table each gathered base unit is packed to bf16 once and registered as the GEMMs' copy.
//
// zero_stage 1 with bf16 weights (Megatron's distributed optimizer): the model keeps its full gradient
// buffer, which reduce_full_gradients reduce-scatters once per step, unit by unit through the
// gradient slots, into the shard; parameters as at stage 2 below.
//
// bf16 weights (weight_dtype bfloat16, Model::bf16_weights): the masters stay fp32 in the shard; a
// unit's piece is packed to bf16 into its own place of the gather's destination, which an in-place
// all-gather of bf16 (half the bytes of the fp32 one) completes. Stage 2: after each update, through
// a staging slot into the model's full bf16 buffer; stage 3: into the slot's bf16 copy on use. In both, a unit in use is widened to fp32 in a slot
// (the stage-3 slots, also at stage 2, where the widening is local) and its bf16 values are the
// GEMMs' copy: every kernel reads bf16(master), and no full fp32 parameter buffer exists.
//
// Every rank makes the same collectives in the same order: they follow the model's calls, which
// follow Model::unit_schedule (checked here, call by call), and end_pass waits for all of them
// under the collective deadline.
#pragma once
#include <cstdint>
#include <vector>

#include "sftdp/comm.h"
#include "sftdp/model.h"
#include "sftdp/optim.h"

namespace sftdp::optim {

class ZeroUnits final : public model::Residency {
 public:
  ZeroUnits(model::Model& model, comm::Communicator& comm, int stage);
  ~ZeroUnits() override;
  ZeroUnits(const ZeroUnits&) = delete;
  ZeroUnits& operator=(const ZeroUnits&) = delete;

  int stage() const { return stage_; }
  const UnitShards& plan() const { return train_plan_; }  // the trainable set's
  float* master() { return master_; }                     // plan().total floats: the fp32 weights
  float* grad_sums() { return accum_; }                   // plan().total floats: their gradient sums
  // Stage 1 (bf16 weights): the model's full gradient buffer, summed across ranks into grad_sums().
  void reduce_full_gradients();
  // After the optimiser updated master(): stage 2 all-gathers it into the model's full buffer, unit
  // by unit; stage 3 drops every gathered unit (the next pass gathers the new values).
  void publish();
  // A buffer in the trainable shard's layout (a moment) in the global layout: a collective; rank 0
  // receives the vector, the others an empty one. And back: every rank passes the global vector.
  std::vector<float> shard_to_host(const float* shard) { return gather(model::UnitSet::kTrainable, shard); }
  // Floats [begin, begin + n) of the global layout (every rank passes the same): this rank's part of
  // them into the shard-layout buffer.
  void shard_from_range(float* shard, size_t begin, const float* data, size_t n) {
    scatter(model::UnitSet::kTrainable, shard, begin, data, n);
  }
  // Device bytes held here, by what they hold (the log and the memory plan, which builds this on a
  // counting table: train/memory_plan.cpp): the master shard and (stage 3, LoRA) the frozen base's
  // shard, the gradient sums' shard, the gradient slots with their pieces, the parameter slots (stage
  // 3) with their bf16 copies.
  struct Bytes {
    size_t master = 0, base_shard = 0, grad_shard = 0, grad_slots = 0, param_slots = 0;
    size_t total() const { return master + base_shard + grad_shard + grad_slots + param_slots; }
  };
  const Bytes& bytes() const { return bytes_; }
  // Floats each rank's reduce-scatters send per micro-step (every unit's slot, padding included).
  size_t reduce_scatter_floats() const;

  // model::Residency
  void begin_pass(bool training) override;
  void use(model::UnitSet set, size_t unit) override;
  void grads_final(size_t unit) override;
  void end_pass() override;
  float* base(size_t offset) override;
  float* trainable(size_t offset) override;
  float* grad(size_t offset) override;
  void zero_grads() override;
  void load_range(model::UnitSet set, size_t begin, const float* data, size_t n) override;
  std::vector<float> to_host(model::UnitSet set) override;

 private:
  using Ticket = comm::Communicator::Ticket;
  enum Class { kLarge, kBlocks, kVectors, kClasses };  // embeddings and head; blocks; vectors
  static constexpr size_t kNone = SIZE_MAX;
  struct Slot {
    float* buf = nullptr;        // world·piece floats of the class's largest unit
    float* recv = nullptr;       // gradient slots: the reduce-scattered piece
    uint16_t* buf16 = nullptr;   // stage-3 base slots on the bf16-GEMM table: the GEMMs' copy
    size_t unit = kNone;         // the unit held, being gathered, summed or drained
    Ticket ticket = 0;           // a collective on this slot not yet waited for (0: none)
    bool widen = false;          // bf16 weights, stage 3: buf16 is being gathered; buf = widened once it is
    bool summing = false;        // gradient slot: the unit's sums of this pass are still coming
    bool packed = false;         // buf16 holds bf16(buf)
    uint64_t used = 0;           // last use (LRU)
  };
  using Pool = std::vector<Slot>;

  const std::vector<model::Unit>& units(model::UnitSet set) const;
  const UnitShards& plan_of(model::UnitSet set) const;
  float* shard_of(model::UnitSet set);
  model::UnitSet real(model::UnitSet set) const;  // kBase is kTrainable without LoRA
  static Class class_of(const model::Unit& u);
  size_t max_piece(model::UnitSet set, Class c) const;  // the largest piece of the set's units of class c
  void make_pool(Pool& pool, model::UnitSet set, Class c, int count, bool bf16, size_t& counted);
  void* alloc(size_t bytes, size_t& counted);
  void expect(const model::UnitEvent& e);
  // Parameter slots (stage 3).
  Slot* resident(model::UnitSet set, size_t unit);
  Slot* free_slot(model::UnitSet set, size_t unit, size_t keep);  // LRU of the unit's pool, not `keep`
  Slot& start_gather(model::UnitSet set, size_t unit, size_t keep);  // into a free slot (not `keep`)
  void ready(Slot& s);       // the gather waited for (with bf16 weights, then widened)
  bool sliced() const { return stage_ == 3 || bf16_; }  // the model reads parameters from slots
  const uint16_t* bf16_copy(const Slot& s, size_t unit) const;  // the GEMMs' copy of the slot's unit
  // bf16 weights: this rank's piece of unit u packed to bf16 at dst + rank·piece, then dst (world·piece
  // values) all-gathered in place.
  Ticket gather_bf16(size_t unit, uint16_t* dst);
  void publish_bf16();       // bf16 weights, stage 2: every unit's bf16 pieces into the model's buffer
  float* gathered(model::UnitSet set, size_t offset);  // stage 3: the tensor in its unit's slot
  void prefetch(model::UnitSet set);
  void drop_gathered();
  // Gradient slots.
  Slot& acquire_grad(size_t unit);
  void drain(Slot& s);       // a finished reduce-scatter added into the shard
  Slot* summing_slot(size_t unit);
  std::vector<float> gather(model::UnitSet set, const float* shard);
  void scatter(model::UnitSet set, float* shard, size_t begin, const float* data, size_t n);
  float* full_buffer(model::UnitSet set);  // stage 2: the model's replicated buffer of the set

  model::Model& model_;
  comm::Communicator& comm_;
  const Ops& ops_;
  int stage_;
  bool lora_;
  bool bf16_;                          // Model::bf16_weights()
  UnitShards train_plan_, base_plan_;  // base_plan_: LoRA's frozen base only
  float* master_ = nullptr;            // the trainable shard (fp32)
  float* base_shard_ = nullptr;        // stage 3 under LoRA: the frozen base's shard
  float* accum_ = nullptr;             // the gradient sums' shard
  Pool params_[2][kClasses];           // [set][class], stage 3
  Pool grads_[kClasses];
  size_t current_[2] = {kNone, kNone};  // the unit each set uses now
  std::vector<model::UnitEvent> train_schedule_, eval_schedule_;
  const std::vector<model::UnitEvent>* schedule_ = nullptr;
  size_t pos_ = 0;
  uint64_t clock_ = 0;
  Bytes bytes_;
  std::vector<void*> owned_;
};

}  // namespace sftdp::optim
