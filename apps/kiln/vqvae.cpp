// kiln train vqvae fashion-mnist: the job around models::VQVAE (apps/kiln/vqvae.h, docs/vq.md).
#include "apps/kiln/vqvae.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/kiln/job_run.h"
#include "apps/kiln/job_support.h"

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/rngs.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/fashion_mnist.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/image.h"
#include "kiln/models/vqvae.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/index.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/shape.h"
#include "kiln/optim/adam.h"
#include "kiln/train/callbacks/checkpoint.h"
#include "kiln/train/callbacks/csv_logger.h"
#include "kiln/train/callbacks/progress_bar.h"
#include "kiln/train/callbacks/stop_on_signal.h"
#include "kiln/train/callbacks/summary.h"
#include "kiln/train/callbacks/validation.h"
#include "kiln/train/signal_guard.h"
#include "kiln/train/steps.h"
#include "kiln/train/trainer.h"

namespace kiln::app {

namespace {

constexpr const char* kOp = "kiln train vqvae fashion-mnist";
using nlohmann::json;

// What the task measured, read by VqTelemetry: the last training step's
// numbers, and the code histogram (level 0) of the validation pass.
struct Telemetry {
  double recon_mse = NAN, perplexity = NAN, usage = NAN, dead_codes = NAN;
  std::vector<int64_t> test_hist;
  int64_t test_tokens = 0;
};

class VqvaeTask : public train::Task {
 public:
  VqvaeTask(nn::Shared<models::VQVAE> model, optim::Optimizer& opt, Rngs* rngs, std::shared_ptr<Telemetry> tel)
      : Task(*model, [model](const Tensor& x) { return model->forward(x).recon; }, opt, rngs),
        model_(model),
        tel_(std::move(tel)) {}

  train::StepResult training_step(const data::Batch& batch) override {
    models::VQVAEOutput out = model_->forward(batch.input);
    Tensor recon = mse_loss(out.recon, batch.input);
    Tensor loss = recon + out.commitment_loss;
    const double loss_value = loss.item<float>();
    const bool applied = train::update(loss, optimizer());
    // The codebook's own step, after the optimizer's, on the same z_e.
    if (applied) model_->ema_update(out);
    nn::VQStats s = model_->stats(level0(out.indices));
    tel_->recon_mse = recon.item<float>();
    tel_->perplexity = s.perplexity;
    tel_->usage = s.usage;
    tel_->dead_codes = double(s.dead);  // after this step's EMA update and re-init
    return {.loss = loss_value, .count = batch.size(), .applied = applied};
  }

  // Test MSE per pixel; the codes' histogram for usage and perplexity.
  train::StepResult validation_step(const data::Batch& batch) override {
    models::VQVAEOutput out = model_->forward(batch.input);
    const int64_t K = model_->options.codebook_size;
    if (int64_t(tel_->test_hist.size()) != K) tel_->test_hist.assign(size_t(K), 0);
    for (int64_t i : level0(out.indices).to_vector<int64_t>()) ++tel_->test_hist[size_t(i)];
    tel_->test_tokens += level0(out.indices).numel();
    return {.loss = mse_loss(out.recon, batch.input).item<float>(), .count = batch.size()};
  }

 private:
  Tensor level0(const Tensor& indices) const {
    return model_->levels() > 1 ? indices.select(-1, 0) : indices;
  }
  nn::Shared<models::VQVAE> model_;
  std::shared_ptr<Telemetry> tel_;
};

// Writes the step's recon_mse / perplexity / usage into logs() for the CSV,
// and after each epoch's validation test/usage, test/perplexity and the
// reconstruction grid. Register after Validation, before the bar and the CSV.
class VqTelemetry : public train::Callback, public io::Stateful {
 public:
  VqTelemetry(nn::Shared<models::VQVAE> model, std::shared_ptr<Telemetry> tel, Tensor grid_images,
              std::filesystem::path dir)
      : model_(std::move(model)), tel_(std::move(tel)), images_(std::move(grid_images)), dir_(std::move(dir)) {}

  // A resumed run puts the last test figures back into logs() (a checkpoint
  // does not hold logs()), so its CSV rows equal an uninterrupted run's.
  void on_train_begin(train::Trainer& t) override {
    if (t.progress().global_step == 0) {
      usage_ = perplexity_ = NAN;
    } else if (!std::isnan(usage_)) {
      t.logs()["test/usage"] = usage_;
      t.logs()["test/perplexity"] = perplexity_;
    }
  }
  void checkpoint_objects(io::Checkpoint& ckpt) override { ckpt.state("vq_telemetry", *this); }
  io::State state() const override {
    return {{"test_usage", fmt::format("{}", usage_)}, {"test_perplexity", fmt::format("{}", perplexity_)}};
  }
  void load_state(const io::State& state) override {
    usage_ = io::state_f64(state, "test_usage", "VqTelemetry.load_state");
    perplexity_ = io::state_f64(state, "test_perplexity", "VqTelemetry.load_state");
  }

  void on_step_end(train::Trainer& t, const train::StepResult&) override {
    t.logs()["recon_mse"] = tel_->recon_mse;
    t.logs()["perplexity"] = tel_->perplexity;
    t.logs()["usage"] = tel_->usage;
    t.logs()["dead_codes"] = tel_->dead_codes;
  }

  void on_epoch_end(train::Trainer& t) override {
    if (tel_->test_tokens > 0) {
      double entropy = 0;
      int64_t used = 0;
      for (int64_t h : tel_->test_hist) {
        if (h == 0) continue;
        ++used;
        const double p = double(h) / double(tel_->test_tokens);
        entropy -= p * std::log(p);
      }
      usage_ = double(used) / double(tel_->test_hist.size());
      perplexity_ = std::exp(entropy);
      t.logs()["test/usage"] = usage_;
      t.logs()["test/perplexity"] = perplexity_;
      fmt::print(t.out(), "test codes: usage {:.3f} · perplexity {:.1f}\n", usage_, perplexity_);
      std::fill(tel_->test_hist.begin(), tel_->test_hist.end(), 0);
      tel_->test_tokens = 0;
    }
    write_grid(t.progress().epoch + 1);  // progress().epoch is 0-based here
  }

  double usage() const { return usage_; }
  double perplexity() const { return perplexity_; }
  const std::string& grid() const { return grid_; }

 private:
  void write_grid(int64_t epoch) {
    const bool was_training = model_->is_training();
    model_->eval();
    Tensor recon;
    {
      NoGradGuard no_grad;
      recon = model_->forward(images_).recon;
    }
    model_->train(was_training);
    grid_ = (dir_ / fmt::format("recon-epoch{}.png", epoch)).string();
    // Top row the test images, bottom row their reconstructions.
    io::save_image_grid(grid_, cat({images_, recon}, 0), images_.size(0));
  }

  nn::Shared<models::VQVAE> model_;
  std::shared_ptr<Telemetry> tel_;
  Tensor images_;
  std::filesystem::path dir_;
  double usage_ = NAN, perplexity_ = NAN;
  std::string grid_;
};

json hyper_parameters(const VqvaeOptions& o, int64_t batch_size) {
  return {{"codebook_size", o.codebook_size}, {"dim", o.dim},   {"levels", o.levels},
          {"batch_size", batch_size},         {"lr", o.lr},     {"beta", o.beta},
          {"decay", o.decay},                 {"dead_code_threshold", o.dead_code_threshold},
          {"seed", o.seed},                   {"limit", o.limit}, {"test_limit", o.test_limit}};
}

}  // namespace

VqvaeResult train_vqvae(const VqvaeOptions& o) {
  KILN_CHECK(o.codebook_size > 0 && o.codebook_size <= 65536, kOp, "--codebook-size must be in [1, 65536], got {}",
             o.codebook_size);
  KILN_CHECK(o.dim > 0 && o.dim <= 4096, kOp, "--dim must be in [1, 4096], got {}", o.dim);
  KILN_CHECK(o.levels >= 1 && o.levels <= 64, kOp, "--levels must be in [1, 64], got {}", o.levels);
  KILN_CHECK(o.epochs >= 1 && o.epochs <= 1'000'000, kOp, "--epochs must be in [1, 1000000], got {}", o.epochs);
  KILN_CHECK(o.batch_size > 0, kOp, "--batch-size must be positive, got {}", o.batch_size);
  KILN_CHECK(o.lr > 0 && std::isfinite(o.lr), kOp, "--lr must be a finite number in (0, inf), got {}", o.lr);
  KILN_CHECK(o.beta >= 0 && std::isfinite(o.beta), kOp, "--beta must be finite and >= 0, got {}", o.beta);
  KILN_CHECK(o.decay >= 0 && o.decay < 1, kOp, "--decay must be in [0, 1), got {}", o.decay);
  KILN_CHECK(o.dead_code_threshold >= 0 && o.dead_code_threshold < 1, kOp,
             "--dead-code-threshold must be in [0, 1), got {}", o.dead_code_threshold);
  KILN_CHECK(o.threads >= 0, kOp, "--threads must be non-negative, got {}", o.threads);
  KILN_CHECK(o.limit >= 0 && o.test_limit >= 0, kOp, "--limit and --test-limit must be non-negative");
  const train::OnNan on_nan = parse_on_nan(kOp, o.on_nan);
  RunFolder::check_path(kOp, o.out);

  // Pixels in [0, 1] (not normalised): the MSE is per pixel of the image itself.
  std::string root = o.data.empty() ? data::FashionMNIST::default_root() : o.data;
  auto train_set = std::make_shared<data::FashionMNIST>(
      root, true, data::FashionMNISTOptions{.normalize = false, .limit = o.limit});
  auto test_set = std::make_shared<data::FashionMNIST>(
      root, false, data::FashionMNISTOptions{.normalize = false, .limit = o.test_limit});
  const int64_t batch_size = std::min(o.batch_size, train_set->size());
  // The first batch seeds the codebook from its latents: it needs K of them.
  KILN_CHECK(batch_size * 49 >= o.codebook_size, kOp,
             "a batch of {} images gives {} latents, fewer than --codebook-size {} (the first batch seeds the codebook)",
             batch_size, batch_size * 49, o.codebook_size);
  // Locked for the whole run; refuses a folder holding another run unless
  // resuming or overwriting it; finds the checkpoint to resume from.
  JobRun run(job_run_options(kOp, "vqvae-fashion-mnist", o.out, o));
  std::ostream& log = run.log();
  const std::string& resume = run.resume_path();
  if (batch_size < o.batch_size)
    fmt::print(log, "--batch-size {} is more than the {} training images: using batches of {}\n", o.batch_size,
               train_set->size(), batch_size);
  data::DataLoader train_loader(train_set, {.batch_size = batch_size, .shuffle = true, .seed = o.seed});
  auto test_loader = std::make_shared<data::DataLoader>(
      test_set, data::DataLoaderOptions{.batch_size = std::clamp<int64_t>(test_set->size(), 1, 500),
                                        .shuffle = false, .prefetch = 1});

  json config = hyper_parameters(o, batch_size);
  const json overrides = run.check_hyper_parameters(run.saved_config(), config);
  config["job"] = "vqvae-fashion-mnist";
  config["epochs"] = o.epochs;
  if (!overrides.empty()) config["overrides"] = overrides;

  Rngs rngs{{"params", o.seed}};
  auto model = nn::make<models::VQVAE>(
      rngs, models::VQVAEOptions{.codebook_size = o.codebook_size,
                                 .dim = o.dim,
                                 .levels = o.levels,
                                 .vq = {.beta = o.beta,
                                        .decay = o.decay,
                                        .dead_code_threshold = o.dead_code_threshold,
                                        .seed = o.seed}});
  optim::Adam opt(model->parameters(), {.lr = o.lr});
  auto tel = std::make_shared<Telemetry>();
  VqvaeTask task(model, opt, &rngs, tel);

  // The grid's images: the first 8 of the test split.
  const int64_t n_grid = std::min<int64_t>(8, test_set->size());
  std::vector<Tensor> grid_images;
  for (int64_t i = 0; i < n_grid; ++i) grid_images.push_back(test_set->get(i).input);
  Tensor grid_batch = stack(grid_images, 0);

  if (!resume.empty()) fmt::print(log, "resuming from {}\n", resume);
  run.folder().start(log);
  auto checkpoints = std::make_shared<train::CheckpointCallback>(
      run.checkpoint_dir(), train::CheckpointCallbackOptions{.monitor = "val/loss", .restore_best = false});
  auto validation = std::make_shared<train::Validation>(test_loader);
  auto telemetry = std::make_shared<VqTelemetry>(model, tel, grid_batch, run.path());
  std::vector<std::shared_ptr<train::Callback>> callbacks = {
      std::make_shared<train::StopOnSignal>(),
      validation,
      telemetry,
      std::make_shared<train::ProgressBar>(),
      std::make_shared<train::CsvLogger>(
          run.csv(), train::CsvLoggerOptions{.append = false,
                                             .log_keys = {"recon_mse", "perplexity", "usage", "val/loss",
                                                          "test/usage", "test/perplexity", "dead_codes"}}),
      std::make_shared<train::Summary>(),
      checkpoints,
      std::make_shared<ReleasePreviousRun>(run.folder(), checkpoints),
  };
  train::Trainer trainer(o.epochs, callbacks, {.out = &log, .tty = o.tty, .config = config.dump(), .on_nan = on_nan});

  fmt::print(log, "vqvae: {} parameters · K {} · D {} · {} level{} · {} train / {} test images · batch {} · {} epoch{} · {}\n",
             model->num_parameters(), o.codebook_size, o.dim, o.levels, o.levels == 1 ? "" : "s", train_set->size(),
             test_set->size(), batch_size, o.epochs, o.epochs == 1 ? "" : "s", threads_and_cpu());

  train::SignalGuard signals;
  run.serve(trainer.control());
  try {
    trainer.fit(task, train_loader, resume);
  } catch (const train::NonFiniteLoss& e) {
    fail_on_nan(kOp, e, checkpoints->latest());
  }
  VqvaeResult result;
  result.test_mse = validation->result().loss;
  result.test_usage = telemetry->usage();
  result.test_perplexity = telemetry->perplexity();
  result.epochs = trainer.progress().epoch;
  result.train_seconds = trainer.elapsed();
  result.checkpoint = checkpoints->latest();
  result.csv = run.csv();
  result.grid = telemetry->grid();
  result.signal = train::SignalGuard::received();
  if (result.signal != 0)
    fmt::print(log, "stopped by {} at step {}: resume with --resume (from {})\n",
               train::SignalGuard::name(result.signal), trainer.progress().global_step, result.checkpoint);
  fmt::print(log, "test mse per pixel: {:.5f} · code usage {:.3f} · perplexity {:.1f}\n", result.test_mse,
             result.test_usage, result.test_perplexity);
  fmt::print(log, "wrote {}, {} and {}\n", result.csv, result.checkpoint, result.grid);
  return result;
}

}  // namespace kiln::app
