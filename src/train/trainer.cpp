#include "kiln/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <iostream>

#include "kiln/core/error.h"
#include "kiln/data/dataloader.h"
#include "kiln/optim/optimizer.h"
#include "kiln/train/control.h"

namespace kiln::train {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string shortest(double v) { return fmt::format("{}", v); }

// Where ranks other than 0 print: nowhere.
std::ostream& null_stream() {
  static std::ostream sink(nullptr);  // no buffer: every write is dropped
  return sink;
}

}  // namespace

NonFiniteLoss::NonFiniteLoss(double loss, int64_t step, int64_t epoch)
    : Error("Trainer",
            fmt::format("non-finite {} at step {} (epoch {}): training stopped before the step was counted, and no "
                        "checkpoint of it was written (RunOptions::on_nan = OnNan::skip skips such steps)",
                        std::isfinite(loss) ? fmt::format("gradients (loss {})", loss) : fmt::format("loss {}", loss),
                        step, epoch + 1),
            __FILE__, __LINE__),
      loss_(loss),
      step_(step),
      epoch_(epoch) {}

std::string NonFiniteLoss::what_was_not_finite() const {
  return std::isfinite(loss_) ? fmt::format("gradients (loss {})", loss_) : fmt::format("loss {}", loss_);
}

const char* to_string(RunState state) {
  switch (state) {
    case RunState::idle: return "idle";
    case RunState::running: return "running";
    case RunState::paused: return "paused";
    case RunState::stopping: return "stopping";
    case RunState::completed: return "completed";
    case RunState::failed: return "failed";
  }
  return "unknown";
}

double EpochStats::loss() const { return count > 0 ? loss_sum / double(count) : kNaN; }

double EpochStats::accuracy() const { return classified > 0 ? double(correct) / double(classified) : kNaN; }

Trainer::Trainer(int64_t max_epochs, std::vector<std::shared_ptr<Callback>> callbacks, RunOptions run)
    : max_epochs_(max_epochs),
      callbacks_(std::move(callbacks)),
      run_(std::move(run)),
      out_(run_.out ? run_.out : &std::cout),
      tty_(run_.tty.value_or(run_.out == nullptr && isatty(STDOUT_FILENO) == 1)),
      control_(std::make_shared<Control>()) {
  KILN_CHECK(max_epochs > 0, "Trainer", "max_epochs must be positive, got {}", max_epochs);
  KILN_CHECK(run_.max_steps >= 0, "Trainer", "run.max_steps must be non-negative, got {}", run_.max_steps);
  KILN_CHECK(run_.accumulate >= 1, "Trainer", "run.accumulate must be at least 1, got {}", run_.accumulate);
  if (run_.distributed && run_.distributed->rank() != 0) out_ = &null_stream();
  KILN_CHECK(run_.tokens_per_sample >= 0, "Trainer", "run.tokens_per_sample must be non-negative, got {}",
             run_.tokens_per_sample);
  for (size_t i = 0; i < callbacks_.size(); ++i)
    KILN_CHECK(callbacks_[i] != nullptr, "Trainer", "callback {} is null", i);
}

Trainer::~Trainer() = default;

Task& Trainer::task() const {
  KILN_CHECK(task_, "Trainer.task", "only available during fit()");
  return *task_;
}

data::DataLoader& Trainer::loader() const {
  KILN_CHECK(loader_, "Trainer.loader", "only available during fit()");
  return *loader_;
}

int64_t Trainer::steps_per_epoch() const {
  const int64_t n = loader().size(), a = run_.accumulate;
  return n / a + (n % a != 0);
}

int64_t Trainer::batch_size() const { return loader().batch_size(); }

void Trainer::request_stop() {
  stop_ = true;
  if (state_ == RunState::running || state_ == RunState::paused) state_ = RunState::stopping;
}

double Trainer::elapsed() const {
  double paused = paused_total_ + (pause_depth_ > 0 ? now_seconds() - pause_start_ : 0);
  return now_seconds() - fit_start_ - paused;
}

double Trainer::epoch_elapsed() const {
  double paused = epoch_paused_ + (pause_depth_ > 0 ? now_seconds() - pause_start_ : 0);
  return now_seconds() - epoch_start_ - paused;
}

void Trainer::pause_clock_begin() {
  if (pause_depth_++ == 0) pause_start_ = now_seconds();
}

void Trainer::pause_clock_end() {
  if (--pause_depth_ > 0) return;
  double paused = now_seconds() - pause_start_;
  paused_total_ += paused;
  epoch_paused_ += paused;
}

void Trainer::set_epoch_label(int64_t number, int64_t count) {
  KILN_CHECK(number >= 1 && count >= 1 && number <= count, "Trainer.set_epoch_label",
             "need 1 <= number <= count, got {} of {}", number, count);
  epoch_label_ = {number, count};
}

std::pair<int64_t, int64_t> Trainer::epoch_label() const {
  return epoch_label_.value_or(std::pair<int64_t, int64_t>{progress_.epoch + 1, max_epochs_});
}

io::Checkpoint Trainer::checkpoint() {
  io::Checkpoint ckpt;
  task().checkpoint_objects(ckpt);
  ckpt.progress(progress_);
  ckpt.state("data", loader());
  // The sums of the epoch in progress, so that a run resumed mid-epoch reports
  // the same epoch loss and accuracy as one that was not interrupted.
  ckpt.state(
      "trainer",
      [this] {
        return io::State{{"steps", std::to_string(epoch_.steps)},
                         {"count", std::to_string(epoch_.count)},
                         {"loss_sum", shortest(epoch_.loss_sum)},
                         {"correct", std::to_string(epoch_.correct)},
                         {"classified", std::to_string(epoch_.classified)},
                         {"last_loss", shortest(epoch_.last_loss)}};
      },
      [this](const io::State& s) {
        const char* op = "Trainer.load_state";
        EpochStats e;
        e.steps = io::state_i64(s, "steps", op);
        e.count = io::state_i64(s, "count", op);
        e.loss_sum = io::state_f64(s, "loss_sum", op);
        e.correct = io::state_i64(s, "correct", op);
        e.classified = io::state_i64(s, "classified", op);
        e.last_loss = io::state_f64(s, "last_loss", op);
        KILN_CHECK(e.steps >= 0 && e.count >= 0 && e.correct >= 0 && e.correct <= e.classified &&
                       e.classified <= e.count,
                   op, "inconsistent epoch sums (steps {}, count {}, correct {}, classified {})", e.steps, e.count,
                   e.correct, e.classified);
        epoch_ = e;
      });
  for (auto& cb : callbacks_) cb->checkpoint_objects(ckpt);
  ckpt.config(run_.config);
  return ckpt;
}

void Trainer::step_once(const data::Batch& batch) {
  for (auto& cb : callbacks_) cb->on_step_begin(*this);
  count_step(task_->training_step(batch));
}

void Trainer::step_once(std::span<const data::Batch> micro_batches) {
  for (auto& cb : callbacks_) cb->on_step_begin(*this);
  count_step(task_->accumulation_step(micro_batches, run_.distributed.get()));
}

void Trainer::count_step(const StepResult& r) {
  const bool finite = std::isfinite(r.loss) && r.applied;
  // Thrown before the step is counted: no callback sees it, so nothing of it
  // is logged as progress or checkpointed.
  if (!finite && run_.on_nan == OnNan::stop) throw NonFiniteLoss(r.loss, progress_.global_step + 1, progress_.epoch);
  ++progress_.global_step;
  ++progress_.step_in_epoch;
  ++epoch_.steps;
  if (finite) {
    epoch_.count += r.count;
    epoch_.loss_sum += r.loss * double(r.count);
    epoch_.last_loss = r.loss;
    if (r.correct >= 0) {
      epoch_.correct += r.correct;
      epoch_.classified += r.count;
    }
  } else {
    // OnNan::skip: the step consumed its batch and the schedules advance, but
    // its loss stays out of the epoch's means.
    ++skipped_steps_;
    *out_ << fmt::format("step {}: {} {}, step skipped (on_nan = skip)\n", progress_.global_step,
                         r.applied ? "loss" : "non-finite gradients, loss", r.loss)
          << std::flush;
  }
  logs_["loss"] = r.loss;
  for (auto& cb : callbacks_) cb->on_step_end(*this, r);
  control_->poll(*this);
}

void Trainer::end_epoch(History& history) {
  logs_["loss"] = epoch_.loss();
  if (epoch_.classified > 0)
    logs_["accuracy"] = epoch_.accuracy();
  else
    logs_.erase("accuracy");
  for (auto& cb : callbacks_) cb->on_epoch_end(*this);
  history.epochs.push_back(logs_);
  control_->poll(*this);
}

namespace {

// While alive, the named streams of rngs carry rank `rank`'s seeds
// (RunOptions::rank_streams); the shared seeds come back at the end, also
// when fit throws, with the counts drawn meanwhile.
class RankStreams {
 public:
  RankStreams(Rngs* rngs, const std::vector<std::string>& names, int rank, int world) {
    if (rngs == nullptr || world <= 1 || rank == 0) return;
    std::map<std::string, Rngs::Stream> state = rngs->state();
    for (const std::string& name : names)
      if (auto it = state.find(name); it != state.end()) {
        shared_[name] = it->second.seed;
        it->second.seed = rank_stream_seed(it->second.seed, rank);
      }
    rngs->set_state(std::move(state));
    rngs_ = rngs;
  }
  ~RankStreams() {
    if (rngs_ == nullptr) return;
    std::map<std::string, Rngs::Stream> state = rngs_->state();
    for (const auto& [name, seed] : shared_)
      if (auto it = state.find(name); it != state.end()) it->second.seed = seed;
    rngs_->set_state(std::move(state));
  }
  RankStreams(const RankStreams&) = delete;
  RankStreams& operator=(const RankStreams&) = delete;

 private:
  Rngs* rngs_ = nullptr;
  std::map<std::string, uint64_t> shared_;
};

}  // namespace

uint64_t rank_stream_seed(uint64_t seed, int rank) {
  if (rank == 0) return seed;
  // SplitMix64's finaliser over the seed and the rank, then once more over
  // the result: a bijection of the seed for each rank, far apart for
  // neighbouring ranks and seeds.
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  return mix(seed ^ mix(uint64_t(rank)));
}

History Trainer::fit(Task& task, data::DataLoader& train, const std::string& resume_from) {
  KILN_CHECK(state_ != RunState::running && state_ != RunState::paused && state_ != RunState::stopping,
             "Trainer.fit", "already running");
  KILN_CHECK(train.size() > 0, "Trainer.fit", "the training loader has no batches (dataset of {} examples, batch {}{})",
             train.dataset().size(), train.batch_size(), train.options().drop_last ? ", drop_last" : "");
  task_ = &task;
  loader_ = &train;
  progress_ = {};
  epoch_ = {};
  logs_.clear();
  stop_ = false;
  skipped_steps_ = 0;
  epoch_label_.reset();
  paused_total_ = epoch_paused_ = 0;
  pause_depth_ = 0;
  History history;
  if (!resume_from.empty()) checkpoint().load(resume_from);
  // After the load: the checkpoint holds rank 0's seeds (the shared ones).
  RankStreams rank_streams(task.rngs(), run_.rank_streams, rank(), world_size());

  fit_start_ = epoch_start_ = now_seconds();
  state_ = RunState::running;
  try {
    control_->begin(*this);
    task.model().train();
    for (auto& cb : callbacks_) cb->on_train_begin(*this);
    auto steps_left = [&] { return run_.max_steps == 0 || progress_.global_step < run_.max_steps; };
    while (progress_.epoch < max_epochs_ && !stop_ && steps_left()) {
      if (train.epoch_done() && progress_.step_in_epoch > 0) {
        // A checkpoint written at an epoch's end: that epoch is over.
        ++progress_.epoch;
        progress_.step_in_epoch = 0;
        continue;
      }
      if (progress_.step_in_epoch == 0) {
        if (train.position() > 0 || train.epoch() < progress_.epoch) train.next_epoch();
        epoch_ = {};
      }
      epoch_start_ = now_seconds();
      epoch_paused_ = 0;
      epoch_label_.reset();
      for (auto& cb : callbacks_) cb->on_epoch_begin(*this);
      task.model().train();
      const bool accumulating = run_.accumulate > 1 || run_.distributed != nullptr;
      std::vector<data::Batch> micro;
      while (!stop_ && steps_left()) {
        if (!accumulating) {
          std::optional<data::Batch> batch = train.next();
          if (!batch) break;
          step_once(*batch);
          continue;
        }
        // Up to `accumulate` batches per optimizer step; the epoch's last
        // step takes what is left.
        micro.clear();
        for (int64_t i = 0; i < run_.accumulate; ++i) {
          std::optional<data::Batch> batch = train.next();
          if (!batch) break;
          micro.push_back(std::move(*batch));
        }
        if (micro.empty()) break;
        step_once(std::span<const data::Batch>(micro));
        micro.clear();  // the loader reuses the buffers we let go of
      }
      if (!train.epoch_done()) break;  // stopped mid-epoch
      end_epoch(history);
      ++progress_.epoch;
      progress_.step_in_epoch = 0;
    }
  } catch (...) {
    fail();
    throw;
  }
  state_ = RunState::completed;
  try {
    for (auto& cb : callbacks_) cb->on_train_end(*this);
  } catch (...) {
    state_ = RunState::failed;
    control_->end(*this, RunState::failed);
    throw;
  }
  control_->end(*this, RunState::completed);
  history.state = state_;
  return history;
}

void Trainer::fail() {
  state_ = RunState::failed;
  for (auto& cb : callbacks_) {
    try {
      cb->on_train_end(*this);
    } catch (...) {
      // The first error is the one to report.
    }
  }
  control_->end(*this, RunState::failed);
}

}  // namespace kiln::train
