// src/train/stop_signal.h — SIGINT (Ctrl-C), SIGTERM and SIGUSR1 (Slurm's pre-timeout signal, a
// scancel) ask the trainer to stop at the next step boundary: it writes a checkpoint and exits 0.
// The handler only sets a flag; ranks agree on it with one tiny allreduce per step. A SIGINT that
// arrives while a stop is already pending (Ctrl-C pressed twice) ends the process at once, by
// SIGINT's default action: no checkpoint, the shell reports status 130 (docs/SPEC.md §2).
#pragma once

namespace sftdp::train {
void install_stop_handlers();
bool stop_requested();  // this rank received a stop signal
int stop_signal();      // which one (the first; 0 if none)
}  // namespace sftdp::train
