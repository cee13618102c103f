// Validation: one whole epoch of the validation loader, model in eval mode,
// no autograd, clock paused; writes "<prefix>loss" / "<prefix>accuracy".
#include "kiln/train/callbacks/validation.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <ostream>
#include <span>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/data/dataloader.h"
#include "kiln/train/metrics.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

namespace {

// Puts the model back in the mode it had, also when a validation step throws.
class RestoreTrainingMode {
 public:
  explicit RestoreTrainingMode(nn::Module& model) : model_(model), training_(model.is_training()) {}
  ~RestoreTrainingMode() { model_.train(training_); }
  RestoreTrainingMode(const RestoreTrainingMode&) = delete;
  RestoreTrainingMode& operator=(const RestoreTrainingMode&) = delete;

 private:
  nn::Module& model_;
  bool training_;
};

// Whether the trainer is between two steps of an epoch (not at its end).
bool mid_epoch(const Trainer& trainer) {
  int64_t done = trainer.progress().step_in_epoch;
  return done > 0 && done < trainer.steps_per_epoch();
}

}  // namespace

Validation::Validation(std::shared_ptr<data::DataLoader> loader, ValidationOptions options)
    : loader_(std::move(loader)), options_(std::move(options)) {
  KILN_CHECK(loader_ != nullptr, "Validation", "loader is null");
  KILN_CHECK(options_.every_n_steps >= 0, "Validation", "every_n_steps is {}; it must be >= 0 (0: epoch ends only)",
             options_.every_n_steps);
  KILN_CHECK(!options_.prefix.empty(), "Validation",
             "prefix is empty; the logs keys would clash with training's \"loss\"");
  KILN_CHECK(loader_->size() > 0, "Validation", "the loader has no batches (data set of {} examples, batch size {})",
             loader_->dataset().size(), loader_->batch_size());
  loss_key_ = options_.prefix + "loss";
  accuracy_key_ = options_.prefix + "accuracy";
  // "val/" prints as "validation:"; another prefix ("test/") as "validation test:".
  std::string bare =
      options_.prefix.back() == '/' ? options_.prefix.substr(0, options_.prefix.size() - 1) : options_.prefix;
  label_ = options_.prefix == "val/" ? "validation" : "validation " + bare;
}

void Validation::on_train_begin(Trainer& trainer) {
  // A fresh run forgets an earlier fit's result.
  if (trainer.progress().global_step == 0) {
    result_ = ValidationResult{};
    return;
  }
  // A resumed one puts the restored result back into logs() (which a
  // checkpoint does not hold), so the callbacks reading "val/loss" before the
  // next evaluation (a CsvLogger's column) see what an uninterrupted run saw.
  if (result_.global_step >= 0) write_logs(trainer);
}

void Validation::write_logs(Trainer& trainer) const {
  auto& logs = trainer.logs();
  logs[loss_key_] = result_.loss;
  if (std::isnan(result_.accuracy))
    logs.erase(accuracy_key_);
  else
    logs[accuracy_key_] = result_.accuracy;
}

void Validation::on_step_end(Trainer& trainer, const StepResult& step) {
  if (options_.every_n_steps == 0) return;
  const io::Progress& p = trainer.progress();
  // The epoch's last step is evaluated by on_epoch_end, once.
  if (p.global_step % options_.every_n_steps == 0 && mid_epoch(trainer)) evaluate(trainer);
}

void Validation::on_epoch_end(Trainer& trainer) { evaluate(trainer); }

void Validation::on_train_end(Trainer& trainer) {
  if (trainer.state() == RunState::failed) return;
  int64_t step = trainer.progress().global_step;
  if (step > 0 && step != result_.global_step) evaluate(trainer);
}

void Validation::checkpoint_objects(io::Checkpoint& ckpt) {
  ckpt.state("validation:" + options_.prefix, *this);
  ckpt.state("validation:" + options_.prefix + "data", *loader_);
}

bool Validation::evaluate_now(Trainer& trainer) {
  evaluate(trainer);
  return true;
}

bool Validation::sharded(const Trainer& trainer) const {
  const data::DataLoaderOptions& lo = loader_->options();
  if (lo.world_size == 1) return false;  // every rank evaluates the whole set: nothing to reduce
  const DistributedHooks* d = trainer.run().distributed.get();
  KILN_CHECK(d != nullptr && d->world_size() == lo.world_size && d->rank() == lo.rank, "Validation",
             "the validation loader is sharded as rank {} of {}, but the Trainer runs {}; give the loader the "
             "Trainer's rank and world size (RunOptions::distributed)",
             lo.rank, lo.world_size,
             d ? fmt::format("as rank {} of {}", d->rank(), d->world_size()) : std::string("in one process"));
  return true;
}

const ValidationResult& Validation::evaluate(Trainer& trainer) {
  using Clock = std::chrono::steady_clock;
  Trainer::ClockPause pause = trainer.pause_clock();  // excluded from training throughput
  Clock::time_point start = Clock::now();

  Task& task = trainer.task();
  const bool shard = sharded(trainer);  // checked before the work
  // Sums over this process' batches: loss x count, count, correct, and the
  // count of the batches that report correct (accuracy's denominator).
  double sums[4] = {0, 0, 0, 0};
  {
    RestoreTrainingMode restore(task.model());
    task.model().eval();
    NoGradGuard no_grad;
    // An evaluation that threw part-way left the loader mid-epoch: start a whole one.
    if (loader_->position() != 0 && !loader_->epoch_done()) loader_->next_epoch();
    for (const data::Batch& batch : *loader_) {
      // A sharded loader's short last batch may leave this rank no rows.
      if (batch.size() == 0) continue;
      StepResult r = task.validation_step(batch);
      KILN_CHECK(r.count >= 0 && r.correct <= r.count, "Validation",
                 "validation_step returned count {} and correct {}; need count >= 0 and correct <= count", r.count,
                 r.correct);
      if (r.count == 0) continue;
      sums[0] += r.loss * double(r.count);
      sums[1] += double(r.count);
      if (r.correct >= 0) {
        sums[2] += double(r.correct);
        sums[3] += double(r.count);
      }
    }
  }
  // A sharded loader (DataLoaderOptions::rank / world_size): each rank
  // evaluated its slice of every global batch; the sums over ranks are the
  // whole validation set's, as one process evaluating all of it would have
  // them (up to the order of the additions). Counts stay exact in a double
  // (below 2^53).
  if (shard) trainer.run().distributed->all_reduce_sum(std::span<double>(sums, 4));

  result_.loss = sums[1] > 0 ? sums[0] / sums[1] : std::numeric_limits<double>::quiet_NaN();
  result_.accuracy = sums[3] > 0 ? sums[2] / sums[3] : std::numeric_limits<double>::quiet_NaN();
  result_.count = int64_t(sums[1]);
  result_.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result_.global_step = trainer.progress().global_step;

  write_logs(trainer);

  // On a terminal a progress bar's line may be open (it is rewritten in place
  // until the bar ends it at the epoch's end, after this): erase it; the bar
  // draws it again below this line at its next update.
  std::string line = trainer.tty() && trainer.progress().step_in_epoch > 0 ? "\r\x1b[K" : "";
  line += fmt::format("{}: loss {:.4f}", label_, result_.loss);
  if (!std::isnan(result_.accuracy)) line += fmt::format(" · accuracy {:.4f}", result_.accuracy);
  line += fmt::format(" · {:.2f}s\n", result_.seconds);
  trainer.out() << line << std::flush;
  return result_;
}

io::State Validation::state() const {
  return {{"loss", fmt::format("{}", result_.loss)},
          {"accuracy", fmt::format("{}", result_.accuracy)},
          {"count", std::to_string(result_.count)},
          {"seconds", fmt::format("{}", result_.seconds)},
          {"global_step", std::to_string(result_.global_step)}};
}

void Validation::load_state(const io::State& state) {
  const char* op = "Validation.load_state";
  ValidationResult r;
  r.loss = io::state_f64(state, "loss", op);
  r.accuracy = io::state_f64(state, "accuracy", op);
  r.count = io::state_i64(state, "count", op);
  r.seconds = io::state_f64(state, "seconds", op);
  r.global_step = io::state_i64(state, "global_step", op);
  KILN_CHECK(r.count >= 0, op, "count is {}; it must be >= 0", r.count);
  KILN_CHECK(r.global_step >= -1, op, "global_step is {}; it must be >= -1", r.global_step);
  result_ = r;
}

}  // namespace kiln::train
