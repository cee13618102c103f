// The learning-rate schedules (SPECS §5 S1–S8, spec 002 schedulers), each
// with its PyTorch 1.13 equivalent; docs/optim.md has the formulas and
// the few places where kiln differs.
//
//   optim::LinearWarmupCosineScheduler sched({.target_lr = 3e-4, .min_lr = 3e-5,
//                                             .warmup_steps = 100, .total_steps = 10000});
//   optim::SequentialScheduler seq({warmup, cosine}, {100});
//
// Options are plain structs, validated at construction (kiln::Error naming
// the scheduler and the option). Steps are 0-based: lr(0) is the rate of the
// first optimizer step, as a PyTorch scheduler sets it at construction.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/optim/scheduler.h"

namespace kiln::optim {

/// lr at every step (PyTorch: none needed; LambdaLR with a constant).
struct ConstantOptions {
  double lr = 1e-3;
};
class ConstantScheduler : public LRScheduler {
 public:
  explicit ConstantScheduler(const ConstantOptions& options);
  std::string name() const override { return "ConstantScheduler"; }
  double lr(int64_t step) const override;
  const ConstantOptions& options() const { return options_; }

 private:
  ConstantOptions options_;
};

/// start_lr + (end_lr - start_lr) * min(step, total_steps) / total_steps
/// (PyTorch LinearLR with start_factor = start_lr / lr, end_factor = end_lr / lr,
/// total_iters = total_steps).
struct LinearOptions {
  double start_lr = 0.0;
  double end_lr = 1e-3;
  int64_t total_steps = 5;
};
class LinearScheduler : public LRScheduler {
 public:
  explicit LinearScheduler(const LinearOptions& options);
  std::string name() const override { return "LinearScheduler"; }
  double lr(int64_t step) const override;
  const LinearOptions& options() const { return options_; }

 private:
  LinearOptions options_;
};

/// lr * gamma^floor(step / step_size) (PyTorch StepLR).
struct StepOptions {
  double lr = 1e-3;
  int64_t step_size = 1;
  double gamma = 0.1;
};
class StepScheduler : public LRScheduler {
 public:
  explicit StepScheduler(const StepOptions& options);
  std::string name() const override { return "StepScheduler"; }
  double lr(int64_t step) const override;
  const StepOptions& options() const { return options_; }

 private:
  StepOptions options_;
};

/// lr * gamma^(number of milestones <= step); milestones strictly increasing,
/// >= 0 (PyTorch MultiStepLR).
struct MultiStepOptions {
  double lr = 1e-3;
  std::vector<int64_t> milestones = {};
  double gamma = 0.1;
};
class MultiStepScheduler : public LRScheduler {
 public:
  explicit MultiStepScheduler(const MultiStepOptions& options);
  std::string name() const override { return "MultiStepScheduler"; }
  double lr(int64_t step) const override;
  const MultiStepOptions& options() const { return options_; }

 private:
  MultiStepOptions options_;
};

/// lr * gamma^step (PyTorch ExponentialLR).
struct ExponentialOptions {
  double lr = 1e-3;
  double gamma = 0.99;
};
class ExponentialScheduler : public LRScheduler {
 public:
  explicit ExponentialScheduler(const ExponentialOptions& options);
  std::string name() const override { return "ExponentialScheduler"; }
  double lr(int64_t step) const override;
  const ExponentialOptions& options() const { return options_; }

 private:
  ExponentialOptions options_;
};

/// fn(step) is the lr itself (PyTorch LambdaLR multiplies the optimizer's
/// initial lr by it: pass [=](int64_t s) { return base_lr * f(s); }). A
/// negative or non-finite value is an error when it is asked for.
class LambdaScheduler : public LRScheduler {
 public:
  explicit LambdaScheduler(std::function<double(int64_t)> fn);
  std::string name() const override { return "LambdaScheduler"; }
  double lr(int64_t step) const override;

 private:
  std::function<double(int64_t)> fn_;
};

/// S1: min_lr + (max_lr - min_lr) * (1 + cos(pi * t / total_steps)) / 2 with
/// t = min(step, total_steps): stays at min_lr after total_steps (PyTorch
/// CosineAnnealingLR with eta_min = min_lr, T_max = total_steps, which instead
/// climbs back up past T_max).
struct CosineOptions {
  double max_lr = 1e-3;
  double min_lr = 0.0;
  int64_t total_steps = 1000;
};
class CosineScheduler : public LRScheduler {
 public:
  explicit CosineScheduler(const CosineOptions& options);
  std::string name() const override { return "CosineScheduler"; }
  double lr(int64_t step) const override;
  const CosineOptions& options() const { return options_; }

 private:
  CosineOptions options_;
};

/// S2 (SGDR): cosine from max_lr to min_lr over a period of t0 steps, then
/// restart with the period multiplied by t_mult (PyTorch
/// CosineAnnealingWarmRestarts with T_0 = t0, T_mult = t_mult, eta_min = min_lr).
struct CosineWarmRestartsOptions {
  double max_lr = 1e-3;
  double min_lr = 0.0;
  int64_t t0 = 1000;
  int64_t t_mult = 1;
};
class CosineWarmRestartsScheduler : public LRScheduler {
 public:
  explicit CosineWarmRestartsScheduler(const CosineWarmRestartsOptions& options);
  std::string name() const override { return "CosineWarmRestartsScheduler"; }
  double lr(int64_t step) const override;
  const CosineWarmRestartsOptions& options() const { return options_; }

 private:
  CosineWarmRestartsOptions options_;
};

/// S6: start_lr + (target_lr - start_lr) * step / warmup_steps for step <
/// warmup_steps, then after->lr(step - warmup_steps); with no `after`, target_lr.
struct WarmupOptions {
  double target_lr = 1e-3;
  int64_t warmup_steps = 100;
  double start_lr = 0.0;
};
class WarmupScheduler : public LRScheduler {
 public:
  WarmupScheduler(const WarmupOptions& options, std::shared_ptr<LRScheduler> after);
  std::string name() const override { return "WarmupScheduler"; }
  double lr(int64_t step) const override;
  /// after's momentum at the step it sees (its step 0 during warmup).
  std::optional<double> momentum(int64_t step) const override;
  const WarmupOptions& options() const { return options_; }
  const std::shared_ptr<LRScheduler>& after() const { return after_; }

 protected:
  std::vector<std::pair<std::string, LRScheduler*>> children() const override;
  void on_seek() override;

 private:
  WarmupOptions options_;
  std::shared_ptr<LRScheduler> after_;
};

/// S3: linear warmup from start_lr to target_lr over warmup_steps, then cosine
/// to min_lr at total_steps (counted from step 0, warmup included): a
/// WarmupScheduler whose `after` is CosineScheduler{target_lr, min_lr,
/// total_steps - warmup_steps}.
struct LinearWarmupCosineOptions {
  double target_lr = 1e-3;
  double min_lr = 0.0;
  int64_t warmup_steps = 100;
  int64_t total_steps = 1000;
  double start_lr = 0.0;
};
class LinearWarmupCosineScheduler : public WarmupScheduler {
 public:
  explicit LinearWarmupCosineScheduler(const LinearWarmupCosineOptions& options);
  std::string name() const override { return "LinearWarmupCosineScheduler"; }
};

/// S4: Smith's 1cycle, exactly PyTorch's OneCycleLR (phase boundaries
/// included): from max_lr / div_factor up to max_lr over pct_start of the
/// steps, then down to max_lr / div_factor / final_div_factor (three_phase:
/// back to the initial lr first, then down). Momentum, when cycled, moves the
/// other way between max_momentum and base_momentum. Past total_steps - 1 the
/// last value holds (PyTorch raises).
enum class Anneal { Cos, Linear };
struct OneCycleOptions {
  double max_lr = 1e-3;
  int64_t total_steps = 1000;
  double pct_start = 0.3;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  Anneal anneal = Anneal::Cos;
  bool three_phase = false;
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
};
class OneCycleScheduler : public LRScheduler {
 public:
  explicit OneCycleScheduler(const OneCycleOptions& options);
  std::string name() const override { return "OneCycleScheduler"; }
  double lr(int64_t step) const override;
  std::optional<double> momentum(int64_t step) const override;
  const OneCycleOptions& options() const { return options_; }

 private:
  struct Phase {
    double end_step;  // PyTorch's float boundaries: pct_start * total_steps - 1, ...
    double start_lr, end_lr, start_momentum, end_momentum;
  };
  // (phase, fraction of it done) at step.
  std::pair<const Phase*, double> locate(int64_t step) const;
  double anneal(double start, double end, double pct) const;

  OneCycleOptions options_;
  std::vector<Phase> phases_;
};

/// S5: PyTorch CyclicLR. Triangular: a constant triangle between base_lr and
/// max_lr (step_size_up steps up, step_size_down down; 0 means equal to up);
/// Triangular2: its amplitude halves every cycle; ExpRange: the amplitude is
/// scaled by gamma^step. Momentum, when cycled, moves between max_momentum and
/// base_momentum the other way.
enum class CyclicMode { Triangular, Triangular2, ExpRange };
struct CyclicOptions {
  double base_lr = 1e-4;
  double max_lr = 1e-3;
  int64_t step_size_up = 2000;
  int64_t step_size_down = 0;
  CyclicMode mode = CyclicMode::Triangular;
  double gamma = 1.0;
  bool cycle_momentum = false;
  double base_momentum = 0.8;
  double max_momentum = 0.9;
};
class CyclicScheduler : public LRScheduler {
 public:
  explicit CyclicScheduler(const CyclicOptions& options);
  std::string name() const override { return "CyclicScheduler"; }
  double lr(int64_t step) const override;
  std::optional<double> momentum(int64_t step) const override;
  const CyclicOptions& options() const { return options_; }

 private:
  // (position in the triangle in [0, 1], amplitude scale) at step.
  std::pair<double, double> shape(int64_t step) const;

  CyclicOptions options_;
};

/// S7: child i + 1 takes over at milestones[i] and sees steps relative to its
/// start (PyTorch SequentialLR). milestones: one fewer than children, > 0,
/// strictly increasing.
class SequentialScheduler : public LRScheduler {
 public:
  SequentialScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers, std::vector<int64_t> milestones);
  std::string name() const override { return "SequentialScheduler"; }
  double lr(int64_t step) const override;
  std::optional<double> momentum(int64_t step) const override;
  const std::vector<std::shared_ptr<LRScheduler>>& schedulers() const { return schedulers_; }
  const std::vector<int64_t>& milestones() const { return milestones_; }

 protected:
  std::vector<std::pair<std::string, LRScheduler*>> children() const override;
  void on_seek() override;

 private:
  // The child active at step and the first step it owns.
  std::pair<size_t, int64_t> locate(int64_t step) const;

  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

/// S8: PyTorch ReduceLROnPlateau for one learning rate. Call step(metric)
/// once per evaluation: after more than `patience` evaluations without an
/// improvement (Min: metric < best * (1 - threshold) for Rel, < best -
/// threshold for Abs; Max mirrored), lr becomes max(lr * factor, min_lr) unless
/// that changes it by eps or less, and `cooldown` evaluations are ignored.
/// lr(step) is the current lr whatever the step; step() without a metric is
/// an error.
enum class PlateauMode { Min, Max };
enum class ThresholdMode { Rel, Abs };
struct ReduceOnPlateauOptions {
  double lr = 1e-3;
  PlateauMode mode = PlateauMode::Min;
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  ThresholdMode threshold_mode = ThresholdMode::Rel;
  int64_t cooldown = 0;
  double min_lr = 0.0;
  double eps = 1e-8;
};
class ReduceOnPlateauScheduler : public LRScheduler {
 public:
  explicit ReduceOnPlateauScheduler(const ReduceOnPlateauOptions& options);
  std::string name() const override { return "ReduceOnPlateauScheduler"; }
  double lr(int64_t step) const override;
  using LRScheduler::step;
  /// Always throws: this scheduler moves only with a metric.
  double step() override;
  /// Records one evaluation of the metric and returns the (new) lr.
  double step(double metric);
  /// step(metric), then apply(opt).
  double step(double metric, Optimizer& opt);

  const ReduceOnPlateauOptions& options() const { return options_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t cooldown_counter() const { return cooldown_counter_; }

 protected:
  void save_own(SchedulerState& out, const std::string& prefix) const override;
  void check_own(const SchedulerState& in, const std::string& prefix, const std::string& owner,
                 std::set<std::string>& used) const override;
  void restore_own(const SchedulerState& in, const std::string& prefix) override;

 private:
  bool is_better(double metric) const;

  ReduceOnPlateauOptions options_;
  double lr_;
  double best_;  // +inf (Min) or -inf (Max) before the first metric
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
};

}  // namespace kiln::optim
