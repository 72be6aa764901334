// src/model/context_attention.cpp — context parallelism's attention (SPEC §1, issue 37). Each rank holds
// two chunks of every row (model/context_split.h); every layer's attention needs every earlier position's
// keys and values, so:
//   forward:  the k/v heads of this rank's rows are packed (copy_strided_rows), all-gathered over the group
//             (member order), put back in position order (one index), and this rank's queries attend to
//             them (attention_cp_fwd: its rows at their global positions, segments of the whole rows);
//   backward: the same gather again, unless the buffer still holds this layer's (its forward ran last: the
//             last layer, and under remat every layer, recomputed right before its backward); nothing
//             per layer is kept (O(T·W) per rank, not O(L·T·W)); the
//             attention's backward gives this rank's query gradients and its part of every position's
//             k/v gradient, which go back in member order and are reduce-scattered: each rank receives
//             the group's sum for its own rows' k/v heads.
// On the act16 path (bf16 activations) the k/v heads are gathered as bf16 (half the bytes, and both the slots and
// every position's k/v in the bytes of one fp32 slot buffer) and attended on tensor cores (act16::attention_cp_*);
// their gradients stay fp32 through the reduce-scatter and are rounded once, into this rank's rows of dqkv.
// K/V are gathered rather than passed around a ring: under GQA they are NH/KVH times smaller than the
// queries (Llama 3's choice), and one all-gather per layer moves (n − 1)/n of them per rank, as a ring
// would in n − 1 steps. Deterministic: copies, and the group's reduce-scatter, whose sums are in an
// order fixed by the group size (bitwise the same run to run).
#include <algorithm>

#include "kernels/attention.h"
#include "kernels/ops.h"
#include "model/context_parallel.h"
#include "sftdp/check.h"
#include "sftdp/comm.h"

namespace sftdp::model {

void Model::set_context_parallel(const ContextSplit& split, comm::Group* group) {
  SFTDP_ASSERT(!cp_, "set_context_parallel: called twice");
  SFTDP_ASSERT(group && group->size() == split.n && group->index() == split.index,
               "set_context_parallel: the group is not the split's");
  SFTDP_ASSERT(split.local_T() == T_, "set_context_parallel: the model's T is not the split's local T");
  const bool act16 = act_storage_ == ActivationStorage::kBf16;
  SFTDP_ASSERT(ops_.copy_strided_rows && (act16 ? ops_.act16.attention_cp_fwd && ops_.act16.copy_strided_rows &&
                                                      attention_bf16::tensor_cores(d_.head_size())
                                                : ops_.attention_cp_fwd != nullptr),
               "set_context_parallel: this kernel table or activation path has no context-parallel attention");
  auto cp = std::make_unique<ContextParallel>();
  cp->split = split;
  cp->group = group;
  const size_t W = 2 * static_cast<size_t>(d_.kv_heads()) * d_.head_size(), B = max_B_, Tq = T_, T = split.T;
  cp->qpos = alloc_ints(Tq);
  ops_.to_device(cp->qpos, split.positions.data(), Tq * sizeof(int32_t));
  cp->seg_k = alloc_ints(B * T);
  cp->slot_rows = alloc_ints(split.n * B * Tq);
  cp->kv_local = alloc_acts(B * Tq * W);
  cp->kv_slots = alloc_acts(B * T * W);
  if (act16) {  // kv_slots's fp32 bytes hold both bf16 buffers of a gather: the slots, then every position's k/v
    cp->kv_local16 = reinterpret_cast<uint16_t*>(cp->kv_local);
    cp->kv_slots16 = reinterpret_cast<uint16_t*>(cp->kv_slots);
    cp->kv_all16 = cp->kv_slots16 + B * T * W;
  } else {
    cp->kv_all = alloc_acts(B * T * W);
  }
  cp->dkv_all = alloc_acts(B * T * W);
  cp_ = std::move(cp);
}

size_t context_parallel_bytes(const config::ModelDims& d, int B, int T, int cp, bool bf16_keys) {
  if (cp <= 1) return 0;
  const size_t W = 2 * static_cast<size_t>(d.kv_heads()) * d.head_size(), rows = static_cast<size_t>(B) * T;
  // kv_local (B·T/cp rows), kv_slots, dkv_all, kv_all (B·T rows each; act16: kv_all16 inside kv_slots); qpos,
  // seg_k, slot_rows
  return (rows / cp + (bf16_keys ? 2 : 3) * rows) * W * sizeof(float) + (T / cp + 2 * rows) * sizeof(int32_t);
}

int Model::context_parallelism() const { return cp_ ? cp_->split.n : 1; }

uint64_t Model::context_gathers() const { return cp_ ? cp_->gathers : 0; }

const data::Batch& Model::share_of(const data::Batch& full, data::Batch& local) {
  if (!cp_) return full;
  ContextParallel& cp = *cp_;
  local = local_batch(full, cp.split);
  cp.has_seg_k = full.has_segments();
  if (cp.has_seg_k)
    ops_.to_device_async(cp.seg_k, full.segment_ids.data(), full.segment_ids.size() * sizeof(int32_t));
  if (cp.index_B != full.B) {  // the slots' rows for this B (each member's positions from the layout)
    const int n = cp.split.n, Tq = T_, T = cp.split.T, B = full.B;
    std::vector<int32_t> rows(static_cast<size_t>(n) * B * Tq);
    for (int m = 0; m < n; ++m) {
      const ContextSplit other = context_split(T, n, m, n);  // member m's positions (group 0's index m)
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < Tq; ++t)
          rows[(static_cast<size_t>(m) * B + b) * Tq + t] = b * T + other.positions[static_cast<size_t>(t)];
    }
    ops_.to_device(cp.slot_rows, rows.data(), rows.size() * sizeof(int32_t));
    cp.index_B = B;
  }
  return local;
}

void Model::gather_keys_values(const float* qkv, int B, int NH, int KVH, int HS) {
  const Ops& o = ops_;
  ContextParallel& cp = *cp_;
  const int Tq = T_, QKV = (NH + 2 * KVH) * HS, W = 2 * KVH * HS, n = cp.split.n;
  o.copy_strided_rows(cp.kv_local, W, nullptr, qkv + static_cast<size_t>(NH) * HS, QKV, nullptr, B * Tq, W);
  cp.group->all_gather(cp.kv_local, cp.kv_slots, static_cast<size_t>(B) * Tq * W * sizeof(float));
  o.copy_strided_rows(cp.kv_all, W, cp.slot_rows, cp.kv_slots, W, nullptr, n * B * Tq, W);
  cp.gathered_from = qkv;
  ++cp.gathers;
}

void Model::gather_keys_values16(const uint16_t* qkv, int B, int NH, int KVH, int HS) {
  const Ops::Act16& o = ops_.act16;
  ContextParallel& cp = *cp_;
  const int Tq = T_, QKV = (NH + 2 * KVH) * HS, W = 2 * KVH * HS, n = cp.split.n;
  o.copy_strided_rows(cp.kv_local16, W, nullptr, qkv + static_cast<size_t>(NH) * HS, QKV, nullptr, B * Tq, W);
  cp.group->all_gather(cp.kv_local16, cp.kv_slots16, static_cast<size_t>(B) * Tq * W * sizeof(uint16_t));
  o.copy_strided_rows(cp.kv_all16, W, cp.slot_rows, cp.kv_slots16, W, nullptr, n * B * Tq, W);
  cp.gathered_from = qkv;
  ++cp.gathers;
}

void Model::attention_forward(float* out, float* lse, const float* qkv, int B, int NH, int KVH, int HS) {
  if (!cp_) return ops_.attention_fwd(out, lse, qkv, io_.seg(), B, T_, NH, KVH, HS);
  ContextParallel& cp = *cp_;
  gather_keys_values(qkv, B, NH, KVH, HS);
  ops_.attention_cp_fwd(out, lse, qkv, cp.kv_all, cp.qpos, io_.seg(), cp.has_seg_k ? cp.seg_k : nullptr, B, T_,
                        cp.split.T, NH, KVH, HS);
}

void Model::attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                               int B, int NH, int KVH, int HS) {
  if (!cp_) return ops_.attention_bwd(dqkv, dout, qkv, out, lse, io_.seg(), B, T_, NH, KVH, HS);
  ContextParallel& cp = *cp_;
  const int QKV = (NH + 2 * KVH) * HS, W = 2 * KVH * HS, n = cp.split.n;
  // The layer's keys and values are still gathered when its forward (or its recomputation under remat) was
  // the last attention to run: the backward of the last layer, and with remat of every layer.
  if (cp.gathered_from != qkv) gather_keys_values(qkv, B, NH, KVH, HS);
  cp.gathered_from = nullptr;  // the next layer's backward reads another layer's keys
  ops_.attention_cp_bwd(dqkv, cp.dkv_all, dout, qkv, cp.kv_all, out, lse, cp.qpos, io_.seg(),
                        cp.has_seg_k ? cp.seg_k : nullptr, B, T_, cp.split.T, NH, KVH, HS);
  // Back to member order, summed over the group: this rank's rows' k/v gradients into dqkv's k/v heads.
  ops_.copy_strided_rows(cp.kv_slots, W, nullptr, cp.dkv_all, W, cp.slot_rows, n * B * T_, W);
  cp.group->reduce_scatter_sum(cp.kv_slots, cp.kv_local, static_cast<size_t>(B) * T_ * W);
  ops_.copy_strided_rows(dqkv + static_cast<size_t>(NH) * HS, QKV, nullptr, cp.kv_local, W, nullptr, B * T_, W);
}

void Model::attention_forward16(uint16_t* out, float* lse, const uint16_t* qkv, int B, int NH, int KVH, int HS) {
  if (!cp_) return ops_.act16.attention_fwd(out, lse, qkv, io_.seg(), B, T_, NH, KVH, HS);
  ContextParallel& cp = *cp_;
  gather_keys_values16(qkv, B, NH, KVH, HS);
  ops_.act16.attention_cp_fwd(out, lse, qkv, cp.kv_all16, cp.qpos, io_.seg(), cp.has_seg_k ? cp.seg_k : nullptr, B, T_,
                              cp.split.T, NH, KVH, HS);
}

void Model::attention_backward16(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* out,
                                 const float* lse, int B, int NH, int KVH, int HS) {
  if (!cp_) return ops_.act16.attention_bwd(dqkv, dout, qkv, out, lse, io_.seg(), B, T_, NH, KVH, HS);
  ContextParallel& cp = *cp_;
  const int QKV = (NH + 2 * KVH) * HS, W = 2 * KVH * HS, n = cp.split.n;
  if (cp.gathered_from != qkv) gather_keys_values16(qkv, B, NH, KVH, HS);  // as attention_backward
  cp.gathered_from = nullptr;
  ops_.act16.attention_cp_bwd(dqkv, cp.dkv_all, dout, qkv, cp.kv_all16, out, lse, cp.qpos, io_.seg(),
                              cp.has_seg_k ? cp.seg_k : nullptr, B, T_, cp.split.T, NH, KVH, HS);
  // The group's fp32 sums of this rank's rows' k/v gradients, rounded once into dqkv's k/v heads (through kv_slots,
  // free after the reduce-scatter: kv_local's own bytes cannot hold its rounding in place on a GPU).
  ops_.copy_strided_rows(cp.kv_slots, W, nullptr, cp.dkv_all, W, cp.slot_rows, n * B * T_, W);
  cp.group->reduce_scatter_sum(cp.kv_slots, cp.kv_local, static_cast<size_t>(B) * T_ * W);
  ops_.bf16_pack(cp.kv_slots16, cp.kv_local, static_cast<size_t>(B) * T_ * W);
  ops_.act16.copy_strided_rows(dqkv + static_cast<size_t>(NH) * HS, QKV, nullptr, cp.kv_slots16, W, nullptr, B * T_, W);
}

}  // namespace sftdp::model
