// src/optim/zero_units.cpp — see zero_units.h.
#include "optim/zero_units.h"

#include <algorithm>
#include <string>

#include "kernels/bf16.h"
#include "kernels/ops.h"
#include "sftdp/check.h"

namespace sftdp::optim {

using model::Unit;
using model::UnitEvent;
using model::UnitSet;

namespace {
size_t index_of(UnitSet set) { return set == UnitSet::kBase ? 0 : 1; }
const char* name_of(UnitSet set) { return set == UnitSet::kBase ? "base" : "trainable"; }
}  // namespace

ZeroUnits::ZeroUnits(model::Model& model, comm::Communicator& comm, int stage)
    : model_(model), comm_(comm), ops_(model.ops()), stage_(stage), lora_(model.lora()), bf16_(model.bf16_weights()) {
  SFTDP_ASSERT(stage == 2 || stage == 3 || (stage == 1 && bf16_), "ZeroUnits: zero_stage 2 or 3, or 1 with bf16 weights");
  SFTDP_ASSERT(model.zero_stage() == (stage == 1 ? 0 : stage), "ZeroUnits: the model was built for another zero_stage");
  const int W = comm.world(), r = comm.rank();
  train_plan_ = unit_shards(model.trainable_units(), model.trainable_layout().n_decay, r, W);
  if (lora_) base_plan_ = unit_shards(model.base_units(), model.layout().n_decay, r, W);
  master_ = static_cast<float*>(alloc(train_plan_.total * sizeof(float), bytes_.master));
  accum_ = static_cast<float*>(alloc(train_plan_.total * sizeof(float), bytes_.grad_shard));
  if (stage == 3 && lora_) base_shard_ = static_cast<float*>(alloc(base_plan_.total * sizeof(float), bytes_.base_shard));
  // Gradient slots over the trainable units; parameter slots (stage 3, and 2 with bf16 weights) over
  // both sets. Blocks get two (one in use or summing while the other is gathered or drained), the
  // other classes one.
  for (int c = 0; c < kClasses; ++c) {
    const int count = c == kBlocks ? 2 : 1;
    make_pool(grads_[c], UnitSet::kTrainable, Class(c), count, /*bf16=*/false, bytes_.grad_slots);
    if (!sliced()) continue;
    // Stage 3: the base parameters (without LoRA: the one set) get the GEMMs' bf16 copies (with bf16
    // weights also the gathers' target), the adapters not. Stage 2 with bf16 weights: none (the
    // model's bf16 buffer is the copy).
    make_pool(params_[index_of(real(UnitSet::kBase))][c], UnitSet::kBase, Class(c), count,
              stage == 3 && (model.bf16_mirrors() || bf16_), bytes_.param_slots);
    if (lora_)
      make_pool(params_[index_of(UnitSet::kTrainable)][c], UnitSet::kTrainable, Class(c), count, false,
                bytes_.param_slots);
  }
  // The pieces the reduce-scatters land in: one per gradient slot, of its class's largest piece.
  for (int c = 0; c < kClasses; ++c)
    for (auto& s : grads_[c])
      s.recv = static_cast<float*>(alloc(max_piece(UnitSet::kTrainable, Class(c)) * sizeof(float), bytes_.grad_slots));
  train_schedule_ = model.unit_schedule(true);
  eval_schedule_ = model.unit_schedule(false);
}

ZeroUnits::~ZeroUnits() {
  for (void* p : owned_) ops_.free(p);
}

ZeroUnits::Class ZeroUnits::class_of(const Unit& u) {
  switch (u.kind) {
    case Unit::kBlock: return kBlocks;
    case Unit::kVectors: return kVectors;
    default: return kLarge;
  }
}

model::UnitSet ZeroUnits::real(UnitSet set) const { return lora_ ? set : UnitSet::kTrainable; }

const std::vector<Unit>& ZeroUnits::units(UnitSet set) const {
  return real(set) == UnitSet::kBase ? model_.base_units() : model_.trainable_units();
}

const UnitShards& ZeroUnits::plan_of(UnitSet set) const {
  return real(set) == UnitSet::kBase ? base_plan_ : train_plan_;
}

float* ZeroUnits::shard_of(UnitSet set) { return real(set) == UnitSet::kBase ? base_shard_ : master_; }

float* ZeroUnits::full_buffer(UnitSet set) {
  return real(set) == UnitSet::kBase ? model_.params() : model_.trainable_params();
}

void* ZeroUnits::alloc(size_t bytes, size_t& counted) {
  void* p = ops_.alloc(std::max<size_t>(bytes, 1));
  owned_.push_back(p);
  counted += bytes;
  return p;
}

size_t ZeroUnits::max_piece(UnitSet set, Class c) const {
  size_t piece = 0;
  const auto& us = units(set);
  for (size_t u = 0; u < us.size(); ++u)
    if (class_of(us[u]) == c) piece = std::max(piece, plan_of(set).units[u].piece);
  return piece;
}

void ZeroUnits::make_pool(Pool& pool, UnitSet set, Class c, int count, bool bf16, size_t& counted) {
  const size_t piece = max_piece(set, c);
  if (piece == 0) return;  // no unit of this class
  const size_t floats = piece * static_cast<size_t>(comm_.world());
  pool.resize(count);
  for (auto& s : pool) {
    s.buf = static_cast<float*>(alloc(floats * sizeof(float), counted));
    if (bf16) s.buf16 = static_cast<uint16_t*>(alloc(floats * sizeof(uint16_t), counted));
  }
}

size_t ZeroUnits::reduce_scatter_floats() const {
  size_t n = 0;
  for (const auto& p : train_plan_.units) n += p.piece * static_cast<size_t>(comm_.world());
  return n;
}

// ---- the schedule --------------------------------------------------------------------------

void ZeroUnits::expect(const UnitEvent& e) {
  SFTDP_ASSERT(schedule_ != nullptr && pos_ < schedule_->size() && (*schedule_)[pos_] == e,
               std::string("ZeRO: the model's ") + (e.kind == UnitEvent::kUse ? "use" : "grads_final") + " of " +
                   name_of(e.set) + " unit " + std::to_string(e.unit) + " is not event " + std::to_string(pos_) +
                   " of its pass's schedule (every rank must make the same collectives in the same order)");
  ++pos_;
}

void ZeroUnits::begin_pass(bool training) {
  SFTDP_ASSERT(schedule_ == nullptr, "ZeRO: a pass began inside another");
  schedule_ = training ? &train_schedule_ : &eval_schedule_;
  pos_ = 0;
  current_[0] = current_[1] = kNone;
  if (!sliced()) return;
  // The vectors (every norm and bias) stay gathered for the whole pass: they are read in every block.
  const auto& us = units(UnitSet::kBase);
  for (size_t u = 0; u < us.size(); ++u)
    if (us[u].kind == Unit::kVectors && !resident(UnitSet::kBase, u)) start_gather(UnitSet::kBase, u, kNone);
  // The pass's first unit of each set, so that it is on its way before the first kernel needs it.
  for (UnitSet set : {UnitSet::kBase, UnitSet::kTrainable}) {
    if (set == UnitSet::kTrainable && !lora_) continue;
    for (const auto& e : *schedule_)
      if (e.kind == UnitEvent::kUse && e.set == set) {
        if (!resident(set, e.unit)) start_gather(set, e.unit, kNone);
        break;
      }
  }
}

void ZeroUnits::use(UnitSet set, size_t unit) {
  expect({UnitEvent::kUse, set, unit});
  if (!sliced()) return;
  current_[index_of(real(set))] = unit;
  Slot* s = resident(set, unit);
  if (!s) s = &start_gather(set, unit, kNone);
  s->used = ++clock_;
  ready(*s);
  // The GEMMs' bf16 copy (base parameters only): packed once per gather, or with bf16 weights the
  // gathered bf16 values themselves.
  if (model_.bf16_mirrors() && (s->buf16 || bf16_)) {
    const size_t n = units(set)[unit].size();
    if (!bf16_ && !s->packed) ops_.bf16_pack(s->buf16, s->buf, n), s->packed = true;
    ops_.bf16_mirror(kMirrorParams, s->buf, bf16_copy(*s, unit), n);
  }
  prefetch(set);
}

void ZeroUnits::grads_final(size_t unit) {
  expect({UnitEvent::kGradsFinal, UnitSet::kTrainable, unit});
  if (stage_ == 1) return;  // the model's full buffer sums on; reduce_full_gradients reduces it once
  Slot* s = summing_slot(unit);
  if (!s) s = &acquire_grad(unit);  // never written in this pass (nothing to compute): zeros
  s->summing = false;
  s->ticket = comm_.start_reduce_scatter_sum(s->buf, s->recv, train_plan_.units[unit].piece);
}

void ZeroUnits::end_pass() {
  SFTDP_ASSERT(schedule_ != nullptr && pos_ == schedule_->size(),
               "ZeRO: a pass ended before its schedule (every rank must make the same collectives)");
  for (auto& pool : grads_)
    for (auto& s : pool) {
      SFTDP_ASSERT(!s.summing, "ZeRO: a unit's gradient sums were never reported final");
      drain(s);
    }
  comm_.wait_all();  // every collective of the pass, under the deadline; prefetches left unused too
  for (auto& set : params_)
    for (auto& pool : set)
      for (auto& s : pool) s.ticket = 0;
  schedule_ = nullptr;
}

// ---- parameters (stage 3) ------------------------------------------------------------------

ZeroUnits::Slot* ZeroUnits::resident(UnitSet set, size_t unit) {
  for (auto& s : params_[index_of(real(set))][class_of(units(set)[unit])])
    if (s.unit == unit) return &s;
  return nullptr;
}

ZeroUnits::Slot* ZeroUnits::free_slot(UnitSet set, size_t unit, size_t keep) {
  Slot* victim = nullptr;
  for (auto& s : params_[index_of(real(set))][class_of(units(set)[unit])])
    if ((keep == kNone || s.unit != keep) && (!victim || s.used < victim->used)) victim = &s;
  return victim;
}

ZeroUnits::Slot& ZeroUnits::start_gather(UnitSet set, size_t unit, size_t keep) {
  Slot* victim = free_slot(set, unit, keep);
  SFTDP_ASSERT(victim != nullptr, "ZeRO: no parameter slot free for a gather");
  const UnitShard& p = plan_of(set).units[unit];
  victim->unit = unit;
  victim->packed = false;
  victim->used = ++clock_;
  // The slot's old unit may still be read by kernels queued before now: the gather (or widening)
  // runs after them.
  if (!bf16_) {
    victim->ticket = comm_.start_all_gather(shard_of(set) + p.offset, victim->buf, p.piece);
  } else if (stage_ == 3) {  // the bf16 pieces; widened when waited for
    victim->ticket = gather_bf16(unit, victim->buf16);
    victim->widen = true;
  } else {  // stage 2: from the model's bf16 buffer, queued in order with the kernels
    const Unit& u = units(set)[unit];
    ops_.bf16_unpack(victim->buf, model_.params_bf16() + u.begin, u.size());
  }
  return *victim;
}

void ZeroUnits::ready(Slot& s) {
  if (s.ticket != 0) comm_.wait(s.ticket);
  s.ticket = 0;
  if (!s.widen) return;
  // Every rank's piece, padding included (zeros): world·piece values of the slot's unit.
  const size_t n = plan_of(UnitSet::kBase).units[s.unit].piece * static_cast<size_t>(comm_.world());
  ops_.bf16_unpack(s.buf, s.buf16, n);
  s.widen = false;
}

const uint16_t* ZeroUnits::bf16_copy(const Slot& s, size_t unit) const {
  if (stage_ == 3) return s.buf16;
  return const_cast<model::Model&>(model_).params_bf16() + units(UnitSet::kBase)[unit].begin;
}

ZeroUnits::Ticket ZeroUnits::gather_bf16(size_t unit, uint16_t* dst) {
  const UnitShard& p = train_plan_.units[unit];
  ops_.bf16_pack(dst + static_cast<size_t>(comm_.rank()) * p.piece, master_ + p.offset, p.piece);
  return comm_.start_all_gather_bf16(dst, p.piece);
}

// The next unit this set uses in the pass, if it is not already here, into a slot other than the
// one in use now (none free: it is gathered when used).
void ZeroUnits::prefetch(UnitSet set) {
  const size_t cur = current_[index_of(real(set))];
  for (size_t i = pos_; i < schedule_->size(); ++i) {
    const auto& e = (*schedule_)[i];
    if (e.kind != UnitEvent::kUse || e.set != set) continue;
    if (!resident(set, e.unit) && free_slot(set, e.unit, cur)) start_gather(set, e.unit, cur);
    return;
  }
}

void ZeroUnits::drop_gathered() {
  for (auto& set : params_)
    for (auto& pool : set)
      for (auto& s : pool) s.unit = kNone, s.packed = false, s.widen = false, s.ticket = 0;
}

float* ZeroUnits::base(size_t offset) {
  return sliced() ? gathered(UnitSet::kBase, offset) : model_.params() + offset;
}

float* ZeroUnits::trainable(size_t offset) {
  if (!lora_) return base(offset);
  return stage_ == 2 ? model_.trainable_params() + offset : gathered(UnitSet::kTrainable, offset);
}

float* ZeroUnits::gathered(UnitSet set, size_t offset) {
  const auto& us = units(set);
  const size_t u = model::unit_at(us, offset);
  Slot* s = resident(set, u);
  SFTDP_ASSERT(s != nullptr, std::string("ZeRO: a ") + name_of(set) + " parameter read outside the units in use (offset " +
                                 std::to_string(offset) + ")");
  ready(*s);  // the vectors' unit has no use(): its gather is waited for at its first read
  return s->buf + (offset - us[u].begin);
}

// ---- gradient sums -------------------------------------------------------------------------

ZeroUnits::Slot* ZeroUnits::summing_slot(size_t unit) {
  for (auto& s : grads_[class_of(model_.trainable_units()[unit])])
    if (s.summing && s.unit == unit) return &s;
  return nullptr;
}

void ZeroUnits::drain(Slot& s) {
  if (s.ticket == 0) return;
  comm_.wait(s.ticket);  // the reduce-scatter of s.unit is in s.recv from here on
  s.ticket = 0;
  const UnitShard& p = train_plan_.units[s.unit];
  ops_.residual_fwd(accum_ + p.offset, accum_ + p.offset, s.recv, p.piece);
}

ZeroUnits::Slot& ZeroUnits::acquire_grad(size_t unit) {
  Pool& pool = grads_[class_of(model_.trainable_units()[unit])];
  Slot* slot = nullptr;
  for (auto& s : pool)
    if (!s.summing && (!slot || s.used < slot->used)) slot = &s;
  SFTDP_ASSERT(slot != nullptr, "ZeRO: no gradient slot free for unit " + std::to_string(unit));
  drain(*slot);
  const UnitShard& p = train_plan_.units[unit];
  ops_.zero(slot->buf, p.piece * static_cast<size_t>(comm_.world()) * sizeof(float));
  slot->unit = unit;
  slot->summing = true;
  slot->used = ++clock_;
  return *slot;
}

float* ZeroUnits::grad(size_t offset) {
  if (stage_ == 1) return model_.grads() + offset;
  const size_t u = model::unit_at(model_.trainable_units(), offset);
  Slot* s = summing_slot(u);
  if (!s) s = &acquire_grad(u);
  return s->buf + (offset - model_.trainable_units()[u].begin);
}

void ZeroUnits::zero_grads() {
  SFTDP_ASSERT(schedule_ == nullptr, "ZeRO: zero_grads inside a pass");
  ops_.zero(accum_, train_plan_.total * sizeof(float));
}

// The whole step's sums of each unit, copied into a slot (padded with zeros) and reduce-scattered;
// the next unit's copy overlaps the collective in flight, and a slot's piece is added into the zeroed
// shard before the slot is reused.
void ZeroUnits::reduce_full_gradients() {
  SFTDP_ASSERT(stage_ == 1, "reduce_full_gradients: zero_stage 1 with bf16 weights only");
  ops_.zero(accum_, train_plan_.total * sizeof(float));
  const float* full = model_.grads();
  const auto& us = model_.trainable_units();
  for (size_t u = 0; u < us.size(); ++u) {
    Slot& s = acquire_grad(u);
    ops_.copy(s.buf, full + us[u].begin, us[u].size() * sizeof(float));
    s.summing = false;
    s.ticket = comm_.start_reduce_scatter_sum(s.buf, s.recv, train_plan_.units[u].piece);
  }
  for (auto& pool : grads_)
    for (auto& s : pool) drain(s);
  comm_.wait_all();
}

// ---- between steps -------------------------------------------------------------------------

void ZeroUnits::publish() {
  if (stage_ == 3) return drop_gathered();
  if (bf16_) return publish_bf16();
  // Stage 2: each unit's pieces gathered into a gradient slot of its class (free between steps) and
  // copied into the model's buffer; the next unit's gather (another slot) overlaps the copy.
  float* full = full_buffer(UnitSet::kTrainable);
  const auto& us = model_.trainable_units();
  for (size_t u = 0; u < us.size(); ++u) {
    Pool& pool = grads_[class_of(us[u])];
    Slot& s = *std::min_element(pool.begin(), pool.end(), [](const Slot& a, const Slot& b) { return a.used < b.used; });
    s.used = ++clock_;
    const UnitShard& p = train_plan_.units[u];
    comm_.wait(comm_.start_all_gather(master_ + p.offset, s.buf, p.piece));
    ops_.copy(full + p.begin, s.buf, p.size * sizeof(float));
  }
  comm_.wait_all();
}

// As publish's fp32 form, with bf16 pieces (half the bytes) into the model's bf16 buffer; the gradient
// slots (free between steps) stage them. The widened units of the old values are dropped.
void ZeroUnits::publish_bf16() {
  drop_gathered();
  uint16_t* full = model_.params_bf16();
  const auto& us = model_.trainable_units();
  for (size_t u = 0; u < us.size(); ++u) {
    Pool& pool = grads_[class_of(us[u])];
    Slot& s = *std::min_element(pool.begin(), pool.end(), [](const Slot& a, const Slot& b) { return a.used < b.used; });
    s.used = ++clock_;
    uint16_t* staging = reinterpret_cast<uint16_t*>(s.buf);  // world·piece floats hold world·piece bf16
    const UnitShard& p = train_plan_.units[u];
    comm_.wait(gather_bf16(u, staging));
    ops_.copy(full + p.begin, staging, p.size * sizeof(uint16_t));
  }
  comm_.wait_all();
}

std::vector<float> ZeroUnits::gather(UnitSet set, const float* shard) {
  const auto& us = units(set);
  const auto& plan = plan_of(set);
  std::vector<float> out;
  if (comm_.rank() == 0) out.resize(us.empty() ? 0 : us.back().end);
  drop_gathered();
  for (size_t u = 0; u < us.size(); ++u) {
    // Staging: a gradient slot of the unit's class (free between steps) for the trainable set; for
    // LoRA's frozen base (stage 3), whose units have no gradient slots, a parameter slot.
    Pool& pool = real(set) == UnitSet::kBase ? params_[index_of(UnitSet::kBase)][class_of(us[u])]
                                             : grads_[class_of(us[u])];
    SFTDP_ASSERT(!pool.empty(), "ZeRO: no staging slot for a gather");
    Slot& s = pool.front();
    const UnitShard& p = plan.units[u];
    comm_.start_all_gather(shard + p.offset, s.buf, p.piece);
    comm_.wait_all();  // under the deadline before the host copy, which would block without one
    if (comm_.rank() == 0) ops_.to_host(out.data() + p.begin, s.buf, p.size * sizeof(float));
  }
  drop_gathered();
  return out;
}

// Straight from the range, piece by piece: no host copy of the shard (the memory plan counts none).
// The padding of every unit the range touches is set to 0.
void ZeroUnits::scatter(UnitSet set, float* shard, size_t begin, const float* data, size_t n) {
  const auto& us = units(set);
  const auto& plan = plan_of(set);
  SFTDP_ASSERT(begin + n <= (us.empty() ? 0 : us.back().end), "ZeRO: a range beyond the layout");
  const size_t end = begin + n;
  for (size_t u = 0; u < us.size(); ++u) {
    if (us[u].end <= begin || us[u].begin >= end) continue;
    const UnitShard& p = plan.units[u];
    const size_t mine = plan.piece_begin(u, plan.rank);  // this rank's floats [mine, mine + held)
    const size_t lo = std::max(mine, begin), hi = std::min(mine + p.held, end);
    if (lo < hi) ops_.to_device(shard + p.offset + (lo - mine), data + (lo - begin), (hi - lo) * sizeof(float));
    if (p.held < p.piece) ops_.zero(shard + p.offset + p.held, (p.piece - p.held) * sizeof(float));
  }
}

void ZeroUnits::load_range(UnitSet set, size_t begin, const float* data, size_t n) {
  drop_gathered();
  set = real(set);
  if (stage_ == 2 && !bf16_) {  // the replicated buffer, and for the trainable set its master shard
    ops_.to_device(full_buffer(set) + begin, data, n * sizeof(float));
    if (set == UnitSet::kBase) return;
  }
  if (stage_ <= 2 && bf16_) {  // the model's bf16 buffer: rounded here as the device rounds (kernels/bf16.h)
    std::vector<uint16_t> packed(n);
    cpu::bf16_pack(packed.data(), data, n);
    ops_.to_device(model_.params_bf16() + begin, packed.data(), n * sizeof(uint16_t));
  }
  scatter(set, shard_of(set), begin, data, n);
}

std::vector<float> ZeroUnits::to_host(UnitSet set) {
  set = real(set);
  if (stage_ == 2 && !bf16_) {  // replicated: every rank has it
    std::vector<float> h(units(set).empty() ? 0 : units(set).back().end);
    ops_.to_host(h.data(), full_buffer(set), h.size() * sizeof(float));
    return h;
  }
  return gather(set, shard_of(set));
}

}  // namespace sftdp::optim
