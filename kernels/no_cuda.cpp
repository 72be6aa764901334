// kernels/no_cuda.cpp — the GPU queries of kernels/ops.h in a build without CUDA (CMake compiles
// this file only when SFTDP_WITH_CUDA is off; kernels/cuda/ops.cu defines them otherwise): there
// is no CUDA table and no usable device. cuda_select_device is not defined: callers guard it with
// #ifdef SFTDP_WITH_CUDA, so a call from CPU-only code fails at link time, not at run time. The CUDA
// tables' scratch sizes are plain arithmetic and are here all the same: a GPU run can be planned on
// any machine (sft_train --plan).
#include "kernels/cuda/scratch.h"
#include "kernels/ops.h"

namespace sftdp {

const Ops* cuda_ops(GemmInputs) { return nullptr; }
bool cuda_device_available() { return false; }
ScratchBytes cuda_scratch_bytes(GemmInputs inputs) { return cuda::scratch_entry(inputs); }

}  // namespace sftdp
