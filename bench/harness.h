// bench/harness.h — the small shared kit of the bench executables (one per kernel, collective or
// whole step): a median timer, an aligned text table, this machine's sgemm GFLOP/s, seeded
// inputs, and a validation line. Every bench checks a result before it times anything.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "sftdp/config.h"
#include "sftdp/data.h"
#include "train/flops.h"

namespace sftdp::bench {

// Median wall time of one call of fn in milliseconds: `warmup` untimed calls, then `reps` timed
// calls. Call the device's synchronize() inside fn when the work is asynchronous.
double median_ms(const std::function<void()>& fn, int reps = 10, int warmup = 2);

// n floats uniform in [lo, hi) / n ints uniform in [0, hi), deterministic in seed.
std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f);
std::vector<int32_t> random_ints(size_t n, uint64_t seed, int32_t hi);

// B rows of T random tokens whose first `prompt` positions (default: a quarter row) have loss
// weight 0, as an SFT prompt, the rest weight 1.
data::Batch random_batch(int B, int T, int V, int prompt = -1);

// Training FLOPs of one optimizer step of model `d` on B×T tokens — the one count every bench
// reports GFLOP/s and MFU in, as the training log its TFLOP/s: train::train_flops, whose header
// (src/train/flops.h) states the formula.
using train::train_flops;

// Throughput of plain cblas_sgemm on this machine, GFLOP/s (2·M·N·K flops per call), for the
// matmul_fwd call C(M,N) = A(M,K)·B(N,K)ᵀ; median over reps. OpenBLAS runs its own threads,
// as many as OpenMP would use, for the measurement only (the CPU matmul kernel pins OpenBLAS to
// one thread and splits GEMMs over OpenMP instead); the previous setting is restored.
double sgemm_gflops(int M, int N, int K, int reps = 5);

// This machine's memory bandwidth, GB/s: the median over reps of one OpenMP pass of the
// STREAM triad a[i] = b[i] + s·c[i] over three arrays of n floats each (n well above the caches:
// 3·n·4 bytes moved per pass, write-allocate traffic not counted, as STREAM reports it).
double triad_gbytes_per_s(size_t n = size_t(1) << 25, int reps = 5);

// Prints "check <what>: max |err| <err> (tolerance <tol>) OK|FAILED" and returns err <= tol.
// A bench that fails a check should exit non-zero before it times anything.
bool check(const std::string& what, double max_abs_err, double tol);

// "3.14" with `digits` decimals: cells for Table.
std::string fmt(double value, int digits = 3);

// A text table: the first column left-aligned, the others right-aligned, widths from content.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::FILE* out = stdout) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace sftdp::bench
