// A tiny training setup for the output callbacks' tests: Linear(4, 3) on 24
// examples in batches of 8 (3 steps per epoch), SGD; a scripted task whose
// step losses and correct counts are known in advance; a callback that saves
// a checkpoint at a given step; masks for the timing fields of printed lines.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "kiln/data/dataloader.h"
#include "kiln/nn/linear.h"
#include "kiln/ops/creation.h"
#include "kiln/optim/sgd.h"
#include "kiln/train/callback.h"
#include "kiln/train/task.h"
#include "kiln/train/trainer.h"

namespace kiln::train::testing {

// Examples i = 0..n-1: input [4] with values (i * 7 + j * 3) % 11 / 10, target i % 3.
inline std::shared_ptr<data::TensorDataset> tiny_dataset(int64_t n = 24) {
  std::vector<float> x(static_cast<size_t>(n * 4));
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 4; ++j) x[static_cast<size_t>(i * 4 + j)] = static_cast<float>((i * 7 + j * 3) % 11) / 10;
    y[static_cast<size_t>(i)] = i % 3;
  }
  return std::make_shared<data::TensorDataset>(tensor(x, Shape{n, 4}), tensor(y, Shape{n}));
}

// Step k (0-based, counted by this task) reports loss 2 - 0.25 k over the
// batch, correct = the whole batch for even k, half of it for odd k.
struct ScriptedTask : Task {
  using Task::Task;
  int64_t calls = 0;
  std::vector<std::string> phases;
  StepResult training_step(const data::Batch& b) override {
    const int64_t k = calls++;
    return {2.0 - 0.25 * static_cast<double>(k), b.size(), k % 2 == 0 ? b.size() : b.size() / 2};
  }
  void set_phase(const std::string& name) override { phases.push_back(name); }
};

// Everything one leg of training needs, built the same way each time (seeded),
// so a second Rig is the "fresh objects" a resumed process would build.
template <class T = Task>
struct Rig {
  explicit Rig(double lr = 0.1, int64_t batch = 8)
      : rngs(0),
        model(nn::make<nn::Linear>(4, 3, nn::Init(rngs))),
        opt(model->parameters(), {.lr = lr}),
        loader(tiny_dataset(), {.batch_size = batch, .shuffle = true, .seed = 3, .prefetch = 0}),
        task(model, opt, &rngs) {}
  Rngs rngs;
  nn::Shared<nn::Linear> model;
  optim::SGD opt;
  data::DataLoader loader;
  T task;
};

// Saves trainer.checkpoint() to `path` right after optimizer step `at`
// (register it after the callbacks whose rows/state the checkpoint must hold).
struct SaveAt : Callback {
  SaveAt(int64_t at, std::string path) : at(at), path(std::move(path)) {}
  void on_step_end(Trainer& t, const StepResult&) override {
    if (t.progress().global_step == at) t.checkpoint().save(path);
  }
  int64_t at;
  std::string path;
};

// Writes fixed "val/..." values into logs() at each epoch end, as a
// validation callback would.
struct FakeValidation : Callback {
  void on_epoch_end(Trainer& t) override {
    t.logs()["val/loss"] = 0.5 + 0.125 * static_cast<double>(t.progress().epoch);
    t.logs()["val/accuracy"] = 0.75;
  }
};

// "0.65s · 0.7 ms/step · 1.26M sample/s" -> "<time>": the fields that depend on the clock.
inline std::string mask_times(const std::string& s) {
  static const std::regex timing(R"(\d+\.\d\ds · \d+\.\d+ ms/step · \d+\.\d\d[KMGTP]? sample/s)");
  return std::regex_replace(s, timing, "<time>");
}

}  // namespace kiln::train::testing
