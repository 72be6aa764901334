// src/train/checkpoint_shards.cpp — see checkpoint_shards.h.
#include "train/checkpoint_shards.h"

#include <algorithm>
#include <vector>

#include "kernels/ops.h"
#include "optim/zero_units.h"
#include "sftdp/check.h"
#include "train/run_state.h"

namespace sftdp::train {

Sharding sharding_of(const model::Model& model, int zero_stage) {
  Sharding s;
  s.total = model.trainable_layout().total;
  s.n_decay = model.trainable_layout().n_decay;
  s.units = model.trainable_units();
  s.zero_stage = zero_stage;
  s.bf16_weights = model.bf16_weights();
  return s;
}

RankRuns rank_runs(const Sharding& s, int rank, int world) {
  RankRuns out;
  std::vector<Held> held;  // the moments this rank holds (its m/v buffers)
  bool replicated = false;
  if (s.units_sharded()) {
    const optim::UnitShards plan = optim::unit_shards(s.units, s.n_decay, rank, world);
    for (size_t u = 0; u < plan.units.size(); ++u)
      if (plan.units[u].held > 0) held.push_back({plan.piece_begin(u, rank), plan.units[u].held, plan.units[u].offset});
    for (int g = 0; g < checkpoint::kGroups; ++g) out.write[g] = held;  // params: the master shard
  } else if (s.zero_stage == 1 && world > 1) {
    const optim::ZeroShard z = optim::zero_shard(s.total, s.n_decay, rank, world);
    if (z.block > 0) held.push_back({z.begin, z.block, 0});
    if (z.tail > 0) held.push_back({z.tail_begin, z.tail, z.block});
    for (int g = 1; g < checkpoint::kGroups; ++g) {
      if (z.block > 0) out.write[g].push_back(held.front());
      if (z.tail > 0 && rank == world - 1) out.write[g].push_back(held.back());  // the tail: once
    }
    replicated = true;  // the parameters only
  } else {
    if (s.total > 0) held.push_back({0, s.total, 0});
    replicated = true;
  }
  if (replicated) {
    // Every rank holds all parameters (and at stage 0 all moments): each writes 1/world of every unit
    // (a layer's matrices, the embeddings, the head, the vectors), so the writes are parallel and
    // the pieces large. Units hold whole tensors and tile the layout.
    std::vector<Held> mine;
    size_t at = 0;
    for (const auto& u : s.units) {
      SFTDP_ASSERT(u.begin == at, "rank_runs: the units do not tile the layout");
      at = u.end;
      const size_t n = u.size();
      const size_t lo = n * static_cast<size_t>(rank) / world, hi = n * static_cast<size_t>(rank + 1) / world;
      if (hi > lo) mine.push_back({u.begin + lo, hi - lo, u.begin + lo});
    }
    SFTDP_ASSERT(at == s.total, "rank_runs: the units do not cover the layout");
    out.write[0] = mine;
    if (!(s.zero_stage == 1 && world > 1)) out.write[1] = out.write[2] = mine;
  }
  out.read_moments.reserve(held.size());
  for (const auto& h : held) out.read_moments.push_back({h.begin, h.count});
  if (s.zero_stage == 3)
    out.read_params = out.read_moments;
  else if (s.total > 0)
    out.read_params = {{0, s.total}};
  return out;
}

size_t shard_bytes(const Sharding& s, int rank, int world) {
  const RankRuns runs = rank_runs(s, rank, world);
  size_t floats = 0;
  for (const auto& group : runs.write)
    for (const auto& h : group) floats += h.count;
  return floats * sizeof(float);
}

checkpoint::Runs runs_only(const RankRuns& r) {
  checkpoint::Runs out;
  for (int g = 0; g < checkpoint::kGroups; ++g)
    for (const auto& h : r.write[g]) out[g].push_back({h.begin, h.count});
  return out;
}

checkpoint::HostShard snapshot(model::Model& model, optim::AdamW& opt, int zero_stage, int rank, int world) {
  checkpoint::HostShard out;
  snapshot(model, opt, zero_stage, rank, world, out);
  return out;
}

void snapshot(model::Model& model, optim::AdamW& opt, int zero_stage, int rank, int world, checkpoint::HostShard& out) {
  const Sharding s = sharding_of(model, zero_stage);
  const RankRuns runs = rank_runs(s, rank, world);
  SFTDP_ASSERT(s.units_sharded() == (opt.zero_units() != nullptr), "snapshot: the optimiser's sharding differs");
  const float* src[checkpoint::kGroups] = {
      s.units_sharded() ? opt.zero_units()->master() : model.trainable_params(), opt.m(), opt.v()};
  out.runs = runs_only(runs);
  const Ops& o = model.ops();
  for (int g = 0; g < checkpoint::kGroups; ++g) {
    size_t n = 0;
    for (const auto& h : runs.write[g]) n += h.count;
    const checkpoint::HostAllocator<float> host(o.host_alloc, o.host_free);
    if (!(out.data[g].get_allocator() == host)) out.data[g] = checkpoint::HostFloats(host);
    out.data[g].resize(n);
    size_t at = 0;
    for (const auto& h : runs.write[g]) {
      o.to_host(out.data[g].data() + at, src[g] + h.local, h.count * sizeof(float));
      at += h.count;
    }
  }
}

void read_into(checkpoint::Reader& reader, model::Model& model, optim::AdamW& opt, int zero_stage, int rank,
               int world) {
  const RankRuns runs = rank_runs(sharding_of(model, zero_stage), rank, world);
  std::vector<float> chunk;
  auto each_chunk = [&](const std::vector<checkpoint::Run>& rs, int group, auto&& take) {
    for (const auto& r : rs)
      for (size_t b = r.begin; b < r.begin + r.count; b += kRestoreChunkFloats) {
        const size_t len = std::min(kRestoreChunkFloats, r.begin + r.count - b);
        chunk.assign(len, 0.0f);  // the padding between tensors is in no piece: 0, as a fresh model's
        reader.read(group, b, len, chunk.data());
        take(b, len);
      }
  };
  for (int which : {0, 1})
    each_chunk(runs.read_moments, 1 + which,
               [&](size_t b, size_t len) { opt.set_moment_range(which, b, chunk.data(), len); });
  each_chunk(runs.read_params, 0, [&](size_t b, size_t len) { model.set_trainable_range(b, chunk.data(), len); });
}

}  // namespace sftdp::train
