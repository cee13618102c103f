#include "apps/kiln/fashion_mnist.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>

#include "apps/kiln/distributed_job.h"
#include "apps/kiln/job_run.h"
#include "apps/kiln/job_support.h"
#include "apps/kiln/memory_flag.h"

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
#include "kiln/train/callbacks/stop_on_signal.h"
#include "kiln/train/callbacks/summary.h"
#include "kiln/train/callbacks/validation.h"
#include "kiln/train/compiled_step.h"
#include "kiln/train/memory_budget.h"
#include "kiln/train/signal_guard.h"
#include "kiln/train/trainer.h"

namespace kiln::app {

namespace {

constexpr const char* kOp = "kiln train fashion-mnist";

std::shared_ptr<const data::Dataset> load_split(const FashionMnistOptions& o, bool train) {
  std::string root = o.data.empty() ? data::FashionMNIST::default_root() : o.data;
  return std::make_shared<data::FashionMNIST>(root, train,
                                              data::FashionMNISTOptions{.limit = train ? o.limit : o.test_limit});
}

using nlohmann::json;

// What a resume must agree with (--epochs may change: a longer run stretches
// the schedule, docs/training.md). batch_size is the one the run uses.
json hyper_parameters(const FashionMnistOptions& o, int64_t batch_size) {
  return {{"model", o.model},   {"batch_size", batch_size}, {"lr", o.lr},
          {"weight_decay", o.weight_decay}, {"seed", o.seed},   {"limit", o.limit},
          {"test_limit", o.test_limit}};
}

}  // namespace

int64_t default_epochs(const std::string& model) { return model == "mlp" ? 20 : 10; }

FashionMnistResult train_fashion_mnist(const FashionMnistOptions& o) {
  KILN_CHECK(o.model == "cnn" || o.model == "mlp", kOp, "--model must be cnn or mlp, got '{}'", o.model);
  KILN_CHECK(o.epochs >= 0 && o.epochs <= 1'000'000, kOp, "--epochs must be in [1, 1000000], got {}", o.epochs);
  KILN_CHECK(o.batch_size > 0, kOp, "--batch-size must be positive, got {}", o.batch_size);
  KILN_CHECK(o.lr > 0 && std::isfinite(o.lr), kOp, "--lr must be a finite number in (0, inf), got {}", o.lr);
  KILN_CHECK(o.weight_decay >= 0 && std::isfinite(o.weight_decay), kOp,
             "--weight-decay must be a finite number in [0, inf), got {}", o.weight_decay);
  KILN_CHECK(o.threads >= 0, kOp, "--threads must be non-negative, got {}", o.threads);
  KILN_CHECK(o.limit >= 0 && o.test_limit >= 0, kOp, "--limit and --test-limit must be non-negative");
  const train::OnNan on_nan = parse_on_nan(kOp, o.on_nan);
  RunFolder::check_path(kOp, o.out);
  KILN_CHECK(o.data.empty() || !std::filesystem::exists(o.data) || std::filesystem::is_directory(o.data), kOp,
             "--data {} is a file: give the folder that holds the IDX files (train-images-idx3-ubyte.gz, ...)", o.data);
  const int64_t epochs = o.epochs > 0 ? o.epochs : default_epochs(o.model);

  // The data first: a missing data set is reported before --out is touched.
  auto train_set = load_split(o, true);
  auto test_set = load_split(o, false);
  // Under mpirun: this rank's place (only rank 0 owns --out and prints).
  JobDistribution ranks(kOp);
  // Locked for the whole run; refuses a folder holding another run unless
  // resuming or overwriting it; finds the checkpoint to resume from.
  JobRunOptions run_options = job_run_options(kOp, "fashion-mnist", o.out, o);
  run_options.primary = ranks.primary();
  JobRun run(run_options);
  std::ostream& log = run.log();
  const std::string csv = run.csv();
  const std::string ckpt_dir = run.checkpoint_dir();
  const std::string& resume = run.resume_path();

  Rngs rngs{{"params", o.seed}, {"dropout", o.seed + 1}};
  nn::Shared<nn::Sequential> model = o.model == "cnn" ? models::image_cnn(rngs) : models::image_mlp(rngs);
  optim::AdamW opt(model->parameters(), {.lr = o.lr, .weight_decay = o.weight_decay});
  // --compile: the training step is recorded once and replayed (docs/compile.md);
  // results and checkpoints are the eager step's, so a run may resume either way.
  KILN_CHECK(!o.compile || !ranks.active(), kOp,
             "--compile records one process's step; under mpirun the gradients' all-reduce is not recorded");
  std::unique_ptr<train::Task> task = o.compile ? std::make_unique<train::CompiledTask>(model, opt, &rngs)
                                                : std::make_unique<train::Task>(model, opt, &rngs);

  // --memory-budget: the largest batch whose peak fits, from three probe
  // steps that leave the model as it was (rank 0 probes, before the model is
  // wrapped; the budget is each process'); a resumed run keeps its batch.
  int64_t wanted_batch = o.batch_size;
  std::optional<train::MemoryFit> fit;  // rank 0's, when it probed
  if (!o.memory_budget.empty()) {
    const int64_t budget = parse_memory_budget(kOp, o.memory_budget);
    if (run.resuming() && run.saved_config().contains("batch_size")) {
      wanted_batch = run.saved_config()["batch_size"].get<int64_t>();
      fmt::print(log, "--memory-budget: resuming with the run's batch {}\n", wanted_batch);
    } else {
      fit.emplace();
      wanted_batch = fit_batch_to_memory(kOp, ranks, *task, *train_set, budget,
                                         {.max_batch = std::max<int64_t>(1, train_set->size() / ranks.world_size())},
                                         log, "image", &*fit);
      if (!ranks.primary()) fit.reset();
    }
  }
  std::shared_ptr<train::DistributedHooks> sync = ranks.wrap(*model);  // rank 0's weights, summed gradients
  // Batch buffers hold what a batch can: never more rows than the split has.
  const int64_t batch_size = std::min(wanted_batch, train_set->size());
  if (o.memory_budget.empty() && batch_size < o.batch_size)
    fmt::print(log, "--batch-size {} is more than the {} training images: using batches of {}\n", o.batch_size,
               train_set->size(), batch_size);
  // batch_size is the global batch: each rank gathers its share of it.
  data::DataLoader train_loader(train_set, {.batch_size = ranks.rank_batch(batch_size), .shuffle = true,
                                            .seed = o.seed, .rank = ranks.rank(), .world_size = ranks.world_size()});
  // Under mpirun each rank tests its share of every batch; Validation sums
  // the ranks' results (the whole test split's loss and accuracy).
  auto test_loader = std::make_shared<data::DataLoader>(
      test_set, data::DataLoaderOptions{
                    .batch_size = std::max<int64_t>(1, std::clamp<int64_t>(test_set->size(), 1, 500) / ranks.world_size()),
                    .shuffle = false, .prefetch = 1, .rank = ranks.rank(), .world_size = ranks.world_size()});

  // The hyper-parameters of the run, compared on resume (--override records a change).
  json config = hyper_parameters(o, batch_size);
  const json overrides = run.check_hyper_parameters(run.saved_config(), config);
  config["job"] = "fashion-mnist";
  config["epochs"] = epochs;
  if (!overrides.empty()) config["overrides"] = overrides;

  auto schedule = std::make_shared<optim::CosineScheduler>(
      optim::CosineOptions{.max_lr = o.lr, .min_lr = o.lr / 100, .total_steps = epochs * train_loader.size()});

  if (!resume.empty()) fmt::print(log, "resuming from {}\n", resume);
  run.folder().start(log);  // a new run: the previous one (--overwrite) moves aside
  // The test split validates each epoch; the best epoch is marked but not
  // restored, so the reported accuracy is the last epoch's, not one picked on
  // the test set.
  // Only rank 0 writes metrics.csv and checkpoints; the other ranks resume
  // from rank 0's checkpoint (parts they do not register are not read).
  const bool writer = ranks.primary();
  auto checkpoints = writer ? std::make_shared<train::CheckpointCallback>(
                                  ckpt_dir, train::CheckpointCallbackOptions{.monitor = "val/loss", .restore_best = false})
                            : nullptr;
  auto validation = std::make_shared<train::Validation>(test_loader);
  std::vector<std::shared_ptr<train::Callback>> callbacks = {
      std::make_shared<train::StopOnSignal>(),  // first: a signal stops the run after the step
      std::make_shared<train::LRSchedulerCallback>(schedule),
      // Before the bar: the epoch's line then carries its val/loss and val/accuracy.
      validation,
      std::make_shared<train::ProgressBar>(),
      writer ? std::make_shared<train::CsvLogger>(
                   csv, train::CsvLoggerOptions{.append = false, .log_keys = {"val/loss", "val/accuracy"}})
             : nullptr,
      std::make_shared<train::Summary>(),
      checkpoints,  // its checkpoints hold the other callbacks' epoch-end state
      writer ? std::make_shared<ReleasePreviousRun>(run.folder(), checkpoints) : nullptr,
      fit ? std::make_shared<MemoryBudgetReport>(*fit) : nullptr,
  };
  std::erase(callbacks, nullptr);  // the writers, on ranks other than 0
  train::Trainer trainer(epochs, callbacks,
                         {.out = &log, .tty = o.tty, .config = config.dump(), .on_nan = on_nan,
                          .distributed = sync});

  fmt::print(log, "{}: {} parameters · {} train / {} test images · batch {} · {} epoch{} · {}{}\n", o.model,
             model->num_parameters(), train_set->size(), test_set->size(), batch_size, epochs, epochs == 1 ? "" : "s",
             threads_and_cpu(), ranks.describe());

  train::SignalGuard signals;  // SIGINT/SIGTERM: finish the step, save, exit 130/143
  run.serve(trainer.control());  // kiln control RUN_DIR ... (docs/live_control.md)
  try {
    trainer.fit(*task, train_loader, resume);
  } catch (const train::NonFiniteLoss& e) {
    fail_on_nan(kOp, e, checkpoints ? checkpoints->latest() : "");
  }
  if (auto* compiled = dynamic_cast<train::CompiledTask*>(task.get()); compiled && compiled->compiled().recordings() > 0) {
    const train::CompiledStep& c = compiled->compiled();
    fmt::print(log, "compiled step: {} recording{}, {} replays, {} eager steps\n{}", c.recordings(),
               c.recordings() == 1 ? "" : "s", c.replays(), c.eager_calls(), c.evidence().str());
  }
  // The test accuracy of the weights training ended with: Validation's last
  // evaluation (after the last epoch, or at train end for a run stopped
  // mid-epoch; restored from the checkpoint when nothing was left to train).
  const train::ValidationResult& test = validation->result();
  FashionMnistResult result;
  result.test_accuracy = test.accuracy;
  result.test_loss = test.loss;
  result.epochs = trainer.progress().epoch;
  result.train_seconds = trainer.elapsed();
  result.checkpoint = checkpoints ? checkpoints->latest() : "";
  result.csv = csv;
  result.signal = train::SignalGuard::received();
  if (result.signal != 0)
    fmt::print(log, "stopped by {} at step {}: resume with --resume (from {})\n",
               train::SignalGuard::name(result.signal), trainer.progress().global_step, result.checkpoint);
  fmt::print(log, "test accuracy: {:.4f} · loss {:.4f} ({} images)\n", result.test_accuracy, result.test_loss,
             test.count);
  fmt::print(log, "wrote {} and {}\n", csv, result.checkpoint);
  return result;
}

}  // namespace kiln::app
