// SIGINT/SIGTERM under a SignalGuard (issue 23, item 10): the handler only
// records the signal; StopOnSignal ends fit() after the step, and the
// CheckpointCallback saves where it stopped, so the run resumes from there.
// (A second signal's immediate exit is tested on the real tool, in
// tests/apps/cli_test.cpp.)
#include <gtest/gtest.h>

#include <csignal>

#include "tests/support/train_testing.h"
#include "tests/train/tiny_run.h"

namespace kiln::train {
namespace {

// Raises `sig` in this process at the end of step `at`, as Ctrl-C would.
struct RaiseAt : Callback {
  RaiseAt(int64_t at, int sig) : at(at), sig(sig) {}
  void on_step_end(Trainer& t, const StepResult&) override {
    if (t.progress().global_step == at) std::raise(sig);
  }
  int64_t at;
  int sig;
};

TEST(SignalGuard, RecordsTheFirstSignalAndRestoresTheHandlers) {
  struct sigaction before;
  sigaction(SIGTERM, nullptr, &before);
  {
    SignalGuard guard;
    EXPECT_EQ(SignalGuard::received(), 0);
    std::raise(SIGTERM);  // would end the test binary without the guard
    EXPECT_EQ(SignalGuard::received(), SIGTERM);
    EXPECT_STREQ(SignalGuard::name(SIGTERM), "SIGTERM");
  }
  struct sigaction after;
  sigaction(SIGTERM, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
  SignalGuard again;  // a new guard starts clear
  EXPECT_EQ(SignalGuard::received(), 0);
}

TEST(StopOnSignal, FinishesTheStepSavesAndResumes) {
  const std::string dir = testing::fresh_dir();
  std::ostringstream out;
  {
    testing::TinyRun run;
    auto stop = std::make_shared<StopOnSignal>();
    auto ckpt = std::make_shared<CheckpointCallback>(dir, CheckpointCallbackOptions{.restore_best = false});
    // The signal arrives during step 7's callbacks: that step is the last.
    Trainer trainer(3, {std::make_shared<RaiseAt>(7, SIGINT), stop, ckpt}, testing::run_to(out));
    SignalGuard guard;
    History h = trainer.fit(run.task, *run.loader);
    EXPECT_EQ(h.state, RunState::completed);  // an ordinary stop
    EXPECT_EQ(stop->signal(), SIGINT);
    EXPECT_EQ(trainer.progress().global_step, 7);
    EXPECT_EQ(io::read_checkpoint_info(ckpt->latest()).progress.global_step, 7);
  }
  EXPECT_NE(out.str().find("SIGINT at step 7: stopping and saving a checkpoint"), std::string::npos) << out.str();
  // A new process resumes at step 8 and runs to the end.
  testing::TinyRun run;
  auto ckpt = std::make_shared<CheckpointCallback>(dir, CheckpointCallbackOptions{.restore_best = false});
  Trainer trainer(3, {std::make_shared<StopOnSignal>(), ckpt}, testing::run_to(out));
  SignalGuard guard;
  trainer.fit(run.task, *run.loader, ckpt->latest());
  EXPECT_EQ(trainer.progress().global_step, 15);
}

}  // namespace
}  // namespace kiln::train
