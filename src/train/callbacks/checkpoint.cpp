// CheckpointCallback (a folder of resumable checkpoints through
// io::CheckpointManager) and ModelCheckpoint (the best weights in one file).
#include "kiln/train/callbacks/checkpoint.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <ostream>

#include "kiln/core/error.h"
#include "kiln/train/trainer.h"
#include "src/train/callbacks/monitor.h"

namespace kiln::train {

std::string metric_display_name(const std::string& monitor) {
  std::string name = monitor;
  for (char& c : name)
    if (c == '/') c = '_';
  return name;
}

// ---- CheckpointCallback ----

CheckpointCallback::CheckpointCallback(std::string dir, CheckpointCallbackOptions options)
    : options_(std::move(options)), display_name_(metric_display_name(options_.monitor)), ranked_by_(display_name_) {
  KILN_CHECK(!options_.monitor.empty(), "CheckpointCallback",
             "monitor is empty; name a key of trainer.logs(), e.g. \"val/loss\"");
  KILN_CHECK(!options_.loss_name.empty() && options_.loss_name.find_first_of(" \t\n") == std::string::npos,
             "CheckpointCallback", "loss_name '{}' must be a non-empty name without spaces, e.g. \"cross_entropy\"",
             options_.loss_name);
  KILN_CHECK(options_.every_n_steps >= 0, "CheckpointCallback",
             "every_n_steps is {}; it must be >= 0 (0: epoch ends only)", options_.every_n_steps);
  // The manager checks keep_last and min_delta, and the folder (created, writable).
  manager_ = std::make_unique<io::CheckpointManager>(std::move(dir), io::CheckpointManagerOptions{
                                                                         .keep_last = options_.keep_last,
                                                                         .keep_best = true,
                                                                         .monitor = options_.monitor,
                                                                         .mode = options_.mode,
                                                                         .min_delta = options_.min_delta,
                                                                     });
}

void CheckpointCallback::on_train_begin(Trainer& trainer) {
  for (const std::string& problem : manager_->problems())
    trainer.out() << "checkpoint folder " << manager_->dir() << ": " << problem << '\n';
  last_saved_step_ = trainer.progress().global_step;  // resumed: the checkpoint holds this step
  if (last_saved_step_ != 0) return;                  // resumed: the checkpoint restored our state too
  // A fresh run would rank its checkpoints against another run's best and
  // could restore that run's weights at the end.
  std::optional<std::string> latest = manager_->latest();
  KILN_CHECK(!latest, "CheckpointCallback",
             "folder '{}' already holds checkpoints of another run (latest {}); resume from it with "
             "trainer.fit(task, loader, callback.latest()), or train into an empty folder",
             manager_->dir(), latest.value_or(""));
  best_epoch_ = last_epoch_ = 0;
  best_step_ = -1;
}

void CheckpointCallback::on_step_end(Trainer& trainer, const StepResult& step) {
  if (options_.every_n_steps == 0) return;
  const io::Progress& p = trainer.progress();
  // The epoch's last step is saved (and ranked) by on_epoch_end.
  if (p.global_step % options_.every_n_steps == 0 && p.step_in_epoch < trainer.steps_per_epoch()) save(trainer, {});
}

void CheckpointCallback::on_epoch_end(Trainer& trainer) {
  const auto& logs = trainer.logs();
  // The monitor when a callback before this one wrote it, else the epoch's training loss.
  auto it = logs.find(options_.monitor);
  bool fallback = it == logs.end();
  if (fallback) it = logs.find("loss");
  KILN_CHECK(it != logs.end(), "CheckpointCallback",
             "trainer.logs() has neither '{}' nor 'loss' at the end of epoch {}", options_.monitor,
             detail::epoch_number(trainer));
  double value = it->second;
  // The training loss is printed under the loss function's name (spec 002).
  const std::string& name = fallback ? options_.loss_name : display_name_;
  ranked_by_ = name;

  int64_t epoch = detail::epoch_number(trainer);
  std::optional<double> previous = manager_->best_metric();
  bool improved = manager_->is_better(value);
  if (improved) {
    best_epoch_ = epoch;
    best_step_ = trainer.progress().global_step;
  }
  last_epoch_ = epoch;
  save(trainer, value);  // after updating our state: the checkpoint holds it

  std::string from = detail::format_value(previous.value_or(io::worst_metric(options_.mode)));
  if (improved)
    trainer.out() << fmt::format("epoch {}: {} improved from {} to {} — saving model\n", epoch, name, from,
                                 detail::format_value(value));
  else
    trainer.out() << fmt::format("epoch {}: {} did not improve from {}\n", epoch, name, from);
  trainer.out() << std::flush;
}

void CheckpointCallback::on_train_end(Trainer& trainer) {
  if (trainer.state() == RunState::failed) return;
  // A run that ended between two saves (max_steps, a stop command mid-epoch)
  // saves where it is, so that fit(..., latest()) continues from there.
  if (trainer.progress().global_step != last_saved_step_) {
    std::string path = save(trainer, {});
    trainer.out() << "saved checkpoint " << path << '\n' << std::flush;
  }
  if (!options_.restore_best) return;
  // The model already holds the best weights when nothing was trained after the best checkpoint.
  if (best_step_ < 0 || best_step_ == trainer.progress().global_step) return;
  std::optional<std::string> path = manager_->best();
  if (!path) {
    trainer.out() << fmt::format("cannot restore the best weights of epoch {}: its checkpoint is gone from {}\n",
                                 best_epoch_, manager_->dir());
    return;
  }
  // Only the task's objects (model, optimizer, random streams): progress, the
  // data order and the callbacks stay where training ended.
  io::Checkpoint ckpt;
  trainer.task().checkpoint_objects(ckpt);
  ckpt.load(*path);
  trainer.out() << fmt::format("restored best weights from epoch {} ({} {})\n", best_epoch_, ranked_by_,
                               detail::format_value(manager_->best_metric().value_or(NAN)))
                << std::flush;
}

void CheckpointCallback::checkpoint_objects(io::Checkpoint& ckpt) { ckpt.state("checkpoint", *this); }

bool CheckpointCallback::save_now(Trainer& trainer) {
  std::string path = save(trainer, {});
  trainer.out() << "saved checkpoint " << path << '\n' << std::flush;
  return true;
}

std::string CheckpointCallback::save(Trainer& trainer, std::optional<double> metric) {
  io::Checkpoint ckpt = trainer.checkpoint();
  std::string path = manager_->save(ckpt, trainer.progress().global_step, metric);
  last_saved_step_ = trainer.progress().global_step;
  return path;
}

std::string CheckpointCallback::latest() const { return manager_->latest().value_or(""); }

std::string CheckpointCallback::best() const { return manager_->best().value_or(""); }

io::State CheckpointCallback::state() const {
  return {{"best_epoch", std::to_string(best_epoch_)},
          {"best_step", std::to_string(best_step_)},
          {"last_epoch", std::to_string(last_epoch_)},
          {"ranked_by", ranked_by_}};
}

void CheckpointCallback::load_state(const io::State& state) {
  const char* op = "CheckpointCallback.load_state";
  int64_t best_epoch = io::state_i64(state, "best_epoch", op);
  int64_t best_step = io::state_i64(state, "best_step", op);
  int64_t last_epoch = io::state_i64(state, "last_epoch", op);
  KILN_CHECK(best_epoch >= 0 && last_epoch >= 0 && best_step >= -1, op,
             "best_epoch {}, best_step {}, last_epoch {} out of range", best_epoch, best_step, last_epoch);
  best_epoch_ = best_epoch;
  best_step_ = best_step;
  last_epoch_ = last_epoch;
  // The loss-name record; absent from checkpoints written before it existed.
  if (auto it = state.find("ranked_by"); it != state.end() && !it->second.empty()) ranked_by_ = it->second;
}

// ---- ModelCheckpoint ----

ModelCheckpoint::ModelCheckpoint(std::string path, ModelCheckpointOptions options)
    : path_(std::move(path)), options_(std::move(options)), display_name_(metric_display_name(options_.monitor)) {
  KILN_CHECK(!path_.empty(), "ModelCheckpoint", "path is empty");
  KILN_CHECK(!options_.monitor.empty(), "ModelCheckpoint",
             "monitor is empty; name a key of trainer.logs(), e.g. \"val/loss\"");
  detail::check_min_delta(options_.min_delta, "ModelCheckpoint");
  std::filesystem::path folder = std::filesystem::path(path_).parent_path();
  std::error_code ec;
  KILN_CHECK(folder.empty() || std::filesystem::is_directory(folder, ec), "ModelCheckpoint",
             "path '{}': the folder '{}' does not exist", path_, folder.string());
  KILN_CHECK(!std::filesystem::is_directory(path_, ec), "ModelCheckpoint", "path '{}' is a folder; give a file name",
             path_);
  reset();
}

void ModelCheckpoint::reset() {
  best_ = io::worst_metric(options_.mode);
  best_epoch_ = 0;
}

void ModelCheckpoint::on_train_begin(Trainer& trainer) {
  if (trainer.progress().global_step == 0) reset();
}

void ModelCheckpoint::on_epoch_end(Trainer& trainer) {
  double value = detail::monitored_value(trainer, options_.monitor, "ModelCheckpoint");
  int64_t epoch = detail::epoch_number(trainer);
  if (!io::improves(value, best_, options_.mode, options_.min_delta)) {
    if (options_.verbose)
      trainer.out() << fmt::format("epoch {}: {} did not improve from {}\n", epoch, display_name_,
                                   detail::format_value(best_))
                    << std::flush;
    return;
  }
  io::Checkpoint weights;
  weights.model(trainer.task().model());
  weights.save(path_);  // atomic: the previous best or this one, never a broken file
  if (options_.verbose)
    trainer.out() << fmt::format("epoch {}: {} improved from {} to {} — saving model to {}\n", epoch, display_name_,
                                 detail::format_value(best_), detail::format_value(value), path_)
                  << std::flush;
  best_ = value;
  best_epoch_ = epoch;
}

void ModelCheckpoint::checkpoint_objects(io::Checkpoint& ckpt) { ckpt.state("model_checkpoint", *this); }

io::State ModelCheckpoint::state() const {
  return {{"best", fmt::format("{}", best_)}, {"best_epoch", std::to_string(best_epoch_)}};
}

void ModelCheckpoint::load_state(const io::State& state) {
  const char* op = "ModelCheckpoint.load_state";
  double best = io::state_f64(state, "best", op);
  int64_t best_epoch = io::state_i64(state, "best_epoch", op);
  KILN_CHECK(!std::isnan(best), op, "best is NaN");
  KILN_CHECK(best_epoch >= 0, op, "best_epoch is {}; it must be >= 0", best_epoch);
  best_ = best;
  best_epoch_ = best_epoch;
}

}  // namespace kiln::train
