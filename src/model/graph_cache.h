// src/model/graph_cache.h — device work replayed as CUDA graphs (issue 34, item 6). A piece of work — a micro-step's
// forward and backward, the optimizer's update — queues the same operations whenever its shape is the same: the
// first time a key (the shape) is seen it runs as it comes (scratch buffers grow, cuBLASLt chooses its algorithms),
// the second time it is captured (Ops::graphs) and the capture launched, from then on only launched: one launch
// instead of hundreds, and a queue the host never has to keep full. The work must wait for nothing and allocate
// nothing (a capture refuses both) and read only what its key fixes from the host: kernel arguments are captured
// by value. A table without graphs (the CPU's), a profile window, or `off` runs everything as it comes; results
// are bitwise the same either way (the same operations on the same data).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

namespace sftdp {
struct Ops;
}

namespace sftdp::model {

class GraphCache {
 public:
  using Key = std::vector<int64_t>;
  explicit GraphCache(const Ops& ops) : ops_(ops) {}
  ~GraphCache() { clear(); }
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // Runs work() now, or queues its captured graph (see the file header).
  void run(const Key& key, const std::function<void()>& work);
  // Forgets every graph: the buffers their work reads or writes are about to change.
  void clear();
  void set_enabled(bool on);
  bool enabled() const { return on_; }
  size_t graphs() const { return graphs_.size(); }  // captured so far (kept)

 private:
  const Ops& ops_;
  bool on_ = true;
  std::map<Key, void*> graphs_;
  std::set<Key> seen_;  // keys run once, as they came
};

}  // namespace sftdp::model
