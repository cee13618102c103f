// The learning-rate schedules: option checks and closed forms in double. The
// expressions keep PyTorch 1.13's order of operations (lr_scheduler.py), so
// that values agree to a few ulps, not just to a tolerance.
#include "kiln/optim/schedulers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "kiln/core/error.h"

// NOTE [ No FMA contraction in schedules ]: with -march=native GCC fuses
// a * b + c into one rounding by default (-ffp-contract=fast), which moves
// PyTorch's float phase boundaries (0.1 * 10 - 1 becomes 5.6e-17, not 0) and
// the last ulps of every value. CMakeLists.txt compiles this file with
// -ffp-contract=off: schedules are scalar code, each operation rounds alone.

namespace kiln::optim {

namespace {

constexpr double kPi = std::numbers::pi;  // == Python's math.pi

void check_lr(const std::string& op, const char* option, double v) {
  KILN_CHECK(std::isfinite(v) && v >= 0.0, op, "{} must be finite and >= 0, got {}", option, v);
}

void check_steps(const std::string& op, const char* option, int64_t v, int64_t lo) {
  KILN_CHECK(v >= lo, op, "{} must be >= {}, got {}", option, lo, v);
}

void check_factor(const std::string& op, const char* option, double v) {
  KILN_CHECK(std::isfinite(v) && v > 0.0, op, "{} must be finite and > 0, got {}", option, v);
}

// Plateau schedulers carry metric state that only step(metric) advances; a
// composite would only ever ask them lr(step), a constant.
void check_child(const std::string& op, const char* what, const LRScheduler* child) {
  KILN_CHECK(child != nullptr, op, "{} is null", what);
  KILN_CHECK(dynamic_cast<const ReduceOnPlateauScheduler*>(child) == nullptr, op,
             "{} is a ReduceOnPlateauScheduler, which only moves with step(metric) and cannot be composed", what);
}

}  // namespace

// ---- Constant ----

ConstantScheduler::ConstantScheduler(const ConstantOptions& options) : options_(options) {
  check_lr(name(), "lr", options.lr);
}

double ConstantScheduler::lr(int64_t step) const {
  check_step(step);
  return options_.lr;
}

// ---- Linear ----

LinearScheduler::LinearScheduler(const LinearOptions& options) : options_(options) {
  check_lr(name(), "start_lr", options.start_lr);
  check_lr(name(), "end_lr", options.end_lr);
  check_steps(name(), "total_steps", options.total_steps, 1);
}

double LinearScheduler::lr(int64_t step) const {
  check_step(step);
  const auto& o = options_;
  const int64_t t = std::min(step, o.total_steps);
  return o.start_lr + (o.end_lr - o.start_lr) * double(t) / double(o.total_steps);
}

// ---- Step ----

StepScheduler::StepScheduler(const StepOptions& options) : options_(options) {
  check_lr(name(), "lr", options.lr);
  check_steps(name(), "step_size", options.step_size, 1);
  check_factor(name(), "gamma", options.gamma);
}

double StepScheduler::lr(int64_t step) const {
  check_step(step);
  return options_.lr * std::pow(options_.gamma, double(step / options_.step_size));
}

// ---- MultiStep ----

MultiStepScheduler::MultiStepScheduler(const MultiStepOptions& options) : options_(options) {
  check_lr(name(), "lr", options.lr);
  check_factor(name(), "gamma", options.gamma);
  const auto& m = options.milestones;
  for (size_t i = 0; i < m.size(); ++i) {
    KILN_CHECK(m[i] >= 0, name(), "milestones[{}] must be >= 0, got {}", i, m[i]);
    KILN_CHECK(i == 0 || m[i] > m[i - 1], name(), "milestones must be strictly increasing, got {} after {}", m[i],
               m[i - 1]);
  }
}

double MultiStepScheduler::lr(int64_t step) const {
  check_step(step);
  const auto& m = options_.milestones;
  const auto passed = std::upper_bound(m.begin(), m.end(), step) - m.begin();  // milestones <= step
  return options_.lr * std::pow(options_.gamma, double(passed));
}

// ---- Exponential ----

ExponentialScheduler::ExponentialScheduler(const ExponentialOptions& options) : options_(options) {
  check_lr(name(), "lr", options.lr);
  check_factor(name(), "gamma", options.gamma);
}

double ExponentialScheduler::lr(int64_t step) const {
  check_step(step);
  return options_.lr * std::pow(options_.gamma, double(step));
}

// ---- Lambda ----

LambdaScheduler::LambdaScheduler(std::function<double(int64_t)> fn) : fn_(std::move(fn)) {
  KILN_CHECK(bool(fn_), name(), "fn is empty");
}

double LambdaScheduler::lr(int64_t step) const {
  check_step(step);
  const double v = fn_(step);
  KILN_CHECK(std::isfinite(v) && v >= 0.0, name(), "fn({}) returned {}: a learning rate must be finite and >= 0", step,
             v);
  return v;
}

// ---- Cosine (S1) ----

CosineScheduler::CosineScheduler(const CosineOptions& options) : options_(options) {
  check_lr(name(), "max_lr", options.max_lr);
  check_lr(name(), "min_lr", options.min_lr);
  KILN_CHECK(options.min_lr <= options.max_lr, name(), "min_lr {} must be <= max_lr {}", options.min_lr,
             options.max_lr);
  check_steps(name(), "total_steps", options.total_steps, 1);
}

double CosineScheduler::lr(int64_t step) const {
  check_step(step);
  const auto& o = options_;
  const int64_t t = std::min(step, o.total_steps);  // PyTorch climbs back up past T_max; kiln holds min_lr
  return o.min_lr + (o.max_lr - o.min_lr) * (1 + std::cos(kPi * double(t) / double(o.total_steps))) / 2;
}

// ---- Cosine with warm restarts (S2) ----

CosineWarmRestartsScheduler::CosineWarmRestartsScheduler(const CosineWarmRestartsOptions& options)
    : options_(options) {
  check_lr(name(), "max_lr", options.max_lr);
  check_lr(name(), "min_lr", options.min_lr);
  KILN_CHECK(options.min_lr <= options.max_lr, name(), "min_lr {} must be <= max_lr {}", options.min_lr,
             options.max_lr);
  check_steps(name(), "t0", options.t0, 1);
  check_steps(name(), "t_mult", options.t_mult, 1);
}

double CosineWarmRestartsScheduler::lr(int64_t step) const {
  check_step(step);
  const auto& o = options_;
  // t_cur: steps since the last restart; t_i: length of the current period.
  int64_t t_cur = step, t_i = o.t0;
  if (o.t_mult == 1) {
    t_cur = step % o.t0;
  } else {
    while (t_cur >= t_i) {  // periods grow geometrically: O(log step) rounds
      t_cur -= t_i;
      t_i = t_i > std::numeric_limits<int64_t>::max() / o.t_mult ? std::numeric_limits<int64_t>::max()
                                                                  : t_i * o.t_mult;
    }
  }
  return o.min_lr + (o.max_lr - o.min_lr) * (1 + std::cos(kPi * double(t_cur) / double(t_i))) / 2;
}

// ---- Warmup (S6) ----

WarmupScheduler::WarmupScheduler(const WarmupOptions& options, std::shared_ptr<LRScheduler> after)
    : options_(options), after_(std::move(after)) {
  check_lr(name(), "target_lr", options.target_lr);
  check_lr(name(), "start_lr", options.start_lr);
  check_steps(name(), "warmup_steps", options.warmup_steps, 0);
  if (after_) check_child(name(), "after", after_.get());
}

double WarmupScheduler::lr(int64_t step) const {
  check_step(step);
  const auto& o = options_;
  if (step < o.warmup_steps)
    return o.start_lr + (o.target_lr - o.start_lr) * double(step) / double(o.warmup_steps);
  return after_ ? after_->lr(step - o.warmup_steps) : o.target_lr;
}

std::optional<double> WarmupScheduler::momentum(int64_t step) const {
  check_step(step);
  if (!after_) return std::nullopt;
  return after_->momentum(std::max<int64_t>(step - options_.warmup_steps, 0));
}

std::vector<std::pair<std::string, LRScheduler*>> WarmupScheduler::children() const {
  if (!after_) return {};
  return {{"after", after_.get()}};
}

void WarmupScheduler::on_seek() {
  if (after_ && last_step() >= options_.warmup_steps) seek(*after_, last_step() - options_.warmup_steps);
}

// ---- Linear warmup + cosine (S3) ----

namespace {
std::shared_ptr<LRScheduler> warmup_cosine_tail(const LinearWarmupCosineOptions& o) {
  const char* op = "LinearWarmupCosineScheduler";
  check_lr(op, "target_lr", o.target_lr);
  check_lr(op, "min_lr", o.min_lr);
  check_lr(op, "start_lr", o.start_lr);
  KILN_CHECK(o.min_lr <= o.target_lr, op, "min_lr {} must be <= target_lr {}", o.min_lr, o.target_lr);
  check_steps(op, "warmup_steps", o.warmup_steps, 0);
  KILN_CHECK(o.total_steps > o.warmup_steps, op, "total_steps {} must be > warmup_steps {}", o.total_steps,
             o.warmup_steps);
  return std::make_shared<CosineScheduler>(
      CosineOptions{.max_lr = o.target_lr, .min_lr = o.min_lr, .total_steps = o.total_steps - o.warmup_steps});
}
}  // namespace

LinearWarmupCosineScheduler::LinearWarmupCosineScheduler(const LinearWarmupCosineOptions& options)
    : WarmupScheduler({.target_lr = options.target_lr, .warmup_steps = options.warmup_steps, .start_lr = options.start_lr},
                      warmup_cosine_tail(options)) {}

// ---- One-cycle (S4) ----

OneCycleScheduler::OneCycleScheduler(const OneCycleOptions& options) : options_(options) {
  const auto& o = options;
  KILN_CHECK(std::isfinite(o.max_lr) && o.max_lr > 0.0, name(), "max_lr must be finite and > 0, got {}", o.max_lr);
  check_steps(name(), "total_steps", o.total_steps, 1);
  KILN_CHECK(o.pct_start >= 0.0 && o.pct_start <= 1.0, name(), "pct_start must be in [0, 1], got {}", o.pct_start);
  check_factor(name(), "div_factor", o.div_factor);
  check_factor(name(), "final_div_factor", o.final_div_factor);
  if (o.cycle_momentum) {
    check_lr(name(), "base_momentum", o.base_momentum);
    check_lr(name(), "max_momentum", o.max_momentum);
  }
  // PyTorch's phases and float boundaries (a phase ends at its end_step,
  // inclusive; the next starts counting from that same end_step).
  const double initial_lr = o.max_lr / o.div_factor;
  const double min_lr = initial_lr / o.final_div_factor;
  const double total = double(o.total_steps);
  const double up_end = o.pct_start * total - 1;
  if (o.three_phase) {
    phases_ = {{up_end, initial_lr, o.max_lr, o.max_momentum, o.base_momentum},
               {2 * o.pct_start * total - 2, o.max_lr, initial_lr, o.base_momentum, o.max_momentum},
               {total - 1, initial_lr, min_lr, o.max_momentum, o.max_momentum}};
  } else {
    phases_ = {{up_end, initial_lr, o.max_lr, o.max_momentum, o.base_momentum},
               {total - 1, o.max_lr, min_lr, o.base_momentum, o.max_momentum}};
  }
  // Every phase some step in [0, total_steps) falls into must have a length
  // (PyTorch divides by zero there).
  double start = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const double end = phases_[i].end_step;
    const double first_step = i == 0 ? 0.0 : std::floor(start) + 1;  // first integer step past the previous phase
    const bool reached = first_step <= total - 1 && (end >= first_step || i + 1 == phases_.size());
    KILN_CHECK(!reached || end > start, name(),
               "pct_start {} with total_steps {} leaves phase {} of the schedule empty (its steps run from {} to {}); "
               "need pct_start * total_steps > 1",
               o.pct_start, o.total_steps, i + 1, start, end);
    start = end;
  }
}

double OneCycleScheduler::anneal(double start, double end, double pct) const {
  if (options_.anneal == Anneal::Linear) return (end - start) * pct + start;
  const double cos_out = std::cos(kPi * pct) + 1;
  return end + (start - end) / 2.0 * cos_out;
}

std::pair<const OneCycleScheduler::Phase*, double> OneCycleScheduler::locate(int64_t step) const {
  const double s = double(std::min(step, options_.total_steps - 1));  // the last value holds past the end
  double start = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const double end = phases_[i].end_step;
    if (s <= end || i + 1 == phases_.size()) return {&phases_[i], (s - start) / (end - start)};
    start = end;
  }
  return {&phases_.back(), 1.0};  // not reached: the last phase always matches
}

double OneCycleScheduler::lr(int64_t step) const {
  check_step(step);
  const auto [phase, pct] = locate(step);
  return anneal(phase->start_lr, phase->end_lr, pct);
}

std::optional<double> OneCycleScheduler::momentum(int64_t step) const {
  check_step(step);
  if (!options_.cycle_momentum) return std::nullopt;
  const auto [phase, pct] = locate(step);
  return anneal(phase->start_momentum, phase->end_momentum, pct);
}

// ---- Cyclic (S5) ----

CyclicScheduler::CyclicScheduler(const CyclicOptions& options) : options_(options) {
  const auto& o = options;
  check_lr(name(), "base_lr", o.base_lr);
  check_lr(name(), "max_lr", o.max_lr);
  check_steps(name(), "step_size_up", o.step_size_up, 1);
  check_steps(name(), "step_size_down", o.step_size_down, 0);
  // ExpRange scales the amplitude by gamma^step: above 1 it overflows to inf.
  if (o.mode == CyclicMode::ExpRange)
    KILN_CHECK(o.gamma > 0.0 && o.gamma <= 1.0, name(), "gamma must be in (0, 1] for mode ExpRange, got {}", o.gamma);
  if (o.cycle_momentum) {
    check_lr(name(), "base_momentum", o.base_momentum);
    check_lr(name(), "max_momentum", o.max_momentum);
  }
  if (options_.step_size_down == 0) options_.step_size_down = options_.step_size_up;
}

std::pair<double, double> CyclicScheduler::shape(int64_t step) const {
  const auto& o = options_;
  const double total_size = double(o.step_size_up) + double(o.step_size_down);
  const double step_ratio = double(o.step_size_up) / total_size;
  const double t = double(step);
  const double cycle = std::floor(1 + t / total_size);  // 1-based cycle number
  const double x = 1. + t / total_size - cycle;          // position in the cycle, [0, 1)
  const double scale_factor = x <= step_ratio ? x / step_ratio : (x - 1) / (step_ratio - 1);
  double scale = 1.0;  // Triangular, PyTorch scale_mode 'cycle'
  if (o.mode == CyclicMode::Triangular2) scale = 1 / std::pow(2., cycle - 1);  // 'cycle'
  if (o.mode == CyclicMode::ExpRange) scale = std::pow(o.gamma, t);            // 'iterations'
  return {scale_factor, scale};
}

double CyclicScheduler::lr(int64_t step) const {
  check_step(step);
  const auto [scale_factor, scale] = shape(step);
  const double base_height = (options_.max_lr - options_.base_lr) * scale_factor;
  return options_.base_lr + base_height * scale;
}

std::optional<double> CyclicScheduler::momentum(int64_t step) const {
  check_step(step);
  if (!options_.cycle_momentum) return std::nullopt;
  const auto [scale_factor, scale] = shape(step);
  const double base_height = (options_.max_momentum - options_.base_momentum) * scale_factor;
  return options_.max_momentum - base_height * scale;
}

// ---- Sequential (S7) ----

SequentialScheduler::SequentialScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers,
                                         std::vector<int64_t> milestones)
    : schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  KILN_CHECK(!schedulers_.empty(), name(), "schedulers is empty");
  for (size_t i = 0; i < schedulers_.size(); ++i)
    check_child(name(), fmt::format("schedulers[{}]", i).c_str(), schedulers_[i].get());
  KILN_CHECK(milestones_.size() + 1 == schedulers_.size(), name(),
             "needs one milestone fewer than schedulers: got {} schedulers and {} milestones", schedulers_.size(),
             milestones_.size());
  for (size_t i = 0; i < milestones_.size(); ++i) {
    KILN_CHECK(milestones_[i] > 0, name(), "milestones[{}] must be > 0, got {}", i, milestones_[i]);
    KILN_CHECK(i == 0 || milestones_[i] > milestones_[i - 1], name(),
               "milestones must be strictly increasing, got {} after {}", milestones_[i], milestones_[i - 1]);
  }
}

std::pair<size_t, int64_t> SequentialScheduler::locate(int64_t step) const {
  const size_t i = std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin();
  return {i, i == 0 ? 0 : milestones_[i - 1]};
}

double SequentialScheduler::lr(int64_t step) const {
  check_step(step);
  const auto [i, start] = locate(step);
  return schedulers_[i]->lr(step - start);
}

std::optional<double> SequentialScheduler::momentum(int64_t step) const {
  check_step(step);
  const auto [i, start] = locate(step);
  return schedulers_[i]->momentum(step - start);
}

std::vector<std::pair<std::string, LRScheduler*>> SequentialScheduler::children() const {
  std::vector<std::pair<std::string, LRScheduler*>> out;
  for (size_t i = 0; i < schedulers_.size(); ++i) out.emplace_back(fmt::format("schedulers.{}", i), schedulers_[i].get());
  return out;
}

void SequentialScheduler::on_seek() {
  const auto [i, start] = locate(last_step());
  seek(*schedulers_[i], last_step() - start);
}

// ---- Reduce on plateau (S8) ----

ReduceOnPlateauScheduler::ReduceOnPlateauScheduler(const ReduceOnPlateauOptions& options)
    : options_(options),
      lr_(options.lr),
      best_(options.mode == PlateauMode::Min ? std::numeric_limits<double>::infinity()
                                             : -std::numeric_limits<double>::infinity()) {
  const auto& o = options;
  check_lr(name(), "lr", o.lr);
  KILN_CHECK(std::isfinite(o.factor) && o.factor >= 0.0 && o.factor < 1.0, name(), "factor must be in [0, 1), got {}",
             o.factor);
  check_steps(name(), "patience", o.patience, 0);
  KILN_CHECK(std::isfinite(o.threshold) && o.threshold >= 0.0, name(), "threshold must be finite and >= 0, got {}",
             o.threshold);
  check_steps(name(), "cooldown", o.cooldown, 0);
  check_lr(name(), "min_lr", o.min_lr);
  KILN_CHECK(std::isfinite(o.eps) && o.eps >= 0.0, name(), "eps must be finite and >= 0, got {}", o.eps);
}

double ReduceOnPlateauScheduler::lr(int64_t step) const {
  check_step(step);
  return lr_;
}

double ReduceOnPlateauScheduler::step() {
  KILN_FAIL(name(), "step() needs the metric: call step(metric) (or step(metric, optimizer))");
}

bool ReduceOnPlateauScheduler::is_better(double a) const {
  const auto& o = options_;
  // As PyTorch: NaN is never better; Rel compares against best scaled by
  // (1 -+ threshold), which is meant for positive metrics.
  if (o.mode == PlateauMode::Min)
    return o.threshold_mode == ThresholdMode::Rel ? a < best_ * (1. - o.threshold) : a < best_ - o.threshold;
  return o.threshold_mode == ThresholdMode::Rel ? a > best_ * (o.threshold + 1.) : a > best_ + o.threshold;
}

double ReduceOnPlateauScheduler::step(double metric) {
  seek(*this, last_step() + 1);
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad evaluations during cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience) {
    const double reduced = std::max(lr_ * options_.factor, options_.min_lr);
    if (lr_ - reduced > options_.eps) lr_ = reduced;
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  return lr_;
}

void ReduceOnPlateauScheduler::save_own(SchedulerState& out, const std::string& prefix) const {
  out[prefix + "lr"] = lr_;
  out[prefix + "best"] = best_;
  out[prefix + "num_bad_epochs"] = double(num_bad_epochs_);
  out[prefix + "cooldown_counter"] = double(cooldown_counter_);
}

void ReduceOnPlateauScheduler::check_own(const SchedulerState& in, const std::string& prefix,
                                         const std::string& owner, std::set<std::string>& used) const {
  const double lr_v = required(in, prefix + "lr", owner, used);
  KILN_CHECK(std::isfinite(lr_v) && lr_v >= 0.0, owner, "load_state_dict: '{}lr' must be finite and >= 0, got {}",
             prefix, lr_v);
  const double best_v = required(in, prefix + "best", owner, used);
  KILN_CHECK(!std::isnan(best_v), owner, "load_state_dict: '{}best' is NaN", prefix);
  required_int(in, prefix + "num_bad_epochs", owner, used, 0, options_.patience);
  required_int(in, prefix + "cooldown_counter", owner, used, 0, options_.cooldown);
}

void ReduceOnPlateauScheduler::restore_own(const SchedulerState& in, const std::string& prefix) {
  lr_ = in.at(prefix + "lr");
  best_ = in.at(prefix + "best");
  num_bad_epochs_ = int64_t(in.at(prefix + "num_bad_epochs"));
  cooldown_counter_ = int64_t(in.at(prefix + "cooldown_counter"));
}

}  // namespace kiln::optim
