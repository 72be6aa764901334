// src/comm/mpi_session.cpp — MPI_Init/Finalize around a run, and this rank's place: rank, world,
// node-local rank (MPI_Comm_split_type SHARED) and host name. Works under mpirun, srun --mpi=pmix
// and as a singleton with no launcher. Opens the collectives' arrival channel (comm/collective.h).
#include <mpi.h>

#include "comm/collective.h"
#include "sftdp/check_mpi.h"
#include "sftdp/comm.h"
#include "sftdp/log.h"

namespace sftdp {

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, len);
}

}  // namespace sftdp

namespace sftdp::comm {
namespace {
// die_internal's way to end every rank (sftdp/check.h).
void abort_world(int code) { MPI_Abort(MPI_COMM_WORLD, code); }
}  // namespace

MpiSession::MpiSession(int& argc, char**& argv) {
  int init = 0;
  CHECK_MPI(MPI_Initialized(&init));
  if (!init) {
    int provided = 0;
#ifdef SFTDP_CUDA_SIM
    // The CUDA simulator's NCCL runs its collectives over MPI on stream worker threads.
    const int wanted = MPI_THREAD_MULTIPLE;
#else
    const int wanted = MPI_THREAD_FUNNELED;
#endif
    CHECK_MPI(MPI_Init_thread(&argc, &argv, wanted, &provided));
    owns_ = true;
  }
  // Errors come back as codes, so CHECK_MPI can name the call before aborting the job.
  CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world_));
  MPI_Comm local;
  CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  CHECK_MPI(MPI_Comm_rank(local, &local_rank_));
  CHECK_MPI(MPI_Comm_size(local, &local_size_));
  CHECK_MPI(MPI_Comm_free(&local));
  auto env_int = [](const char* name) -> int {
    const char* v = std::getenv(name);
    if (!v || !*v) return -1;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    return (*end == '\0' && x >= 0) ? static_cast<int>(x) : -1;
  };
  if (const int ompi = env_int("OMPI_COMM_WORLD_LOCAL_RANK"); ompi >= 0) {
    local_rank_ = ompi;
  } else if (const int slurm = env_int("SLURM_LOCALID"); slurm >= 0 && env_int("SLURM_PROCID") == rank_) {
    local_rank_ = slurm;
  }
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  CHECK_MPI(MPI_Get_processor_name(name, &len));
  host_.assign(name, len);
  log::set_rank(rank_);
  set_job_abort(abort_world, rank_);
  detail::open_arrival_channel();
}

MpiSession::~MpiSession() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) detail::close_arrival_channel();
  set_job_abort(nullptr, rank_);  // MPI_Abort is not allowed after MPI_Finalize
  if (owns_ && !fin) MPI_Finalize();
}

int world_size() {
  int w = 1;
  CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &w));
  return w;
}

int world_rank() {
  int r = 0;
  CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &r));
  return r;
}

}  // namespace sftdp::comm
