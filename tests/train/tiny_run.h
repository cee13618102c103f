// A tiny training run for the callback tests (Validation, EarlyStopping,
// CheckpointCallback): Linear(4 -> 3) classifying 10 synthetic samples in
// batches of 2 (5 steps an epoch), 6 validation samples in batches of 4, SGD
// with momentum. Every object is built afresh per TinyRun, as a new process
// would, so resume tests rebuild one and load a checkpoint into it.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/data/dataloader.h"
#include "tests/support/train_testing.h"
#include "kiln/train/trainer.h"

namespace kiln::testing {

/// Synthetic classification data: x [n, 4] ~ N(0, 1), y [n] = argmax(x[:, :3]),
/// with every `noisy`-th label moved to the next class (0: none), so that a
/// validation loss rises and falls instead of only falling.
inline std::shared_ptr<data::TensorDataset> tiny_dataset(int64_t n, uint64_t seed, int64_t noisy = 0) {
  Generator gen(seed);
  Tensor x = randn({n, 4}, gen);
  std::vector<int64_t> y(n);
  const float* px = x.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float* row = px + i * 4;
    y[i] = row[1] > row[0] ? (row[2] > row[1] ? 2 : 1) : (row[2] > row[0] ? 2 : 0);
    if (noisy > 0 && i % noisy == 0) y[i] = (y[i] + 1) % 3;
  }
  return std::make_shared<data::TensorDataset>(x, tensor(y));
}

struct TinyRun {
  explicit TinyRun(uint64_t init_seed = 0, bool shuffle = true)
      : rngs{{"params", init_seed}},
        model(nn::make<nn::Linear>(4, 3, nn::Init(rngs))),
        optimizer(model->parameters(), {.lr = 0.5, .momentum = 0.9}),
        task(model, optimizer, &rngs),
        train_set(tiny_dataset(10, 1)),
        val_set(tiny_dataset(6, 2, 3)),
        loader(std::make_shared<data::DataLoader>(
            train_set, data::DataLoaderOptions{.batch_size = 2, .shuffle = shuffle, .seed = 7})),
        val_loader(
            std::make_shared<data::DataLoader>(val_set, data::DataLoaderOptions{.batch_size = 4, .shuffle = false})) {}

  /// Copies of the model's parameters, by name.
  std::vector<std::pair<std::string, Tensor>> weights() const {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto& [name, p] : model->named_parameters()) out.emplace_back(name, p.value().clone());
    return out;
  }

  Rngs rngs;
  nn::Shared<nn::Linear> model;
  optim::SGD optimizer;
  train::Task task;
  std::shared_ptr<data::TensorDataset> train_set, val_set;
  std::shared_ptr<data::DataLoader> loader;
  std::shared_ptr<data::DataLoader> val_loader;
};

/// Writes logs()[key] = values[epoch] at each epoch end: a scripted monitor.
/// Stateless (indexed by the epoch), so it resumes by itself.
struct ScriptedMetric : train::Callback {
  ScriptedMetric(std::string key, std::vector<double> values) : key(std::move(key)), values(std::move(values)) {}
  void on_epoch_end(train::Trainer& t) override { t.logs()[key] = values.at(size_t(t.progress().epoch)); }
  std::string key;
  std::vector<double> values;
};

/// Options printing into `out` (not a terminal), with an optional step limit.
inline train::RunOptions run_to(std::ostream& out, int64_t max_steps = 0, bool tty = false) {
  train::RunOptions run;
  run.max_steps = max_steps;
  run.out = &out;
  run.tty = tty;
  return run;
}

/// The lines of `text` that start with `prefix`.
inline std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  return out;
}

}  // namespace kiln::testing
