// tests/kernels/test_encoder.cpp — CPU encoder twin: a hand case, explicit positions, the
// gradient against fp64 finite differences (with repeated tokens), += accumulation, bitwise
// determinism across thread counts, and token embeddings only when wpe (and dwpe) is null.
#include <cstdint>
#include <vector>

#include "common/test_util.h"
#include "grad_check.h"
#include "kernels/encoder.h"

namespace sftdp::test {
namespace {

// fp64 reference forward: out[b,t,:] = wte[inp[b,t],:] + wpe[pos or t,:].
std::vector<double> encoder_ref(const std::vector<int32_t>& inp, const int32_t* pos,
                                const std::vector<double>& wte, const std::vector<double>& wpe,
                                int B, int T, int C) {
  std::vector<double> out(size_t(B) * T * C);
  for (int bt = 0; bt < B * T; ++bt) {
    const int p = pos ? pos[bt] : bt % T;
    for (int c = 0; c < C; ++c) out[size_t(bt) * C + c] = wte[size_t(inp[bt]) * C + c] + wpe[size_t(p) * C + c];
  }
  return out;
}

TEST(Encoder, HandCaseDefaultPositions) {
  const int B = 1, T = 2, C = 2;
  const std::vector<int32_t> inp = {2, 0};
  const std::vector<float> wte = {1, 2, 3, 4, 5, 6};         // V = 3
  const std::vector<float> wpe = {10, 20, 30, 40, 50, 60};   // maxT = 3
  std::vector<float> out(B * T * C, -1.f);
  cpu::encoder_fwd(out.data(), inp.data(), nullptr, wte.data(), wpe.data(), B, T, C);
  EXPECT_TRUE(bitwise_equal(out, {15, 26, 31, 42}));
}

TEST(Encoder, ExplicitPositionsAreUsed) {
  const int B = 2, T = 2, C = 1;
  const std::vector<int32_t> inp = {0, 1, 1, 0}, pos = {2, 0, 0, 1};
  const std::vector<float> wte = {1, 2}, wpe = {100, 200, 300};
  std::vector<float> out(4);
  cpu::encoder_fwd(out.data(), inp.data(), pos.data(), wte.data(), wpe.data(), B, T, C);
  EXPECT_TRUE(bitwise_equal(out, {301, 102, 102, 201}));
}

// Backward against central differences of L = Σ dout·out in fp64, with token ids that repeat
// and with explicit positions; dwte/dwpe start non-zero to check +=.
void check_backward(bool explicit_positions) {
  const int B = 2, T = 4, C = 3, V = 5, maxT = 6;
  const std::vector<int32_t> inp = {1, 3, 1, 1, 0, 3, 4, 1};
  const std::vector<int32_t> pos = {5, 0, 1, 2, 0, 1, 0, 1};  // position 0 and 1 repeat
  const int32_t* p = explicit_positions ? pos.data() : nullptr;
  const auto wte = uniform(V * C, 1), wpe = uniform(maxT * C, 2), dout = uniform(B * T * C, 3);
  const auto dwte0 = uniform(V * C, 4), dwpe0 = uniform(maxT * C, 5);
  std::vector<float> dwte = dwte0, dwpe = dwpe0;
  cpu::encoder_bwd(dwte.data(), dwpe.data(), dout.data(), inp.data(), p, nullptr, B, T, C);

  auto wte64 = to_f64(wte), wpe64 = to_f64(wpe);
  const auto dout64 = to_f64(dout);
  auto loss = [&] { return dot(dout64, encoder_ref(inp, p, wte64, wpe64, B, T, C)); };
  EXPECT_TRUE(allclose(added(dwte, dwte0), central_diff(wte64, loss), 1e-6, 1e-6));
  EXPECT_TRUE(allclose(added(dwpe, dwpe0), central_diff(wpe64, loss), 1e-6, 1e-6));
}
TEST(Encoder, BackwardMatchesFiniteDifferences) { check_backward(false); }
TEST(Encoder, BackwardWithPositionsMatchesFiniteDifferences) { check_backward(true); }

TEST(Encoder, ForwardMatchesFp64Reference) {
  const int B = 3, T = 7, C = 67, V = 11;
  const auto inp = uniform_int(B * T, 6, V);
  const auto wte = uniform(V * C, 7), wpe = uniform(T * C, 8);
  std::vector<float> out(B * T * C);
  cpu::encoder_fwd(out.data(), inp.data(), nullptr, wte.data(), wpe.data(), B, T, C);
  EXPECT_TRUE(allclose(to_f64(out), encoder_ref(inp, nullptr, to_f64(wte), to_f64(wpe), B, T, C),
                       1e-7, 1e-7));
}

TEST(Encoder, BackwardIsBitwiseIdenticalForOneAndTwoThreads) {
  const int B = 4, T = 64, C = 200, V = 7;  // few ids: many repeats summing into one row
  const auto inp = uniform_int(B * T, 9, V);
  const auto dout = uniform(B * T * C, 10);
  auto run = [&](int threads) {
    std::vector<float> dwte(V * C, 0.5f), dwpe(T * C, 0.25f);
    with_threads(threads, [&] {
      cpu::encoder_bwd(dwte.data(), dwpe.data(), dout.data(), inp.data(), nullptr, nullptr, B, T, C);
    });
    dwte.insert(dwte.end(), dwpe.begin(), dwpe.end());
    return dwte;
  };
  EXPECT_TRUE(bitwise_equal(run(1), run(2)));
}

// Llama family: no learned positions. out = wte[inp] exactly, whatever pos says.
TEST(Encoder, NullWpeGivesTokenEmbeddingsOnly) {
  const int B = 2, T = 3, C = 5, V = 4;
  const std::vector<int32_t> inp = {3, 0, 3, 1, 2, 1}, pos = {9, 9, 9, 9, 9, 9};  // pos is ignored
  const auto wte = uniform(V * C, 41);
  for (const int32_t* p : {static_cast<const int32_t*>(nullptr), pos.data()}) {
    std::vector<float> out(B * T * C, -1.f), want;
    cpu::encoder_fwd(out.data(), inp.data(), p, wte.data(), nullptr, B, T, C);
    for (int bt = 0; bt < B * T; ++bt) want.insert(want.end(), &wte[inp[bt] * C], &wte[inp[bt] * C + C]);
    EXPECT_TRUE(bitwise_equal(out, want));
  }
}

TEST(Encoder, NullDwpeBackwardAccumulatesTokenGradientsOnly) {
  const int B = 2, T = 4, C = 3, V = 5;
  const std::vector<int32_t> inp = {1, 3, 1, 1, 0, 3, 4, 1};
  const auto wte = uniform(V * C, 42), dout = uniform(B * T * C, 43), dwte0 = uniform(V * C, 44);
  std::vector<float> dwte = dwte0;
  cpu::encoder_bwd(dwte.data(), nullptr, dout.data(), inp.data(), nullptr, nullptr, B, T, C);
  auto wte64 = to_f64(wte);
  const std::vector<double> no_positions(size_t(T) * C, 0.0);  // wpe = 0: the same function
  const auto dout64 = to_f64(dout);
  auto loss = [&] { return dot(dout64, encoder_ref(inp, nullptr, wte64, no_positions, B, T, C)); };
  EXPECT_TRUE(allclose(added(dwte, dwte0), central_diff(wte64, loss), 1e-6, 1e-6));
}

}  // namespace
}  // namespace sftdp::test
