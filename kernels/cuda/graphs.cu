// kernels/cuda/graphs.cu — the CUDA tables' graphs (Ops::Graphs, kernels/ops.h): stream capture on the tables' one
// stream and instantiated executable graphs. A capture is thread-local (cudaStreamCaptureModeThreadLocal): only
// this thread's potentially unsafe calls (cudaMalloc, a synchronisation) would break it, and the work captured makes
// none. Not inside a profile window (kernels/cuda/profile.cuh): its events cannot be timed in a capture, and a
// launched graph would be one operation where the profile wants every kernel.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/graphs.cuh"

namespace sftdp::cuda {

bool graph_usable() { return !profile::active(); }

void graph_begin() { CHECK_CUDA(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal)); }

void* graph_end() {
  cudaGraph_t graph = nullptr;
  CHECK_CUDA(cudaStreamEndCapture(stream(), &graph));
  cudaGraphExec_t exec = nullptr;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return exec;
}

void graph_launch(void* graph) { CHECK_CUDA(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), stream())); }

void graph_destroy(void* graph) {
  // Queued launches of it may still run: the stream first (CUDA keeps a launched graph's work alive, but a
  // destroyed exec's later launch would not be).
  CHECK_CUDA(cudaStreamSynchronize(stream()));
  CHECK_CUDA(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph)));
}

}  // namespace sftdp::cuda
