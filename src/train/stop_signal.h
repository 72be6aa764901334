// src/train/stop_signal.h — SIGINT (Ctrl-C), SIGTERM and SIGUSR1 (Slurm's pre-timeout signal, a
// scancel) ask the trainer to stop at the next step boundary: it writes a checkpoint and exits 0.
// The handler only sets a flag; ranks agree on it with one tiny allreduce per step. Nothing is lost
// silently (docs/SPEC.md §2): a SIGINT while that stop is pending (Ctrl-C pressed twice) keeps it
// and says so, with the step of the last checkpoint written; a third ends the process at once by
// SIGINT's default action (status 130), after one line saying that no checkpoint is written and
// which step a resubmission continues from.
#pragma once
#include <cstdint>

namespace sftdp::train {
void install_stop_handlers();
bool stop_requested();  // this rank received a stop signal
int stop_signal();      // which one (the first; 0 if none)
// The step of the newest checkpoint on disk (-1: none), for the interrupt lines; the trainer sets it
// at start (a resumed run's checkpoint) and after every checkpoint it writes.
void set_last_checkpoint_step(int64_t step);
}  // namespace sftdp::train
