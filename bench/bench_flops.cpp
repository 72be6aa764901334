// bench/bench_flops.cpp — bench::train_flops (harness.h: the one FLOP count every bench reports
// GFLOP/s and MFU in) of one optimizer step of the run that `sft_train CONFIG.yml [key=value ...]`
// would make with the same arguments: the model's dimensions after presets and overrides, the
// global batch G of one rank's plan (global_batch_size, or per_device_batch_size × GA) and
// T = max_target_length. Prints one line of key=value pairs, flops_per_step first, for scripts
// (bench/llmc_compare.py). A bad config: one `error:` line on stderr, exit 2, as sft_train.
#include <cstdio>

#include "harness.h"
#include "sftdp/check.h"
#include "sftdp/config.h"

int main(int argc, char** argv) {
  using namespace sftdp;
  try {
    const config::Config cfg = config::from_args(argc, argv);
    const config::ModelDims d = config::model_dims(cfg);
    const config::BatchPlan plan = config::resolve_batch(cfg, 1);
    const int B = static_cast<int>(plan.global_batch), T = static_cast<int>(cfg.max_target_length);
    std::printf("flops_per_step=%.0f B=%d T=%d block=%s L=%d C=%d F=%d V=%d NH=%d\n", bench::train_flops(d, B, T), B,
                T, config::block_name(d).c_str(), d.L, d.C, d.F, d.V, d.NH);
    return 0;
  } catch (const UserError& e) {
    std::fprintf(stderr, "bench_flops: error: %s\n", e.what());
    return 2;
  }
}
