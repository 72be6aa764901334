// src/optim/shard_plan.cpp — which slice of each unit a rank holds under ZeRO-2/3 (UnitShards in
// sftdp/optim.h): equal padded pieces per unit, so every collective moves equal blocks, and one
// shard per rank with the decayed units first.
#include <algorithm>

#include "sftdp/check.h"
#include "sftdp/optim.h"

namespace sftdp::optim {

UnitShards unit_shards(const std::vector<model::Unit>& units, size_t n_decay, int rank, int world) {
  SFTDP_ASSERT(world >= 1 && rank >= 0 && rank < world, "unit_shards: rank outside [0, world)");
  UnitShards s;
  s.rank = rank, s.world = world;
  size_t next = 0;
  bool decayed_part = true;
  for (const auto& u : units) {
    SFTDP_ASSERT(u.begin == next, "unit_shards: the units do not tile the buffer in order");
    const bool decayed = u.end <= n_decay;
    SFTDP_ASSERT(decayed || u.begin >= n_decay, "unit_shards: a unit is partly decayed");
    SFTDP_ASSERT(decayed_part || !decayed, "unit_shards: a decayed unit after an undecayed one");
    decayed_part = decayed;
    UnitShard p;
    p.begin = u.begin, p.size = u.size();
    p.piece = (p.size + world - 1) / world;
    p.offset = s.total;
    s.units.push_back(p);
    s.units.back().held = s.held_by(s.units.size() - 1, rank);
    s.total += p.piece;
    if (decayed) s.decayed = s.total;
    next = u.end;
  }
  return s;
}

size_t UnitShards::piece_begin(size_t u, int r) const {
  const UnitShard& p = units.at(u);
  return p.begin + std::min(p.size, static_cast<size_t>(r) * p.piece);
}

size_t UnitShards::held_by(size_t u, int r) const {
  const UnitShard& p = units.at(u);
  const size_t first = std::min(p.size, static_cast<size_t>(r) * p.piece);
  return std::min(p.piece, p.size - first);
}

}  // namespace sftdp::optim
