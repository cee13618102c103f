// LRScheduler: the base of every learning-rate schedule (SPECS §5 S1–S8,
// spec 002 "LRScheduler (base)"); the schedules themselves are in schedulers.h.
//
//   optim::AdamW opt(model.parameters(), {.lr = 3e-4});
//   optim::OneCycleScheduler sched({.max_lr = 3e-4, .total_steps = 1000});
//   sched.apply(opt);                     // lr (and momentum) of step 0
//   for (...) { opt.step(grads); sched.step(opt); }
//
// A schedule is a pure function of the 0-based step, lr(step), evaluated in
// closed form in double; the scheduler only keeps the step it is at
// (last_step), so state_dict() is tiny and a restored scheduler continues
// exactly where it stopped. ReduceOnPlateauScheduler is the exception: it is
// driven by a metric and keeps that state too.
//
// Unlike PyTorch, a scheduler does not hold its optimizer: apply(opt) writes
// the schedule into any optimizer, every group's lr becoming lr * its
// "lr_scale" (Optimizer::apply_lr).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kiln::optim {

class Optimizer;

/// A scheduler's checkpointable state: names to doubles (a double holds every
/// step count below 2^53 and every lr exactly). Children's keys are nested
/// under their name: "after.last_step", "schedulers.1.last_step".
using SchedulerState = std::map<std::string, double>;

class LRScheduler {
 public:
  virtual ~LRScheduler();

  /// "CosineScheduler", ...: the prefix of every error this scheduler throws.
  virtual std::string name() const = 0;
  /// The learning rate at 0-based step `step` (pure; step >= 0).
  virtual double lr(int64_t step) const = 0;
  /// The momentum at `step` for schedulers that cycle it (OneCycle, Cyclic
  /// with cycle_momentum); nullopt otherwise.
  virtual std::optional<double> momentum(int64_t step) const;

  /// The step the scheduler is at: 0 after construction, +1 per step().
  int64_t last_step() const { return last_step_; }
  /// lr(last_step()).
  double get_lr() const { return lr(last_step_); }
  /// Advances one step and returns the new get_lr().
  virtual double step();

  /// Writes the current schedule into `opt`: apply_lr(get_lr()) (every group
  /// gets lr * its lr_scale) and, when momentum() has a value, sets option
  /// "momentum" in every group, or "beta1" for optimizers without
  /// "momentum" (Adam, AdamW), as PyTorch's OneCycleLR does.
  void apply(Optimizer& opt) const;
  /// step(), then apply(opt); returns the new lr.
  double step(Optimizer& opt);

  /// {"last_step": n} plus the scheduler's own state and its children's,
  /// nested under their names.
  virtual SchedulerState state_dict() const;
  /// Restores a state_dict(). Every key (missing, unknown) and value (range,
  /// integrality) is checked first; on error (a kiln::Error naming the
  /// scheduler and the key) nothing changes.
  virtual void load_state_dict(const SchedulerState& state);

 protected:
  LRScheduler() = default;

  // Composite schedulers (Warmup, Sequential) name their children here; the
  // base class saves, checks and restores them under "<name>.".
  virtual std::vector<std::pair<std::string, LRScheduler*>> children() const { return {}; }
  // Called after last_step changes (step, load): composites move their active
  // child to the step it sees, so a child's own last_step and get_lr() stay
  // meaningful.
  virtual void on_seek() {}
  // State beyond last_step (ReduceOnPlateau): save under prefix; check
  // (throwing a kiln::Error named after `owner`, marking each key used);
  // restore (already checked, must not throw).
  virtual void save_own(SchedulerState& out, const std::string& prefix) const {}
  virtual void check_own(const SchedulerState& in, const std::string& prefix, const std::string& owner,
                         std::set<std::string>& used) const {}
  virtual void restore_own(const SchedulerState& in, const std::string& prefix) {}

  // Sets s's last_step (s may be another scheduler: a child) and lets it
  // propagate to its own children.
  static void seek(LRScheduler& s, int64_t step);
  // Throws unless step >= 0 (for lr(step) and momentum(step)).
  void check_step(int64_t step) const;

  // Helpers for check_own: the value of a key that must be present.
  static double required(const SchedulerState& in, const std::string& key, const std::string& owner,
                         std::set<std::string>& used);
  // An integer-valued double in [lo, hi].
  static int64_t required_int(const SchedulerState& in, const std::string& key, const std::string& owner,
                              std::set<std::string>& used, int64_t lo, int64_t hi);

 private:
  void save_tree(SchedulerState& out, const std::string& prefix) const;
  void check_tree(const SchedulerState& in, const std::string& prefix, const std::string& owner,
                  std::set<std::string>& used) const;
  void restore_tree(const SchedulerState& in, const std::string& prefix);

  int64_t last_step_ = 0;
};

}  // namespace kiln::optim
