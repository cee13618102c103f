// The Trainer against a plain PyTorch loop (tests/goldens/train_loop.json from
// tools/goldens/train_loop.py), its hooks, stops, failures and exact resume.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <thread>

#include "kiln/data/dataloader.h"
#include "kiln/io/checkpoint.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/linear.h"
#include "kiln/optim/adam.h"
#include "kiln/train/control.h"
#include "kiln/train/trainer.h"
#include "tests/support/train_testing.h"

namespace kiln::train {
namespace {

using kiln::testing::golden;
using kiln::testing::golden_tensor;

// Records every hook as a word, and each step's loss.
struct Recorder : Callback {
  std::vector<std::string> events;
  std::vector<double> losses;
  void on_train_begin(Trainer&) override { events.push_back("train_begin"); }
  void on_epoch_begin(Trainer& t) override { events.push_back(fmt::format("epoch_begin {}", t.progress().epoch)); }
  void on_step_begin(Trainer&) override { events.push_back("step_begin"); }
  void on_step_end(Trainer& t, const StepResult& r) override {
    events.push_back(fmt::format("step_end {}", t.progress().global_step));
    losses.push_back(r.loss);
  }
  void on_epoch_end(Trainer& t) override { events.push_back(fmt::format("epoch_end {}", t.progress().epoch)); }
  void on_train_end(Trainer& t) override { events.push_back(fmt::format("train_end {}", to_string(t.state()))); }
};

// Runs `fn` at each step end.
struct AtStep : Callback {
  std::function<void(Trainer&)> fn;
  explicit AtStep(std::function<void(Trainer&)> f) : fn(std::move(f)) {}
  void on_step_end(Trainer& t, const StepResult&) override { fn(t); }
};

// The golden's model and data: MLP 6 -> 8 -> 3 in f64, 22 samples.
struct Golden {  // one training setup
  Rngs rngs{{"params", 0}, {"dropout", 1}};
  nn::Shared<nn::Sequential> model;
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<Task> task;
  std::shared_ptr<data::TensorDataset> dataset;
  std::unique_ptr<data::DataLoader> loader;

  explicit Golden(data::DataLoaderOptions lo = {.batch_size = 4, .shuffle = false, .prefetch = 0},
                 double dropout = 0) {
    const auto& g = golden("train_loop");
    model = nn::make<nn::Sequential>();
    model->push_back(nn::Linear(6, 8, rngs));
    model->push_back(nn::ReLU());
    if (dropout > 0) model->push_back(nn::Dropout(dropout, rngs));
    model->push_back(nn::Linear(8, 3, rngs));
    model->to(kF64);
    if (dropout == 0) {
      nn::StateDict initial;
      for (auto& [k, v] : g["initial"].items()) initial.insert(k, golden_tensor(v));
      model->load_state_dict(initial);
    }
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 0.01});
    task = std::make_unique<Task>(model, *opt, &rngs);
    dataset = std::make_shared<data::TensorDataset>(golden_tensor(g["x"]), golden_tensor(g["y"]));
    loader = std::make_unique<data::DataLoader>(dataset, lo);
  }
};

TEST(Trainer, MatchesPyTorchLoop) {
  const auto& g = golden("train_loop");
  for (int prefetch : {0, 2}) {
    SCOPED_TRACE(prefetch);
    Golden s({.batch_size = 4, .shuffle = false, .prefetch = prefetch});
    auto rec = std::make_shared<Recorder>();
    std::ostringstream out;
    Trainer trainer(3, {rec}, {.out = &out});
    History h = trainer.fit(*s.task, *s.loader);
    EXPECT_EQ(h.state, RunState::completed);
    auto want_losses = g["step_losses"].get<std::vector<double>>();
    ASSERT_EQ(rec->losses.size(), want_losses.size());
    for (size_t i = 0; i < want_losses.size(); ++i) EXPECT_NEAR(rec->losses[i], want_losses[i], 1e-12) << i;
    ASSERT_EQ(h.epochs.size(), 3u);
    for (size_t e = 0; e < 3; ++e) {
      EXPECT_NEAR(h.epochs[e].at("loss"), g["epoch_loss"][e].get<double>(), 1e-12);
      EXPECT_DOUBLE_EQ(h.epochs[e].at("accuracy"), g["epoch_accuracy"][e].get<double>());
    }
    for (auto& [k, v] : g["final"].items())
      EXPECT_TRUE(kiln::testing::all_close(s.model->state_dict().at(k), golden_tensor(v), 1e-10, 1e-12)) << k;
    EXPECT_EQ(trainer.progress().global_step, 18);
    EXPECT_EQ(s.opt->step_count(), 18);
    EXPECT_EQ(out.str(), "");  // no callback prints
  }
}

TEST(Trainer, HooksRunInOrder) {
  Golden s({.batch_size = 11, .shuffle = false, .prefetch = 0});
  auto rec = std::make_shared<Recorder>();
  Trainer trainer(2, {rec});
  trainer.fit(*s.task, *s.loader);
  std::vector<std::string> want = {"train_begin",  "epoch_begin 0", "step_begin", "step_end 1", "step_begin",
                                   "step_end 2",   "epoch_end 0",   "epoch_begin 1", "step_begin", "step_end 3",
                                   "step_begin",   "step_end 4",    "epoch_end 1",   "train_end completed"};
  EXPECT_EQ(rec->events, want);
}

TEST(Trainer, MaxStepsEndsMidEpoch) {
  Golden s;
  auto rec = std::make_shared<Recorder>();
  Trainer trainer(10, {rec}, {.max_steps = 8});
  History h = trainer.fit(*s.task, *s.loader);
  EXPECT_EQ(h.state, RunState::completed);
  EXPECT_EQ(trainer.progress().global_step, 8);
  EXPECT_EQ(h.epochs.size(), 1u);  // 6 steps per epoch: only the first is complete
  EXPECT_EQ(trainer.progress().step_in_epoch, 2);
  EXPECT_EQ(rec->events.back(), "train_end completed");
}

TEST(Trainer, RequestStopEndsAfterTheStep) {
  Golden s;
  auto stop = std::make_shared<AtStep>([](Trainer& t) {
    if (t.progress().global_step == 3) {
      t.request_stop();
      EXPECT_EQ(t.state(), RunState::stopping);
    }
  });
  Trainer trainer(5, {stop});
  History h = trainer.fit(*s.task, *s.loader);
  EXPECT_EQ(trainer.progress().global_step, 3);
  EXPECT_TRUE(h.epochs.empty());
  EXPECT_EQ(h.state, RunState::completed);
  EXPECT_EQ(trainer.control()->state(), RunState::completed);
}

TEST(Trainer, FailureRunsTrainEndAndPropagates) {
  Golden s;
  auto rec = std::make_shared<Recorder>();
  auto boom = std::make_shared<AtStep>([](Trainer& t) {
    if (t.progress().global_step == 2) throw Error("Boom", "step two");
  });
  Trainer trainer(2, {rec, boom});
  EXPECT_KILN_ERROR(trainer.fit(*s.task, *s.loader), "step two");
  EXPECT_EQ(trainer.state(), RunState::failed);
  EXPECT_EQ(rec->events.back(), "train_end failed");
  EXPECT_EQ(trainer.control()->state(), RunState::failed);
}

TEST(Trainer, LogsHoldEpochMeans) {
  Golden s;
  std::vector<double> step_losses;
  auto check = std::make_shared<AtStep>([&](Trainer& t) {
    EXPECT_EQ(t.logs().at("loss"), t.epoch_stats().last_loss);
    step_losses.push_back(t.epoch_stats().last_loss);
  });
  Trainer trainer(1, {check});
  History h = trainer.fit(*s.task, *s.loader);
  // Batches of 4, 4, 4, 4, 4, 2: the epoch loss weighs each step by its samples.
  double sum = 0;
  for (size_t i = 0; i < step_losses.size(); ++i) sum += step_losses[i] * (i == 5 ? 2 : 4);
  EXPECT_NEAR(h.epochs[0].at("loss"), sum / 22, 1e-15);
  EXPECT_EQ(trainer.epoch_stats().count, 22);
  EXPECT_EQ(trainer.epoch_stats().steps, 6);
}

// Saves trainer.checkpoint() when the global step reaches `at` (mid-epoch), or
// at the end of epoch `at_epoch_end` (0-based).
struct SaveAt : Callback {
  std::string path;
  int64_t at = -1, at_epoch_end = -1;
  void on_step_end(Trainer& t, const StepResult&) override {
    if (t.progress().global_step == at) t.checkpoint().save(path);
  }
  void on_epoch_end(Trainer& t) override {
    if (t.progress().epoch == at_epoch_end) t.checkpoint().save(path);
  }
};

std::string temp_path(const std::string& name) { return kiln::testing::fresh_dir() + "/" + name; }

// I3 through the Trainer: shuffled order, dropout masks, Adam moments and the
// epoch's sums all continue exactly.
TEST(Trainer, ResumeIsExact) {
  for (int64_t mid : {0, 1}) {
    SCOPED_TRACE(mid ? "mid-epoch" : "epoch end");
    std::string path = temp_path("resume.safetensors");
    data::DataLoaderOptions lo{.batch_size = 4, .shuffle = true, .seed = 5, .prefetch = 2};
    Golden a(lo, 0.3);
    auto save = std::make_shared<SaveAt>();
    save->path = path;
    (mid ? save->at : save->at_epoch_end) = mid ? 9 : 0;
    auto rec_a = std::make_shared<Recorder>();
    History ha = Trainer(3, {rec_a, save}).fit(*a.task, *a.loader);

    Golden b(lo, 0.3);
    auto rec_b = std::make_shared<Recorder>();
    History hb = Trainer(3, {rec_b, std::make_shared<SaveAt>()}).fit(*b.task, *b.loader, path);
    int64_t resumed_at = mid ? 9 : 6;
    ASSERT_EQ(rec_b->losses.size(), rec_a->losses.size() - size_t(resumed_at));
    for (size_t i = 0; i < rec_b->losses.size(); ++i) EXPECT_EQ(rec_b->losses[i], rec_a->losses[resumed_at + i]) << i;
    ASSERT_EQ(hb.epochs.size(), 2u);
    EXPECT_EQ(hb.epochs, std::vector(ha.epochs.begin() + 1, ha.epochs.end()));
    auto sa = a.model->state_dict(), sb = b.model->state_dict();
    for (const auto& [k, v] : sa) EXPECT_TRUE(kiln::testing::equal(sb.at(k), v)) << k;
    std::remove(path.c_str());
  }
}

TEST(Trainer, ClockPauseIsExcluded) {
  Golden s;
  auto slow = std::make_shared<AtStep>([](Trainer& t) {
    auto pause = t.pause_clock();
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
  });
  double elapsed = 0, epoch_elapsed = 0;
  auto read = std::make_shared<AtStep>([&](Trainer& t) {
    elapsed = t.elapsed();
    epoch_elapsed = t.epoch_elapsed();
  });
  auto start = std::chrono::steady_clock::now();
  Trainer(1, {slow, read}).fit(*s.task, *s.loader);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Six pauses of 60 ms: at least 0.36 s of the wall time is not training time.
  EXPECT_GE(wall, 0.36);
  EXPECT_LT(elapsed, wall - 0.3);
  EXPECT_LE(epoch_elapsed, elapsed);
}

TEST(Trainer, Errors) {
  EXPECT_KILN_ERROR(Trainer(0), "max_epochs must be positive, got 0");
  EXPECT_KILN_ERROR(Trainer(1, {nullptr}), "callback 0 is null");
  EXPECT_KILN_ERROR(Trainer(1, {}, {.max_steps = -1}), "max_steps");
  EXPECT_KILN_ERROR(Trainer(1, {}, {.tokens_per_sample = -2}),
                    "run.tokens_per_sample must be non-negative, got -2");
  {  // fit() from inside a running fit()
    Golden g;
    auto reenter = std::make_shared<AtStep>([&](Trainer& t) { t.fit(*g.task, *g.loader); });
    Trainer inner(1, {reenter});
    EXPECT_KILN_ERROR(inner.fit(*g.task, *g.loader), "[Trainer.fit] already running");
    EXPECT_EQ(inner.state(), RunState::failed);
  }
  Trainer t(1);
  EXPECT_KILN_ERROR(t.task(), "[Trainer.task] only available during fit()");
  EXPECT_KILN_ERROR(t.set_epoch_label(3, 2), "need 1 <= number <= count, got 3 of 2");
  Golden s;
  data::DataLoader empty(std::make_shared<data::TensorDataset>(zeros({0, 6}, {.dtype = kF64}), zeros({0}, {.dtype = kI64})),
                         {.batch_size = 4});
  EXPECT_KILN_ERROR(t.fit(*s.task, empty), "the training loader has no batches (dataset of 0 examples, batch 4)");
  Golden ok;
  EXPECT_ANY_THROW(t.fit(*ok.task, *ok.loader, temp_path("missing.safetensors")));
  EXPECT_EQ(ok.opt->step_count(), 0);  // a failed resume trains nothing
}

TEST(Trainer, ResumeRefusesAnotherSetup) {
  std::string path = temp_path("other.safetensors");
  Golden a;
  auto save = std::make_shared<SaveAt>();
  save->path = path;
  save->at = 2;
  Trainer(1, {save}).fit(*a.task, *a.loader);
  // Another batch size: the loader refuses the state, and nothing is changed.
  Golden b({.batch_size = 5, .shuffle = false, .prefetch = 0});
  auto before = b.model->state_dict();
  EXPECT_ANY_THROW(Trainer(1).fit(*b.task, *b.loader, path));
  for (const auto& [k, v] : before) EXPECT_TRUE(kiln::testing::equal(b.model->state_dict().at(k), v)) << k;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kiln::train
