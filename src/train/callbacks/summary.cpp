// Summary: counts steps, samples, losses and training seconds; prints them at
// train end.
#include "kiln/train/callbacks/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ostream>

#include "kiln/core/error.h"
#include "kiln/train/callbacks/progress_bar.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

void Summary::on_train_begin(Trainer& trainer) {
  // A resumed fit() has loaded the counters just before this; a fresh one
  // starts them (also when this Summary served an earlier fit()).
  if (!loaded_) {
    steps_ = samples_ = 0;
    seconds_ = loss_sum_ = 0;
    initial_loss_ = final_loss_ = kNaN;
    latency_.clear();
  }
  loaded_ = false;
  seconds_at_begin_ = seconds_;
  elapsed_at_begin_ = last_step_elapsed_ = trainer.elapsed();
}

void Summary::on_step_end(Trainer& trainer, const StepResult& step) {
  const double now = trainer.elapsed();
  const double latency = now - last_step_elapsed_;
  last_step_elapsed_ = now;
  if (!std::isfinite(step.loss)) return;  // a step skipped for its loss (OnNan::skip) was not applied
  latency_.add(std::max(latency, 0.0));
  if (steps_ == 0) initial_loss_ = step.loss;
  final_loss_ = step.loss;
  loss_sum_ += step.loss;
  ++steps_;
  samples_ += step.count;
  seconds_ = seconds_at_begin_ + (trainer.elapsed() - elapsed_at_begin_);
}

double Summary::mean_loss() const { return steps_ > 0 ? loss_sum_ / static_cast<double>(steps_) : kNaN; }

double Summary::p50_ms() const {
  return steps_ > 0 && latency_.count() == steps_ ? latency_.quantile(0.50) * 1e3 : kNaN;
}

double Summary::p95_ms() const {
  return steps_ > 0 && latency_.count() == steps_ ? latency_.quantile(0.95) * 1e3 : kNaN;
}

std::string Summary::text(int64_t batch_size, int64_t tokens_per_sample) const {
  if (steps_ == 0) return "summary: no steps\n";
  std::string s = fmt::format("summary: loss: initial {:.4f} · final {:.4f} · mean {:.4f}\n", initial_loss_,
                              final_loss_, mean_loss());
  const double ms = seconds_ * 1e3 / static_cast<double>(steps_);
  const double samples_per_s = seconds_ > 0 ? static_cast<double>(samples_) / seconds_ : 0.0;
  s += fmt::format("Wall: {} ms/step", format_ms(ms));
  if (const double p50 = p50_ms(), p95 = p95_ms(); std::isfinite(p50))
    s += fmt::format(" · p50 {:.3f} · p95 {:.3f}", p50, p95);
  s += fmt::format(" · {} sample/s", format_rate(samples_per_s));
  if (tokens_per_sample > 0)
    s += fmt::format(" · {} token/s", format_rate(samples_per_s * static_cast<double>(tokens_per_sample)));
  s += fmt::format("\nrun: {:.2f}s · {} steps · batch {}", seconds_, steps_, batch_size);
  if (tokens_per_sample > 0) s += fmt::format(" · sequence {} token/sample", tokens_per_sample);
  s += '\n';
  return s;
}

void Summary::on_train_end(Trainer& trainer) {
  trainer.out() << text(trainer.batch_size(), trainer.run().tokens_per_sample) << std::flush;
}

void Summary::checkpoint_objects(io::Checkpoint& ckpt) { ckpt.state("summary", *this); }

io::State Summary::state() const {
  return {{"steps", fmt::format("{}", steps_)},
          {"samples", fmt::format("{}", samples_)},
          {"seconds", fmt::format("{}", seconds_)},
          {"loss_sum", fmt::format("{}", loss_sum_)},
          {"initial_loss", fmt::format("{}", initial_loss_)},
          {"final_loss", fmt::format("{}", final_loss_)},
          {"step_latency", latency_.str()}};
}

void Summary::load_state(const io::State& state) {
  const char* op = "Summary";
  const int64_t steps = io::state_i64(state, "steps", op);
  const int64_t samples = io::state_i64(state, "samples", op);
  const double seconds = io::state_f64(state, "seconds", op);
  const double loss_sum = io::state_f64(state, "loss_sum", op);
  const double initial = io::state_f64(state, "initial_loss", op);
  const double final_loss = io::state_f64(state, "final_loss", op);
  KILN_CHECK(steps >= 0 && samples >= 0, op, "state has steps {} and samples {}; both must be >= 0", steps, samples);
  KILN_CHECK(std::isfinite(seconds) && seconds >= 0, op, "state 'seconds' is {}, not a duration >= 0", seconds);
  auto it = state.find("step_latency");
  LatencyHistogram latency = it == state.end() ? LatencyHistogram() : LatencyHistogram::parse(it->second, op);
  KILN_CHECK(latency.count() <= steps, op, "state has {} step latencies for {} steps", latency.count(), steps);
  steps_ = steps;
  samples_ = samples;
  seconds_ = seconds;
  loss_sum_ = loss_sum;
  initial_loss_ = initial;
  final_loss_ = final_loss;
  latency_ = std::move(latency);
  seconds_at_begin_ = seconds_;
  loaded_ = true;
}

}  // namespace kiln::train
