#include "apps/kiln/fashion_mnist.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <filesystem>
#include <iostream>

#include "kiln/core/error.h"
#include "kiln/core/parallel.h"
#include "kiln/core/rngs.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/fashion_mnist.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/models/classifiers.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/schedulers.h"
#include "kiln/train/callbacks/checkpoint.h"
#include "kiln/train/callbacks/csv_logger.h"
#include "kiln/train/callbacks/lr_scheduler.h"
#include "kiln/train/callbacks/progress_bar.h"
#include "kiln/train/callbacks/summary.h"
#include "kiln/train/callbacks/validation.h"
#include "kiln/train/trainer.h"

namespace kiln::app {

namespace {

constexpr const char* kOp = "kiln train fashion-mnist";

std::shared_ptr<const data::Dataset> load_split(const FashionMnistOptions& o, bool train) {
  std::string root = o.data.empty() ? data::FashionMNIST::default_root() : o.data;
  return std::make_shared<data::FashionMNIST>(root, train,
                                              data::FashionMNISTOptions{.limit = train ? o.limit : o.test_limit});
}

std::string config_json(const FashionMnistOptions& o, int64_t epochs) {
  return fmt::format(R"({{"job":"fashion-mnist","model":"{}","epochs":{},"batch_size":{},"lr":{},)"
                     R"("weight_decay":{},"seed":{},"limit":{},"test_limit":{}}})",
                     o.model, epochs, o.batch_size, o.lr, o.weight_decay, o.seed, o.limit, o.test_limit);
}

}  // namespace

int64_t default_epochs(const std::string& model) { return model == "mlp" ? 20 : 10; }

FashionMnistResult train_fashion_mnist(const FashionMnistOptions& o) {
  KILN_CHECK(o.model == "cnn" || o.model == "mlp", kOp, "--model must be cnn or mlp, got '{}'", o.model);
  KILN_CHECK(o.epochs >= 0, kOp, "--epochs must be positive, got {}", o.epochs);
  KILN_CHECK(o.batch_size > 0, kOp, "--batch-size must be positive, got {}", o.batch_size);
  KILN_CHECK(o.lr > 0, kOp, "--lr must be positive, got {}", o.lr);
  KILN_CHECK(o.threads >= 0, kOp, "--threads must be non-negative, got {}", o.threads);
  KILN_CHECK(o.limit >= 0 && o.test_limit >= 0, kOp, "--limit and --test-limit must be non-negative");
  if (o.threads > 0) set_num_threads(o.threads);
  std::ostream& log = o.log ? *o.log : std::cout;
  const int64_t epochs = o.epochs > 0 ? o.epochs : default_epochs(o.model);

  auto train_set = load_split(o, true);
  auto test_set = load_split(o, false);
  data::DataLoader train_loader(train_set, {.batch_size = o.batch_size, .shuffle = true, .seed = o.seed});
  auto test_loader = std::make_shared<data::DataLoader>(
      test_set, data::DataLoaderOptions{.batch_size = 500, .shuffle = false, .prefetch = 1});

  Rngs rngs{{"params", o.seed}, {"dropout", o.seed + 1}};
  nn::Shared<nn::Sequential> model = o.model == "cnn" ? models::image_cnn(rngs) : models::image_mlp(rngs);
  optim::AdamW opt(model->parameters(), {.lr = o.lr, .weight_decay = o.weight_decay});
  train::Task task(model, opt, &rngs);
  auto schedule = std::make_shared<optim::CosineScheduler>(
      optim::CosineOptions{.max_lr = o.lr, .min_lr = o.lr / 100, .total_steps = epochs * train_loader.size()});

  std::filesystem::create_directories(o.out);
  const std::string csv = (std::filesystem::path(o.out) / "metrics.csv").string();
  const std::string ckpt_dir = (std::filesystem::path(o.out) / "checkpoints").string();
  std::string resume = o.resume;
  if (resume == "latest") {
    io::CheckpointManager manager(ckpt_dir);
    KILN_CHECK(manager.latest().has_value(), kOp, "--resume latest: no checkpoint in {}", ckpt_dir);
    resume = *manager.latest();
  }
  if (!resume.empty()) {
    fmt::print(log, "resuming from {}\n", resume);
  } else if (std::filesystem::exists(ckpt_dir)) {
    // A new run in this folder replaces the previous one (its log is
    // truncated too); --resume continues it instead.
    std::filesystem::remove_all(ckpt_dir);
  }
  // The test split validates each epoch; the best epoch is marked but not
  // restored, so the reported accuracy is the last epoch's, not one picked on
  // the test set.
  auto checkpoints = std::make_shared<train::CheckpointCallback>(
      ckpt_dir, train::CheckpointCallbackOptions{.monitor = "val/loss", .restore_best = false});
  auto validation = std::make_shared<train::Validation>(test_loader);
  std::vector<std::shared_ptr<train::Callback>> callbacks = {
      std::make_shared<train::LRSchedulerCallback>(schedule),
      // Before the bar: the epoch's line then carries its val/loss and val/accuracy.
      validation,
      std::make_shared<train::ProgressBar>(),
      std::make_shared<train::CsvLogger>(
          csv, train::CsvLoggerOptions{.append = false, .log_keys = {"val/loss", "val/accuracy"}}),
      std::make_shared<train::Summary>(),
      checkpoints,  // last: its checkpoints hold the other callbacks' epoch-end state
  };
  train::Trainer trainer(epochs, callbacks, {.out = &log, .tty = o.tty, .config = config_json(o, epochs)});

  fmt::print(log, "{}: {} parameters · {} train / {} test images · batch {} · {} epoch{} · {} thread{}\n", o.model,
             model->num_parameters(), train_set->size(), test_set->size(), o.batch_size, epochs, epochs == 1 ? "" : "s",
             get_num_threads(), get_num_threads() == 1 ? "" : "s");

  trainer.fit(task, train_loader, resume);

  // The test accuracy of the weights training ended with: Validation's last
  // evaluation (after the last epoch, or at train end for a run stopped
  // mid-epoch; restored from the checkpoint when nothing was left to train).
  const train::ValidationResult& test = validation->result();
  FashionMnistResult result;
  result.test_accuracy = test.accuracy;
  result.test_loss = test.loss;
  result.epochs = trainer.progress().epoch;
  result.train_seconds = trainer.elapsed();
  result.checkpoint = checkpoints->latest();
  result.csv = csv;
  fmt::print(log, "test accuracy: {:.4f} · loss {:.4f} ({} images)\n", result.test_accuracy, result.test_loss,
             test.count);
  fmt::print(log, "wrote {} and {}\n", csv, result.checkpoint);
  return result;
}

}  // namespace kiln::app
