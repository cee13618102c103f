// Validation: the sample-weighted mean loss and accuracy of a whole
// validation epoch in trainer.logs() and History, the printed line, eval mode
// and no autograd during it, every N steps, step-only runs, its time excluded
// from the training clocks, evaluate_now, state, and argument errors.
#include "kiln/train/callbacks/validation.h"

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <sstream>
#include <thread>

#include "kiln/train/metrics.h"
#include "kiln/train/steps.h"
#include "kiln/train/trainer.h"
#include "tests/support/train_testing.h"
#include "tests/train/tiny_run.h"

namespace kiln {
namespace {

using testing::lines_starting;
using testing::TinyRun;
using train::Validation;
using train::ValidationOptions;

// The reference: classification_eval over the validation set in order, means weighted by batch size.
std::pair<double, double> reference_eval(TinyRun& r) {
  data::DataLoader fresh(r.val_set, {.batch_size = 4, .shuffle = false, .prefetch = 0});
  NoGradGuard no_grad;
  r.model->eval();
  train::Mean loss;
  train::Accuracy acc;
  for (const data::Batch& b : fresh) {
    train::StepResult s = train::classification_eval(r.task.forward(), b);
    loss.update(s.loss, double(s.count));
    acc.update(s.correct, s.count);
  }
  r.model->train();
  return {loss.result(), acc.result()};
}

TEST(Validation, WritesLossAndAccuracyOfTheWholeEpochAndPrintsOneLine) {
  TinyRun r;
  std::ostringstream out;
  auto val = std::make_shared<Validation>(r.val_loader);
  train::Trainer trainer(2, {val}, testing::run_to(out));
  train::History h = trainer.fit(r.task, *r.loader);

  ASSERT_EQ(h.epochs.size(), 2u);
  auto [loss, accuracy] = reference_eval(r);
  EXPECT_EQ(h.epochs[1].at("val/loss"), loss);
  EXPECT_EQ(h.epochs[1].at("val/accuracy"), accuracy);
  EXPECT_NE(h.epochs[0].at("val/loss"), h.epochs[1].at("val/loss"));  // evaluated after each epoch
  EXPECT_EQ(val->result().loss, loss);
  EXPECT_EQ(val->metric(), loss);
  EXPECT_EQ(val->result().count, 6);
  EXPECT_EQ(val->result().global_step, 10);

  std::vector<std::string> lines = lines_starting(out.str(), "validation");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].rfind(fmt::format("validation: loss {:.4f} · accuracy {:.4f} · ", loss, accuracy), 0), 0u)
      << lines[1];
  std::regex shape(R"(validation: loss \d+\.\d{4} · accuracy [01]\.\d{4} · \d+\.\d\ds)");
  EXPECT_TRUE(std::regex_match(lines[0], shape)) << lines[0];
  EXPECT_EQ(out.str(), lines[0] + "\n" + lines[1] + "\n");  // nothing else printed
}

// A regression task: no correct counts, so no accuracy.
struct Regression : train::Task {
  using Task::Task;
  train::StepResult training_step(const data::Batch& b) override {
    return train::regression_step(forward(), optimizer(), {b.input, b.input.narrow(1, 0, 3)});
  }
  train::StepResult validation_step(const data::Batch& b) override {
    return train::regression_eval(forward(), {b.input, b.input.narrow(1, 0, 3)});
  }
};

TEST(Validation, NoAccuracyWhenStepsDoNotClassify) {
  TinyRun r;
  Regression task(r.model, r.optimizer);
  std::ostringstream out;
  auto val = std::make_shared<Validation>(r.val_loader, ValidationOptions{.prefix = "test/"});
  train::Trainer trainer(1, {val}, testing::run_to(out));
  train::History h = trainer.fit(task, *r.loader);
  EXPECT_EQ(h.epochs[0].count("test/loss"), 1u);
  EXPECT_EQ(h.epochs[0].count("test/accuracy"), 0u);
  EXPECT_TRUE(std::isnan(val->result().accuracy));
  std::regex shape(R"(validation test: loss \d+\.\d{4} · \d+\.\d\ds\n)");
  EXPECT_TRUE(std::regex_match(out.str(), shape)) << out.str();
}

// Records the model's mode and grad mode inside validation_step.
struct Probe : train::Task {
  using Task::Task;
  train::StepResult validation_step(const data::Batch& b) override {
    ++calls;
    if (model().is_training()) ++training;
    if (GradMode::is_enabled()) ++grad;
    if (sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    return Task::validation_step(b);
  }
  int calls = 0, training = 0, grad = 0, sleep_ms = 0;
};

// Checks at each epoch end (after Validation) that training mode is back on.
struct ModeCheck : train::Callback {
  void on_epoch_end(train::Trainer& t) override { modes.push_back(t.task().model().is_training()); }
  std::vector<bool> modes;
};

TEST(Validation, EvalModeWithoutAutogradThenTrainingModeBack) {
  TinyRun r;
  Probe task(r.model, r.optimizer);
  auto check = std::make_shared<ModeCheck>();
  std::ostringstream out;
  train::Trainer trainer(2, {std::make_shared<Validation>(r.val_loader), check}, testing::run_to(out));
  trainer.fit(task, *r.loader);
  EXPECT_EQ(task.calls, 4);  // 2 batches (4 + 2 samples) per evaluation
  EXPECT_EQ(task.training, 0);
  EXPECT_EQ(task.grad, 0);
  EXPECT_EQ(check->modes, (std::vector<bool>{true, true}));
  EXPECT_TRUE(GradMode::is_enabled());
}

// Records the global step of each evaluation.
struct Steps : train::Callback {
  explicit Steps(std::shared_ptr<Validation> v) : val(std::move(v)) {}
  void on_step_end(train::Trainer& t, const train::StepResult&) override { note(); }
  void on_epoch_end(train::Trainer& t) override { note(); }
  void on_train_end(train::Trainer& t) override { note(); }
  void note() {
    int64_t s = val->result().global_step;
    if (s >= 0 && (seen.empty() || seen.back() != s)) seen.push_back(s);
  }
  std::shared_ptr<Validation> val;
  std::vector<int64_t> seen;
};

TEST(Validation, EveryNStepsAndAtEachEpochEndOnce) {
  TinyRun r;
  std::ostringstream out;
  auto val = std::make_shared<Validation>(r.val_loader, ValidationOptions{.every_n_steps = 2});
  auto steps = std::make_shared<Steps>(val);
  train::Trainer trainer(2, {val, steps}, testing::run_to(out));
  trainer.fit(r.task, *r.loader);
  // 5 steps an epoch: 2, 4, the end of epoch 1 (5), 6, 8, the end of epoch 2 (10, once).
  EXPECT_EQ(steps->seen, (std::vector<int64_t>{2, 4, 5, 6, 8, 10}));
  EXPECT_EQ(lines_starting(out.str(), "validation: ").size(), 6u);
}

TEST(Validation, StepOnlyRunEvaluatesOnceAtTrainEnd) {
  TinyRun r;
  std::ostringstream out;
  auto val = std::make_shared<Validation>(r.val_loader);
  train::Trainer trainer(5, {val}, testing::run_to(out, 3));
  train::History h = trainer.fit(r.task, *r.loader);
  EXPECT_EQ(h.epochs.size(), 0u);
  EXPECT_EQ(val->result().global_step, 3);
  EXPECT_EQ(trainer.logs().at("val/loss"), val->metric());
  EXPECT_EQ(lines_starting(out.str(), "validation: ").size(), 1u);

  // max_steps after an epoch end: the last epoch's evaluation and one at the end.
  TinyRun r2;
  std::ostringstream out2;
  auto val2 = std::make_shared<Validation>(r2.val_loader);
  auto steps = std::make_shared<Steps>(val2);
  train::Trainer trainer2(5, {val2, steps}, testing::run_to(out2, 7));
  trainer2.fit(r2.task, *r2.loader);
  EXPECT_EQ(steps->seen, (std::vector<int64_t>{5, 7}));
}

// Measures wall time around each epoch, with Validation inside it.
struct Clock : train::Callback {
  using C = std::chrono::steady_clock;
  void on_epoch_begin(train::Trainer&) override { start = C::now(); }
  void on_epoch_end(train::Trainer& t) override {
    wall = std::chrono::duration<double>(C::now() - start).count();
    epoch_elapsed = t.epoch_elapsed();
  }
  C::time_point start;
  double wall = 0, epoch_elapsed = 0;
};

TEST(Validation, ItsTimeIsExcludedFromTheTrainingClock) {
  TinyRun r;
  Probe task(r.model, r.optimizer);
  task.sleep_ms = 40;  // 2 batches: 80 ms of validation
  auto val = std::make_shared<Validation>(r.val_loader);
  auto clock = std::make_shared<Clock>();
  std::ostringstream out;
  train::Trainer trainer(1, {clock, val, clock}, testing::run_to(out));  // clock begins before, ends after
  trainer.fit(task, *r.loader);
  EXPECT_GE(val->result().seconds, 0.08);
  EXPECT_LE(clock->epoch_elapsed, clock->wall - val->result().seconds + 1e-3);
  EXPECT_GE(clock->epoch_elapsed, 0.0);
  std::regex shape(R"(validation: loss \d+\.\d{4} · accuracy [01]\.\d{4} · 0\.(0[89]|[1-9]\d)s\n)");
  EXPECT_TRUE(std::regex_match(out.str(), shape)) << out.str();
}

// Calls evaluate_now at the 3rd step, as live control would.
struct EvaluateAt : train::Callback {
  EvaluateAt(std::shared_ptr<Validation> v, int64_t step) : val(std::move(v)), step(step) {}
  void on_step_end(train::Trainer& t, const train::StepResult&) override {
    if (t.progress().global_step == step) applied = val->evaluate_now(t);
  }
  std::shared_ptr<Validation> val;
  int64_t step;
  bool applied = false;
};

TEST(Validation, EvaluateNowRunsAWholeEpochAnyTime) {
  TinyRun r;
  std::ostringstream out;
  auto val = std::make_shared<Validation>(r.val_loader);
  auto at = std::make_shared<EvaluateAt>(val, 3);
  auto steps = std::make_shared<Steps>(val);
  train::Trainer trainer(1, {val, at, steps}, testing::run_to(out, 0, true));
  trainer.fit(r.task, *r.loader);
  EXPECT_TRUE(at->applied);
  EXPECT_EQ(steps->seen, (std::vector<int64_t>{3, 5}));
  // On a terminal the progress bar's open line is erased first (both times: mid-epoch and at its end).
  std::vector<std::string> lines = lines_starting(out.str(), "\r\x1b[Kvalidation: loss ");
  EXPECT_EQ(lines.size(), 2u) << out.str();

  // A validation loader left mid-epoch (an interrupted evaluation) still gives a whole epoch.
  TinyRun r2;
  r2.val_loader->next();
  auto val2 = std::make_shared<Validation>(r2.val_loader);
  train::Trainer trainer2(1, {val2}, testing::run_to(out));
  trainer2.fit(r2.task, *r2.loader);
  EXPECT_EQ(val2->result().count, 6);
}

TEST(Validation, StateRoundTripsAndBadStatesAreRefused) {
  TinyRun r;
  std::ostringstream out;
  auto val = std::make_shared<Validation>(r.val_loader);
  train::Trainer trainer(1, {val}, testing::run_to(out));
  trainer.fit(r.task, *r.loader);
  io::State s = val->state();
  EXPECT_EQ(s.at("global_step"), "5");
  EXPECT_EQ(s.at("count"), "6");
  EXPECT_EQ(s.at("loss"), fmt::format("{}", val->metric()));

  Validation fresh(r.val_loader);
  EXPECT_EQ(fresh.result().global_step, -1);
  EXPECT_TRUE(std::isnan(fresh.metric()));
  fresh.load_state(s);
  EXPECT_EQ(fresh.metric(), val->metric());
  EXPECT_EQ(fresh.result().accuracy, val->result().accuracy);
  EXPECT_EQ(fresh.result().global_step, 5);
  // NaN (no evaluation yet) round-trips.
  Validation empty(r.val_loader);
  fresh.load_state(empty.state());
  EXPECT_TRUE(std::isnan(fresh.metric()));

  io::State bad = s;
  bad["count"] = "-2";
  EXPECT_KILN_ERROR(fresh.load_state(bad), "[Validation.load_state] count is -2; it must be >= 0");
  bad = s;
  bad.erase("global_step");
  EXPECT_KILN_ERROR(fresh.load_state(bad), "[Validation.load_state] state has no 'global_step'");
  EXPECT_EQ(fresh.result().global_step, -1);  // untouched
}

// Returns an impossible count.
struct BadStep : train::Task {
  using Task::Task;
  train::StepResult validation_step(const data::Batch& b) override { return {0.5, 2, 3}; }
};

TEST(Validation, Errors) {
  TinyRun r;
  EXPECT_KILN_ERROR(Validation(nullptr), "[Validation] loader is null");
  EXPECT_KILN_ERROR(Validation(r.val_loader, {.every_n_steps = -1}),
                    "[Validation] every_n_steps is -1; it must be >= 0 (0: epoch ends only)");
  EXPECT_KILN_ERROR(Validation(r.val_loader, {.prefix = ""}), "[Validation] prefix is empty");

  BadStep task(r.model, r.optimizer);
  std::ostringstream out;
  train::Trainer trainer(1, {std::make_shared<Validation>(r.val_loader)}, testing::run_to(out));
  EXPECT_KILN_ERROR(
      trainer.fit(task, *r.loader),
      "[Validation] validation_step returned count 2 and correct 3; need count >= 0 and correct <= count");
  EXPECT_TRUE(r.model->is_training());  // the mode was put back
  EXPECT_TRUE(GradMode::is_enabled());
}

}  // namespace
}  // namespace kiln
