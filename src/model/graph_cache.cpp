// src/model/graph_cache.cpp — see graph_cache.h. Bounded: a run whose shapes keep changing (every micro-batch with
// its own count of weighted positions) would otherwise keep a graph per shape; past kMaxGraphs the oldest are let
// go (all of them: the next ones are captured again as they repeat).
#include "model/graph_cache.h"

#include "kernels/ops.h"

namespace sftdp::model {

namespace {
constexpr size_t kMaxGraphs = 32;
constexpr size_t kMaxSeen = 4096;
}  // namespace

void GraphCache::run(const Key& key, const std::function<void()>& work) {
  const Ops::Graphs& g = ops_.graphs;
  if (!on_ || !g.usable || !g.usable()) return work();
  if (const auto it = graphs_.find(key); it != graphs_.end()) return g.launch(it->second);
  if (seen_.insert(key).second) {  // the first time: as it comes
    if (seen_.size() > kMaxSeen) seen_ = {key};
    return work();
  }
  if (graphs_.size() >= kMaxGraphs) clear();
  g.begin();
  work();
  void* graph = g.end();
  graphs_.emplace(key, graph);
  g.launch(graph);
}

void GraphCache::clear() {
  for (const auto& [key, graph] : graphs_) ops_.graphs.destroy(graph);
  graphs_.clear();
  seen_.clear();
}

void GraphCache::set_enabled(bool on) {
  if (!on) clear();
  on_ = on;
}

}  // namespace sftdp::model
