// EarlyStopping: the exact stopping epoch and line on scripted monitor values
// (min and max modes, min_delta, ties, NaN, baseline), the missing-monitor
// error, option errors, and resume with the patience counter carried over.
#include "kiln/train/callbacks/early_stopping.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "kiln/train/trainer.h"
#include "tests/support/train_testing.h"
#include "tests/train/tiny_run.h"

namespace kiln {
namespace {

using testing::ScriptedMetric;
using testing::TinyRun;
using train::EarlyStopping;
using train::EarlyStoppingOptions;

struct Outcome {
  int64_t epochs = 0;  // epochs run
  std::string out;
  std::shared_ptr<EarlyStopping> es;
};

// Runs up to values.size() epochs with logs()[monitor] scripted from `values`.
Outcome run(std::vector<double> values, EarlyStoppingOptions options) {
  TinyRun r;
  std::ostringstream out;
  auto es = std::make_shared<EarlyStopping>(options);
  train::Trainer trainer(int64_t(values.size()), {std::make_shared<ScriptedMetric>(options.monitor, values), es},
                         testing::run_to(out));
  train::History h = trainer.fit(r.task, *r.loader);
  return {int64_t(h.epochs.size()), out.str(), es};
}

TEST(EarlyStopping, StopsAfterPatienceEpochsWithoutImprovement) {
  // best 0.9 at epoch 2; epochs 3, 4, 5 do not improve -> stop at 5 of 8.
  Outcome o = run({1.0, 0.9, 0.95, 0.91, 0.92, 0.5, 0.4, 0.3}, {.monitor = "val/loss", .patience = 3});
  EXPECT_EQ(o.epochs, 5);
  EXPECT_EQ(o.out, "epoch 5: early stopping (val/loss did not improve for 3 epochs, best 0.9000 at epoch 2)\n");
  EXPECT_EQ(o.es->stopped_epoch(), 5);
  EXPECT_EQ(o.es->best(), 0.9);
  EXPECT_EQ(o.es->best_epoch(), 2);
  EXPECT_EQ(o.es->wait(), 3);
}

TEST(EarlyStopping, AnImprovementRestartsThePatience) {
  // 0.85 at epoch 4 restarts the count: stop at 4 + 2 = 6.
  Outcome o = run({1.0, 0.9, 0.95, 0.85, 0.86, 0.87, 0.1}, {.patience = 2});
  EXPECT_EQ(o.epochs, 6);
  EXPECT_EQ(o.out, "epoch 6: early stopping (val/loss did not improve for 2 epochs, best 0.8500 at epoch 4)\n");
}

TEST(EarlyStopping, NeverStopsWhileImproving) {
  Outcome o = run({5, 4, 3, 2, 1}, {.patience = 0});
  EXPECT_EQ(o.epochs, 5);
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.es->stopped_epoch(), 0);
  EXPECT_EQ(o.es->best(), 1.0);
  EXPECT_EQ(o.es->wait(), 0);
}

TEST(EarlyStopping, PatienceZeroStopsAtTheFirstEpochWithoutImprovement) {
  Outcome o = run({5, 4, 4, 1}, {.patience = 0});  // a tie is no improvement
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(o.out, "epoch 3: early stopping (val/loss did not improve for 1 epoch, best 4.0000 at epoch 2)\n");
}

TEST(EarlyStopping, MaxModeForAccuracies) {
  Outcome o =
      run({0.5, 0.7, 0.8, 0.8, 0.79, 0.9}, {.monitor = "val/accuracy", .patience = 2, .mode = io::MetricMode::max});
  EXPECT_EQ(o.epochs, 5);
  EXPECT_EQ(o.out, "epoch 5: early stopping (val/accuracy did not improve for 2 epochs, best 0.8000 at epoch 3)\n");
}

TEST(EarlyStopping, MinDeltaIgnoresSmallImprovements) {
  // With min_delta 0.1 only 0.85 improves on 1.0 (by more than 0.1); 0.95 and 0.8 do not.
  Outcome o = run({1.0, 0.95, 0.85, 0.8, 0.76, 0.7}, {.patience = 2, .min_delta = 0.1});
  EXPECT_EQ(o.epochs, 5);
  EXPECT_EQ(o.out, "epoch 5: early stopping (val/loss did not improve for 2 epochs, best 0.8500 at epoch 3)\n");
  // Without it, every epoch improves.
  EXPECT_EQ(run({1.0, 0.95, 0.85, 0.8, 0.76, 0.7}, {.patience = 2}).epochs, 6);
  // Max mode: 0.8 -> 0.85 is not more than 0.05 better.
  Outcome m = run({0.8, 0.85, 0.84}, {.monitor = "acc", .patience = 2, .min_delta = 0.05, .mode = io::MetricMode::max});
  EXPECT_EQ(m.epochs, 3);
  EXPECT_EQ(m.es->best(), 0.8);
}

TEST(EarlyStopping, NaNNeverImproves) {
  // The NaN of epoch 1 counts, but the first epoch never stops; 1.0 restarts the count.
  Outcome o = run({NAN, 1.0, NAN, NAN, 0.5}, {.patience = 2});
  EXPECT_EQ(o.epochs, 4);
  EXPECT_EQ(o.out, "epoch 4: early stopping (val/loss did not improve for 2 epochs, best 1.0000 at epoch 2)\n");
  Outcome n = run({NAN, NAN, NAN}, {.patience = 1});
  EXPECT_EQ(n.epochs, 2);
  EXPECT_EQ(n.out, "epoch 2: early stopping (val/loss did not improve for 2 epochs, no finite value yet)\n");
}

TEST(EarlyStopping, BaselineMustBeBeatenToRestartThePatience) {
  // Keras: 0.9 and 0.8 improve on the best but not on the baseline 0.5, so
  // the count goes on (1, 2) and 0.85 makes it 3.
  Outcome o = run({0.9, 0.8, 0.85, 0.4, 0.45}, {.patience = 3, .baseline = 0.5});
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(
      o.out,
      "epoch 3: early stopping (val/loss did not beat the baseline 0.5000 for 3 epochs, best 0.8000 at epoch 2)\n");
  // 0.4 beats the baseline and restarts the count.
  Outcome b = run({0.4, 0.45, 0.5, 0.1}, {.patience = 2, .baseline = 0.5});
  EXPECT_EQ(b.epochs, 3);
  EXPECT_EQ(b.out, "epoch 3: early stopping (val/loss did not improve for 2 epochs, best 0.4000 at epoch 1)\n");
  Outcome n = run({NAN, 0.7, 0.75, 0.1}, {.patience = 1, .baseline = 0.5});
  EXPECT_EQ(n.epochs, 3);
  EXPECT_EQ(
      n.out,
      "epoch 3: early stopping (val/loss did not beat the baseline 0.5000 for 3 epochs, best 0.7000 at epoch 2)\n");
}

TEST(EarlyStopping, TrainingLossNeedsNoValidation) {
  // "loss" is always in logs() at an epoch end: a real run decides on it.
  TinyRun r;
  std::ostringstream out;
  auto es = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "loss", .patience = 100});
  train::Trainer trainer(3, {es}, testing::run_to(out));
  train::History h = trainer.fit(r.task, *r.loader);
  ASSERT_EQ(h.epochs.size(), 3u);
  double best = INFINITY;
  int64_t best_epoch = 0;
  for (size_t e = 0; e < 3; ++e)
    if (h.epochs[e].at("loss") < best) best = h.epochs[e].at("loss"), best_epoch = int64_t(e) + 1;
  EXPECT_EQ(es->best(), best);
  EXPECT_EQ(es->best_epoch(), best_epoch);
}

TEST(EarlyStopping, MissingMonitorNamesTheKeysPresent) {
  TinyRun r;
  std::ostringstream out;
  train::Trainer trainer(2, {std::make_shared<EarlyStopping>()}, testing::run_to(out));
  EXPECT_KILN_ERROR(
      trainer.fit(r.task, *r.loader),
      "[EarlyStopping] monitor 'val/loss' is not in trainer.logs() at the end of epoch 1 (present: "
      "accuracy, loss); register the callback that writes it (Validation for \"val/...\") before this one");
  EXPECT_EQ(trainer.state(), train::RunState::failed);
}

TEST(EarlyStopping, OptionErrors) {
  EXPECT_KILN_ERROR(EarlyStopping({.patience = -1}), "[EarlyStopping] patience is -1; it must be >= 0");
  EXPECT_KILN_ERROR(EarlyStopping({.min_delta = -0.1}),
                    "[EarlyStopping] min_delta is -0.1; it must be a finite number >= 0");
  EXPECT_KILN_ERROR(EarlyStopping({.min_delta = NAN}), "[EarlyStopping] min_delta is nan");
  EXPECT_KILN_ERROR(EarlyStopping({.monitor = ""}), "[EarlyStopping] monitor is empty");
  EXPECT_KILN_ERROR(EarlyStopping({.baseline = NAN}), "[EarlyStopping] baseline is NaN");
}

TEST(EarlyStopping, StateRoundTripsAndBadStatesAreRefused) {
  Outcome o = run({1.0, 0.9, 0.95}, {.patience = 5});
  io::State s = o.es->state();
  EXPECT_EQ(s, (io::State{{"best", "0.9"}, {"best_epoch", "2"}, {"wait", "1"}, {"stopped_epoch", "0"}}));
  EarlyStopping fresh({.patience = 5});
  EXPECT_EQ(fresh.best(), INFINITY);
  fresh.load_state(s);
  EXPECT_EQ(fresh.best(), 0.9);
  EXPECT_EQ(fresh.best_epoch(), 2);
  EXPECT_EQ(fresh.wait(), 1);
  // Infinity (no value yet) round-trips too.
  EarlyStopping other({.mode = io::MetricMode::max});
  fresh.load_state(other.state());
  EXPECT_EQ(fresh.best(), -INFINITY);

  io::State bad = s;
  bad["wait"] = "-1";
  EXPECT_KILN_ERROR(fresh.load_state(bad),
                    "[EarlyStopping.load_state] best_epoch 2, wait -1 and stopped_epoch 0 must be >= 0");
  bad = s;
  bad.erase("best");
  EXPECT_KILN_ERROR(fresh.load_state(bad), "[EarlyStopping.load_state] state has no 'best'");
  bad = s;
  bad["best"] = "nan";
  EXPECT_KILN_ERROR(fresh.load_state(bad), "[EarlyStopping.load_state] best is NaN");
  EXPECT_EQ(fresh.best(), -INFINITY);  // untouched by the refused loads
}

// Saves trainer.checkpoint() at the end of epoch `epoch` (1-based), after the
// callbacks registered before it.
struct SaveAtEpoch : train::Callback {
  SaveAtEpoch(int64_t epoch, std::string path) : epoch(epoch), path(std::move(path)) {}
  void on_epoch_end(train::Trainer& t) override {
    if (t.progress().epoch + 1 == epoch) t.checkpoint().save(path);
  }
  int64_t epoch;
  std::string path;
};

TEST(EarlyStopping, ResumeCarriesThePatienceCounter) {
  std::vector<double> values{1.0, 0.9, 0.95, 0.91, 0.92, 0.5};
  std::string path = testing::fresh_dir() + "/epoch3.safetensors";
  // Straight: stops at epoch 5 (best 0.9 at 2, then 3 epochs without).
  Outcome straight = run(values, {.patience = 3});
  ASSERT_EQ(straight.epochs, 5);

  // The same run, checkpointed at epoch 3 (wait 1) and cut there.
  {
    TinyRun r;
    std::ostringstream out;
    auto es = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.patience = 3});
    train::Trainer trainer(
        3, {std::make_shared<ScriptedMetric>("val/loss", values), es, std::make_shared<SaveAtEpoch>(3, path)},
        testing::run_to(out));
    trainer.fit(r.task, *r.loader);
    EXPECT_EQ(es->wait(), 1);
  }
  // New objects, resumed: two more epochs without improvement make three.
  TinyRun r(/*init_seed=*/99);
  std::ostringstream out;
  auto es = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.patience = 3});
  train::Trainer trainer(6, {std::make_shared<ScriptedMetric>("val/loss", values), es}, testing::run_to(out));
  train::History h = trainer.fit(r.task, *r.loader, path);
  EXPECT_EQ(h.epochs.size(), 2u);  // epochs 4 and 5
  EXPECT_EQ(out.str(), straight.out);
  EXPECT_EQ(es->state(), straight.es->state());

  // A fresh fit with the same callback starts over (step 0: state reset).
  TinyRun again;
  train::Trainer fresh(2, {std::make_shared<ScriptedMetric>("val/loss", std::vector<double>{3, 2}), es},
                       testing::run_to(out));
  fresh.fit(again.task, *again.loader);
  EXPECT_EQ(es->best(), 2.0);
  EXPECT_EQ(es->best_epoch(), 2);
  EXPECT_EQ(es->stopped_epoch(), 0);
}

}  // namespace
}  // namespace kiln
