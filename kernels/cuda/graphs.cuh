// kernels/cuda/graphs.cuh — the CUDA tables' Ops::Graphs entries (graphs.cu).
#pragma once

namespace sftdp::cuda {
bool graph_usable();
void graph_begin();
void* graph_end();
void graph_launch(void* graph);
void graph_destroy(void* graph);
}  // namespace sftdp::cuda
