// kernels/cuda/encoder.cu — token + position embedding on the GPU (kernels/encoder.h). B batch,
// T seq, C channels. Accumulation: dwte +=, dwpe += — deterministic without atomics: the token
// (and position) ids are bucketed on the host (encoder_buckets, kernels/encoder.h: stable, so each
// bucket lists its tokens in ascending b·T + t) when the micro-batch is uploaded, then one block row
// per distinct id adds its tokens' gradients to the table row in that order. Each (row, c) sees the
// same additions in the same order as the CPU twin's plain loop. Nothing waits; a caller without the
// buckets gets them made here, at the cost of one stream synchronisation.
// wpe == nullptr (Llama family, no learned positions): token embeddings only; backward then takes
// dwpe == nullptr and neither reads pos nor builds position buckets.
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/vec.cuh"
#include "kernels/encoder.h"

namespace sftdp::cuda {
namespace {

constexpr int kBlock = 256;

// A warp per token row bt of BT = B·T (its ids read once per row, the position bt mod T in 32 bits: the
// launcher checks BT < 2^32), the row in 16-byte vectors where out's, wte's and wpe's rows share an
// alignment, element by element otherwise (vec.cuh).
__global__ void encoder_fwd_kernel(float* out, const int32_t* inp, const int32_t* pos, const float* wte,
                                   const float* wpe, int T, int C, size_t BT) {
  constexpr int V = Vec<float>::kSize;
  for_each_row_by_warp(BT, [&](size_t bt, int lane) {
    float* o = out + bt * C;
    const float* e = wte + static_cast<size_t>(inp[bt]) * C;
    if (wpe == nullptr) {
      vector_loop<V>(
          lane, kWarp, C, vector_head(V, o, e), [&](size_t c) { store_vec(o + c, load_vec(e + c)); },
          [&](size_t c) { o[c] = e[c]; });
      return;
    }
    const size_t p = pos ? static_cast<size_t>(pos[bt]) : static_cast<uint32_t>(bt) % static_cast<uint32_t>(T);
    const float* q = wpe + p * C;
    vector_loop<V>(
        lane, kWarp, C, vector_head(V, o, e, q),
        [&](size_t c) {
          const Vec<float> a = load_vec(e + c), b = load_vec(q + c);
          Vec<float> y;
          SFTDP_UNROLL
          for (int k = 0; k < V; ++k) y[k] = a[k] + b[k];
          store_vec(o + c, y);
        },
        [&](size_t c) { o[c] = e[c] + q[c]; });
  });
}

// Bucket u of a table's buckets (encoder_buckets' layout: order, starts, rows, and the count U at *count) covers
// order[starts[u] .. starts[u+1]) and targets table row rows[u]:
// table[row, c] = (((table[row, c] + dout[o0, c]) + dout[o1, c]) + ...), o ascending.
// Grid (n, ceil(C / kBlock)) for the n = B·T positions, the most buckets there can be: blocks past U leave at once
// (U is on the device, so the launch needs no wait for it). One thread per (bucket, channel): no two share an element.
__global__ void scatter_add_buckets_kernel(float* table, const float* dout, const int32_t* count, const int32_t* order,
                                           const int32_t* starts, const int32_t* rows, int C) {
  const int u = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (u >= *count || c >= C) return;
  float* dst = table + static_cast<size_t>(rows[u]) * C + c;
  float acc = *dst;
  for (int j = starts[u]; j < starts[u + 1]; ++j) acc += dout[static_cast<size_t>(order[j]) * C + c];
  *dst = acc;
}

// The buckets of one table at `at` (encoder_buckets' layout; n positions), its count at `count`.
void scatter_add(float* table, const float* dout, const int32_t* count, const int32_t* at, size_t n, int C,
                 cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(ceil_div(C, kBlock)));
  SFTDP_LAUNCH(scatter_add_buckets_kernel, grid, kBlock, 0, stream, table, dout, count, at, at + n, at + 2 * n + 1, C);
  CHECK_LAUNCH();
}

void check_dims(const char* op, int B, int T, int C) {
  SFTDP_ASSERT(B >= 0 && T > 0 && C > 0, std::string(op) + ": need B >= 0, T > 0, C > 0 (got B=" +
                                             std::to_string(B) + " T=" + std::to_string(T) +
                                             " C=" + std::to_string(C) + ")");
}

}  // namespace

void encoder_fwd(float* out, const int32_t* inp, const int32_t* pos, const float* wte, const float* wpe, int B,
                 int T, int C, cudaStream_t stream) {
  check_dims("encoder_fwd", B, T, C);
  const size_t BT = static_cast<size_t>(B) * T;
  if (BT == 0) return;
  SFTDP_ASSERT(BT <= UINT32_MAX, "encoder_fwd: B·T = " + std::to_string(BT) + " rows exceed 2^32 - 1");
  SFTDP_LAUNCH(encoder_fwd_kernel, row_blocks(BT, kBlock), kBlock, 0, stream, out, inp, pos, wte, wpe, T, C, BT);
  CHECK_LAUNCH();
}

void encoder_bwd(float* dwte, float* dwpe, const float* dout, const int32_t* inp, const int32_t* pos,
                 const int32_t* buckets, int B, int T, int C, cudaStream_t stream) {
  check_dims("encoder_bwd", B, T, C);
  const size_t n = static_cast<size_t>(B) * T;
  if (n == 0) return;
  SFTDP_ASSERT(n <= static_cast<size_t>(INT32_MAX / 8), "encoder_bwd: B·T too large for int32 buckets");
  const bool with_pos = dwpe != nullptr;
  if (!buckets) {  // the caller has none: the ids to the host, bucketed there, uploaded (one wait)
    // Static host buffers: reused across calls. Safe because the next call overwrites them only after its own
    // stream synchronisation, when this call's upload has completed.
    static std::vector<int32_t> tokens, positions, host;
    tokens.resize(n);
    memcpy_async(tokens.data(), inp, n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream);
    positions.resize(with_pos && pos ? n : 0);
    if (with_pos && pos)
      memcpy_async(positions.data(), pos, n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    encoder_buckets(tokens.data(), with_pos && pos ? positions.data() : nullptr, B, T, with_pos, host);
    int32_t* dev = scratch_as<int32_t>(Scratch::kEncoderBuckets, host.size());
    memcpy_async(dev, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream);
    buckets = dev;
  }
  scatter_add(dwte, dout, buckets, buckets + 2, n, C, stream);
  if (with_pos) scatter_add(dwpe, dout, buckets + 1, buckets + 2 + 3 * n + 1, n, C, stream);
}

}  // namespace sftdp::cuda
