// tests/kernels/test_cuda_vectorised_sim.cpp — the vectorised memory-bound kernels of kernels/cuda/ (16-byte
// vectors, warp-per-row kernels, grids sized to the SM count: issue 34 item 3) give bit for bit what the scalar
// kernels they replaced gave. Each old kernel is kept in scalar_kernels_sim.h as it was and runs on the
// simulator beside today's launcher, on the same random inputs, at sizes that reach the vector path and the
// scalar head and tail, with pointers at element offsets that are misaligned alike (a scalar head, then
// vectors) or differently (the scalar fallback), in place where the kernel allows it. Outputs start from the
// same contents (NaN poison or the in-place input) and whole buffers are compared, padding included, so an
// element written twice, skipped or written outside its range shows. The launchers serve both CUDA tables
// ("cuda" and "cuda-bf16"), which share these kernels. Simulator build only: the old kernels are device code.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.h"
// The simulator's device side before any CUDA header (sim_test_util.h includes cudasim/device.h first).
#include "cudasim/sim_test_util.h"

#include "kernels/adamw.h"
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/encoder.h"
#include "kernels/gather.h"
#include "kernels/gelu.h"
#include "kernels/lora.h"
#include "kernels/residual.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "scalar_kernels_sim.h"

namespace sftdp::test {
namespace {

namespace old = scalar;
constexpr size_t kPad = 8;  // elements around every range: offsets up to 3, and nothing may be written there
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Same bytes, element for element; the first mismatches by index.
template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  std::string misses;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
    if (bad++ < 6) {
      uint64_t g = 0, w = 0;
      std::memcpy(&g, &got[i], sizeof(T));
      std::memcpy(&w, &want[i], sizeof(T));
      misses += "\n  [" + std::to_string(i) + "] got bits " + std::to_string(g) + ", the scalar kernel's " +
                std::to_string(w);
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ:" << misses;
}

// Offsets (in elements) of up to three pointers: aligned, misaligned alike, misaligned differently.
struct Offsets {
  size_t a, b, c;
};
const Offsets kOffsets[] = {{0, 0, 0}, {1, 1, 1}, {3, 3, 3}, {0, 1, 2}, {2, 0, 0}, {0, 0, 3}};
std::string name(const Offsets& o) {
  return "offsets " + std::to_string(o.a) + "," + std::to_string(o.b) + "," + std::to_string(o.c);
}

class Vectorised : public SimTest {
 protected:
  // A device copy of `h` (plus kPad elements of `pad` after it).
  template <class T>
  T* upload(std::vector<T> h, T pad = T{}) {
    h.resize(h.size() + kPad, pad);
    return device_from(h);
  }
  std::vector<float> random(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
    return uniform(n + kPad, seed, lo, hi);
  }
  float* poisoned(size_t n) { return device_from(std::vector<float>(n + kPad, kNaN)); }
  std::vector<float> get(const float* p, size_t n) { return host(p, n + kPad); }
  cudaStream_t s() const { return stream_; }
};

// ---- flat elementwise: residual, GELU, AdamW --------------------------------------------------------------
const size_t kFlatSizes[] = {1, 3, 4, 5, 1000, 4099, 65541};

TEST_F(Vectorised, ResidualIsTheScalarKernelsBits) {
  for (size_t N : kFlatSizes)
    for (const Offsets& o : kOffsets) {
      SCOPED_TRACE("N=" + std::to_string(N) + " " + name(o));
      float* a = device_from(random(N, 1));
      float* b = device_from(random(N, 2));
      float *want = poisoned(N), *got = poisoned(N);
      SFTDP_LAUNCH(old::residual_fwd_kernel, old::blocks(N), old::kBlock, 0, s(), want + o.a, a + o.b, b + o.c, N);
      cuda::residual_fwd(got + o.a, a + o.b, b + o.c, N, s());
      EXPECT_TRUE(same_bits(get(got, N), get(want, N)));
      // in place: out = a
      float* in_want = device_from(random(N, 1));
      float* in_got = device_from(random(N, 1));
      SFTDP_LAUNCH(old::residual_fwd_kernel, old::blocks(N), old::kBlock, 0, s(), in_want + o.a, in_want + o.a,
                   b + o.c, N);
      cuda::residual_fwd(in_got + o.a, in_got + o.a, b + o.c, N, s());
      EXPECT_TRUE(same_bits(get(in_got, N), get(in_want, N))) << "in place";
    }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

TEST_F(Vectorised, GeluForwardAndBackwardAreTheScalarKernelsBits) {
  for (size_t N : kFlatSizes)
    for (const Offsets& o : kOffsets) {
      SCOPED_TRACE("N=" + std::to_string(N) + " " + name(o));
      float* x = device_from(random(N, 3, -6.f, 6.f));
      float* dout = device_from(random(N, 4));
      float *want = poisoned(N), *got = poisoned(N);
      SFTDP_LAUNCH(old::gelu_fwd_kernel, old::blocks(N), old::kBlock, 0, s(), want + o.a, x + o.b, N);
      cuda::gelu_fwd(got + o.a, x + o.b, N, s());
      EXPECT_TRUE(same_bits(get(got, N), get(want, N))) << "gelu_fwd";
      float *dwant = poisoned(N), *dgot = poisoned(N);
      SFTDP_LAUNCH(old::gelu_bwd_kernel, old::blocks(N), old::kBlock, 0, s(), dwant + o.a, x + o.b, dout + o.c, N);
      cuda::gelu_bwd(dgot + o.a, x + o.b, dout + o.c, N, s());
      EXPECT_TRUE(same_bits(get(dgot, N), get(dwant, N))) << "gelu_bwd";
    }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

TEST_F(Vectorised, AdamWIsTheScalarKernelsBits) {
  const float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.5f;
  const int t = 3;
  // as adamw_update forms them
  const auto bc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b1), t)));
  const auto bc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b2), t)));
  for (size_t N : kFlatSizes)
    for (const Offsets& o : kOffsets) {
      SCOPED_TRACE("N=" + std::to_string(N) + " " + name(o));
      const size_t n_decay = N * 2 / 3;
      const auto p0 = random(N, 5), m0 = random(N, 6), v0 = random(N, 7, 0.f, 1e-3f), g = random(N, 8);
      float *pw = device_from(p0), *mw = device_from(m0), *vw = device_from(v0);
      float *pg = device_from(p0), *mg = device_from(m0), *vg = device_from(v0);
      const float* grads = device_from(g);
      // params at offset a, m and v at b, grads at c
      SFTDP_LAUNCH(old::adamw_kernel, old::blocks(N), old::kBlock, 0, s(), pw + o.a, mw + o.b, vw + o.b, grads + o.c,
                   N, n_decay, lr, b1, b2, eps, wd, bc1, bc2, scale);
      cuda::adamw_update(pg + o.a, mg + o.b, vg + o.b, grads + o.c, N, n_decay, lr, b1, b2, eps, wd, t, scale, s());
      EXPECT_TRUE(same_bits(get(pg, N), get(pw, N))) << "params";
      EXPECT_TRUE(same_bits(get(mg, N), get(mw, N))) << "m";
      EXPECT_TRUE(same_bits(get(vg, N), get(vw, N))) << "v";
    }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

// ---- row kernels: SwiGLU, gather/scatter, encoder, LoRA dropout, the bias --------------------------------------
struct NF {
  int N, F;
};
const NF kRowShapes[] = {{1, 1}, {3, 5}, {4, 8}, {5, 67}, {7, 128}, {2, 1031}};

TEST_F(Vectorised, SwigluForwardAndBackwardAreTheScalarKernelsBits) {
  for (const NF& shape : kRowShapes)
    for (const Offsets& o : kOffsets) {
      const int N = shape.N, F = shape.F;
      SCOPED_TRACE("N=" + std::to_string(N) + " F=" + std::to_string(F) + " " + name(o));
      const size_t NF_ = static_cast<size_t>(N) * F;
      float* inp = device_from(random(2 * NF_, 9, -5.f, 5.f));
      float* dout = device_from(random(NF_, 10));
      float *want = poisoned(NF_), *got = poisoned(NF_);
      SFTDP_LAUNCH(old::swiglu_fwd_kernel, old::blocks(NF_), old::kBlock, 0, s(), want + o.a, inp + o.b, F, NF_);
      cuda::swiglu_fwd(got + o.a, inp + o.b, N, F, s());
      EXPECT_TRUE(same_bits(get(got, NF_), get(want, NF_))) << "swiglu_fwd";
      float *dwant = poisoned(2 * NF_), *dgot = poisoned(2 * NF_);
      SFTDP_LAUNCH(old::swiglu_bwd_kernel, old::blocks(NF_), old::kBlock, 0, s(), dwant + o.a, inp + o.b, dout + o.c,
                   F, NF_);
      cuda::swiglu_bwd(dgot + o.a, inp + o.b, dout + o.c, N, F, s());
      EXPECT_TRUE(same_bits(get(dgot, 2 * NF_), get(dwant, 2 * NF_))) << "swiglu_bwd";
    }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

TEST_F(Vectorised, GatherAndScatterAreTheScalarKernelsBits) {
  struct Shape {
    int N, C, n;
  };
  for (const Shape& shape : {Shape{1, 1, 1}, Shape{97, 131, 40}, Shape{64, 64, 33}, Shape{40, 7, 40}, Shape{9, 8, 9}})
    for (const Offsets& o : kOffsets) {
      const int N = shape.N, C = shape.C, n = shape.n;
      SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C) + " n=" + std::to_string(n) + " " + name(o));
      std::vector<int32_t> idx(N);
      for (int i = 0; i < N; ++i) idx[i] = (i * 37 + 11) % N;  // distinct: no N here is a multiple of 37
      idx.resize(n);
      const int32_t* d_idx = upload(idx);
      const size_t table = static_cast<size_t>(N) * C, packed = static_cast<size_t>(n) * C;
      float* inp = device_from(random(table, 12));
      float *want = poisoned(packed), *got = poisoned(packed);
      SFTDP_LAUNCH(old::copy_rows_kernel<false>, old::blocks(packed), old::kBlock, 0, s(), want + o.a, inp + o.b,
                   d_idx, C, packed);
      cuda::gather_rows(got + o.a, inp + o.b, d_idx, n, C, s());
      EXPECT_TRUE(same_bits(get(got, packed), get(want, packed))) << "gather_rows";
      float* rows = device_from(random(packed, 13));
      float *swant = device_from(random(table, 14)), *sgot = device_from(random(table, 14));
      SFTDP_LAUNCH(old::copy_rows_kernel<true>, old::blocks(packed), old::kBlock, 0, s(), swant + o.a, rows + o.b,
                   d_idx, C, packed);
      cuda::scatter_rows(sgot + o.a, rows + o.b, d_idx, n, C, s());
      EXPECT_TRUE(same_bits(get(sgot, table), get(swant, table))) << "scatter_rows";
    }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

TEST_F(Vectorised, EncoderForwardIsTheScalarKernelsBits) {
  struct Shape {
    int B, T, C;
  };
  const int V = 50, maxT = 16;
  for (const Shape& shape : {Shape{1, 1, 1}, Shape{2, 3, 5}, Shape{2, 4, 64}, Shape{3, 5, 67}})
    for (const Offsets& o : kOffsets)
      for (int variant = 0; variant < 3; ++variant) {  // GPT-2 positions t, given positions, no wpe (Llama)
        const int B = shape.B, T = shape.T, C = shape.C;
        SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) + " " +
                     name(o) + " variant " + std::to_string(variant));
        const size_t BT = static_cast<size_t>(B) * T, total = BT * C;
        const int32_t* tokens = upload(uniform_int(BT, 15, V));
        const int32_t* pos = variant == 1 ? upload(uniform_int(BT, 16, maxT)) : nullptr;
        const float* wte = device_from(random(static_cast<size_t>(V) * C, 17));
        const float* wpe = variant == 2 ? nullptr : device_from(random(static_cast<size_t>(maxT) * C, 18));
        float *want = poisoned(total), *got = poisoned(total);
        const float* wpe_at = wpe ? wpe + o.c : nullptr;
        SFTDP_LAUNCH(old::encoder_fwd_kernel, old::blocks(total), old::kBlock, 0, s(), want + o.a, tokens, pos,
                     wte + o.b, wpe_at, T, C, total);
        cuda::encoder_fwd(got + o.a, tokens, pos, wte + o.b, wpe_at, B, T, C, s());
        EXPECT_TRUE(same_bits(get(got, total), get(want, total)));
      }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

TEST_F(Vectorised, LoraDropoutIsTheScalarKernelsBits) {
  struct Shape {
    int N, T, C;
  };
  const uint64_t key = 0x1234abcd5678ef01ull;
  const float p = 0.25f, keep_scale = 1.f / (1.f - p);
  for (const Shape& shape : {Shape{1, 1, 1}, Shape{6, 3, 5}, Shape{8, 4, 64}, Shape{9, 3, 131}})
    for (const Offsets& o : kOffsets) {
      const int N = shape.N, T = shape.T, C = shape.C;
      SCOPED_TRACE("N=" + std::to_string(N) + " T=" + std::to_string(T) + " C=" + std::to_string(C) + " " + name(o));
      const size_t n = static_cast<size_t>(N) * C;
      std::vector<int64_t> rows(N / T + 1);
      for (size_t b = 0; b < rows.size(); ++b) rows[b] = static_cast<int64_t>(1000 + 7919 * b);
      const int64_t* d_rows = upload(rows);
      const uint64_t* d_key = upload(std::vector<uint64_t>{key});
      float* x = device_from(random(n, 19));
      float *want = poisoned(n), *got = poisoned(n);
      SFTDP_LAUNCH(old::lora_dropout_kernel, old::blocks(n), old::kBlock, 0, s(), want + o.a, x + o.b, d_rows, key, p,
                   keep_scale, T, C, n);
      cuda::lora_dropout(got + o.a, x + o.b, d_rows, nullptr, d_key, p, keep_scale, N, T, C, s());
      EXPECT_TRUE(same_bits(get(got, n), get(want, n)));
      float *in_want = device_from(random(n, 19)), *in_got = device_from(random(n, 19));  // in place
      SFTDP_LAUNCH(old::lora_dropout_kernel, old::blocks(n), old::kBlock, 0, s(), in_want + o.a, in_want + o.a,
                   d_rows, key, p, keep_scale, T, C, n);
      cuda::lora_dropout(in_got + o.a, in_got + o.a, d_rows, nullptr, d_key, p, keep_scale, N, T, C, s());
      EXPECT_TRUE(same_bits(get(in_got, n), get(in_want, n))) << "in place";
    }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

// gemm's bias kernel runs where cuBLASLt's epilogue cannot take the bias: a bias below 16-byte alignment.
TEST_F(Vectorised, GemmBiasKernelIsTheScalarKernelsBits) {
  struct Shape {
    int M, N, K, ldc;
  };
  for (const Shape& shape : {Shape{3, 5, 2, 5}, Shape{17, 64, 8, 64}, Shape{9, 130, 4, 133}, Shape{6, 8, 3, 9}})
    for (size_t bias_offset : {1, 2, 3})
      for (size_t c_offset : {0, 1}) {
        const int M = shape.M, N = shape.N, K = shape.K, ldc = shape.ldc;
        SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) + " ldc=" + std::to_string(ldc) +
                     " bias offset " + std::to_string(bias_offset) + " C offset " + std::to_string(c_offset));
        const float* A = device_from(random(static_cast<size_t>(M) * K, 20));
        const float* B = device_from(random(static_cast<size_t>(K) * N, 21));
        const float* bias = device_from(random(N, 22));
        const size_t c_size = static_cast<size_t>(M) * ldc;
        float *want = poisoned(c_size), *got = poisoned(c_size);
        cuda::gemm(false, false, M, N, K, 1.f, A, K, B, N, 0.f, want + c_offset, ldc, nullptr, false, cuda::GemmBatch{},
                   s());
        SFTDP_LAUNCH(old::add_bias_kernel, old::blocks(static_cast<size_t>(M) * N), old::kBlock, 0, s(),
                     want + c_offset, bias + bias_offset, M, N, ldc);
        cuda::gemm(false, false, M, N, K, 1.f, A, K, B, N, 0.f, got + c_offset, ldc, bias + bias_offset, false,
                   cuda::GemmBatch{}, s());
        EXPECT_TRUE(same_bits(get(got, c_size), get(want, c_size)));
      }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

// ---- RoPE ------------------------------------------------------------------------------------------------------
TEST_F(Vectorised, RopeForwardAndBackwardAreTheScalarKernelsBits) {
  struct Shape {
    int B, T, NH, KVH, HS;
  };
  for (const Shape& shape : {Shape{1, 3, 2, 1, 2}, Shape{2, 5, 4, 2, 6}, Shape{2, 7, 3, 1, 8}, Shape{1, 9, 4, 2, 64},
                             Shape{1, 2, 2, 2, 12}})
    for (size_t offset : {0, 1, 2, 4})
      for (bool with_positions : {false, true}) {
        const int B = shape.B, T = shape.T, NH = shape.NH, KVH = shape.KVH, HS = shape.HS;
        SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
                     " KVH=" + std::to_string(KVH) + " HS=" + std::to_string(HS) + " offset " +
                     std::to_string(offset) + (with_positions ? " positions" : ""));
        const size_t BT = static_cast<size_t>(B) * T, n = BT * (NH + 2 * KVH) * HS;
        const size_t pairs = BT * (NH + KVH) * (HS / 2);
        const int32_t* pos = with_positions ? upload(uniform_int(BT, 23, 40000)) : nullptr;
        const float* inv_freq = device_from(random(HS / 2, 24, 1e-4f, 1.f));
        const auto qkv0 = random(n, 25);
        for (bool transpose : {false, true}) {
          float *want = device_from(qkv0), *got = device_from(qkv0);
          if (transpose) {
            SFTDP_LAUNCH(old::rope_kernel<true>, old::blocks(pairs), old::kBlock, 0, s(), want + offset, pos,
                         inv_freq, T, NH, KVH, HS, pairs);
            cuda::rope_bwd(got + offset, pos, inv_freq, B, T, NH, KVH, HS, s());
          } else {
            SFTDP_LAUNCH(old::rope_kernel<false>, old::blocks(pairs), old::kBlock, 0, s(), want + offset, pos,
                         inv_freq, T, NH, KVH, HS, pairs);
            cuda::rope_fwd(got + offset, pos, inv_freq, B, T, NH, KVH, HS, s());
          }
          EXPECT_TRUE(same_bits(get(got, n), get(want, n))) << (transpose ? "rope_bwd" : "rope_fwd");
        }
      }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

// ---- casts -----------------------------------------------------------------------------------------------------
std::vector<uint16_t> bits16(const std::vector<__nv_bfloat16>& v) {
  std::vector<uint16_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(uint16_t));
  return out;
}

TEST_F(Vectorised, CastsAreTheScalarKernelsBits) {
  struct Shape {
    size_t len, count, ld_in, ld_out;
  };
  const Shape shapes[] = {{1, 1, 1, 1},         {4099, 1, 4099, 4099}, {65541, 1, 65541, 65541}, {64, 33, 64, 64},
                          {257, 9, 257, 264},    {31, 7, 96, 31},       {16, 40, 19, 24},          {5, 6, 5, 8},
                          {1000, 3, 1003, 1000}, {8, 1, 100, 100}};
  for (const Shape& sh : shapes)
    for (const Offsets& o : kOffsets) {
      SCOPED_TRACE("len=" + std::to_string(sh.len) + " count=" + std::to_string(sh.count) + " ld_in=" +
                   std::to_string(sh.ld_in) + " ld_out=" + std::to_string(sh.ld_out) + " " + name(o));
      const size_t in_size = sh.ld_in * (sh.count - 1) + sh.len, out_size = sh.ld_out * (sh.count - 1) + sh.len;
      const float* inp = device_from(random(in_size, 26, -3.f, 3.f));
      const std::vector<__nv_bfloat16> nan16(out_size + kPad, __float2bfloat16_rn(kNaN));
      __nv_bfloat16 *want = device_from(nan16), *got = device_from(nan16);
      SFTDP_LAUNCH(old::fp32_to_bf16_kernel, old::blocks(sh.len * sh.count), old::kBlock, 0, s(), want + o.a,
                   sh.ld_out, inp + o.b, sh.ld_in, sh.len, sh.len * sh.count);
      cuda::cast_fp32_to_bf16(got + o.a, sh.ld_out, inp + o.b, sh.ld_in, sh.len, sh.count, s());
      EXPECT_TRUE(same_bits(bits16(host(got, out_size + kPad)), bits16(host(want, out_size + kPad))))
          << "fp32 -> bf16";
      if (sh.count > 1) continue;
      const size_t n = sh.len;  // and back, contiguous
      float *back_want = poisoned(n), *back_got = poisoned(n);
      SFTDP_LAUNCH(old::bf16_to_fp32_kernel, old::blocks(n), old::kBlock, 0, s(), back_want + o.c, want + o.a, n);
      cuda::cast_bf16_to_fp32(back_got + o.c, want + o.a, n, s());
      EXPECT_TRUE(same_bits(get(back_got, n), get(back_want, n))) << "bf16 -> fp32";
    }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

// ---- reductions: the partials and the result ------------------------------------------------------------------
TEST_F(Vectorised, SumsOfSquaresAndOfDoublesAreTheScalarKernelsBits) {
  // 4194304 + 5003: chunks of 4101 floats, so the blocks' ranges start at every alignment
  for (size_t n : {size_t{1}, size_t{7}, size_t{4096}, size_t{4097}, size_t{10000}, size_t{4199307}})
    for (size_t offset : {0, 1, 2, 3}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " offset " + std::to_string(offset));
      const size_t chunk = old::sum_chunk(n), P = (n + chunk - 1) / chunk;
      {
        const float* x = device_from(random(n, 27, -2.f, 2.f));
        double* partials = device<double>(P);
        float *want = poisoned(0), *got = poisoned(0);
        SFTDP_LAUNCH(old::partial_sums_kernel<old::LoadSquare>, P, old::kSumBlock, 0, s(), partials,
                     old::LoadSquare{x + offset}, n, chunk);
        SFTDP_LAUNCH(old::finish_sum_kernel, 1, old::kFinishBlock, 0, s(), want, partials, static_cast<int>(P), false);
        cuda::sum_squares_into(got, x + offset, n, s());
        const double* got_partials = cuda::scratch_as<double>(cuda::Scratch::kReducePartials, P);  // the launcher's
        EXPECT_TRUE(same_bits(host(got_partials, P), host(partials, P))) << "sum of squares: partials";
        EXPECT_TRUE(same_bits(get(got, 0), get(want, 0))) << "sum of squares";
      }
      if (n > 10000) continue;  // fp64 items: the small sizes are enough for every alignment
      std::vector<double> xd(n + kPad);
      const auto xf = random(n, 28, -50.f, 50.f);
      for (size_t i = 0; i < xd.size(); ++i) xd[i] = static_cast<double>(xf[i]) / 3.0;
      const double* x = device_from(xd);
      double* partials = device<double>(P);
      float* want = device_from(std::vector<float>(1 + kPad, 1.5f));
      float* got = device_from(std::vector<float>(1 + kPad, 1.5f));
      SFTDP_LAUNCH(old::partial_sums_kernel<old::LoadDouble>, P, old::kSumBlock, 0, s(), partials,
                   old::LoadDouble{x + offset}, n, chunk);
      SFTDP_LAUNCH(old::finish_sum_kernel, 1, old::kFinishBlock, 0, s(), want, partials, static_cast<int>(P), true);
      cuda::sum_into(got, x + offset, n, /*accumulate=*/true, s());
      const double* got_partials = cuda::scratch_as<double>(cuda::Scratch::kReducePartials, P);
      EXPECT_TRUE(same_bits(host(got_partials, P), host(partials, P))) << "sum of doubles: partials";
      EXPECT_TRUE(same_bits(get(got, 0), get(want, 0))) << "sum of doubles";
    }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

TEST_F(Vectorised, ColumnSumsAreTheScalarKernelsBits) {
  for (const NF& shape : {NF{1, 4}, NF{5, 3}, NF{130, 8}, NF{300, 257}, NF{257, 64}, NF{129, 132}})
    for (size_t offset : {0, 1, 4}) {
      const int N = shape.N, C = shape.F;
      SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C) + " offset " + std::to_string(offset));
      const int R = cuda::column_chunks(N);
      const float* x = device_from(random(static_cast<size_t>(N) * C, 29));
      const auto dst0 = random(C, 30);
      float *want = device_from(dst0), *got = device_from(dst0);
      float* partials = device<float>(static_cast<size_t>(R) * C);
      const dim3 grid(static_cast<unsigned>((C + old::kColTile - 1) / old::kColTile), static_cast<unsigned>(R));
      SFTDP_LAUNCH(old::column_partials_kernel, grid, dim3(old::kColTile, old::kColRows), 0, s(), partials,
                   x + offset, N, C);
      cuda::add_column_partials(want, partials, R, C, s());
      cuda::add_column_sums(got, x + offset, N, C, s());
      const float* got_partials = cuda::scratch_as<float>(cuda::Scratch::kColumnPartials, static_cast<size_t>(R) * C);
      EXPECT_TRUE(same_bits(host(got_partials, static_cast<size_t>(R) * C), host(partials, static_cast<size_t>(R) * C)))
          << "partials";
      EXPECT_TRUE(same_bits(get(got, C), get(want, C)));
    }
  EXPECT_TRUE(sim::reports().empty()) << all_reports();
}

// The grid is one wave of the device (its SM count, asked once per device) whatever n: a grid-stride loop
// covers the rest, so a size far past one wave is still every element once (the sizes above cover 2048·4·8).
TEST_F(Vectorised, GridsAreSizedToTheSmCount) {
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_EQ(cuda::sm_count(), sms);
  const unsigned wave = static_cast<unsigned>(sms) * (cuda::kResidentThreadsPerSm / 256);
  EXPECT_EQ(cuda::elementwise_blocks(1, 256), 1u);
  EXPECT_EQ(cuda::elementwise_blocks(size_t{1} << 40, 256), wave);
  EXPECT_EQ(cuda::elementwise_blocks(size_t{256} * wave + 1, 256), wave);
}

}  // namespace
}  // namespace sftdp::test
