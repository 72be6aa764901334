// cudasim/graph_api.cpp — the CUDA runtime's stream-capture and graph entry points, under their real
// names and CUDA 13's declarations (cuda_runtime_api.h), on capture.h: cudaStreamBeginCapture,
// cudaStreamEndCapture, cudaStreamIsCapturing, cudaStreamGetCaptureInfo (status, id, graph and the number of
// dependencies; the node arrays are cudaErrorNotSupported), cudaThreadExchangeStreamCaptureMode,
// cudaGraphInstantiate(WithFlags), cudaGraphLaunch, cudaGraphUpload (nothing to upload), cudaGraphGetNodes
// (the count), cudaGraphExecDestroy and cudaGraphDestroy. A handle that is not a live graph or executable
// graph is cudaErrorInvalidValue, as these calls document. An executable graph keeps its graph's nodes
// (destroying the graph afterwards changes nothing), and each launch is ordered after the previous one of the
// same executable graph, whatever stream that ran on.
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>

#include "cudasim/capture.h"
#include "cudasim/runtime.h"

namespace sftdp::sim {
namespace {

struct GraphExec {
  std::shared_ptr<const Graph> graph;
  std::mutex mu;  // guards the previous launch
  Stream* last_stream = nullptr;
  uint64_t last_seq = 0;
  order::Clock last_clock;  // streamcheck: the previous launch's last node, which the next launch is ordered after
};

struct Handles {
  std::mutex mu;
  std::map<Graph*, std::shared_ptr<Graph>> graphs;
  std::map<GraphExec*, std::shared_ptr<GraphExec>> execs;
};
Handles& handles() {
  static auto* h = new Handles;
  return *h;
}

std::shared_ptr<Graph> find_graph(cudaGraph_t handle) {
  std::lock_guard<std::mutex> lock(handles().mu);
  const auto it = handles().graphs.find(reinterpret_cast<Graph*>(handle));
  return it == handles().graphs.end() ? nullptr : it->second;
}
std::shared_ptr<GraphExec> find_exec(cudaGraphExec_t handle) {
  std::lock_guard<std::mutex> lock(handles().mu);
  const auto it = handles().execs.find(reinterpret_cast<GraphExec*>(handle));
  return it == handles().execs.end() ? nullptr : it->second;
}
void register_graph(const std::shared_ptr<Graph>& g) {
  std::lock_guard<std::mutex> lock(handles().mu);
  handles().graphs.emplace(g.get(), g);
}
void drop_graph(const Graph* g) {
  std::lock_guard<std::mutex> lock(handles().mu);
  handles().graphs.erase(const_cast<Graph*>(g));
}

bool valid_mode(cudaStreamCaptureMode mode) {
  return mode == cudaStreamCaptureModeGlobal || mode == cudaStreamCaptureModeThreadLocal ||
         mode == cudaStreamCaptureModeRelaxed;
}

}  // namespace
}  // namespace sftdp::sim

using namespace sftdp::sim;

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t handle, cudaStreamCaptureMode mode) {
  if (devices().empty()) return fail(cudaErrorNoDevice);
  if (const cudaError_t e = sticky_error(current_device()); e != cudaSuccess) return fail(e);
  if (!valid_mode(mode)) return fail(cudaErrorInvalidValue);
  Stream* s = resolve(handle);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  cudaError_t e = cudaSuccess;
  const std::shared_ptr<Graph> g = begin_capture(*s, mode, &e);
  if (!g) return fail(e);
  register_graph(g);  // cudaStreamGetCaptureInfo may hand it out before the capture ends
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t handle, cudaGraph_t* graph) {
  if (!graph) return fail(cudaErrorInvalidValue);
  *graph = nullptr;
  Stream* s = resolve(handle);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  cudaError_t e = cudaSuccess;
  const std::shared_ptr<Graph> g = end_capture(*s, &e);
  if (e != cudaSuccess) {
    if (g) drop_graph(g.get());  // "a NULL graph will be returned"
    return fail(e);
  }
  *graph = reinterpret_cast<cudaGraph_t>(g.get());
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t handle, cudaStreamCaptureStatus* status) {
  if (!status) return fail(cudaErrorInvalidValue);
  Stream* s = resolve(handle);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  CaptureInfo info;
  if (const cudaError_t e = capture_info(*s, &info); e != cudaSuccess) return fail(e);
  *status = info.status;
  return cudaSuccess;
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t handle, cudaStreamCaptureStatus* status, unsigned long long* id,
                                     cudaGraph_t* graph, const cudaGraphNode_t** dependencies,
                                     const cudaGraphEdgeData** edge_data, size_t* num_dependencies) {
  if (!status || (edge_data && !dependencies)) return fail(cudaErrorInvalidValue);
  if (dependencies) return fail(cudaErrorNotSupported);  // graph nodes are no objects here
  Stream* s = resolve(handle);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  CaptureInfo info;
  if (const cudaError_t e = capture_info(*s, &info); e != cudaSuccess) return fail(e);
  *status = info.status;
  if (info.status != cudaStreamCaptureStatusActive) return cudaSuccess;  // the rest is valid only then
  if (id) *id = info.id;
  if (graph) *graph = reinterpret_cast<cudaGraph_t>(info.graph.get());
  if (num_dependencies) *num_dependencies = info.dependencies;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (!mode || !valid_mode(*mode)) return fail(cudaErrorInvalidValue);
  std::swap(*mode, thread_capture_mode());
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (!exec) return fail(cudaErrorInvalidValue);
  *exec = nullptr;
  const std::shared_ptr<Graph> g = find_graph(graph);
  if (!g || g->capturing) return fail(cudaErrorInvalidValue);  // not instantiable before EndCapture
  constexpr unsigned long long kKnown = cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload |
                                        cudaGraphInstantiateFlagDeviceLaunch | cudaGraphInstantiateFlagUseNodePriority;
  if (flags & ~kKnown) return fail(cudaErrorInvalidValue);
  // No allocation nodes and no priorities here: AutoFreeOnLaunch and UseNodePriority change nothing.
  if (flags & cudaGraphInstantiateFlagDeviceLaunch) return fail(cudaErrorNotSupported);
  auto x = std::make_shared<GraphExec>();
  x->graph = g;
  std::lock_guard<std::mutex> lock(handles().mu);
  handles().execs.emplace(x.get(), x);
  *exec = reinterpret_cast<cudaGraphExec_t>(x.get());
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  return cudaGraphInstantiate(exec, graph, flags);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t handle, cudaStream_t stream_handle) {
  if (devices().empty()) return fail(cudaErrorNoDevice);
  const std::shared_ptr<GraphExec> x = find_exec(handle);
  if (!x) return fail(cudaErrorInvalidValue);
  Stream* s = resolve(stream_handle);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky_error(s->device()); e != cudaSuccess) return fail(e);
  CaptureInfo info;
  const bool eager = capture_info(*s, &info) == cudaSuccess && info.status == cudaStreamCaptureStatusNone;
  std::lock_guard<std::mutex> lock(x->mu);
  // "Each launch is ordered behind ... any previous launches of graphExec" (a destroyed stream ran its work).
  if (eager && x->last_stream && x->last_stream != s) {
    s->order_after(x->last_clock);
    if (is_live(x->last_stream) && !x->last_stream->finished(x->last_seq))
      enqueue(
          *s, "cudaGraphLaunch: the previous launch",
          [on = x->last_stream, seq = x->last_seq] { on->wait(seq); }, /*exec=*/false);
  }
  if (const cudaError_t e = queue_graph(*s, x->graph); e != cudaSuccess) return fail(e);
  if (eager) x->last_stream = s, x->last_seq = s->tail(), x->last_clock = s->clock();
  return cudaSuccess;
}

cudaError_t cudaGraphUpload(cudaGraphExec_t handle, cudaStream_t stream_handle) {
  if (!find_exec(handle)) return fail(cudaErrorInvalidValue);
  if (!resolve(stream_handle)) return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;  // nothing to move to a device
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  const std::shared_ptr<Graph> g = find_graph(graph);
  if (!g) return fail(cudaErrorInvalidValue);
  if (nodes) return fail(cudaErrorNotSupported);  // graph nodes are no objects here
  *count = node_count(*g);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t handle) {
  std::lock_guard<std::mutex> lock(handles().mu);  // queued replays hold what they run
  return handles().execs.erase(reinterpret_cast<GraphExec*>(handle)) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaGraphDestroy(cudaGraph_t handle) {
  const std::shared_ptr<Graph> g = find_graph(handle);
  if (!g) return fail(cudaErrorInvalidValue);
  if (g->capturing) return fail(cudaErrorIllegalState);  // "All operations other than destroy ... are permitted"
  drop_graph(g.get());
  return cudaSuccess;
}

}  // extern "C"
