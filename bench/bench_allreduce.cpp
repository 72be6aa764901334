// bench/bench_allreduce.cpp — the trainer's gradient allreduce (Communicator::allreduce_sum on
// the flat gradient buffer: gradient sums + loss sum + weight sum) against a raw MPI_Allreduce of
// the same byte count, in the same run. Run under mpirun -np N. Reports algorithm and bus
// bandwidth (nccl-tests: busbw = algbw · 2(n−1)/n) and the ratio trainer / raw.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "harness.h"
#include "sftdp/comm.h"
#include "sftdp/config.h"
#include "sftdp/model.h"

using namespace sftdp;

int main(int argc, char** argv) {
  comm::MpiSession mpi(argc, argv);
  auto comm = comm::make_mpi_communicator();
  const int n = mpi.world();
  struct Case {
    const char* name;
    config::ModelDims d;
  };
  const Case cases[] = {{"gpt2-tiny", {2, 4, 64, 256, 264, 256}},
                        {"L4 C256 V50257", {4, 4, 256, 1024, 50257, 1024}},
                        {"gpt2-124m", {12, 12, 768, 3072, 50257, 1024}}};
  bench::Table table({"buffer", "MiB", "trainer ms", "raw MPI ms", "ratio", "busbw GB/s"});
  bool ok = true;
  for (const auto& c : cases) {
    const size_t floats = model::gpt2_layout(c.d).total + 2;
    std::vector<float> buf(floats), raw(floats);
    // Check first: every rank contributes rank+1, so each element must become n(n+1)/2.
    for (auto& x : buf) x = float(mpi.rank() + 1);
    comm->allreduce_sum(buf.data(), floats);
    double err = 0;
    for (float x : buf) err = std::fmax(err, std::fabs(x - n * (n + 1) / 2.0));
    if (mpi.rank() == 0) ok &= bench::check(std::string(c.name) + " allreduce sum", err, 0.0);
    const int reps = floats > 50'000'000 ? 5 : 11;
    auto trainer = [&] {
      MPI_Barrier(MPI_COMM_WORLD);
      comm->allreduce_sum(buf.data(), floats);
    };
    auto rawcall = [&] {
      MPI_Barrier(MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, raw.data(), static_cast<int>(floats), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    };
    // Interleaved, so a busy moment on the machine hits both the same way.
    std::vector<double> tt, tr;
    for (int r = 0; r < reps; ++r) {
      tt.push_back(bench::median_ms(trainer, 1, r == 0 ? 1 : 0));
      tr.push_back(bench::median_ms(rawcall, 1, r == 0 ? 1 : 0));
    }
    std::sort(tt.begin(), tt.end());
    std::sort(tr.begin(), tr.end());
    double t_trainer = tt[tt.size() / 2], t_raw = tr[tr.size() / 2];
    // Every rank reports rank 0's view of the timing.
    MPI_Bcast(&t_trainer, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(&t_raw, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    const double bytes = floats * sizeof(float);
    const double busbw = bytes / (t_trainer * 1e-3) * 2.0 * (n - 1) / n / 1e9;
    table.add_row({c.name, bench::fmt(bytes / 1048576.0, 1), bench::fmt(t_trainer, 2),
                   bench::fmt(t_raw, 2), bench::fmt(t_trainer / t_raw, 3), bench::fmt(busbw, 2)});
  }
  if (mpi.rank() == 0) {
    std::printf("ranks: %d\n", n);
    table.print();
  }
  return ok ? 0 : 1;
}
