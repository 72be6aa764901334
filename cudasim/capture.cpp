// cudasim/capture.cpp — capture sequences, the one door of device work (queue_work) and the checks the
// runtime's calls ask while streams capture (capture.h). The rules are the CUDA Programming Guide's ("Stream
// Capture": cross-stream dependencies and events, prohibited and unhandled operations, invalidation) and
// cudaThreadExchangeStreamCaptureMode's for the capture modes. One process-wide lock guards every capture;
// while none is going on, queue_work does not take it.
#include "cudasim/capture.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "cudasim/runtime.h"

namespace sftdp::sim {
namespace {

struct Capture {
  uint64_t id = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;  // the one that began it
  Stream* origin = nullptr;
  bool invalidated = false;
  std::shared_ptr<Graph> graph;
  std::map<Stream*, std::vector<uint32_t>> members;  // every stream capturing into it: its dependency set
};

struct Captures {
  std::mutex mu;               // guards everything below but `active`
  std::atomic<int> active{0};  // captures going on
  uint64_t next_id = 1;
  std::map<Stream*, std::shared_ptr<Capture>> by_stream;  // every capturing stream, origins and joined ones
  std::map<uint64_t, std::shared_ptr<Capture>> by_id;     // captures going on
};
Captures& captures() {
  static auto* c = new Captures;  // never destroyed: stream workers may still queue at exit
  return *c;
}

// The rest of this namespace runs with captures().mu held.
Capture* capture_of(Stream& s) {
  const auto it = captures().by_stream.find(&s);
  return it == captures().by_stream.end() ? nullptr : it->second.get();
}

// "When any stream in the same context is being captured, and it was not created with
// cudaStreamNonBlocking, any attempted use of the legacy stream is invalid": those captures are invalidated.
cudaError_t legacy_conflict(const Stream& s) {
  if (s.kind() != Stream::Kind::kLegacy) return cudaSuccess;
  bool conflict = false;
  for (auto& [stream, cap] : captures().by_stream) {
    if (stream->kind() == Stream::Kind::kBlocking && stream->device() == s.device()) {
      cap->invalidated = true;
      conflict = true;
    }
  }
  return conflict ? cudaErrorStreamCaptureImplicit : cudaSuccess;
}

void add_node(Capture& cap, Stream& s, Work w) {
  std::vector<uint32_t>& deps = cap.members[&s];
  const auto index = static_cast<uint32_t>(cap.graph->nodes.size());
  cap.graph->nodes.push_back(GraphNode{std::move(w), deps});
  deps.assign(1, index);
}

// A graph launched into a capture: its nodes join the capture's graph, those without dependencies depending
// on the stream's; afterwards the stream depends on its sinks.
void add_graph(Capture& cap, Stream& s, const Graph& g) {
  if (g.nodes.empty()) return;
  std::vector<uint32_t>& deps = cap.members[&s];
  std::vector<GraphNode>& nodes = cap.graph->nodes;
  const auto base = static_cast<uint32_t>(nodes.size());
  std::vector<char> has_dependant(g.nodes.size(), 0);
  for (const GraphNode& n : g.nodes) {
    GraphNode copy{n.work, n.deps.empty() ? deps : n.deps};
    if (!n.deps.empty())
      for (uint32_t& d : copy.deps) has_dependant[d] = 1, d += base;
    nodes.push_back(std::move(copy));
  }
  deps.clear();
  for (uint32_t i = 0; i < g.nodes.size(); ++i)
    if (!has_dependant[i]) deps.push_back(base + i);
}

// Takes every stream of the capture out of capture mode.
void finish(const std::shared_ptr<Capture>& cap) {
  Captures& c = captures();
  for (const auto& member : cap->members) c.by_stream.erase(member.first);
  c.by_id.erase(cap->id);
  cap->graph->capturing = false;
  --c.active;
}

// Whether every captured node is the origin's last node or one of its ancestors ("Failure to rejoin to the
// origin stream will result in failure of the overall capture operation").
bool all_joined(const Capture& cap) {
  const std::vector<GraphNode>& nodes = cap.graph->nodes;
  std::vector<char> reached(nodes.size(), 0);
  std::vector<uint32_t> todo = cap.members.at(cap.origin);
  while (!todo.empty()) {
    const uint32_t i = todo.back();
    todo.pop_back();
    if (reached[i]) continue;
    reached[i] = 1;
    todo.insert(todo.end(), nodes[i].deps.begin(), nodes[i].deps.end());
  }
  return std::all_of(reached.begin(), reached.end(), [](char r) { return r != 0; });
}

// Records and queues w: moved from when eager (Work&&), copied from a graph's node when replayed (Work&).
template <class W>
void queue_now(Stream& s, W&& w, const std::string& extra) {
  w.record(s, extra);
  const uint64_t seq = enqueue(s, std::forward<W>(w).what, std::forward<W>(w).run);
  if (w.queued) w.queued(s, seq);
}

}  // namespace

cudaError_t queue_work(Stream& s, Work w) {
  if (captures().active.load() > 0) {
    std::lock_guard<std::mutex> lock(captures().mu);
    if (const cudaError_t e = legacy_conflict(s); e != cudaSuccess) return e;
    if (Capture* cap = capture_of(s)) {
      if (cap->invalidated) return cudaErrorStreamCaptureInvalidated;
      add_node(*cap, s, std::move(w));
      return cudaSuccess;
    }
  }
  queue_now(s, std::move(w), "");
  return cudaSuccess;
}

cudaError_t queue_graph(Stream& s, const std::shared_ptr<const Graph>& g) {
  if (captures().active.load() > 0) {
    std::lock_guard<std::mutex> lock(captures().mu);
    if (const cudaError_t e = legacy_conflict(s); e != cudaSuccess) return e;
    if (Capture* cap = capture_of(s)) {
      if (cap->invalidated) return cudaErrorStreamCaptureInvalidated;
      add_graph(*cap, s, *g);
      return cudaSuccess;
    }
  }
  const std::string graph_field = ",\"graph\":" + std::to_string(g->id) + ",\"node\":";
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    const Work& node = g->nodes[i].work;
    queue_now(s, node, graph_field + std::to_string(i));
  }
  return cudaSuccess;
}

std::shared_ptr<Graph> begin_capture(Stream& s, cudaStreamCaptureMode mode, cudaError_t* error) {
  if (s.kind() == Stream::Kind::kLegacy) {  // "Capture may not be initiated if stream is cudaStreamLegacy"
    *error = cudaErrorStreamCaptureUnsupported;
    return nullptr;
  }
  Captures& c = captures();
  std::lock_guard<std::mutex> lock(c.mu);
  if (capture_of(s)) {
    *error = cudaErrorIllegalState;
    return nullptr;
  }
  auto cap = std::make_shared<Capture>();
  cap->id = c.next_id++;
  cap->mode = mode;
  cap->thread = std::this_thread::get_id();
  cap->origin = &s;
  cap->graph = std::make_shared<Graph>();
  cap->graph->id = cap->id;
  cap->members[&s] = {};
  c.by_stream[&s] = cap;
  c.by_id[cap->id] = cap;
  ++c.active;
  *error = cudaSuccess;
  return cap->graph;
}

std::shared_ptr<Graph> end_capture(Stream& s, cudaError_t* error) {
  Captures& c = captures();
  std::lock_guard<std::mutex> lock(c.mu);
  const auto it = c.by_stream.find(&s);
  if (it == c.by_stream.end()) {
    *error = cudaErrorIllegalState;
    return nullptr;
  }
  const std::shared_ptr<Capture> cap = it->second;
  if (cap->origin != &s) {  // "must still be called in the same stream where cudaStreamBeginCapture() was"
    cap->invalidated = true;
    *error = cudaErrorStreamCaptureUnmatched;
    return nullptr;
  }
  if (cap->mode != cudaStreamCaptureModeRelaxed && cap->thread != std::this_thread::get_id()) {
    *error = cudaErrorStreamCaptureWrongThread;
    return nullptr;
  }
  finish(cap);
  *error = cap->invalidated ? cudaErrorStreamCaptureInvalidated
                            : (all_joined(*cap) ? cudaSuccess : cudaErrorStreamCaptureUnjoined);
  return cap->graph;
}

cudaError_t capture_info(Stream& s, CaptureInfo* info) {
  *info = CaptureInfo{};
  if (captures().active.load() == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(captures().mu);
  if (s.kind() == Stream::Kind::kLegacy) {  // asking does not invalidate the blocking stream's capture
    for (const auto& [stream, cap] : captures().by_stream)
      if (stream->kind() == Stream::Kind::kBlocking && stream->device() == s.device())
        return cudaErrorStreamCaptureImplicit;
    return cudaSuccess;
  }
  const Capture* cap = capture_of(s);
  if (!cap) return cudaSuccess;
  info->status = cap->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  info->id = cap->id;
  info->graph = cap->graph;
  info->dependencies = cap->members.at(&s).size();
  return cudaSuccess;
}

size_t node_count(const Graph& g) {
  std::lock_guard<std::mutex> lock(captures().mu);
  return g.nodes.size();
}

cudaStreamCaptureMode& thread_capture_mode() {
  static thread_local cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  return mode;
}

void forget_stream_captures(Stream& s) {
  std::lock_guard<std::mutex> lock(captures().mu);
  const auto it = captures().by_stream.find(&s);
  if (it == captures().by_stream.end()) return;
  const std::shared_ptr<Capture> cap = it->second;
  if (cap->origin == &s) {
    finish(cap);  // nobody can end it any more: its graph is dropped
    return;
  }
  cap->invalidated = true;
  cap->members.erase(&s);
  captures().by_stream.erase(&s);
}

cudaError_t check_stream_sync(Stream& s) {
  if (captures().active.load() == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(captures().mu);
  if (const cudaError_t e = legacy_conflict(s); e != cudaSuccess) return e;
  Capture* cap = capture_of(s);
  if (!cap) return cudaSuccess;
  cap->invalidated = true;
  return cudaErrorStreamCaptureUnsupported;
}

cudaError_t check_legacy_use(Stream& s) {
  if (captures().active.load() == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(captures().mu);
  return legacy_conflict(s);
}

cudaError_t check_device_sync(int device) {
  if (captures().active.load() == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(captures().mu);
  bool capturing = false;
  for (auto& [stream, cap] : captures().by_stream) {
    if (stream->device() == device) {
      cap->invalidated = true;
      capturing = true;
    }
  }
  return capturing ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t check_unsafe_call() {
  const cudaStreamCaptureMode mine = thread_capture_mode();
  if (mine == cudaStreamCaptureModeRelaxed || captures().active.load() == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(captures().mu);
  const std::thread::id me = std::this_thread::get_id();
  bool forbidden = false;
  for (auto& [id, cap] : captures().by_id) {
    const bool local = cap->thread == me;
    if ((local && cap->mode != cudaStreamCaptureModeRelaxed) ||
        (!local && mine == cudaStreamCaptureModeGlobal && cap->mode == cudaStreamCaptureModeGlobal)) {
      cap->invalidated = true;
      forbidden = true;
    }
  }
  return forbidden ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t capture_event_record(Event& ev, Stream& s, bool* done) {
  *done = false;
  if (captures().active.load() > 0) {
    std::lock_guard<std::mutex> lock(captures().mu);
    if (const cudaError_t e = legacy_conflict(s); e != cudaSuccess) return e;
    if (Capture* cap = capture_of(s)) {
      if (cap->invalidated) return cudaErrorStreamCaptureInvalidated;
      std::lock_guard<std::mutex> ev_lock(ev.mu);
      ev.capture = cap->id;
      ev.capture_nodes = cap->members.at(&s);
      ++ev.generation;  // an earlier eager record's marker must not set a time now
      ev.time_ms = -1;
      *done = true;
      return cudaSuccess;
    }
  }
  std::lock_guard<std::mutex> ev_lock(ev.mu);
  ev.capture = 0;
  ev.capture_nodes.clear();
  return cudaSuccess;
}

cudaError_t capture_event_wait(Stream& s, Event& ev, bool* done) {
  *done = false;
  uint64_t id = 0;
  std::vector<uint32_t> nodes;
  {
    std::lock_guard<std::mutex> ev_lock(ev.mu);
    id = ev.capture;
    nodes = ev.capture_nodes;
  }
  if (id == 0 && captures().active.load() == 0) return cudaSuccess;
  Captures& c = captures();
  std::lock_guard<std::mutex> lock(c.mu);
  if (const cudaError_t e = legacy_conflict(s); e != cudaSuccess) return e;
  Capture* mine = capture_of(s);
  if (mine && mine->invalidated) return cudaErrorStreamCaptureInvalidated;
  if (id == 0) {  // "It is invalid to wait on a non-captured event from a stream which is being captured"
    if (!mine) return cudaSuccess;
    mine->invalidated = true;
    return cudaErrorStreamCaptureIsolation;
  }
  const auto it = c.by_id.find(id);
  if (it == c.by_id.end()) {  // recorded in a capture that has ended
    if (mine) mine->invalidated = true;
    return cudaErrorCapturedEvent;
  }
  Capture& theirs = *it->second;
  if (mine && mine != &theirs) {  // "It is invalid to merge two separate capture graphs"
    mine->invalidated = theirs.invalidated = true;
    return cudaErrorStreamCaptureMerge;
  }
  if (theirs.invalidated) return cudaErrorStreamCaptureInvalidated;
  if (s.kind() == Stream::Kind::kLegacy) {  // the legacy stream cannot capture
    theirs.invalidated = true;
    return cudaErrorStreamCaptureImplicit;
  }
  std::vector<uint32_t>& deps = theirs.members[&s];
  if (!mine) {  // the fork: s joins the capture, its earlier (eager) work is no dependency
    c.by_stream[&s] = it->second;
    deps = nodes;
  } else {
    for (const uint32_t n : nodes)
      if (std::find(deps.begin(), deps.end(), n) == deps.end()) deps.push_back(n);
  }
  *done = true;
  return cudaSuccess;
}

cudaError_t check_event_use(Event& ev) {
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> ev_lock(ev.mu);
    id = ev.capture;
  }
  if (id == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(captures().mu);
  if (const auto it = captures().by_id.find(id); it != captures().by_id.end()) it->second->invalidated = true;
  return cudaErrorCapturedEvent;
}

}  // namespace sftdp::sim
