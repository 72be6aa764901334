// src/train/stop_signal.h — SIGTERM / SIGUSR1 (Slurm's pre-timeout signal, a scancel) ask the
// trainer to stop at the next step boundary: it writes a checkpoint and exits 0. The handler
// only sets a flag; ranks agree on it with one tiny allreduce per step.
#pragma once

namespace sftdp::train {
void install_stop_handlers();
bool stop_requested();  // this rank received a stop signal
int stop_signal();      // which one (0 if none)
}  // namespace sftdp::train
