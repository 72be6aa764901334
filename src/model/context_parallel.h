// src/model/context_parallel.h — internal to src/model: what a context-parallel model keeps beside its
// own buffers (sftdp/model.h's set_context_parallel; src/model/context_attention.cpp uses it).
#pragma once
#include <cstdint>

#include "model/context_split.h"
#include "sftdp/model.h"

namespace sftdp::model {

struct Model::ContextParallel {
  ContextSplit split;           // this rank's positions of every row
  comm::Group* group = nullptr;
  int32_t* qpos = nullptr;      // (Tq) split.positions on the device
  int32_t* seg_k = nullptr;     // (max_B·T) the group's segment ids of the whole rows, when the batch has them
  bool has_seg_k = false;
  // The gathered slot s = m·B·Tq + b·Tq + t (member m's local row t of row b) is whole-row position
  // rows[s] = b·T + positions_m[t]; built for B rows (index_B) when a pass's B differs.
  int32_t* slot_rows = nullptr;  // (n·max_B·Tq)
  int index_B = 0;
  // (max_B·Tq, W) this rank's k/v heads (and their summed gradients); (n·max_B·Tq, W) the gathered
  // slots (and the gradients to scatter); (max_B·T, W) every position's k/v and this rank's part of their
  // gradients; W = 2·KVH·HS.
  float *kv_local = nullptr, *kv_slots = nullptr, *kv_all = nullptr, *dkv_all = nullptr;
  // The act16 path: the k/v heads move as bf16 (kv_local16 in the first half of kv_local's bytes, kv_slots16 and
  // kv_all16 in the two halves of kv_slots's; no kv_all), their gradients as fp32 (dkv_all, kv_slots, kv_local):
  // a backward's gradients overwrite kv_slots only after its attention has read kv_all16.
  uint16_t *kv_local16 = nullptr, *kv_slots16 = nullptr, *kv_all16 = nullptr;
  // The qkv buffer kv_all was last gathered from, while it still holds what was gathered (null: nothing):
  // a layer's backward that follows its own forward (the last layer; every layer under remat, whose
  // recomputation gathers) finds its keys and values there and gathers nothing.
  const void* gathered_from = nullptr;
  uint64_t gathers = 0;  // all-gathers made (tests count them)
};

}  // namespace sftdp::model
