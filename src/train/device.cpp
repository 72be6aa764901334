// src/train/device.cpp — see device.h.
#include "train/device.h"

#include <mpi.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "sftdp/check_mpi.h"
#include "sftdp/log.h"
#include "train/gpu_plan.h"
#include "train/placement.h"

namespace sftdp::train {

int cpu_threads_per_rank(int ranks_on_node) {
  if (std::getenv("OMP_NUM_THREADS")) return omp_get_max_threads();
  cpu_set_t set;
  int cores = 1;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
  // Under mpirun every rank's mask is usually the whole node; under srun it is the task's share.
  const bool whole_node = ranks_on_node > 1 && cores >= ranks_on_node &&
                          cores == static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return std::max(1, whole_node ? cores / ranks_on_node : cores);
}

void check_cpu_dtypes(const config::Config& cfg) {
  if (cfg.dtype != "float32")
    throw UserError("dtype: " + cfg.dtype + " needs hardware=gpu; the CPU path computes in float32");
  if (cfg.weight_dtype != "float32")
    throw UserError("weight_dtype: " + cfg.weight_dtype + " needs hardware=gpu; the CPU path keeps float32 weights");
}

namespace {
void pick_cpu_threads(const comm::MpiSession& mpi) {
  if (!std::getenv("OMP_NUM_THREADS")) omp_set_num_threads(cpu_threads_per_rank(mpi.local_size()));
}
}  // namespace

Device pick_device(const config::Config& cfg, const comm::MpiSession& mpi) {
  Device dev;
  const bool have_gpu = cuda_device_available();
  // A node without a GPU must not leave the others waiting in NCCL's set-up: agree first.
  comm::agree_on_user_errors([&] {
    if (cfg.hardware == "gpu" && !have_gpu) {
#ifdef SFTDP_WITH_CUDA
      throw UserError("hardware: gpu requested but no CUDA device is usable on " + mpi.host() +
                      " (use hardware=cpu or auto)");
#else
      throw UserError("hardware: gpu requested but this build has no CUDA (nvcc was not found at "
                      "build time); use hardware=cpu or auto");
#endif
    }
  });
  // The GPU only when every rank gets a device of its own (all ranks must use one kind of
  // communicator, and NCCL refuses two ranks on one GPU); the facts are gathered, so all agree.
  if (cfg.hardware != "cpu") {
    const GpuPlan plan = plan_gpus(gather_gpu_facts(mpi));
    if (!plan.ok && cfg.hardware == "gpu")
      throw UserError("hardware: gpu: " + plan.why +
                      "; start at most one rank per GPU on each node, or use hardware=cpu or auto");
    if (!plan.ok && plan.any_device)
      log::info("hardware: auto: the CPU on every rank, since %s", plan.why.c_str());
    dev.gpu = plan.ok;
  }
  if (!dev.gpu) {
    check_cpu_dtypes(cfg);
    pick_cpu_threads(mpi);
    dev.ops = &cpu_ops();
    dev.comm = comm::make_mpi_communicator();
    log_placement(mpi, "cpu");
    return dev;
  }
#ifdef SFTDP_WITH_CUDA
  const int device = cuda_select_device(mpi.local_rank());
  const bool bf16_gemm = cfg.dtype == "bfloat16" || cfg.weight_dtype == "bfloat16";
  dev.ops = cuda_ops(bf16_gemm ? GemmInputs::kBf16 : GemmInputs::kFp32);
  SFTDP_ASSERT(dev.ops != nullptr, "CUDA device reported present but no CUDA ops table");
  dev.comm = comm::make_nccl_communicator();
  log::info("hardware: gpu (CUDA device %d on %s, local rank %d)", device, mpi.host().c_str(),
            mpi.local_rank());
  log_placement(mpi, device_bus_id(device));
#endif
  return dev;
}

}  // namespace sftdp::train
