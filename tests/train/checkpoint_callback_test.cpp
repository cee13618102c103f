// CheckpointCallback and ModelCheckpoint through a real Trainer: the printed
// lines, rotation and the best checkpoint, every N steps, save_now,
// restore-best at train end, exact resume at an epoch end and mid-epoch with
// fresh objects (the key test), a used folder refused, errors and state.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "kiln/train/callbacks/checkpoint.h"
#include "kiln/train/callbacks/csv_logger.h"
#include "kiln/train/callbacks/early_stopping.h"
#include "kiln/train/callbacks/progress_bar.h"
#include "kiln/train/callbacks/summary.h"
#include "kiln/train/callbacks/validation.h"
#include "kiln/train/control.h"
#include "kiln/train/trainer.h"
#include "tests/support/train_testing.h"
#include "tests/train/tiny_run.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::lines_starting;
using testing::ScriptedMetric;
using testing::TinyRun;
using train::CheckpointCallback;
using train::CheckpointCallbackOptions;
using train::ModelCheckpoint;
using Weights = std::vector<std::pair<std::string, Tensor>>;

void expect_equal(const Weights& a, const Weights& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(testing::equal(a[i].second, b[i].second)) << a[i].first;
  }
}

// The model's weights and SGD momentum buffers at the end of epoch `epoch` (1-based).
struct CaptureAt : train::Callback {
  CaptureAt(const TinyRun& run, int64_t epoch) : run(run), epoch(epoch) {}
  void on_epoch_end(train::Trainer& t) override {
    if (t.progress().epoch + 1 != epoch) return;
    weights = run.weights();
    momentum.clear();
    for (const auto& [name, p] : run.model->named_parameters()) momentum.push_back(p.state("momentum_buffer").clone());
  }
  const TinyRun& run;
  int64_t epoch;
  Weights weights;
  std::vector<Tensor> momentum;
};

std::vector<int64_t> steps_of(const io::CheckpointManager& m) {
  std::vector<int64_t> steps;
  for (const auto& e : m.entries()) steps.push_back(e.step);
  return steps;
}

TEST(CheckpointCallback, PrintsKerasLinesRotatesAndKeepsTheBest) {
  std::string dir = testing::fresh_dir();
  TinyRun r;
  std::ostringstream out;
  auto ckpt =
      std::make_shared<CheckpointCallback>(dir, CheckpointCallbackOptions{.keep_last = 1, .restore_best = false});
  train::Trainer trainer(
      5, {std::make_shared<ScriptedMetric>("val/loss", std::vector<double>{0.4056, 0.3486, 0.36, 0.3, 0.31}), ckpt},
      testing::run_to(out));
  trainer.fit(r.task, *r.loader);
  EXPECT_EQ(out.str(),
            "epoch 1: val_loss improved from inf to 0.4056 — saving model\n"
            "epoch 2: val_loss improved from 0.4056 to 0.3486 — saving model\n"
            "epoch 3: val_loss did not improve from 0.3486\n"
            "epoch 4: val_loss improved from 0.3486 to 0.3000 — saving model\n"
            "epoch 5: val_loss did not improve from 0.3000\n");
  // 5 steps an epoch; keep_last 1 plus the best.
  EXPECT_EQ(steps_of(ckpt->manager()), (std::vector<int64_t>{20, 25}));
  EXPECT_EQ(ckpt->latest(), dir + "/step-25.safetensors");
  EXPECT_EQ(ckpt->best(), dir + "/step-20.safetensors");
  EXPECT_EQ(ckpt->best_epoch(), 4);
  EXPECT_EQ(ckpt->manager().best_metric(), 0.3);
  // The epoch checkpoints are whole runs: progress at the epoch's end, the callback's own state.
  io::CheckpointInfo info = io::read_checkpoint_info(ckpt->latest());
  EXPECT_EQ(info.progress, (io::Progress{.epoch = 4, .global_step = 25, .step_in_epoch = 5}));
  auto states = nlohmann::json::parse(info.metadata.at("kiln.states"));
  EXPECT_EQ(states.at("checkpoint"), nlohmann::json({{"best_epoch", "4"},
                                                     {"best_step", "20"},
                                                     {"last_epoch", "5"},
                                                     {"ranked_by", "val_loss"}}));
  EXPECT_TRUE(states.contains("data"));
}

TEST(CheckpointCallback, MaxModePrintsMinusInfinityFirst) {
  std::string dir = testing::fresh_dir();
  TinyRun r;
  std::ostringstream out;
  auto ckpt = std::make_shared<CheckpointCallback>(
      dir, CheckpointCallbackOptions{.monitor = "val/accuracy", .mode = io::MetricMode::max, .min_delta = 0.05});
  train::Trainer trainer(3,
                         {std::make_shared<ScriptedMetric>("val/accuracy", std::vector<double>{0.5, 0.54, 0.6}), ckpt},
                         testing::run_to(out));
  trainer.fit(r.task, *r.loader);
  // 0.54 is not more than 0.05 better than 0.5; the best is the last epoch, so nothing is restored.
  EXPECT_EQ(out.str(),
            "epoch 1: val_accuracy improved from -inf to 0.5000 — saving model\n"
            "epoch 2: val_accuracy did not improve from 0.5000\n"
            "epoch 3: val_accuracy improved from 0.5000 to 0.6000 — saving model\n");
}

TEST(CheckpointCallback, FallsBackToTheEpochTrainingLoss) {
  std::string dir = testing::fresh_dir();
  TinyRun r;
  std::ostringstream out;
  train::Trainer trainer(1, {std::make_shared<CheckpointCallback>(dir)}, testing::run_to(out));
  train::History h = trainer.fit(r.task, *r.loader);
  EXPECT_EQ(out.str(),
            fmt::format("epoch 1: loss improved from inf to {:.4f} — saving model\n", h.epochs[0].at("loss")));

  // The restore line names what ranked the checkpoints.
  std::string dir2 = testing::fresh_dir("2");
  TinyRun r2;
  std::ostringstream out2;
  train::Trainer trainer2(3,
                          {std::make_shared<ScriptedMetric>("loss", std::vector<double>{0.5, 0.3, 0.4}),
                           std::make_shared<CheckpointCallback>(dir2)},
                          testing::run_to(out2));
  trainer2.fit(r2.task, *r2.loader);
  EXPECT_EQ(out2.str(),
            "epoch 1: loss improved from inf to 0.5000 — saving model\n"
            "epoch 2: loss improved from 0.5000 to 0.3000 — saving model\n"
            "epoch 3: loss did not improve from 0.3000\n"
            "restored best weights from epoch 2 (loss 0.3000)\n");
}

TEST(CheckpointCallback, NamesTheLossFunctionAsSpec002) {
  // Spec 002's lines: "epoch 3: cross_entropy improved from 0.4056 to 0.3486 — saving model".
  std::string dir = testing::fresh_dir();
  TinyRun r;
  std::ostringstream out;
  auto ckpt = std::make_shared<CheckpointCallback>(dir, CheckpointCallbackOptions{.loss_name = "cross_entropy"});
  train::Trainer trainer(4,
                         {std::make_shared<ScriptedMetric>("loss", std::vector<double>{0.4056, 0.3486, 0.36, 0.37}),
                          ckpt},
                         testing::run_to(out));
  trainer.fit(r.task, *r.loader);
  EXPECT_EQ(out.str(),
            "epoch 1: cross_entropy improved from inf to 0.4056 — saving model\n"
            "epoch 2: cross_entropy improved from 0.4056 to 0.3486 — saving model\n"
            "epoch 3: cross_entropy did not improve from 0.3486\n"
            "epoch 4: cross_entropy did not improve from 0.3486\n"
            "restored best weights from epoch 2 (cross_entropy 0.3486)\n");
  // The loss-name record rides in the checkpoints: a fresh callback resuming from one names it
  // before it has seen an epoch end of its own.
  auto states = nlohmann::json::parse(io::read_checkpoint_info(ckpt->latest()).metadata.at("kiln.states"));
  EXPECT_EQ(states.at("checkpoint").at("ranked_by"), "cross_entropy");
  CheckpointCallback resumed(dir);
  EXPECT_EQ(resumed.ranked_by(), "val_loss");
  resumed.load_state(states.at("checkpoint").get<io::State>());
  EXPECT_EQ(resumed.ranked_by(), "cross_entropy");
  // A monitor present in logs() is printed under its own name whatever loss_name says.
  std::string dir2 = testing::fresh_dir("2");
  TinyRun r2;
  std::ostringstream out2;
  train::Trainer(1,
                 {std::make_shared<ScriptedMetric>("val/loss", std::vector<double>{0.5}),
                  std::make_shared<CheckpointCallback>(dir2, CheckpointCallbackOptions{.loss_name = "cross_entropy"})},
                 testing::run_to(out2))
      .fit(r2.task, *r2.loader);
  EXPECT_EQ(out2.str(), "epoch 1: val_loss improved from inf to 0.5000 — saving model\n");
}

TEST(CheckpointCallback, RestoresTheBestWeightsAndOptimizerAtTrainEnd) {
  std::vector<double> values{0.5, 0.3, 0.4, 0.45};
  for (bool restore : {true, false}) {
    SCOPED_TRACE(restore);
    std::string dir = testing::fresh_dir(restore ? "restore" : "keep");
    TinyRun r;
    auto at2 = std::make_shared<CaptureAt>(r, 2);
    auto at4 = std::make_shared<CaptureAt>(r, 4);
    auto ckpt = std::make_shared<CheckpointCallback>(dir, CheckpointCallbackOptions{.restore_best = restore});
    std::ostringstream out;
    train::Trainer trainer(4, {std::make_shared<ScriptedMetric>("val/loss", values), ckpt, at2, at4},
                           testing::run_to(out));
    trainer.fit(r.task, *r.loader);
    expect_equal(r.weights(), restore ? at2->weights : at4->weights);
    size_t i = 0;
    for (const auto& [name, p] : r.model->named_parameters())
      EXPECT_TRUE(testing::equal(p.state("momentum_buffer"), (restore ? at2 : at4)->momentum[i++])) << name;
    std::vector<std::string> lines = lines_starting(out.str(), "restored");
    EXPECT_EQ(lines, restore ? std::vector<std::string>{"restored best weights from epoch 2 (val_loss 0.3000)"}
                             : std::vector<std::string>{});
    EXPECT_EQ(ckpt->best_epoch(), 2);
  }
}

// Saves with the callback's save_now at global step `step`, as the live "checkpoint" command does.
struct SaveNowAt : train::Callback {
  SaveNowAt(std::shared_ptr<CheckpointCallback> c, int64_t step) : ckpt(std::move(c)), step(step) {}
  void on_step_end(train::Trainer& t, const train::StepResult&) override {
    if (t.progress().global_step == step) {
      applied = ckpt->save_now(t);
      latest = ckpt->latest();
    }
  }
  std::shared_ptr<CheckpointCallback> ckpt;
  int64_t step;
  bool applied = false;
  std::string latest;
};

TEST(CheckpointCallback, EveryNStepsAndSaveNowAreUnranked) {
  std::string dir = testing::fresh_dir();
  TinyRun r;
  std::ostringstream out;
  auto ckpt = std::make_shared<CheckpointCallback>(dir, CheckpointCallbackOptions{.keep_last = 10, .every_n_steps = 2});
  auto now = std::make_shared<SaveNowAt>(ckpt, 3);
  train::Trainer trainer(2, {std::make_shared<ScriptedMetric>("val/loss", std::vector<double>{0.5, 0.4}), ckpt, now},
                         testing::run_to(out));
  trainer.fit(r.task, *r.loader);
  EXPECT_TRUE(now->applied);
  EXPECT_EQ(now->latest, dir + "/step-3.safetensors");
  // 5 steps an epoch: 2, 3 (save_now), 4, the end of epoch 1 (5), 6, 8, the end of epoch 2 (10, once).
  std::vector<io::CheckpointManager::Entry> entries = ckpt->manager().entries();
  ASSERT_EQ(entries.size(), 7u);
  std::vector<int64_t> steps{2, 3, 4, 5, 6, 8, 10};
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i].step, steps[i]);
    bool epoch_end = steps[i] % 5 == 0;
    EXPECT_EQ(entries[i].metric.has_value(), epoch_end) << steps[i];
  }
  EXPECT_EQ(entries[3].metric, 0.5);
  EXPECT_EQ(entries[6].metric, 0.4);
  EXPECT_EQ(lines_starting(out.str(), "saved checkpoint "),
            std::vector<std::string>{"saved checkpoint " + dir + "/step-3.safetensors"});
  // The mid-epoch checkpoints hold the position inside the epoch.
  EXPECT_EQ(io::read_checkpoint_info(dir + "/step-8.safetensors").progress,
            (io::Progress{.epoch = 1, .global_step = 8, .step_in_epoch = 3}));
}

TEST(CheckpointCallback, LiveControlCheckpointAndEvaluateCommands) {
  std::string dir = testing::fresh_dir();
  TinyRun r;
  std::ostringstream out;
  auto val = std::make_shared<train::Validation>(r.val_loader);
  auto ckpt = std::make_shared<CheckpointCallback>(dir);
  train::Trainer trainer(1, {val, ckpt}, testing::run_to(out));
  // Sent before fit: applied at the first safe point, after step 1.
  uint64_t save = trainer.control()->submit(train::Command::checkpoint());
  uint64_t evaluate = trainer.control()->submit(train::Command::evaluate());
  trainer.fit(r.task, *r.loader);
  std::optional<train::CommandResult> saved = trainer.control()->wait(save, std::chrono::milliseconds(0));
  std::optional<train::CommandResult> evaluated = trainer.control()->wait(evaluate, std::chrono::milliseconds(0));
  ASSERT_TRUE(saved && evaluated);
  EXPECT_TRUE(saved->applied);
  EXPECT_EQ(saved->message, "saved");
  EXPECT_EQ(saved->global_step, 1);
  EXPECT_TRUE(evaluated->applied);
  std::regex evaluated_message(R"(evaluated \(val/accuracy: 0\.\d+, val/loss: \d\.\d+\))");
  EXPECT_TRUE(std::regex_match(evaluated->message, evaluated_message)) << evaluated->message;
  EXPECT_EQ(steps_of(ckpt->manager()), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(lines_starting(out.str(), "saved checkpoint "),
            std::vector<std::string>{"saved checkpoint " + dir + "/step-1.safetensors"});
  EXPECT_EQ(lines_starting(out.str(), "validation: ").size(), 2u);  // the command's, the epoch's
}

// ---- resume ----

struct Leg {
  std::string out;
  train::History history;
  Weights weights;
  std::shared_ptr<train::EarlyStopping> es;
  std::shared_ptr<CheckpointCallback> ckpt;
};

// One process's worth of training: every object new, resuming from `resume`,
// or by default from the folder's latest checkpoint when it has one.
Leg run_leg(const std::string& dir, int64_t max_epochs, uint64_t init_seed, CheckpointCallbackOptions options,
            int64_t max_steps = 0, std::optional<std::string> resume = std::nullopt) {
  TinyRun r(init_seed);
  std::ostringstream out;
  auto val = std::make_shared<train::Validation>(r.val_loader);
  auto es = std::make_shared<train::EarlyStopping>(train::EarlyStoppingOptions{.patience = 10});
  auto ckpt = std::make_shared<CheckpointCallback>(dir, options);
  train::Trainer trainer(max_epochs, {val, es, ckpt}, testing::run_to(out, max_steps));
  Leg leg;
  leg.history = trainer.fit(r.task, *r.loader, resume.value_or(ckpt->latest()));
  leg.out = out.str();
  leg.weights = r.weights();
  leg.es = es;
  leg.ckpt = ckpt;
  return leg;
}

// The printed lines of epochs >= `from` (improvement lines, early stopping, restore),
// and the validation lines without their times.
std::vector<std::string> lines_from_epoch(const std::string& text, int64_t from) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::regex epoch_line(R"(epoch (\d+): .*)");
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_match(line, m, epoch_line) && std::stoll(m[1]) >= from)
      out.push_back(line);
    else if (line.rfind("restored", 0) == 0)
      out.push_back(line);
  }
  return out;
}

std::vector<std::string> validation_values(const std::string& text) {
  std::vector<std::string> out;
  for (const std::string& line : lines_starting(text, "validation: ")) out.push_back(line.substr(0, line.rfind(" · ")));
  return out;
}

TEST(CheckpointCallback, ResumeAtAnEpochEndIsExact) {
  CheckpointCallbackOptions options{.keep_last = 2};
  Leg straight = run_leg(testing::fresh_dir("straight"), 4, 0, options);
  ASSERT_EQ(straight.history.epochs.size(), 4u);

  std::string dir = testing::fresh_dir("resumed");
  Leg first = run_leg(dir, 2, 0, options);
  ASSERT_EQ(first.history.epochs.size(), 2u);
  EXPECT_EQ(first.ckpt->latest(), dir + "/step-10.safetensors");
  // A new process: other initial weights, new loaders and callbacks, same folder.
  Leg second = run_leg(dir, 4, 99, options);

  expect_equal(second.weights, straight.weights);  // bit-identical
  ASSERT_EQ(second.history.epochs.size(), 2u);
  EXPECT_EQ(second.history.epochs[0], straight.history.epochs[2]);  // loss, accuracy, val/loss, val/accuracy
  EXPECT_EQ(second.history.epochs[1], straight.history.epochs[3]);
  std::vector<std::string> expected = lines_from_epoch(straight.out, 3);
  ASSERT_EQ(lines_starting(straight.out, "epoch ").size(), 4u);
  EXPECT_EQ(lines_from_epoch(second.out, 3), expected);
  EXPECT_EQ(lines_from_epoch(second.out, 1).size(), expected.size());  // nothing of epochs 1-2 again
  std::vector<std::string> val = validation_values(straight.out);
  EXPECT_EQ(validation_values(second.out), std::vector<std::string>(val.begin() + 2, val.end()));
  // Early stopping's state came through the checkpoint.
  EXPECT_EQ(second.es->state(), straight.es->state());
  EXPECT_EQ(second.ckpt->best_epoch(), straight.ckpt->best_epoch());
  EXPECT_EQ(steps_of(second.ckpt->manager()), steps_of(straight.ckpt->manager()));
}

TEST(CheckpointCallback, ResumeMidEpochIsExact) {
  CheckpointCallbackOptions options{.every_n_steps = 2};
  Leg straight = run_leg(testing::fresh_dir("straight"), 4, 0, options);

  // A run ended at step 7 by max_steps saves there at train end; one killed
  // after step 7 has step 6 as its latest (every 2 steps). Both continue exactly.
  for (bool killed : {false, true}) {
    SCOPED_TRACE(killed);
    std::string dir = testing::fresh_dir(killed ? "killed" : "ended");
    Leg first = run_leg(dir, 4, 0, options, /*max_steps=*/7);
    EXPECT_EQ(first.ckpt->latest(), dir + "/step-7.safetensors");
    EXPECT_EQ(lines_starting(first.out, "saved checkpoint "),
              std::vector<std::string>{"saved checkpoint " + dir + "/step-7.safetensors"});
    std::string from = dir + (killed ? "/step-6.safetensors" : "/step-7.safetensors");
    Leg second = run_leg(dir, 4, 99, options, 0, from);

    expect_equal(second.weights, straight.weights);
    ASSERT_EQ(second.history.epochs.size(), 3u);  // the rest of epoch 2, then 3 and 4
    for (size_t e = 0; e < 3; ++e) EXPECT_EQ(second.history.epochs[e], straight.history.epochs[e + 1]) << e;
    EXPECT_EQ(lines_from_epoch(second.out, 1), lines_from_epoch(straight.out, 2));
    EXPECT_EQ(second.es->state(), straight.es->state());
    EXPECT_EQ(steps_of(second.ckpt->manager()), steps_of(straight.ckpt->manager()));
    EXPECT_EQ(lines_starting(second.out, "saved checkpoint "), std::vector<std::string>{});  // ended at an epoch end
  }
}

// The documented order with the output callbacks: Validation, CsvLogger,
// ProgressBar, Summary, EarlyStopping, CheckpointCallback.
struct FullRun {
  std::string out, csv;
  Weights weights;
};

FullRun run_full(const std::string& dir, int64_t max_epochs, uint64_t init_seed) {
  TinyRun r(init_seed);
  std::ostringstream out;
  auto ckpt = std::make_shared<CheckpointCallback>(dir + "/ckpt", CheckpointCallbackOptions{.keep_last = 2});
  train::Trainer trainer(max_epochs,
                         {std::make_shared<train::Validation>(r.val_loader),
                          std::make_shared<train::CsvLogger>(
                              dir + "/metrics.csv", train::CsvLoggerOptions{.log_keys = {"val/loss", "val/accuracy"}}),
                          std::make_shared<train::ProgressBar>(), std::make_shared<train::Summary>(),
                          std::make_shared<train::EarlyStopping>(train::EarlyStoppingOptions{.patience = 2}), ckpt},
                         testing::run_to(out));
  trainer.fit(r.task, *r.loader, ckpt->latest());
  return {out.str(), testing::read_bytes(dir + "/metrics.csv"), r.weights()};
}

// The CSV without its time columns (elapsed_s, step_ms, samples_per_s).
std::vector<std::string> csv_values(const std::string& csv) {
  std::vector<std::string> rows;
  std::istringstream in(csv);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::istringstream cols(line);
    for (std::string cell; std::getline(cols, cell, ',');) cells.push_back(cell);
    if (line.back() == ',') cells.push_back("");
    std::string kept;
    for (size_t i = 0; i < cells.size(); ++i)
      if (i < 6 || i > 8) kept += cells[i] + ",";
    rows.push_back(kept);
  }
  return rows;
}

TEST(CheckpointCallback, ResumeWithTheOutputCallbacks) {
  std::string straight_dir = testing::fresh_dir("straight"), dir = testing::fresh_dir("resumed");
  FullRun straight = run_full(straight_dir, 4, 0);
  run_full(dir, 2, 0);
  FullRun resumed = run_full(dir, 4, 99);
  if (std::getenv("KILN_PRINT_SAMPLE")) std::cout << straight.out << "---- resumed:\n" << resumed.out;

  expect_equal(resumed.weights, straight.weights);
  // The CSV continued where the checkpoint left it: the same rows but for their times.
  std::vector<std::string> rows = csv_values(straight.csv);
  ASSERT_EQ(rows.size(), 1u + 15u);  // header + 3 epochs of 5 steps: early stopping after epoch 3
  EXPECT_EQ(csv_values(resumed.csv), rows);
  // The straight run stops at epoch 3 (best at 1, patience 2); the resumed one
  // (from the end of epoch 2) prints the same lines for epoch 3.
  EXPECT_EQ(lines_from_epoch(resumed.out, 3), lines_from_epoch(straight.out, 3));
  EXPECT_EQ(lines_starting(straight.out, "epoch 3: early stopping ").size(), 1u);
  EXPECT_EQ(lines_starting(resumed.out, "restored best weights from epoch 1 ").size(), 1u);
}

TEST(CheckpointCallback, AFreshRunIntoAUsedFolderIsRefused) {
  std::string dir = testing::fresh_dir();
  run_leg(dir, 1, 0, {});
  TinyRun r;
  std::ostringstream out;
  train::Trainer trainer(1, {std::make_shared<CheckpointCallback>(dir)}, testing::run_to(out));
  EXPECT_KILN_ERROR(trainer.fit(r.task, *r.loader),
                    fmt::format("[CheckpointCallback] folder '{}' already holds checkpoints of another run (latest "
                                "{}/step-5.safetensors); resume from it with trainer.fit(task, loader, "
                                "callback.latest()), or train into an empty folder",
                                dir, dir));
}

TEST(CheckpointCallback, PrintsWhatOpeningTheFolderFound) {
  std::string dir = testing::fresh_dir();
  Leg first = run_leg(dir, 1, 0, {});
  fs::remove(dir + "/checkpoints.json");  // the record lost: the file is adopted on reopening
  Leg second = run_leg(dir, 2, 0, {});
  EXPECT_EQ(lines_starting(second.out, "checkpoint folder "),
            std::vector<std::string>{"checkpoint folder " + dir +
                                     ": step-5.safetensors is not in checkpoints.json (a save interrupted before the "
                                     "record was written?): adopted as the newest checkpoint, without a metric"});
}

TEST(CheckpointCallback, Errors) {
  std::string dir = testing::fresh_dir();
  EXPECT_KILN_ERROR(CheckpointCallback(dir, {.keep_last = 0}), "keep_last is 0; it must be at least 1");
  EXPECT_KILN_ERROR(CheckpointCallback(dir, {.min_delta = -1}), "min_delta is -1; it must be a finite number >= 0");
  EXPECT_KILN_ERROR(CheckpointCallback(dir, {.every_n_steps = -1}),
                    "[CheckpointCallback] every_n_steps is -1; it must be >= 0 (0: epoch ends only)");
  EXPECT_KILN_ERROR(CheckpointCallback(dir, {.monitor = ""}), "[CheckpointCallback] monitor is empty");
  EXPECT_KILN_ERROR(CheckpointCallback(dir, {.loss_name = ""}),
                    "[CheckpointCallback] loss_name '' must be a non-empty name without spaces");
  EXPECT_KILN_ERROR(CheckpointCallback(dir, {.loss_name = "cross entropy"}), "loss_name 'cross entropy' must be");
  testing::write_bytes(dir + "/file", "x");
  EXPECT_KILN_ERROR(CheckpointCallback(dir + "/file"), "[CheckpointManager] folder '" + dir + "/file'");

  CheckpointCallback ckpt(dir);
  EXPECT_EQ(ckpt.latest(), "");
  EXPECT_EQ(ckpt.best(), "");
  io::State s{{"best_epoch", "3"}, {"best_step", "15"}, {"last_epoch", "4"}, {"ranked_by", "cross_entropy"}};
  ckpt.load_state(s);
  EXPECT_EQ(ckpt.state(), s);
  EXPECT_EQ(ckpt.best_epoch(), 3);
  // A state from before the loss-name record loads; the name stays what it was.
  CheckpointCallback old(testing::fresh_dir("old"));
  old.load_state({{"best_epoch", "1"}, {"best_step", "5"}, {"last_epoch", "1"}});
  EXPECT_EQ(old.ranked_by(), "val_loss");
  s["best_step"] = "-2";
  EXPECT_KILN_ERROR(ckpt.load_state(s),
                    "[CheckpointCallback.load_state] best_epoch 3, best_step -2, last_epoch 4 out of range");
  s.erase("last_epoch");
  EXPECT_KILN_ERROR(ckpt.load_state(s), "[CheckpointCallback.load_state] state has no 'last_epoch'");
}

// ---- ModelCheckpoint ----

TEST(ModelCheckpoint, KeepsOnlyTheBestWeightsInOneFile) {
  std::string dir = testing::fresh_dir();
  std::string path = dir + "/best.safetensors";
  TinyRun r;
  auto at2 = std::make_shared<CaptureAt>(r, 2);
  auto best = std::make_shared<ModelCheckpoint>(path);
  std::ostringstream out;
  train::Trainer trainer(3,
                         {std::make_shared<ScriptedMetric>("val/loss", std::vector<double>{0.5, 0.3, 0.4}), best, at2},
                         testing::run_to(out));
  trainer.fit(r.task, *r.loader);
  EXPECT_EQ(out.str(), fmt::format("epoch 1: val_loss improved from inf to 0.5000 — saving model to {0}\n"
                                   "epoch 2: val_loss improved from 0.5000 to 0.3000 — saving model to {0}\n"
                                   "epoch 3: val_loss did not improve from 0.3000\n",
                                   path));
  EXPECT_EQ(best->best(), 0.3);
  EXPECT_EQ(best->best_epoch(), 2);
  EXPECT_EQ(fs::directory_iterator(dir)->path().string(), path);  // one file, no temporaries
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);

  // Weights only; they load into a fresh model.
  io::CheckpointInfo info = io::read_checkpoint_info(path);
  EXPECT_EQ(info.optimizers.size(), 0u);
  ASSERT_EQ(info.tensors.size(), 2u);
  TinyRun fresh(/*init_seed=*/99);
  io::Checkpoint().model(*fresh.model).load(path);
  expect_equal(fresh.weights(), at2->weights);
}

TEST(ModelCheckpoint, MaxModeQuietAndResumable) {
  std::string path = testing::fresh_dir() + "/best.safetensors";
  TinyRun r;
  auto best = std::make_shared<ModelCheckpoint>(
      path, train::ModelCheckpointOptions{.monitor = "val/accuracy", .mode = io::MetricMode::max, .verbose = false});
  std::ostringstream out;
  train::Trainer trainer(2, {std::make_shared<ScriptedMetric>("val/accuracy", std::vector<double>{0.7, 0.6}), best},
                         testing::run_to(out));
  trainer.fit(r.task, *r.loader);
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(best->state(), (io::State{{"best", "0.7"}, {"best_epoch", "1"}}));

  ModelCheckpoint other(path);
  EXPECT_EQ(other.best(), INFINITY);
  other.load_state(best->state());
  EXPECT_EQ(other.best(), 0.7);
  io::State bad{{"best", "nan"}, {"best_epoch", "1"}};
  EXPECT_KILN_ERROR(other.load_state(bad), "[ModelCheckpoint.load_state] best is NaN");
  bad = {{"best", "0.5"}, {"best_epoch", "-1"}};
  EXPECT_KILN_ERROR(other.load_state(bad), "[ModelCheckpoint.load_state] best_epoch is -1; it must be >= 0");
  EXPECT_EQ(other.best(), 0.7);
}

TEST(ModelCheckpoint, Errors) {
  std::string dir = testing::fresh_dir();
  EXPECT_KILN_ERROR(
      ModelCheckpoint(dir + "/missing/best.safetensors"),
      fmt::format("[ModelCheckpoint] path '{0}/missing/best.safetensors': the folder '{0}/missing' does not exist",
                  dir));
  EXPECT_KILN_ERROR(ModelCheckpoint{dir},
                    fmt::format("[ModelCheckpoint] path '{}' is a folder; give a file name", dir));
  EXPECT_KILN_ERROR(ModelCheckpoint(""), "[ModelCheckpoint] path is empty");
  EXPECT_KILN_ERROR(ModelCheckpoint(dir + "/b", {.min_delta = -1}), "[ModelCheckpoint] min_delta is -1");

  TinyRun r;
  std::ostringstream out;
  train::Trainer trainer(1, {std::make_shared<ModelCheckpoint>(dir + "/best.safetensors")}, testing::run_to(out));
  EXPECT_KILN_ERROR(trainer.fit(r.task, *r.loader),
                    "[ModelCheckpoint] monitor 'val/loss' is not in trainer.logs() at the end of epoch 1 (present: "
                    "accuracy, loss)");
  EXPECT_FALSE(fs::exists(dir + "/best.safetensors"));
}

}  // namespace
}  // namespace kiln
