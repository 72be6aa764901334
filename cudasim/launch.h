// cudasim/launch.h — the simulator's device-side entry points, as device.h uses them: the per-OS-
// thread pointers behind the built-in variables, the block barrier, the warp exchange, and launch(),
// which SFTDP_LAUNCH(kernel, grid, block, smem, stream, args...) becomes in the sim build. A launch is
// checked as CUDA checks it (errors through cudaGetLastError), its pointer arguments must be device
// memory, and it is queued on its stream; block_runner.cpp runs it there.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace sftdp::sim {

// What threadIdx & co. read: set by the block runner before it resumes a simulated thread.
struct Builtins {
  const uint3* thread_idx;
  const uint3* block_idx;
  const dim3* block_dim;
  const dim3* grid_dim;
};
extern __thread Builtins t_builtins;

// The shuffles first (resolve_warp relies on the order); kMma and kLdmatrix are the warp-collective
// matrix instructions of tensor_core.h, whose `value` is a pointer to the lane's operands.
enum class WarpOp : int { kShflIdx, kShflXor, kShflDown, kShflUp, kSyncWarp, kBallot, kAll, kAny, kMma, kLdmatrix };
const char* warp_op_name(WarpOp op);

// __syncthreads(): waits until every thread of the block has reached this call site.
void syncthreads(const char* file, int line);
// Every lane of `mask` posts `value` (and `arg`: the source lane, xor mask or delta) at the same call
// site; returns what op gives this lane once all of them have (see block_runner.cpp).
uint64_t warp_exchange(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line);

// Before a vector access of `bytes` (16, 8 or 4) at p (kernels/cuda/vec.cuh): true when p is a multiple of
// `bytes`. Else, as a GPU faults ("misaligned address"), the launch fails: a memcheck report naming the
// kernel, block, thread, call site and the address in its allocation, and the device's sticky
// cudaErrorMisalignedAddress; the caller then skips the access (a load reads zeros).
bool check_vector_access(const void* p, size_t bytes, bool store, const char* file, int line);

// One kernel argument as the launch check sees it: a pointer (must be device memory or null), or
// the bytes of any other value (scanned for words that point into device memory).
struct ArgView {
  const void* bytes;
  size_t size;
  bool is_pointer;
  size_t pointee = 1;  // a pointer's element size (1 for void*): the bytes streamcheck takes as read at it
};

struct KernelLaunch {
  const char* kernel;  // the name as written at the launch
  const char* file;
  int line;
  dim3 grid, block;
  size_t dynamic_smem = 0;
  const void* kernel_address = nullptr;  // what cudaFuncSetAttribute names it by
  std::vector<ArgView> args;          // into the argument tuple that `thread_body` holds
  std::function<void()> thread_body;  // calls the kernel with its arguments: one simulated thread
  std::shared_ptr<void> keep_alive;   // the argument tuple
};

// Checks and queues `launch` on `stream`; a failed check sets the launch error (cudaGetLastError).
void submit(KernelLaunch&& launch, cudaStream_t stream);

struct LaunchSite {
  const char* kernel;
  const char* file;
  int line;
};

// sizeof(*p) for a pointer type P (1 for void pointers), else 0.
template <class P>
constexpr size_t pointee_size() {
  if constexpr (!std::is_pointer_v<P>) {
    return 0;
  } else {
    using E = std::remove_cv_t<std::remove_pointer_t<P>>;
    if constexpr (std::is_void_v<E> || std::is_function_v<E>) return 1;
    else return sizeof(E);
  }
}

// kernel<<<grid, block, smem, stream>>>(args...): arguments converted to the kernel's parameter
// types and copied, as CUDA copies them at the launch.
template <class... P, class... A>
void launch(const LaunchSite& site, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  using Tuple = std::tuple<std::remove_cv_t<P>...>;
  auto params = std::make_shared<Tuple>(static_cast<std::remove_cv_t<P>>(std::forward<A>(args))...);
  KernelLaunch l{site.kernel, site.file, site.line, grid, block, smem, reinterpret_cast<const void*>(kernel), {}, {}, {}};
  std::apply(
      [&l](auto&... p) {
        (l.args.push_back(ArgView{&p, sizeof(p), std::is_pointer_v<std::remove_reference_t<decltype(p)>>,
                                  pointee_size<std::remove_reference_t<decltype(p)>>()}),
         ...);
      },
      *params);
  Tuple* raw = params.get();
  l.thread_body = [raw, kernel] { std::apply(kernel, *raw); };
  l.keep_alive = std::move(params);
  submit(std::move(l), stream);
}

}  // namespace sftdp::sim
