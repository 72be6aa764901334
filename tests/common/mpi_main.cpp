// tests/common/mpi_main.cpp — main() for tests run under mpiexec: MPI around GoogleTest; only
// rank 0 prints results; the exit status is non-zero on every rank if any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

int main(int argc, char** argv) {
#ifdef SFTDP_CUDA_SIM
  int provided = 0;  // the CUDA simulator's NCCL runs collectives on stream worker threads
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
#else
  MPI_Init(&argc, &argv);
#endif
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any && rank == 0 && !failed) std::fprintf(stderr, "a rank other than 0 failed\n");
  MPI_Finalize();
  return any;
}
