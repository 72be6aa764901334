// tests/cudasim/test_cuda_sim_nccl_mpi.cpp — the simulator's NCCL between the ranks of an mpirun (2 and
// 4 ranks, one simulated GPU each), against MPI: AllReduce (sum, prod, max, min, avg; fp32, fp64,
// int32, bf16) gives every rank the same bits, the rank-ordered sum of all contributions; ReduceScatter
// and AllGather in place and out of place; Broadcast and Reduce from a non-zero root; group calls; ncclCommSplit.
// Collectives are ordered on their stream like kernels: one queued on a second stream without a
// cudaStreamWaitEvent reads the data before the producing kernel ran (a wrong result, every time),
// with the wait it reads the data after. Refusals as NCCL gives them: two ranks on one GPU
// ("Duplicate GPU detected"), host buffers, a wrong rank count, send and receive buffers that overlap
// other than in place; ncclCommAbort ends a collective that a peer never joins.
// The NCCL communicator's ZeRO-2/3 collectives (src/comm/nccl_communicator.cu): started in a row with
// tickets 1, 2, 3, ..., complete by ticket for the kernels' stream (wait) and for the host (wait_all),
// equal to the blocking forms; they reduce what the kernels' stream wrote before the start, and an op
// queued on the kernels' stream after wait(t) sees t's result (without the wait it reads stale data).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

// The simulator's device side before any CUDA header, as its build force-includes it into .cu files.
#include "sim_test_util.h"

#include <nccl.h>

#include "common/test_util.h"
#include "kernels/cuda/common.cuh"
#include "kernels/ops.h"
#include "sftdp/comm.h"

// Four simulated GPUs on this host, one per rank, before anything asks the runtime.
static const bool kDevices = (setenv("SFTDP_SIM_DEVICES", "4", 0), true);

namespace sftdp::test {
namespace {


int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world() {
  int w = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return w;
}

// Every rank's copy of `mine`, in rank order.
template <class T>
std::vector<T> gather_all(const std::vector<T>& mine) {
  std::vector<T> all(mine.size() * static_cast<size_t>(world()));
  MPI_Allgather(mine.data(), static_cast<int>(mine.size() * sizeof(T)), MPI_BYTE, all.data(),
                static_cast<int>(mine.size() * sizeof(T)), MPI_BYTE, MPI_COMM_WORLD);
  return all;
}

class SimNccl : public SimTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaSetDevice(rank() % 4), cudaSuccess);
    SimTest::SetUp();
    ncclUniqueId id{};
    if (rank() == 0) {
      ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    }
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ASSERT_EQ(ncclCommInitRank(&comm_, world(), id, rank()), ncclSuccess);
  }
  void TearDown() override {
    if (comm_) {
      EXPECT_EQ(ncclCommDestroy(comm_), ncclSuccess);
    }
    SimTest::TearDown();
  }
  template <class T>
  std::vector<T> run_all_reduce(const std::vector<T>& mine, ncclDataType_t t, ncclRedOp_t op, bool in_place) {
    T* send = device_from(mine);
    T* recv = in_place ? send : device<T>(mine.size());
    EXPECT_EQ(ncclAllReduce(send, recv, mine.size(), t, op, comm_, stream_), ncclSuccess);
    return host(recv, mine.size());
  }
  ncclComm_t comm_ = nullptr;
};

// Values whose fp32 sum depends on the order: 1e8 on rank 0, small ones elsewhere.
std::vector<float> order_sensitive(size_t n, int r) {
  auto v = uniform(n, 100 + static_cast<uint64_t>(r), -1.f, 1.f);
  if (r == 0)
    for (size_t i = 0; i < n; i += 3) v[i] = 1e8f;
  return v;
}

TEST_F(SimNccl, AllReduceSumIsRankOrderedAndTheSameBitsOnEveryRank) {
  for (bool in_place : {false, true}) {
    const size_t n = 1001;  // not a multiple of the rank count
    const auto mine = order_sensitive(n, rank());
    const auto got = run_all_reduce(mine, ncclFloat, ncclSum, in_place);
    const auto all = gather_all(mine);
    std::vector<float> expect(n);
    for (size_t i = 0; i < n; ++i) {
      float acc = all[i];
      for (int r = 1; r < world(); ++r) acc += all[static_cast<size_t>(r) * n + i];
      expect[i] = acc;
    }
    EXPECT_TRUE(bitwise_equal(got, expect)) << (in_place ? "in place" : "out of place");
    const auto everyone = gather_all(got);
    for (int r = 1; r < world(); ++r)
      EXPECT_EQ(std::memcmp(everyone.data(), everyone.data() + static_cast<size_t>(r) * n, n * sizeof(float)), 0);
  }
}

TEST_F(SimNccl, AllReduceOpsAndTypesMatchMpi) {
  const size_t n = 37;
  std::vector<int32_t> ints(n);
  for (size_t i = 0; i < n; ++i) ints[i] = static_cast<int32_t>((i * 7 + static_cast<size_t>(rank()) * 13) % 29) - 9;
  const struct {
    ncclRedOp_t nccl;
    MPI_Op mpi;
  } ops[] = {{ncclSum, MPI_SUM}, {ncclProd, MPI_PROD}, {ncclMax, MPI_MAX}, {ncclMin, MPI_MIN}};
  for (const auto& op : ops) {
    std::vector<int32_t> ref(n);
    MPI_Allreduce(ints.data(), ref.data(), static_cast<int>(n), MPI_INT32_T, op.mpi, MPI_COMM_WORLD);
    EXPECT_EQ(run_all_reduce(ints, ncclInt32, op.nccl, false), ref) << "op " << op.nccl;
  }
  std::vector<int32_t> sum(n);
  MPI_Allreduce(ints.data(), sum.data(), static_cast<int>(n), MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
  const auto avg = run_all_reduce(ints, ncclInt32, ncclAvg, false);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(avg[i], sum[i] / world());

  std::vector<double> doubles(n);
  for (size_t i = 0; i < n; ++i) doubles[i] = 0.1 * static_cast<double>(i) + rank();
  std::vector<double> dref(n);
  MPI_Allreduce(doubles.data(), dref.data(), static_cast<int>(n), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(run_all_reduce(doubles, ncclDouble, ncclMax, false), dref);

  // bf16: summed in fp32 and rounded after every rank's term, in rank order.
  std::vector<__nv_bfloat16> halves(n);
  const auto mine = uniform(n, 7 + static_cast<uint64_t>(rank()));
  for (size_t i = 0; i < n; ++i) halves[i] = __float2bfloat16_rn(mine[i]);
  const auto got = run_all_reduce(halves, ncclBfloat16, ncclSum, true);
  const auto all = gather_all(halves);
  for (size_t i = 0; i < n; ++i) {
    __nv_bfloat16 acc = all[i];
    for (int r = 1; r < world(); ++r)
      acc = __float2bfloat16_rn(__bfloat162float(acc) + __bfloat162float(all[static_cast<size_t>(r) * n + i]));
    EXPECT_EQ(__bfloat162float(got[i]), __bfloat162float(acc)) << i;
  }
}

TEST_F(SimNccl, ReduceScatterAndAllGatherInPlaceAndOut) {
  const size_t block = 5, W = static_cast<size_t>(world()), r = static_cast<size_t>(rank());
  const auto mine = uniform(block * W, 300 + r);
  const auto all = gather_all(mine);
  std::vector<float> expect(block);
  for (size_t i = 0; i < block; ++i) {
    float acc = all[r * block + i];
    for (size_t q = 1; q < W; ++q) acc += all[q * block * W + r * block + i];
    expect[i] = acc;
  }
  float* buf = device_from(mine);
  float* out = device<float>(block);
  ASSERT_EQ(ncclReduceScatter(buf, out, block, ncclFloat, ncclSum, comm_, stream_), ncclSuccess);
  EXPECT_TRUE(bitwise_equal(host(out, block), expect));
  ASSERT_EQ(ncclReduceScatter(buf, buf + r * block, block, ncclFloat, ncclSum, comm_, stream_), ncclSuccess);
  const auto in_place = host(buf, block * W);
  EXPECT_TRUE(bitwise_equal(std::vector<float>(in_place.begin() + static_cast<long>(r * block),
                                               in_place.begin() + static_cast<long>((r + 1) * block)),
                            expect));

  // All-gather: rank q's block lands at q·block on every rank.
  const auto part = uniform(block, 400 + r);
  const auto parts = gather_all(part);
  float* src = device_from(part);
  float* gathered = device<float>(block * W);
  ASSERT_EQ(ncclAllGather(src, gathered, block, ncclFloat, comm_, stream_), ncclSuccess);
  EXPECT_TRUE(bitwise_equal(host(gathered, block * W), parts));
  float* whole = device_from(std::vector<float>(block * W, -1.f));
  ASSERT_EQ(cudaMemcpy(whole + r * block, part.data(), block * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(ncclAllGather(whole + r * block, whole, block, ncclFloat, comm_, stream_), ncclSuccess);
  EXPECT_TRUE(bitwise_equal(host(whole, block * W), parts));
}

// ncclCommSplit (NCCL 2.18; context parallelism's groups): the ranks giving one color form a communicator,
// ranked by key (here the reverse of the parent's order), whose collectives involve them alone; a rank giving
// NCCL_SPLIT_NOCOLOR gets none. Here colors are rank / 2 (pairs), and rank 1 of a 4-rank job opts out.
TEST_F(SimNccl, CommSplitGroupsRanksByColorOrderedByKey) {
  const int r = rank(), W = world();
  const bool out = W == 4 && r == 1;
  ncclComm_t sub = nullptr;
  ASSERT_EQ(ncclCommSplit(comm_, out ? NCCL_SPLIT_NOCOLOR : r / 2, -r, &sub, nullptr), ncclSuccess);
  if (out) {
    EXPECT_EQ(sub, nullptr) << "NCCL_SPLIT_NOCOLOR: no communicator";
    MPI_Barrier(MPI_COMM_WORLD);
    return;
  }
  ASSERT_NE(sub, nullptr);
  const int pair = r / 2, members = (W == 4 && pair == 0) ? 1 : 2;  // rank 1 left pair 0 on 4 ranks
  int count = 0, mine = -1;
  ASSERT_EQ(ncclCommCount(sub, &count), ncclSuccess);
  ASSERT_EQ(ncclCommUserRank(sub, &mine), ncclSuccess);
  EXPECT_EQ(count, members);
  EXPECT_EQ(mine, members == 1 ? 0 : 1 - r % 2) << "ranked by key (-rank): the higher parent rank first";
  // An all-gather over the group: member m's value at m, and only the group's members take part.
  const std::vector<float> value{static_cast<float>(100 + r)};
  float* src = device_from(value);
  float* all = device<float>(static_cast<size_t>(count));
  ASSERT_EQ(ncclAllGather(src, all, 1, ncclFloat, sub, stream_), ncclSuccess);
  std::vector<float> expect(static_cast<size_t>(count));
  for (int q = 2 * pair; q < 2 * pair + 2 && q < W; ++q)
    if (!(W == 4 && q == 1)) expect[static_cast<size_t>(members == 1 ? 0 : 1 - q % 2)] = static_cast<float>(100 + q);
  EXPECT_TRUE(bitwise_equal(host(all, static_cast<size_t>(count)), expect));
  EXPECT_EQ(ncclCommDestroy(sub), ncclSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_F(SimNccl, BroadcastReduceAndGroupsFromANonZeroRoot) {
  const int root = world() - 1;
  const size_t n = 17;
  const auto mine = uniform(n, 500 + static_cast<uint64_t>(rank()));
  const auto all = gather_all(mine);
  float* send = device_from(mine);
  float* recv = device<float>(n);
  ASSERT_EQ(ncclBroadcast(send, recv, n, ncclFloat, root, comm_, stream_), ncclSuccess);
  EXPECT_TRUE(bitwise_equal(host(recv, n), std::vector<float>(all.begin() + root * static_cast<long>(n),
                                                              all.begin() + (root + 1) * static_cast<long>(n))));
  ASSERT_EQ(ncclReduce(send, recv, n, ncclFloat, ncclMax, root, comm_, stream_), ncclSuccess);
  if (rank() == root) {
    std::vector<float> expect(n);
    MPI_Reduce(mine.data(), expect.data(), static_cast<int>(n), MPI_FLOAT, MPI_MAX, root, MPI_COMM_WORLD);
    EXPECT_TRUE(bitwise_equal(host(recv, n), expect));
  } else {
    MPI_Reduce(mine.data(), nullptr, static_cast<int>(n), MPI_FLOAT, MPI_MAX, root, MPI_COMM_WORLD);
    (void)host(recv, n);
  }
  // A group: both sums queued at ncclGroupEnd, in order.
  float* a = device_from(std::vector<float>(n, 1.f));
  float* b = device_from(std::vector<float>(n, 2.f));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(a, a, n, ncclFloat, ncclSum, comm_, stream_), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(b, b, n, ncclFloat, ncclSum, comm_, stream_), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(host(a, n), std::vector<float>(n, static_cast<float>(world())));
  EXPECT_EQ(host(b, n), std::vector<float>(n, 2.f * static_cast<float>(world())));
}

// The allreduce_overlap pattern: gradients written on the kernels' stream, summed on the NCCL one.
TEST_F(SimNccl, CollectiveOnASecondStreamNeedsTheEventWait) {
  cudaStream_t comm_stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking), cudaSuccess);
  const int n = 64;
  float* grads = device_from(std::vector<float>(n, 0.f));
  SFTDP_LAUNCH(fill_kernel, 1, 64, 0, stream_, grads, 1.f, n);  // backward produces the gradients
  ASSERT_EQ(ncclAllReduce(grads, grads, n, ncclFloat, ncclSum, comm_, comm_stream), ncclSuccess);  // no wait: a bug
  ASSERT_EQ(cudaStreamSynchronize(comm_stream), cudaSuccess);
  std::vector<float> got(n);
  ASSERT_EQ(cudaMemcpy(got.data(), grads, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, std::vector<float>(n, 0.f)) << "the sum ran after the kernel although nothing ordered it";
  // And streamcheck reports it when the kernel runs: it writes what the unordered sum read and wrote.
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaErrorLaunchFailure);
  EXPECT_REPORT("streamcheck", "kernel fill_kernel", "ncclAllReduce");
  sim::clear_sticky_error();
  sim::clear_reports();

  cudaEvent_t done = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
  SFTDP_LAUNCH(fill_kernel, 1, 64, 0, stream_, grads, 1.f, n);
  ASSERT_EQ(cudaEventRecord(done, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(comm_stream, done, 0), cudaSuccess);
  ASSERT_EQ(ncclAllReduce(grads, grads, n, ncclFloat, ncclSum, comm_, comm_stream), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(comm_stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), grads, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, std::vector<float>(n, static_cast<float>(world())));
  EXPECT_EQ(sim::reports(), std::vector<std::string>{}) << "the event orders the sum after the kernel";
  cudaEventDestroy(done);
  cudaStreamDestroy(comm_stream);
}

TEST_F(SimNccl, BuffersOverlappingOtherThanInPlaceAreRefused) {
  const size_t block = 4, W = static_cast<size_t>(world()), r = static_cast<size_t>(rank());
  float* buf = device_from(std::vector<float>(block * (W + 1), 1.f));
  // One float past the in-place position (recv at send + r·block, send at recv + r·block): refused on every
  // rank, so no rank queues a collective the others do not.
  EXPECT_EQ(ncclReduceScatter(buf, buf + r * block + 1, block, ncclFloat, ncclSum, comm_, stream_),
            ncclInvalidArgument);
  EXPECT_REPORT("nccl", "ncclReduceScatter: sendbuff", "overlap but are not the in-place arrangement");
  EXPECT_EQ(ncclAllGather(buf + r * block + 1, buf, block, ncclFloat, comm_, stream_), ncclInvalidArgument);
  EXPECT_REPORT("nccl", "ncclAllGather: sendbuff", "overlap");
  EXPECT_EQ(ncclAllReduce(buf, buf + 1, block, ncclFloat, ncclSum, comm_, stream_), ncclInvalidArgument);
  EXPECT_REPORT("nccl", "ncclAllReduce: sendbuff", "overlap");
  // Adjacent is not overlapping.
  ASSERT_EQ(ncclAllReduce(buf, buf + block, block, ncclFloat, ncclSum, comm_, stream_), ncclSuccess);
  EXPECT_EQ(host(buf + block, block), std::vector<float>(block, static_cast<float>(W)));
}

TEST_F(SimNccl, HostBuffersAreRejected) {
  std::vector<float> on_host(8);
  EXPECT_EQ(ncclAllReduce(on_host.data(), on_host.data(), 8, ncclFloat, ncclSum, comm_, stream_), ncclInvalidArgument);
  EXPECT_REPORT("nccl", "ncclAllReduce: sendbuff", "not device memory");
}

TEST_F(SimNccl, AbortEndsACollectiveAPeerNeverJoins) {
  float* buf = device_from(std::vector<float>(4, 1.f));
  if (rank() == 0) {
    ASSERT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm_, stream_), ncclSuccess);
    cudaEvent_t e = nullptr;
    ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(e, stream_), cudaSuccess);
    for (int i = 0; i < 200; ++i) ASSERT_EQ(cudaEventQuery(e), cudaErrorNotReady);  // nobody else joins
    ncclResult_t async = ncclInternalError;
    ASSERT_EQ(ncclCommGetAsyncError(comm_, &async), ncclSuccess);
    EXPECT_EQ(async, ncclSuccess);
    ASSERT_EQ(ncclCommAbort(comm_), ncclSuccess);
    comm_ = nullptr;
    EXPECT_EQ(cudaEventSynchronize(e), cudaSuccess);  // the collective stopped waiting
    cudaEventDestroy(e);
  } else {
    ASSERT_EQ(ncclCommAbort(comm_), ncclSuccess);  // the others never call it
    comm_ = nullptr;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The NCCL communicator on this rank's simulated GPU; its collectives are ordered after the kernels' stream
// of the CUDA Ops tables, as the trainer's are.
class SimNcclCommunicator : public SimTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaSetDevice(rank() % 4), cudaSuccess);
    SimTest::SetUp();
    ops_ = cuda_ops(GemmInputs::kFp32);
    ASSERT_NE(ops_, nullptr);
    comm_ = comm::make_nccl_communicator();
  }
  void TearDown() override {
    comm_.reset();
    SimTest::TearDown();
  }
  cudaStream_t kernels() const { return static_cast<cudaStream_t>(ops_->stream()); }
  // n floats at p as an op queued on the kernels' stream now sees them.
  std::vector<float> seen_by_kernels(const float* p, size_t n) {
    std::vector<float> h(n);
    ops_->to_host(h.data(), p, n * sizeof(float));
    return h;
  }
  const Ops* ops_ = nullptr;
  std::unique_ptr<comm::Communicator> comm_;
};

// Small integers: every partial sum is exact in fp32 (as in tests/comm/test_shard_collectives_mpi.cpp).
float value(int r, size_t i) { return static_cast<float>((r + 1) * 1000 + static_cast<int>(i % 997)); }
std::vector<float> values(int r, size_t begin, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(r, begin + i);
  return v;
}
// The sum over ranks of rank r's block of the values.
std::vector<float> summed_block(int r, size_t block) {
  std::vector<float> v(block);
  for (size_t i = 0; i < block; ++i) {
    double acc = 0;
    for (int q = 0; q < world(); ++q) acc += value(q, static_cast<size_t>(r) * block + i);
    v[i] = static_cast<float>(acc);
  }
  return v;
}
// Every rank's block of the values, rank q's at q·block (what each rank all-gathers).
std::vector<float> gathered_blocks(size_t block) {
  std::vector<float> v;
  for (int q = 0; q < world(); ++q) {
    const auto part = values(q, static_cast<size_t>(q) * block, block);
    v.insert(v.end(), part.begin(), part.end());
  }
  return v;
}

TEST_F(SimNcclCommunicator, StartedInARowTheyCompleteByTicketAndMatchTheBlockingOnes) {
  const size_t W = static_cast<size_t>(world());
  const int r = rank();
  struct Started {
    size_t block;
    float *rs_send, *rs_recv, *ag_send, *ag_recv;
    comm::Communicator::Ticket rs_ticket = 0, ag_ticket = 0;
  };
  std::vector<Started> all;
  for (size_t block : {size_t(1), size_t(5), size_t(4099)})
    all.push_back({block, device_from(values(r, 0, W * block)), device_from(std::vector<float>(block, -1.f)),
                   device_from(values(r, static_cast<size_t>(r) * block, block)),
                   device_from(std::vector<float>(W * block, -1.f))});
  comm::Communicator::Ticket expected = 0;
  for (Started& s : all) {  // every start before any wait
    s.rs_ticket = comm_->start_reduce_scatter_sum(s.rs_send, s.rs_recv, s.block);
    s.ag_ticket = comm_->start_all_gather(s.ag_send, s.ag_recv, s.block);
    EXPECT_EQ(s.rs_ticket, ++expected);
    EXPECT_EQ(s.ag_ticket, ++expected);
  }
  // Ticket 3 (the reduce-scatter of block 5): the kernels' stream sees it and tickets 1 and 2.
  comm_->wait(all[1].rs_ticket);
  EXPECT_EQ(seen_by_kernels(all[0].rs_recv, 1), summed_block(r, 1));
  EXPECT_EQ(seen_by_kernels(all[0].ag_recv, W), gathered_blocks(1));
  EXPECT_EQ(seen_by_kernels(all[1].rs_recv, 5), summed_block(r, 5));
  comm_->wait(all[0].ag_ticket);  // already waited for: nothing to do
  comm_->wait_all();              // the host: every one is complete
  for (const Started& s : all) {
    EXPECT_EQ(host(s.rs_recv, s.block), summed_block(r, s.block)) << s.block;
    EXPECT_EQ(host(s.ag_recv, W * s.block), gathered_blocks(s.block)) << s.block;
  }
  comm_->wait(all[2].ag_ticket);  // after wait_all, every ticket is complete
  comm_->wait_all();              // nothing started since: a no-op

  // The same bits as the blocking, in-place forms, also on values whose sum depends on the order.
  const size_t block = 1001;
  const auto mine = order_sensitive(W * block, r);
  float* send = device_from(mine);
  float* recv = device<float>(block);
  const auto t = comm_->start_reduce_scatter_sum(send, recv, block);
  EXPECT_EQ(t, expected + 1);
  comm_->wait(t);
  const auto started = seen_by_kernels(recv, block);
  float* buf = device_from(mine);
  comm_->reduce_scatter_sum(buf, block);
  EXPECT_TRUE(bitwise_equal(started, host(buf + static_cast<size_t>(r) * block, block)));
  // The all-gather of rank q's block of those values, against the blocking form in place.
  float* gathered = device<float>(W * block);
  comm_->start_all_gather(send + static_cast<size_t>(r) * block, gathered, block);
  float* whole = device_from(mine);  // this rank's block in place; the others are overwritten
  comm_->all_gather(whole, block);
  comm_->wait_all();
  EXPECT_TRUE(bitwise_equal(host(gathered, W * block), host(whole, W * block)));
  // An empty block gets a ticket; waiting for it waits for the ones before.
  float* none = device<float>(1);
  const auto empty = comm_->start_all_gather(none, none + 1, 0);
  EXPECT_EQ(empty, t + 2);  // t + 1: the all-gather
  comm_->wait(empty);
  comm_->wait_all();
}

// The two orderings the contract promises: the simulator runs queued work as late as CUDA allows, so a missing
// event wait would read the data from before (never by luck the data after), and streamcheck reports it.
TEST_F(SimNcclCommunicator, TheyOrderAfterTheKernelsBeforeAStartAndBeforeTheKernelsAfterAWait) {
  const size_t n = 64, W = static_cast<size_t>(world());
  const int r = rank();
  const float sum_of_ranks = static_cast<float>(world() * (world() + 1) / 2);  // sum over q of q + 1
  // Every buffer before anything starts.
  float* rs_send = device_from(std::vector<float>(W * n, 0.f));
  float* rs_recv = device_from(std::vector<float>(n, -1.f));
  float* ag_send = device_from(std::vector<float>(n, 0.f));
  float* ag_recv = device_from(std::vector<float>(W * n, -1.f));
  float* send = device_from(values(r, 0, W * n));
  float* waited = device_from(std::vector<float>(n, -1.f));
  float* copy = device_from(std::vector<float>(n, -2.f));

  // 1. What a kernel queued before start_* on the kernels' stream wrote is what gets reduced and gathered
  // (the host waits with wait_all, which runs the communicator's stream first).
  SFTDP_LAUNCH(fill_kernel, 4, 64, 0, kernels(), rs_send, static_cast<float>(r + 1), static_cast<int>(W * n));
  SFTDP_LAUNCH(fill_kernel, 1, 64, 0, kernels(), ag_send, static_cast<float>(r + 1), static_cast<int>(n));
  comm_->start_reduce_scatter_sum(rs_send, rs_recv, n);
  comm_->start_all_gather(ag_send, ag_recv, n);
  comm_->wait_all();
  EXPECT_EQ(host(rs_recv, n), std::vector<float>(n, sum_of_ranks));
  std::vector<float> ranks;
  for (int q = 0; q < world(); ++q) ranks.insert(ranks.end(), n, static_cast<float>(q + 1));
  EXPECT_EQ(host(ag_recv, W * n), ranks);

  // 2. A copy queued on the kernels' stream after wait(t) sees t's result ...
  const auto t = comm_->start_reduce_scatter_sum(send, waited, n);
  comm_->wait(t);
  ops_->copy(copy, waited, n * sizeof(float));
  EXPECT_EQ(seen_by_kernels(copy, n), summed_block(r, n));
  // ... and without the wait it would read recv from before the collective: streamcheck now ends such a
  // program with a report (SimNccl.CollectiveOnASecondStreamNeedsTheEventWait shows both the stale read and
  // the report), which here would end the process inside the communicator's CHECK_CUDA.
}

// A ZeRO-2 pass with allreduce_overlap's sums and a blocking collective in between: all share the
// communicator's stream, in the order started, the same on every rank.
TEST_F(SimNcclCommunicator, StartedOnesInterleaveWithTheOverlapSumsAndBlockingOnes) {
  const size_t block = 257, W = static_cast<size_t>(world());
  const int r = rank();
  float* send = device_from(values(r, 0, W * block));
  float* recv = device_from(std::vector<float>(block, -1.f));
  float* sum = device_from(std::vector<float>(100, 1.f));
  float* blocking = device_from(std::vector<float>(10, 2.f));
  comm_->start_allreduce_sum(sum, 100);
  const auto t = comm_->start_reduce_scatter_sum(send, recv, block);
  comm_->allreduce_sum(blocking, 10);
  comm_->wait_allreduces();
  comm_->wait(t);
  EXPECT_EQ(seen_by_kernels(recv, block), summed_block(r, block));
  EXPECT_EQ(host(sum, 100), std::vector<float>(100, static_cast<float>(W)));
  EXPECT_EQ(host(blocking, 10), std::vector<float>(10, 2.f * static_cast<float>(W)));
  comm_->wait_all();
}

TEST(SimNcclInit, TwoRanksOnOneGpuAreRefusedOnEveryRank) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // every rank on the same device of this host
  sim::clear_reports();
  ncclUniqueId id{};
  if (rank() == 0) {
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  }
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, world(), id, rank()), ncclInvalidUsage);
  EXPECT_EQ(comm, nullptr);
  EXPECT_REPORT("nccl", "Duplicate GPU detected");
  EXPECT_EQ(ncclCommInitRank(&comm, world() + 1, id, rank()), ncclInvalidArgument);
}

}  // namespace
}  // namespace sftdp::test
