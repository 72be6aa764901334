// cudasim/capture.h — stream capture and CUDA graphs in the simulator, as the CUDA Programming Guide's
// "Stream Capture" section and the runtime API describe them. Every piece of device work (kernel, copy,
// memset, cuBLASLt matmul, NCCL collective) enters through queue_work(): on a stream that is not capturing
// it is recorded (record.h) and queued; on a capturing stream it becomes a node of the capture's graph and
// nothing runs or is recorded. Events recorded in a capture and waited on by other streams fork and join
// the capture; a replay (cudaGraphLaunch, graph_api.cpp) queues the nodes in capture order (a valid
// topological order) on the launch stream, each recorded as its eager op with "graph" and "node" added.
// The runtime's other calls ask the checks below first: what a capture forbids fails with CUDA's code and
// invalidates the capture (cudaStreamEndCapture then returns cudaErrorStreamCaptureInvalidated).
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cudasim/streams.h"

namespace sftdp::sim {

// One piece of device work as the call site made it: what an eager run queues, and how it is recorded.
struct Work {
  std::string what;           // the op's name in the stream queue ("kernel fill_kernel", "cudaMemcpyAsync")
  std::function<void()> run;  // on the stream worker, under the execution lock (record-only: whatever is left)
  // Writes its record line on `s` with `extra` (JSON members, ",\"k\":v" style) appended: "" when queued
  // eagerly, the graph and node numbers when replayed.
  std::function<void(const Stream& s, const std::string& extra)> record;
  // (optional) told the op's number each time it is queued on a stream (NCCL keeps a communicator's last op).
  std::function<void(Stream& s, uint64_t seq)> queued;
};

// A captured graph: its nodes in capture order, each depending only on nodes before it.
struct GraphNode {
  Work work;
  std::vector<uint32_t> deps;  // indices of the nodes it waits for
};
struct Graph {
  uint64_t id = 0;  // 1, 2, ... in order of cudaStreamBeginCapture (per process)
  std::vector<GraphNode> nodes;  // grows under the capture lock while capturing, then never changes
  std::atomic<bool> capturing{true};  // until its capture ends
};
size_t node_count(const Graph& g);  // also while it is being captured into

// Queues w on s (recorded first), or adds it to the graph s captures into. cudaErrorStreamCaptureInvalidated
// on a stream of an invalidated capture, cudaErrorStreamCaptureImplicit on the legacy stream while a blocking
// stream of its device captures (that capture is invalidated); nothing is queued or recorded then.
cudaError_t queue_work(Stream& s, Work w);
// Queues every node of g on s in order (each recorded with "graph" and "node"), or adds them to s's capture
// (a graph launched into a capture is captured as its nodes). Errors as queue_work's.
cudaError_t queue_graph(Stream& s, const std::shared_ptr<const Graph>& g);

// ---- capture sequences (graph_api.cpp's entry points) -----------------------------------------------------
// cudaStreamBeginCapture: the new capture's graph, or null with *error set (cudaErrorStreamCaptureUnsupported:
// the legacy stream; cudaErrorIllegalState: s already captures).
std::shared_ptr<Graph> begin_capture(Stream& s, cudaStreamCaptureMode mode, cudaError_t* error);
// cudaStreamEndCapture: ends the capture s originated (every stream that joined it leaves capture mode) and
// gives its graph. *error: cudaErrorStreamCaptureInvalidated (it was invalidated) or
// cudaErrorStreamCaptureUnjoined (work that no chain of events joins back to s) end it too, the graph given
// only to be dropped; null when no capture ended: s is not capturing (cudaErrorIllegalState), joined a
// capture it did not begin (cudaErrorStreamCaptureUnmatched; invalidated), or the capture is neither the
// calling thread's nor relaxed (cudaErrorStreamCaptureWrongThread; it goes on).
std::shared_ptr<Graph> end_capture(Stream& s, cudaError_t* error);
struct CaptureInfo {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  uint64_t id = 0;  // unique per process
  std::shared_ptr<Graph> graph;
  size_t dependencies = 0;  // nodes the next captured node on the stream will depend on
};
// cudaStreamIsCapturing / cudaStreamGetCaptureInfo: cudaErrorStreamCaptureImplicit for the legacy stream
// while a blocking stream of its device captures (no capture is invalidated by asking).
cudaError_t capture_info(Stream& s, CaptureInfo* info);
cudaStreamCaptureMode& thread_capture_mode();  // cudaThreadExchangeStreamCaptureMode's
void forget_stream_captures(Stream& s);        // cudaStreamDestroy: its capture ends or is invalidated

// ---- what the runtime's other calls ask first (each invalidates the captures it fails for) -------------
// cudaStreamSynchronize, cudaStreamQuery: cudaErrorStreamCaptureUnsupported for a capturing stream;
// cudaErrorStreamCaptureImplicit for the legacy stream while a blocking stream of its device captures.
cudaError_t check_stream_sync(Stream& s);
// Work queued on s outside queue_work (cudaMemcpy, cudaMemset, cudaEventRecord, cudaStreamWaitEvent on
// the legacy stream): cudaErrorStreamCaptureImplicit as above.
cudaError_t check_legacy_use(Stream& s);
// cudaDeviceSynchronize: cudaErrorStreamCaptureUnsupported while any stream of the device captures.
cudaError_t check_device_sync(int device);
// "Potentially unsafe API calls" (cudaMalloc, cudaFree, cudaMemcpy), by the calling thread's mode: relaxed
// never fails; otherwise cudaErrorStreamCaptureUnsupported while this thread has a capture not begun
// relaxed, or (global mode) while any other thread has a capture begun in global mode.
cudaError_t check_unsafe_call();

// ---- events ---------------------------------------------------------------------------------------------
// cudaEventRecord on s: when s captures, ev becomes a captured event (the nodes s's next node would depend
// on) and *done is set; else ev forgets any capture and the caller records it as usual.
cudaError_t capture_event_record(Event& ev, Stream& s, bool* done);
// cudaStreamWaitEvent(s, ev): a captured event forks s into its capture (or adds to s's dependencies if s
// already captures into it) and sets *done. Errors: cudaErrorStreamCaptureMerge (s captures another graph),
// cudaErrorStreamCaptureIsolation (s captures, ev is not a captured event), cudaErrorCapturedEvent (ev's
// capture has ended), cudaErrorStreamCaptureImplicit (the legacy stream cannot join a capture).
cudaError_t capture_event_wait(Stream& s, Event& ev, bool* done);
// cudaEventQuery, cudaEventSynchronize, cudaEventElapsedTime: cudaErrorCapturedEvent for an event last
// recorded in a capture (which, still going, is invalidated).
cudaError_t check_event_use(Event& ev);

}  // namespace sftdp::sim
