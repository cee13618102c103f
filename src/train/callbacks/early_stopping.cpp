// EarlyStopping: Keras' patience rule over a value of trainer.logs().
#include "kiln/train/callbacks/early_stopping.h"

#include <fmt/format.h>

#include <cmath>
#include <ostream>

#include "kiln/core/error.h"
#include "kiln/train/trainer.h"
#include "src/train/callbacks/monitor.h"

namespace kiln::train {

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : options_(std::move(options)) {
  KILN_CHECK(!options_.monitor.empty(), "EarlyStopping",
             "monitor is empty; name a key of trainer.logs(), e.g. \"val/loss\"");
  KILN_CHECK(options_.patience >= 0, "EarlyStopping", "patience is {}; it must be >= 0", options_.patience);
  detail::check_min_delta(options_.min_delta, "EarlyStopping");
  KILN_CHECK(!options_.baseline || !std::isnan(*options_.baseline), "EarlyStopping", "baseline is NaN");
  reset();
}

void EarlyStopping::reset() {
  best_ = io::worst_metric(options_.mode);
  best_epoch_ = wait_ = stopped_epoch_ = 0;
}

bool EarlyStopping::improves(double value, double reference) const {
  return io::improves(value, reference, options_.mode, options_.min_delta);
}

void EarlyStopping::on_train_begin(Trainer& trainer) {
  if (trainer.progress().global_step == 0) reset();
}

// Keras 3's EarlyStopping.on_epoch_end: an improvement of the best resets the
// patience counter only when it also beats the baseline, and an improving
// epoch never stops; nor does the first epoch.
void EarlyStopping::on_epoch_end(Trainer& trainer) {
  double value = detail::monitored_value(trainer, options_.monitor, "EarlyStopping");
  int64_t epoch = detail::epoch_number(trainer);
  ++wait_;
  if (improves(value, best_)) {
    best_ = value;
    best_epoch_ = epoch;
    if (!options_.baseline || improves(value, *options_.baseline)) wait_ = 0;
    return;
  }
  if (wait_ < options_.patience || epoch <= 1) return;
  stopped_epoch_ = epoch;
  trainer.request_stop();
  // "did not beat the baseline" while no value has: the best may have improved meanwhile.
  bool below_baseline = options_.baseline && !improves(best_, *options_.baseline);
  std::string what = below_baseline
                         ? fmt::format("did not beat the baseline {}", detail::format_value(*options_.baseline))
                         : std::string("did not improve");
  std::string best = best_epoch_ > 0 ? fmt::format("best {} at epoch {}", detail::format_value(best_), best_epoch_)
                                     : std::string("no finite value yet");
  trainer.out() << fmt::format("epoch {}: early stopping ({} {} for {} epoch{}, {})\n", epoch, options_.monitor, what,
                               wait_, wait_ == 1 ? "" : "s", best)
                << std::flush;
}

void EarlyStopping::checkpoint_objects(io::Checkpoint& ckpt) { ckpt.state("early_stopping", *this); }

io::State EarlyStopping::state() const {
  return {{"best", fmt::format("{}", best_)},
          {"best_epoch", std::to_string(best_epoch_)},
          {"wait", std::to_string(wait_)},
          {"stopped_epoch", std::to_string(stopped_epoch_)}};
}

void EarlyStopping::load_state(const io::State& state) {
  const char* op = "EarlyStopping.load_state";
  double best = io::state_f64(state, "best", op);
  int64_t best_epoch = io::state_i64(state, "best_epoch", op);
  int64_t wait = io::state_i64(state, "wait", op);
  int64_t stopped_epoch = io::state_i64(state, "stopped_epoch", op);
  KILN_CHECK(!std::isnan(best), op, "best is NaN");
  KILN_CHECK(best_epoch >= 0 && wait >= 0 && stopped_epoch >= 0, op,
             "best_epoch {}, wait {} and stopped_epoch {} must be >= 0", best_epoch, wait, stopped_epoch);
  best_ = best;
  best_epoch_ = best_epoch;
  wait_ = wait;
  stopped_epoch_ = stopped_epoch;
}

}  // namespace kiln::train
