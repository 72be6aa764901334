// tests/train/test_stop_signal.cpp — Ctrl-C loses nothing silently (docs/SPEC.md §2): the first SIGINT
// asks for a stop at the next step boundary; a second while it is pending keeps that stop (the
// checkpoint is still written) and says so with the last checkpoint's step; a third ends the process
// at once, killed by SIGINT (status 130 in a shell), after one line saying no checkpoint is written
// and where a resubmission continues. Each case runs in a child process (death tests): the handler's
// state is the process's.
#include <gtest/gtest.h>

#include <unistd.h>

#include <csignal>

#include "train/stop_signal.h"

namespace sftdp::train {
namespace {

class StopSignal : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(StopSignal, ASecondCtrlCKeepsThePendingCheckpointAndSaysSo) {
  EXPECT_EXIT(
      {
        install_stop_handlers();
        set_last_checkpoint_step(40);
        std::raise(SIGINT);
        std::raise(SIGINT);
        _exit(stop_requested() && stop_signal() == SIGINT ? 0 : 1);  // alive, and still stopping
      },
      ::testing::ExitedWithCode(0),
      "sft_train: interrupt: stopping at the next step boundary to write a checkpoint .*"
      "sft_train: interrupt again: the checkpoint is still written at the next step boundary \\(last "
      "checkpoint: step 40\\); a third Ctrl-C stops at once, without it");
}

TEST_F(StopSignal, AThirdCtrlCStopsAtOnceAndSaysWhereAResubmissionContinues) {
  EXPECT_EXIT(
      {
        install_stop_handlers();
        set_last_checkpoint_step(12);
        for (int i = 0; i < 3; ++i) std::raise(SIGINT);
        _exit(0);
      },
      ::testing::KilledBySignal(SIGINT),
      "sft_train: third interrupt: stopping now, without a checkpoint; a resubmission continues from the last "
      "checkpoint, step 12");
  EXPECT_EXIT(
      {
        install_stop_handlers();
        for (int i = 0; i < 3; ++i) std::raise(SIGINT);
        _exit(0);
      },
      ::testing::KilledBySignal(SIGINT),
      "interrupt again: the checkpoint is still written at the next step boundary \\(no checkpoint yet\\).*"
      "third interrupt: stopping now, without a checkpoint; no checkpoint written yet: a resubmission starts over");
}

TEST_F(StopSignal, RepeatedTermOrUsr1ChangeNothing) {
  EXPECT_EXIT(
      {
        install_stop_handlers();
        std::raise(SIGUSR1);
        std::raise(SIGTERM);
        std::raise(SIGUSR1);
        _exit(stop_signal() == SIGUSR1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace sftdp::train
