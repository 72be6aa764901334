// src/optim/zero_shard.cpp — which part of the flat buffer a rank owns under ZeRO-1 (ZeroShard in
// sftdp/optim.h): equal blocks for the reduce-scatter and all-gather, and the short tail that
// every rank owns.
#include <algorithm>

#include "sftdp/check.h"
#include "sftdp/optim.h"

namespace sftdp::optim {

ZeroShard zero_shard(size_t total, size_t n_decay, int rank, int world) {
  SFTDP_ASSERT(world >= 1 && rank >= 0 && rank < world, "zero_shard: rank outside [0, world)");
  SFTDP_ASSERT(n_decay <= total, "zero_shard: n_decay beyond the buffer");
  ZeroShard s;
  const auto w = static_cast<size_t>(world), r = static_cast<size_t>(rank);
  s.block = total / w;
  s.begin = r * s.block;
  s.tail_begin = w * s.block;
  s.tail = total - s.tail_begin;
  // [0, n_decay) intersected with [start, start + len), counted from start
  auto decayed = [&](size_t start, size_t len) {
    return std::min(len, n_decay - std::min(n_decay, start));
  };
  s.decay_block = decayed(s.begin, s.block);
  s.decay_tail = decayed(s.tail_begin, s.tail);
  return s;
}

}  // namespace sftdp::optim
