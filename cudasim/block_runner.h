// cudasim/block_runner.h — runs one kernel launch on the CPU under CUDA's execution model: every
// block, one after another; the threads of a block as fibers (Boost.Context), so __syncthreads is a
// real barrier and the warp shuffles a real exchange among the lanes of a warp. Each launch runs under
// settings().schedules thread schedules (1: lanes and blocks in order; 2: both reversed; 3+: seeded
// shuffles between sync points) from the same starting memory, and the results must be bitwise equal:
// a missing barrier or a shared-memory race shows as a difference. Failed checks are reported and
// become the device's sticky error (runtime.h).
#pragma once
#include <string>
#include <vector>

#include "cudasim/launch.h"
#include "cudasim/memory.h"

namespace sftdp::sim {

// On the launch's stream worker, under the execution lock. `regions`: the live allocations the
// kernel's arguments point into (what is snapshot, compared and checked for overflows).
void run_kernel(const KernelLaunch& launch, const std::vector<Allocation>& regions, int device);

// "kernel K (file:line) block (x,y,z) thread (x,y,z)" while a simulated thread runs on this OS
// thread, else "": for the SIGSEGV handler and ASan's death callback (faults.cpp).
std::string running_thread_description();

}  // namespace sftdp::sim
