// cudasim/nccl.cpp — the NCCL subset sft-dp uses, written from NCCL's documented semantics, between
// the ranks of an mpirun: communicators over MPI_COMM_WORLD (every rank calls ncclCommInitRank, as one
// communicator over the job; NCCL's own "Duplicate GPU" refusal when two ranks of one host share a
// device; ncclCommSplit's sub-communicators of them), and AllReduce, ReduceScatter, AllGather, Broadcast, Reduce queued on their CUDA stream like
// kernels. Reductions run in rank order 0, 1, ..., W-1 for every element (reduce-scatter by all-to-all,
// then all-gather), so all ranks get the same bits whatever MPI's algorithms are, as NCCL promises.
// Send and receive buffers are either disjoint or in NCCL's in-place arrangement; any other overlap,
// which NCCL does not check and a GPU turns into silently wrong results, is refused (ncclInvalidArgument).
// A collective waits with non-blocking MPI and polls for ncclCommAbort; an MPI failure becomes the
// communicator's asynchronous error (ncclCommGetAsyncError). Group calls queue their collectives at
// ncclGroupEnd. MPI must be initialised with MPI_THREAD_MULTIPLE: collectives run on stream workers.
// Record mode (record.h): each collective is a line when it is queued (op, count, dtype, reduction, ranks);
// record-only queues it without its arithmetic or its MPI traffic (on every rank alike). NCCL supports
// stream capture: on a capturing stream a collective becomes a graph node (capture.h), run at each replay.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cudasim/capture.h"
#include "cudasim/memory.h"
#include "cudasim/record.h"
#include "cudasim/runtime.h"
#include "cudasim/stream_order.h"

struct ncclComm {  // nccl.h: typedef struct ncclComm* ncclComm_t (opaque)
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, nranks = 1, device = 0;
  std::atomic<bool> aborted{false};
  std::atomic<int> async_error{ncclSuccess};
  std::mutex mu;
  std::map<sftdp::sim::Stream*, uint64_t> last_op;  // per stream: the comm's newest op there
};

namespace sftdp::sim {
namespace {

constexpr char kIdMagic[] = "sftdp-sim-nccl";

std::mutex& comms_mu() {
  static auto* m = new std::mutex;
  return *m;
}
std::map<ncclComm*, std::shared_ptr<ncclComm>>& comms() {
  static auto* m = new std::map<ncclComm*, std::shared_ptr<ncclComm>>;
  return *m;
}
std::shared_ptr<ncclComm> find_comm(ncclComm_t c) {
  std::lock_guard<std::mutex> lock(comms_mu());
  const auto it = comms().find(c);
  return it == comms().end() ? nullptr : it->second;
}

std::string& last_error_text() {
  static thread_local std::string text;
  return text;
}
ncclResult_t warn(ncclResult_t r, const std::string& text) {
  last_error_text() = text;
  report("nccl", "NCCL WARN " + text);
  return r;
}

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}
bool reducible(ncclDataType_t t) { return type_bytes(t) != 0 && t != ncclFloat8e4m3 && t != ncclFloat8e5m2; }

template <class T>
T apply(T a, T b, ncclRedOp_t op) {
  switch (op) {
    case ncclProd:
      return a * b;
    case ncclMax:
      return a > b ? a : b;
    case ncclMin:
      return a < b ? a : b;
    default:
      return a + b;  // ncclSum, and ncclAvg before its division
  }
}
template <class T>
void combine(void* acc, const void* x, size_t n, ncclRedOp_t op) {
  auto* a = static_cast<T*>(acc);
  const auto* b = static_cast<const T*>(x);
  for (size_t i = 0; i < n; ++i) a[i] = apply(a[i], b[i], op);
}
template <class Half, class ToFloat, class FromFloat>
void combine_16(void* acc, const void* x, size_t n, ncclRedOp_t op, ToFloat to, FromFloat from) {
  auto* a = static_cast<Half*>(acc);
  const auto* b = static_cast<const Half*>(x);
  for (size_t i = 0; i < n; ++i) a[i] = from(apply(to(a[i]), to(b[i]), op));  // rounded after every step
}
// acc (op)= x, elementwise.
void combine(void* acc, const void* x, size_t n, ncclDataType_t t, ncclRedOp_t op) {
  switch (t) {
    case ncclInt8:
      combine<int8_t>(acc, x, n, op);
      break;
    case ncclUint8:
      combine<uint8_t>(acc, x, n, op);
      break;
    case ncclInt32:
      combine<int32_t>(acc, x, n, op);
      break;
    case ncclUint32:
      combine<uint32_t>(acc, x, n, op);
      break;
    case ncclInt64:
      combine<int64_t>(acc, x, n, op);
      break;
    case ncclUint64:
      combine<uint64_t>(acc, x, n, op);
      break;
    case ncclFloat32:
      combine<float>(acc, x, n, op);
      break;
    case ncclFloat64:
      combine<double>(acc, x, n, op);
      break;
    case ncclFloat16:
      combine_16<__half>(
          acc, x, n, op, [](__half h) { return __half2float(h); }, [](float f) { return __float2half_rn(f); });
      break;
    case ncclBfloat16:
      combine_16<__nv_bfloat16>(
          acc, x, n, op, [](__nv_bfloat16 h) { return __bfloat162float(h); },
          [](float f) { return __float2bfloat16_rn(f); });
      break;
    default:
      break;
  }
}
template <class T>
void divide(void* p, size_t n, int w) {
  auto* a = static_cast<T*>(p);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<T>(a[i] / static_cast<T>(w));
}
void average(void* p, size_t n, ncclDataType_t t, int w) {
  switch (t) {
    case ncclInt8:
      divide<int8_t>(p, n, w);
      break;
    case ncclUint8:
      divide<uint8_t>(p, n, w);
      break;
    case ncclInt32:
      divide<int32_t>(p, n, w);
      break;
    case ncclUint32:
      divide<uint32_t>(p, n, w);
      break;
    case ncclInt64:
      divide<int64_t>(p, n, w);
      break;
    case ncclUint64:
      divide<uint64_t>(p, n, w);
      break;
    case ncclFloat32:
      divide<float>(p, n, w);
      break;
    case ncclFloat64:
      divide<double>(p, n, w);
      break;
    case ncclFloat16: {
      auto* h = static_cast<__half*>(p);
      for (size_t i = 0; i < n; ++i) h[i] = __float2half_rn(__half2float(h[i]) / static_cast<float>(w));
      break;
    }
    case ncclBfloat16: {
      auto* h = static_cast<__nv_bfloat16*>(p);
      for (size_t i = 0; i < n; ++i) h[i] = __float2bfloat16_rn(__bfloat162float(h[i]) / static_cast<float>(w));
      break;
    }
    default:
      break;
  }
}

// One element of t as an MPI type (contiguous bytes; the reductions are ours).
MPI_Datatype mpi_type(ncclDataType_t t) {
  static MPI_Datatype types[9] = {};
  const size_t bytes = type_bytes(t);
  if (!types[bytes]) {
    MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &types[bytes]);
    MPI_Type_commit(&types[bytes]);
  }
  return types[bytes];
}

// Waits for a non-blocking MPI call, polling for ncclCommAbort; false when aborted or failed.
bool finish(ncclComm& c, int rc, MPI_Request& req, const char* what) {
  if (rc != MPI_SUCCESS) {
    c.async_error = ncclSystemError;
    report("nccl", std::string("NCCL WARN ") + what + ": MPI error " + std::to_string(rc));
    return false;
  }
  for (;;) {
    int done = 0;
    rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      c.async_error = ncclSystemError;
      report("nccl", std::string("NCCL WARN ") + what + ": MPI error " + std::to_string(rc));
      return false;
    }
    if (done) return true;
    if (c.aborted) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// Rank r's share of n elements: [n·r/W, n·(r+1)/W).
size_t share_begin(size_t n, int r, int w) { return n * static_cast<size_t>(r) / static_cast<size_t>(w); }

void all_reduce(ncclComm& c, const void* send, void* recv, size_t n, ncclDataType_t t, ncclRedOp_t op) {
  const int W = c.nranks, r = c.rank;
  const size_t es = type_bytes(t);
  std::vector<int> scount(W), sdispl(W), rcount(W), rdispl(W);
  const size_t mine = share_begin(n, r + 1, W) - share_begin(n, r, W);
  for (int j = 0; j < W; ++j) {
    scount[j] = static_cast<int>(share_begin(n, j + 1, W) - share_begin(n, j, W));
    sdispl[j] = static_cast<int>(share_begin(n, j, W));
    rcount[j] = static_cast<int>(mine);
    rdispl[j] = static_cast<int>(mine * static_cast<size_t>(j));
  }
  std::vector<unsigned char> pieces(mine * es * static_cast<size_t>(W));
  MPI_Request req;
  int rc = MPI_Ialltoallv(send, scount.data(), sdispl.data(), mpi_type(t), pieces.data(), rcount.data(), rdispl.data(),
                          mpi_type(t), c.mpi, &req);
  if (!finish(c, rc, req, "ncclAllReduce")) return;
  for (int j = 1; j < W; ++j) combine(pieces.data(), pieces.data() + mine * es * static_cast<size_t>(j), mine, t, op);
  if (op == ncclAvg) average(pieces.data(), mine, t, W);
  for (int j = 0; j < W; ++j) rcount[j] = scount[j];
  rc = MPI_Iallgatherv(pieces.data(), static_cast<int>(mine), mpi_type(t), recv, rcount.data(), sdispl.data(),
                       mpi_type(t), c.mpi, &req);
  finish(c, rc, req, "ncclAllReduce");
}

void reduce_scatter(ncclComm& c, const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op) {
  const int W = c.nranks;
  const size_t es = type_bytes(t);
  std::vector<unsigned char> pieces(count * es * static_cast<size_t>(W));
  MPI_Request req;
  const int rc = MPI_Ialltoall(send, static_cast<int>(count), mpi_type(t), pieces.data(), static_cast<int>(count),
                               mpi_type(t), c.mpi, &req);
  if (!finish(c, rc, req, "ncclReduceScatter")) return;
  for (int j = 1; j < W; ++j) combine(pieces.data(), pieces.data() + count * es * static_cast<size_t>(j), count, t, op);
  if (op == ncclAvg) average(pieces.data(), count, t, W);
  std::memcpy(recv, pieces.data(), count * es);
}

void all_gather(ncclComm& c, const void* send, void* recv, size_t count, ncclDataType_t t) {
  const size_t es = type_bytes(t);
  const bool in_place = send == static_cast<const char*>(recv) + static_cast<size_t>(c.rank) * count * es;
  MPI_Request req;
  const int rc = MPI_Iallgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(count), mpi_type(t), recv,
                                static_cast<int>(count), mpi_type(t), c.mpi, &req);
  finish(c, rc, req, "ncclAllGather");
}

void broadcast(ncclComm& c, const void* send, void* recv, size_t count, ncclDataType_t t, int root) {
  if (c.rank == root && send != recv) std::memmove(recv, send, count * type_bytes(t));
  MPI_Request req;
  const int rc = MPI_Ibcast(recv, static_cast<int>(count), mpi_type(t), root, c.mpi, &req);
  finish(c, rc, req, "ncclBroadcast");
}

void reduce(ncclComm& c, const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root) {
  const size_t es = type_bytes(t);
  std::vector<unsigned char> pieces(c.rank == root ? count * es * static_cast<size_t>(c.nranks) : 0);
  MPI_Request req;
  const int rc = MPI_Igather(send, static_cast<int>(count), mpi_type(t), pieces.data(), static_cast<int>(count),
                             mpi_type(t), root, c.mpi, &req);
  if (!finish(c, rc, req, "ncclReduce") || c.rank != root) return;
  for (int j = 1; j < c.nranks; ++j)
    combine(pieces.data(), pieces.data() + count * es * static_cast<size_t>(j), count, t, op);
  if (op == ncclAvg) average(pieces.data(), count, t, c.nranks);
  std::memcpy(recv, pieces.data(), count * es);
}

// ---- the calls ---------------------------------------------------------------------------------------
struct Pending {
  Stream* stream;
  std::shared_ptr<ncclComm> comm;
  std::string what;
  std::function<void()> fn;
  std::string record;  // its record line's fields
};
int& group_depth() {
  static thread_local int depth = 0;
  return depth;
}
std::vector<Pending>& group_ops() {
  static thread_local std::vector<Pending> ops;
  return ops;
}

// Queues p on its stream (or captures it: capture.h); the communicator remembers each stream's last op.
ncclResult_t launch(Pending&& p) {
  Work w;
  w.what = p.what;
  w.run = record_only() ? std::function<void()>([] {}) : std::move(p.fn);
  w.record = [fields = std::move(p.record)](const Stream& s, const std::string& extra) {
    record_op("nccl", &s, fields + extra);
  };
  w.queued = [comm = p.comm](Stream& s, uint64_t seq) {
    std::lock_guard<std::mutex> lock(comm->mu);
    comm->last_op[&s] = seq;
  };
  if (const cudaError_t e = queue_work(*p.stream, std::move(w)); e != cudaSuccess)
    return warn(ncclUnhandledCudaError, p.what + ": " + cudaGetErrorString(e));
  return ncclSuccess;
}

bool buffer_ok(const char* call, const char* which, const void* p, size_t bytes) {
  if (bytes == 0) return true;
  const auto a = memory().find(p, bytes);
  if (a && a->live) return true;
  warn(ncclInvalidArgument, std::string(call) + ": " + which + " (" + std::to_string(bytes) + " bytes at " +
                                memory().describe(p) + ") is not inside one live device allocation");
  return false;
}

// Checks a collective's arguments and queues it (or keeps it for ncclGroupEnd).
const char* type_name(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return "int8";
    case ncclUint8: return "uint8";
    case ncclInt32: return "int32";
    case ncclUint32: return "uint32";
    case ncclInt64: return "int64";
    case ncclUint64: return "uint64";
    case ncclFloat16: return "fp16";
    case ncclFloat32: return "fp32";
    case ncclFloat64: return "fp64";
    case ncclBfloat16: return "bf16";
    default: return "other";
  }
}
const char* op_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "sum";
    case ncclProd: return "prod";
    case ncclMax: return "max";
    case ncclMin: return "min";
    case ncclAvg: return "avg";
    default: return "other";
  }
}

// True when [a, a + a_bytes) and [b, b + b_bytes) share a byte.
bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes != 0 && b_bytes != 0 && x < y + b_bytes && y < x + a_bytes;
}

// count: the call's own count argument; root < 0: none. in_place: send and recv are the call's in-place
// arrangement (NCCL's documentation: recvbuff == sendbuff for AllReduce, Broadcast and Reduce,
// recvbuff == sendbuff + rank·recvcount for ReduceScatter, sendbuff == recvbuff + rank·sendcount for
// AllGather); otherwise the two must not overlap (on a GPU NCCL's kernels would read what they already wrote).
ncclResult_t collective(const char* call, ncclComm_t handle, cudaStream_t stream_handle, ncclDataType_t t,
                        ncclRedOp_t op, bool reduces, const void* send, size_t send_bytes, const void* recv,
                        size_t recv_bytes, size_t count, int root, bool in_place,
                        std::function<void(ncclComm&)> body) {
  const auto comm = find_comm(handle);
  if (!comm) return warn(ncclInvalidArgument, std::string(call) + ": not a live communicator");
  if (comm->aborted) return warn(ncclInvalidUsage, std::string(call) + ": the communicator was aborted");
  if (type_bytes(t) == 0 || (reduces && !reducible(t)))
    return warn(ncclInvalidArgument, std::string(call) + ": invalid data type " + std::to_string(t));
  if (reduces && (op < ncclSum || op > ncclAvg))
    return warn(ncclInvalidArgument, std::string(call) + ": invalid reduction " + std::to_string(op));
  if (!buffer_ok(call, "sendbuff", send, send_bytes) || !buffer_ok(call, "recvbuff", recv, recv_bytes))
    return ncclInvalidArgument;
  if (!in_place && overlap(send, send_bytes, recv, recv_bytes))
    return warn(ncclInvalidArgument, std::string(call) + ": sendbuff (" + std::to_string(send_bytes) + " bytes at " +
                                         memory().describe(send) + ") and recvbuff (" + std::to_string(recv_bytes) +
                                         " bytes at " + memory().describe(recv) +
                                         ") overlap but are not the in-place arrangement");
  Stream* s = resolve(stream_handle);
  if (!s) return warn(ncclInvalidArgument, std::string(call) + ": invalid CUDA stream");
  if (s->device() != comm->device)
    return warn(ncclInvalidUsage, std::string(call) + ": the stream is on CUDA device " + std::to_string(s->device()) +
                                      ", the communicator on " + std::to_string(comm->device));
  std::shared_ptr<ncclComm> keep = comm;
  std::string fields = "\"call\":" + json_string(call) + ",\"count\":" + std::to_string(count) + ",\"dtype\":\"" +
                       type_name(t) + "\"" + (reduces ? std::string(",\"redop\":\"") + op_name(op) + "\"" : "") +
                       ",\"ranks\":" + std::to_string(comm->nranks) + ",\"rank\":" + std::to_string(comm->rank) +
                       (root >= 0 ? ",\"root\":" + std::to_string(root) : "") + ",\"send\":" + json_pointer(send) +
                       ",\"recv\":" + json_pointer(recv);
  Pending p{s, comm, call,
            [keep, body = std::move(body), send, send_bytes, recv, recv_bytes] {
              order::access(send, send_bytes, false, "sendbuff");  // streamcheck (stream_order.h)
              order::access(recv, recv_bytes, true, "recvbuff");
              if (!keep->aborted) body(*keep);
            },
            std::move(fields)};
  if (group_depth() > 0) {
    group_ops().push_back(std::move(p));
    return ncclSuccess;
  }
  return launch(std::move(p));
}

}  // namespace
}  // namespace sftdp::sim

using namespace sftdp::sim;

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  std::memset(id, 0, sizeof *id);
  std::memcpy(id->internal, kIdMagic, sizeof kIdMagic);
  std::random_device rd;
  const uint64_t nonce = (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  std::memcpy(id->internal + 32, &nonce, sizeof nonce);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  if (!out) return ncclInvalidArgument;
  *out = nullptr;
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (!initialised || finalised)
    return warn(ncclInvalidUsage,
                "ncclCommInitRank: the CUDA simulator's NCCL runs over MPI, which is not initialised");
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE)
    return warn(ncclInvalidUsage,
                "ncclCommInitRank: the CUDA simulator's NCCL needs MPI_THREAD_MULTIPLE "
                "(collectives run on stream workers)");
  if (std::memcmp(id.internal, kIdMagic, sizeof kIdMagic) != 0)
    return warn(ncclInvalidArgument, "ncclCommInitRank: the unique id was not made by ncclGetUniqueId");
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (nranks != world || rank < 0 || rank >= nranks)
    return warn(ncclInvalidArgument,
                "ncclCommInitRank: nranks " + std::to_string(nranks) + ", rank " + std::to_string(rank) +
                    ": the simulator's communicators span MPI_COMM_WORLD (" + std::to_string(world) + " ranks)");
  if (devices().empty()) return warn(ncclUnhandledCudaError, "ncclCommInitRank: no CUDA device");
  const int device = current_device();
  struct Info {
    char id[NCCL_UNIQUE_ID_BYTES];
    int rank, nranks;
    char host[MPI_MAX_PROCESSOR_NAME];
    char bus[32];
  } mine{};
  std::memcpy(mine.id, id.internal, sizeof mine.id);
  mine.rank = rank, mine.nranks = nranks;
  int len = 0;
  MPI_Get_processor_name(mine.host, &len);
  std::snprintf(mine.bus, sizeof mine.bus, "%s", sftdp::sim::device(device).bus_id.c_str());
  std::vector<Info> all(static_cast<size_t>(world));
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
  std::vector<int> seen(static_cast<size_t>(nranks), -1);
  for (int w = 0; w < world; ++w) {
    const Info& o = all[static_cast<size_t>(w)];
    if (std::memcmp(o.id, mine.id, sizeof mine.id) != 0 || o.nranks != nranks || o.rank < 0 || o.rank >= nranks ||
        seen[static_cast<size_t>(o.rank)] >= 0)
      return warn(ncclInvalidUsage,
                  "ncclCommInitRank: the ranks of MPI_COMM_WORLD disagree on the unique id, "
                  "nranks or their ranks");
    seen[static_cast<size_t>(o.rank)] = w;
    for (int v = 0; v < w; ++v) {
      const Info& p = all[static_cast<size_t>(v)];
      if (std::strcmp(p.host, o.host) == 0 && std::strcmp(p.bus, o.bus) == 0)
        return warn(ncclInvalidUsage, "Duplicate GPU detected : rank " + std::to_string(o.rank) + " and rank " +
                                          std::to_string(p.rank) + " both on CUDA device " + o.bus + " of " + o.host);
    }
  }
  auto comm = std::make_shared<ncclComm>();
  comm->rank = rank, comm->nranks = nranks, comm->device = device;
  if (MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &comm->mpi) != MPI_SUCCESS)
    return warn(ncclSystemError, "ncclCommInitRank: MPI_Comm_split failed");
  MPI_Comm_set_errhandler(comm->mpi, MPI_ERRORS_RETURN);
  std::lock_guard<std::mutex> lock(comms_mu());
  comms().emplace(comm.get(), comm);
  *out = comm.get();
  return ncclSuccess;
}

// NCCL 2.18's split (nccl.h): collective over the parent's ranks; the ranks that give the same color form one
// communicator, ordered by key and then by their rank in the parent; NCCL_SPLIT_NOCOLOR gives none. The config
// (non-blocking mode, CTA limits) changes nothing here: the simulator's communicators are blocking. As in NCCL,
// no collective may be in flight on the parent meanwhile (here: an MPI_Comm_split of its MPI communicator).
ncclResult_t ncclCommSplit(ncclComm_t parent_handle, int color, int key, ncclComm_t* out, ncclConfig_t* /*config*/) {
  if (!out) return ncclInvalidArgument;
  *out = nullptr;
  const auto parent = find_comm(parent_handle);
  if (!parent) return warn(ncclInvalidArgument, "ncclCommSplit: not a communicator");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) return warn(ncclInvalidArgument, "ncclCommSplit: negative color");
  MPI_Comm split = MPI_COMM_NULL;
  if (MPI_Comm_split(parent->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &split) != MPI_SUCCESS)
    return warn(ncclSystemError, "ncclCommSplit: MPI_Comm_split failed");
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  auto comm = std::make_shared<ncclComm>();
  comm->mpi = split;
  comm->device = parent->device;
  MPI_Comm_rank(split, &comm->rank);
  MPI_Comm_size(split, &comm->nranks);
  MPI_Comm_set_errhandler(comm->mpi, MPI_ERRORS_RETURN);
  std::lock_guard<std::mutex> lock(comms_mu());
  comms().emplace(comm.get(), comm);
  *out = comm.get();
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t handle) {
  const auto comm = find_comm(handle);
  if (!comm) return ncclInvalidArgument;
  std::map<Stream*, uint64_t> pending;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    pending = comm->last_op;
  }
  for (auto [s, seq] : pending)
    if (is_live(s)) s->wait(seq);  // NCCL finishes what was queued first (a destroyed stream has)
  {
    std::lock_guard<std::mutex> lock(comms_mu());
    comms().erase(handle);
  }
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised) MPI_Comm_free(&comm->mpi);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t handle) {
  const auto comm = find_comm(handle);
  if (!comm) return ncclInvalidArgument;
  comm->aborted = true;  // queued collectives are skipped, a running one stops waiting
  std::lock_guard<std::mutex> lock(comms_mu());
  comms().erase(handle);  // its MPI communicator is left alone: a collective may still be posted on it
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t handle, ncclResult_t* error) {
  const auto comm = find_comm(handle);
  if (!comm || !error) return ncclInvalidArgument;
  *error = static_cast<ncclResult_t>(comm->async_error.load());
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t handle, int* count) {
  const auto comm = find_comm(handle);
  if (!comm || !count) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t handle, int* rank) {
  const auto comm = find_comm(handle);
  if (!comm || !rank) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(const ncclComm_t handle, int* device) {
  const auto comm = find_comm(handle);
  if (!comm || !device) return ncclInvalidArgument;
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * type_bytes(t);
  return collective("ncclAllReduce", comm, stream, t, op, true, send, bytes, recv, bytes, count, -1, send == recv,
                    [=](ncclComm& c) { all_reduce(c, send, recv, count, t, op); });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  const auto c = find_comm(comm);
  const size_t W = c ? static_cast<size_t>(c->nranks) : 1, bytes = recvcount * type_bytes(t);
  const bool in_place = c && recv == static_cast<const char*>(send) + static_cast<size_t>(c->rank) * bytes;
  return collective("ncclReduceScatter", comm, stream, t, op, true, send, bytes * W, recv, bytes, recvcount, -1,
                    in_place, [=](ncclComm& cm) { reduce_scatter(cm, send, recv, recvcount, t, op); });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t stream) {
  const auto c = find_comm(comm);
  const size_t W = c ? static_cast<size_t>(c->nranks) : 1, bytes = sendcount * type_bytes(t);
  const bool in_place = c && send == static_cast<const char*>(recv) + static_cast<size_t>(c->rank) * bytes;
  return collective("ncclAllGather", comm, stream, t, ncclSum, false, send, bytes, recv, bytes * W, sendcount, -1,
                    in_place, [=](ncclComm& cm) { all_gather(cm, send, recv, sendcount, t); });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  const auto c = find_comm(comm);
  if (c && (root < 0 || root >= c->nranks)) return warn(ncclInvalidArgument, "ncclBroadcast: invalid root");
  const size_t bytes = count * type_bytes(t);
  const bool is_root = c && c->rank == root;
  return collective("ncclBroadcast", comm, stream, t, ncclSum, false, send, is_root ? bytes : 0, recv, bytes, count,
                    root, send == recv, [=](ncclComm& cm) { broadcast(cm, send, recv, count, t, root); });
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, t, root, comm, stream);
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  const auto c = find_comm(comm);
  if (c && (root < 0 || root >= c->nranks)) return warn(ncclInvalidArgument, "ncclReduce: invalid root");
  const size_t bytes = count * type_bytes(t);
  const bool is_root = c && c->rank == root;
  return collective("ncclReduce", comm, stream, t, op, true, send, bytes, recv, is_root ? bytes : 0, count, root,
                    send == recv, [=](ncclComm& cm) { reduce(cm, send, recv, count, t, op, root); });
}

ncclResult_t ncclGroupStart() {
  ++group_depth();
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth() == 0) return warn(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth() > 0) return ncclSuccess;
  std::vector<Pending> ops = std::move(group_ops());
  group_ops().clear();
  ncclResult_t result = ncclSuccess;
  for (Pending& p : ops)
    if (const ncclResult_t r = launch(std::move(p)); r != ncclSuccess && result == ncclSuccess) result = r;
  return result;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return last_error_text().c_str(); }

}  // extern "C"
