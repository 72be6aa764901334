// kernels/cuda/reduce.cu — the deterministic reductions of reduce.cuh. No atomics: every partial
// has one writer, and every sum runs in an order fixed by the problem size alone. Also the counter
// of last_block_to_finish.
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/vec.cuh"

namespace sftdp::cuda {
namespace {

constexpr int kSumBlock = 512;               // threads per partial-sum block
constexpr int kFinishBlock = 1024;           // threads of the one finishing block
constexpr size_t kMaxPartials = 1024;        // at most this many per-block partials
constexpr size_t kMinChunk = kSumBlock * 8;  // at least 8 items per thread before splitting
constexpr int kColTile = 32;                 // columns per column-partial block (one warp wide)
constexpr int kColRows = 8;                  // warps per column-partial block

// What a partial sum adds: Elem-typed x[i], as value(x[i]) in fp64.
struct LoadDouble {
  using Elem = double;
  const double* x;
  __device__ static double value(double v) { return v; }
};
struct LoadSquare {
  using Elem = float;
  const float* x;
  __device__ static double value(float f) {
    const double v = f;
    return v * v;
  }
};

// partials[b] = Σ load(i) over i in [b·chunk, min((b+1)·chunk, n)); blockDim.x = kSumBlock. Thread t adds
// the items r ≡ t (mod kSumBlock) of the block's range in ascending r, the order of a plain strided loop,
// then block_sum: the sum does not depend on how the items are loaded. They are loaded in 16-byte vectors
// where the range allows (vec.cuh): a tile of kSumBlock vectors at a time into shared memory, from which
// each thread takes its own items; the few before the first aligned address and the tail after the last
// full tile are read directly.
template <class Load>
__global__ void __launch_bounds__(kSumBlock) partial_sums_kernel(double* partials, Load load, size_t n,
                                                                 size_t chunk) {
  using E = typename Load::Elem;
  constexpr int V = Vec<E>::kSize;
  constexpr int kTileItems = kSumBlock * V;
  __shared__ double shared[kWarp];
  __shared__ Vec<E> tile[kSumBlock];
  const size_t begin = static_cast<size_t>(blockIdx.x) * chunk;
  const size_t end = begin + chunk < n ? begin + chunk : n;
  const size_t len = end - begin;
  const E* x = load.x + begin;
  const int t = static_cast<int>(threadIdx.x);
  const int head = vector_head(V, x);
  const bool vectors = head >= 0 && static_cast<size_t>(head) <= len;
  const size_t h = vectors ? static_cast<size_t>(head) : 0, tiles = vectors ? (len - h) / kTileItems : 0;
  // t's items: r = t if t < h; in tile k, r = h + k·kTileItems + s + kSumBlock·m (m < V); then the tail.
  const int s = (t + kSumBlock - static_cast<int>(h)) % kSumBlock;
  double acc = 0.0;
  if (static_cast<size_t>(t) < h) acc += Load::value(x[t]);
  for (size_t k = 0; k < tiles; ++k) {
    __syncthreads();  // the previous tile has been read
    tile[t] = load_vec(x + h + k * kTileItems + static_cast<size_t>(t) * V);
    __syncthreads();
    SFTDP_UNROLL
    for (int m = 0; m < V; ++m) {
      const int q = s + kSumBlock * m;
      acc += Load::value(tile[q / V][q % V]);
    }
  }
  for (size_t r = h + tiles * kTileItems + s; r < len; r += kSumBlock) acc += Load::value(x[r]);
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// dst[0] (+)= Σ partials[0..P), one block.
__global__ void __launch_bounds__(kFinishBlock) finish_sum_kernel(float* dst, const double* partials, int P,
                                                                  bool accumulate) {
  __shared__ double shared[kWarp];
  double acc = 0.0;
  for (int i = threadIdx.x; i < P; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc, shared);
  // One rounding to fp32, after the add in fp64, as the CPU twins do (sums[0] = float(sums[0] +
  // loss_sum)); rounding acc first and adding in fp32 could differ from them by an ulp.
  if (threadIdx.x == 0) dst[0] = static_cast<float>(accumulate ? static_cast<double>(dst[0]) + acc : acc);
}

// Columns per thread of column_partials_kernel: 4 (a 16-byte vector) when C is a multiple of 4 and x and
// partials are 16-byte aligned (then so is every row), else 1. The launcher and the kernel both ask.
__host__ __device__ __forceinline__ int column_width(const float* partials, const float* x, int C) {
  return C % Vec<float>::kSize == 0 && vector_head(Vec<float>::kSize, partials, x) == 0 ? Vec<float>::kSize : 1;
}

// partials[chunk·C + c] = Σ x[n·C + c] over the chunk's rows; block (kColTile, kColRows), grid
// (ceil(C / (kColTile·width)), chunks), width = column_width(): each thread takes `width` adjacent
// columns. Each warp strides the chunk's rows; warps add in order: per column the same sums in the same
// order whatever the width.
__global__ void column_partials_kernel(float* partials, const float* x, int N, int C) {
  constexpr int V = Vec<float>::kSize;
  __shared__ float tile[kColRows][V][kColTile + 1];
  const int r0 = blockIdx.y * kRowsPerChunk;
  const int r1 = r0 + kRowsPerChunk < N ? r0 + kRowsPerChunk : N;
  if (column_width(partials, x, C) == V) {
    const int c = (blockIdx.x * kColTile + threadIdx.x) * V;
    Vec<float> acc;
    SFTDP_UNROLL
    for (int k = 0; k < V; ++k) acc[k] = 0.f;
    if (c < C)
      for (int n = r0 + threadIdx.y; n < r1; n += kColRows) {
        const Vec<float> v = load_vec(x + static_cast<size_t>(n) * C + c);
        SFTDP_UNROLL
        for (int k = 0; k < V; ++k) acc[k] += v[k];
      }
    SFTDP_UNROLL
    for (int k = 0; k < V; ++k) tile[threadIdx.y][k][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
      Vec<float> sum;
      SFTDP_UNROLL
      for (int k = 0; k < V; ++k) {
        sum[k] = 0.f;
        for (int j = 0; j < kColRows; ++j) sum[k] += tile[j][k][threadIdx.x];
      }
      store_vec(partials + static_cast<size_t>(blockIdx.y) * C + c, sum);
    }
    return;
  }
  const int c = blockIdx.x * kColTile + threadIdx.x;
  float acc = 0.f;
  if (c < C)
    for (int n = r0 + threadIdx.y; n < r1; n += kColRows) acc += x[static_cast<size_t>(n) * C + c];
  tile[threadIdx.y][0][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float sum = 0.f;
    for (int j = 0; j < kColRows; ++j) sum += tile[j][0][threadIdx.x];
    partials[static_cast<size_t>(blockIdx.y) * C + c] = sum;
  }
}

__global__ void add_column_partials_kernel(float* dst, const float* partials, int R, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int r = 0; r < R; ++r) acc += partials[static_cast<size_t>(r) * C + c];
  dst[c] += acc;
}

template <class Load>
void two_pass_sum(float* dst, Load load, size_t n, bool accumulate, cudaStream_t stream) {
  if (n == 0) {
    if (!accumulate) memset_async(dst, 0, sizeof(float), stream);
    return;
  }
  const size_t min_chunk = kMinChunk;
  const size_t chunk = ceil_div(n, kMaxPartials) > min_chunk ? ceil_div(n, kMaxPartials) : min_chunk;
  const int P = static_cast<int>(ceil_div(n, chunk));  // <= kMaxPartials
  double* partials = scratch_as<double>(Scratch::kReducePartials, P);
  SFTDP_LAUNCH(partial_sums_kernel<Load>, P, kSumBlock, 0, stream, partials, load, n, chunk);
  CHECK_LAUNCH();
  SFTDP_LAUNCH(finish_sum_kernel, 1, kFinishBlock, 0, stream, dst, partials, P, accumulate);
  CHECK_LAUNCH();
}

}  // namespace

void sum_into(float* dst, const double* x, size_t n, bool accumulate, cudaStream_t stream) {
  two_pass_sum(dst, LoadDouble{x}, n, accumulate, stream);
}

void sum_squares_into(float* dst, const float* x, size_t n, cudaStream_t stream) {
  two_pass_sum(dst, LoadSquare{x}, n, /*accumulate=*/false, stream);
}

void add_column_partials(float* dst, const float* partials, int R, int C, cudaStream_t stream) {
  if (R <= 0 || C <= 0) return;
  constexpr int kBlock = 256;
  SFTDP_LAUNCH(add_column_partials_kernel, static_cast<unsigned>(ceil_div(C, kBlock)), kBlock, 0, stream, dst, partials,
               R, C);
  CHECK_LAUNCH();
}

unsigned* blocks_done_counter(cudaStream_t stream) {
  static void* zeroed = nullptr;  // the allocation last zeroed: a new one starts as 0xff bytes
  void* counter = scratch(Scratch::kBlocksDone, sizeof(unsigned));
  if (counter != zeroed) {
    memset_async(counter, 0, sizeof(unsigned), stream);
    zeroed = counter;
  }
  return static_cast<unsigned*>(counter);
}

void add_column_sums(float* dst, const float* x, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const int R = column_chunks(N);
  SFTDP_ASSERT(R <= 65535, "add_column_sums: N / 128 row chunks exceed gridDim.y (65535)");
  float* partials = scratch_as<float>(Scratch::kColumnPartials, static_cast<size_t>(R) * C);
  const size_t columns_per_block = static_cast<size_t>(kColTile) * column_width(partials, x, C);
  const dim3 grid(static_cast<unsigned>(ceil_div(C, columns_per_block)), static_cast<unsigned>(R));
  SFTDP_LAUNCH(column_partials_kernel, grid, dim3(kColTile, kColRows), 0, stream, partials, x, N, C);
  CHECK_LAUNCH();
  add_column_partials(dst, partials, R, C, stream);
}

}  // namespace sftdp::cuda
