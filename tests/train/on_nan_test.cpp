// A non-finite loss (issue 23, item 5): by default fit() stops at it with
// NonFiniteLoss before any callback sees the step, so no checkpoint of it is
// written; OnNan::skip counts the step but keeps it out of the epoch's means;
// train::update() never applies such a loss, nor non-finite gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "tests/support/train_testing.h"
#include "tests/train/tiny_run.h"

namespace kiln::train {
namespace {

// TinyRun's classification steps, except that step `nan_step` (1-based)
// reports a NaN loss without touching the model, as train::update() does.
struct NanAt : Task {
  NanAt(testing::TinyRun& run, int64_t nan_step) : Task(run.model, run.optimizer, &run.rngs), nan_step(nan_step) {}
  StepResult training_step(const data::Batch& b) override {
    if (++steps == nan_step) return {std::nan(""), b.size(), 0};
    return Task::training_step(b);
  }
  int64_t nan_step, steps = 0;
};

TEST(OnNan, StopIsTheDefaultAndWritesNoCheckpointOfTheStep) {
  testing::TinyRun run;
  NanAt task(run, 3);
  const std::string dir = testing::fresh_dir();
  auto ckpt = std::make_shared<CheckpointCallback>(dir, CheckpointCallbackOptions{.every_n_steps = 1});
  std::ostringstream out;
  Trainer trainer(2, {ckpt}, testing::run_to(out));
  try {
    trainer.fit(task, *run.loader);
    ADD_FAILURE() << "fit() went on past a NaN loss";
  } catch (const NonFiniteLoss& e) {
    EXPECT_EQ(e.step(), 3);
    EXPECT_EQ(e.epoch(), 0);
    EXPECT_TRUE(std::isnan(e.loss()));
    EXPECT_NE(std::string(e.what()).find("non-finite loss nan at step 3 (epoch 1)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(trainer.state(), RunState::failed);
  EXPECT_EQ(trainer.progress().global_step, 2);  // the NaN step is not counted
  // Steps 1 and 2 were saved; the failed run saves nothing more.
  std::vector<int64_t> steps;
  for (const auto& e : ckpt->manager().entries()) steps.push_back(e.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2}));
}

TEST(OnNan, SkipCountsTheStepButNotItsLoss) {
  testing::TinyRun run;
  NanAt task(run, 2);
  std::ostringstream out;
  RunOptions options = testing::run_to(out);
  options.on_nan = OnNan::skip;
  auto summary = std::make_shared<Summary>();
  Trainer trainer(1, {summary}, options);
  History h = trainer.fit(task, *run.loader);
  EXPECT_EQ(h.state, RunState::completed);
  EXPECT_EQ(trainer.progress().global_step, 5);  // the batch was consumed
  EXPECT_EQ(trainer.skipped_steps(), 1);
  ASSERT_EQ(h.epochs.size(), 1u);
  EXPECT_TRUE(std::isfinite(h.epochs[0].at("loss")));      // 4 steps of 2 samples
  EXPECT_TRUE(std::isfinite(h.epochs[0].at("accuracy")));
  EXPECT_EQ(trainer.epoch_stats().count, 8);
  EXPECT_NE(out.str().find("step 2: loss nan, step skipped (on_nan = skip)"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("loss: initial nan"), std::string::npos) << out.str();
  for (const auto& [name, p] : run.model->named_parameters()) {
    std::vector<double> v = p.value().to(kF64).to_vector<double>();
    for (double x : v) EXPECT_TRUE(std::isfinite(x)) << name;
  }
}

TEST(OnNan, UpdateNeverAppliesANonFiniteLoss) {
  testing::TinyRun run;
  const auto before = run.weights();
  Generator gen(3);
  Tensor x = randn({2, 4}, gen);
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {std::nan(""), inf, -inf}) {
    Tensor loss = sum(run.model(x)) * bad;
    EXPECT_FALSE(update(loss, run.optimizer)) << bad;
  }
  // A finite loss (0) whose gradients are not (d sqrt(u) / du at 0 is inf, times 0).
  Tensor zero = sum(sqrt(run.model(x) * 0.0));
  ASSERT_EQ(zero.item<double>(), 0.0);
  EXPECT_FALSE(update(zero, run.optimizer));
  const auto after = run.weights();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(testing::equal(after[i].second, before[i].second));
  Tensor loss = sum(run.model(x));
  EXPECT_TRUE(update(loss, run.optimizer));
  EXPECT_FALSE(testing::equal(run.weights()[0].second, before[0].second));
}

}  // namespace
}  // namespace kiln::train
