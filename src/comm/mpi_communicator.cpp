// src/comm/mpi_communicator.cpp — the CPU communicator: in-place MPI_Iallreduce (sum) of host
// float buffers, waited for under the collective deadline (comm/collective.h). MPI takes an int
// count, so buffers above INT_MAX floats go in chunks.
#include <mpi.h>

#include <algorithm>
#include <climits>

#include "comm/collective.h"
#include "comm/mpi_host.h"
#include "sftdp/check_mpi.h"

namespace sftdp::comm {
namespace {

class MpiCommunicator final : public MpiHostCommunicator {
 public:
  const char* name() const override { return "mpi"; }
  void allreduce_sum(float* buf, size_t n) override {
    if (world_ == 1) return;  // the identity, but callers still go through here
    for (size_t off = 0; off < n; off += INT_MAX) {
      const int cnt = static_cast<int>(std::min<size_t>(INT_MAX, n - off));
      detail::Collective c("the gradient allreduce");
      CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                               c.request()));
      c.wait();
    }
  }
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

}  // namespace sftdp::comm
