// Optimizer: the base of SGD, Adam, AdamW, Muon and NoOp (SPECS §5 O1–O5,
// spec 002 "base Optimizer", spec 001 "Param — four tensors").
//
//   optim::AdamW opt(model.parameters(), {.lr = 3e-4, .weight_decay = 0.1});
//   auto [loss, grads] = kiln::value_and_grad(model, loss_fn);
//   opt.step(grads);                        // or: loss.backward(); opt.step(); opt.zero_grad();
//
// Parameter groups carry their own options, as PyTorch's param_groups do:
//
//   optim::SGD opt({{body.parameters()}, {head.parameters(), {{"lr", 0.1}}}}, {.lr = 0.01, .momentum = 0.9});
//
// Per-parameter state (moments, step counts) lives with the Parameter itself
// (Parameter::state), allocated at the first step that needs it; a new
// optimizer clears the state of the parameters it is given, as a new PyTorch
// optimizer starts fresh. Weight decay skips parameters whose decay flag is
// off (biases and norm scales, M11). Frozen parameters (requires_grad off) and
// parameters without a gradient are skipped.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/nn/module.h"
#include "kiln/nn/state_dict.h"
#include "kiln/nn/transforms.h"

namespace kiln::optim {

// A group of parameters and the options it overrides ({"lr", 0.1}); the rest
// come from the optimizer's defaults. Unknown option names are an error.
struct ParamGroup {
  nn::ParameterList params;
  std::map<std::string, double> options = {};
};

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "SGD", "Adam", ...: the prefix of every error this optimizer throws.
  const std::string& name() const { return name_; }

  // One update from each parameter's live grad() (parameters whose grad is
  // undefined are skipped, as in PyTorch).
  void step();
  // One update from value_and_grad's result. Every parameter of this optimizer
  // must be among grads' parameters (by identity, not by shape).
  void step(const nn::Gradients& grads);
  // Clears (set_to_none) or zero-fills every parameter's live grad.
  void zero_grad(bool set_to_none = true);
  // Number of step() calls so far (restored by load_state_dict).
  int64_t step_count() const { return step_count_; }

  // ---- groups and options ----
  size_t num_groups() const { return groups_.size(); }
  const nn::ParameterList& params(size_t group = 0) const;
  // Every option this optimizer has, by name: its own ("lr", "momentum",
  // "nesterov" as 0/1, ...) and "lr_scale" (default 1), by which apply_lr
  // multiplies a scheduler's learning rate for that group.
  std::vector<std::string> option_names() const;
  bool has_option(const std::string& option) const;
  double get(const std::string& option, size_t group = 0) const;
  // Sets an option in every group, or in one. Validated first: on error
  // nothing changes.
  void set(const std::string& option, double value);
  void set(size_t group, const std::string& option, double value);
  double lr(size_t group = 0) const { return get("lr", group); }
  // Sets every group's lr to lr * its lr_scale (what schedulers call).
  void apply_lr(double lr);

  // ---- state ----
  // Keys: "step" (i64 scalar, step_count), "param_groups.<g>.<option>" (f64
  // scalars) and "<parameter name>.<state>" for each allocated per-parameter
  // state ("fc1.weight.exp_avg"). Tensors are snapshots (clones).
  nn::StateDict state_dict() const;
  // Validates every key, shape, dtype and option value before changing
  // anything; on error the optimizer and its parameters are untouched.
  void load_state_dict(const nn::StateDict& state);
  // The checks of load_state_dict without the commit: throws what it would
  // throw and leaves the optimizer as it was.
  void check_state_dict(const nn::StateDict& state);

 protected:
  // An optimizer needs at least one parameter unless allow_empty (NoOp).
  Optimizer(std::string name, std::vector<ParamGroup> groups, bool allow_empty = false);

  // The update of one parameter from its gradient (contiguous, same dtype and
  // shape as the parameter; read-only: it may be the caller's). Called under
  // no-grad, after every gradient of the step has been checked.
  virtual void update(size_t group, const nn::Parameter& param, const Tensor& grad) = 0;
  // Names of the per-parameter state this optimizer may allocate ("exp_avg"):
  // load_state_dict accepts exactly these. A state named "step" is an i64
  // scalar; the others have the parameter's shape and dtype.
  virtual std::vector<std::string> state_names() const = 0;

  // Typed option storage lives in the subclass (OptimizerWith<Options>).
  virtual std::vector<std::string> own_option_names() const = 0;
  virtual double get_own(size_t group, const std::string& option) const = 0;  // unknown: unknown_option()
  // Validates the value (kiln::Error naming option and value) and sets it
  // only if valid.
  virtual void set_own(size_t group, const std::string& option, double value) = 0;

  const std::vector<ParamGroup>& groups() const { return groups_; }
  [[noreturn]] void unknown_option(size_t group, const std::string& option) const;

 private:
  void check_option(const std::string& option) const;
  void run_step(const nn::Gradients* grads);
  void load_state_dict(const nn::StateDict& state, bool commit);

  std::string name_;
  std::vector<ParamGroup> groups_;  // options here are the overrides given; typed values live in the subclass
  std::vector<double> lr_scale_;    // per group
  std::vector<std::string> keys_;   // per parameter (groups flattened): its name in state_dict
  int64_t step_count_ = 0;
  struct Pending {
    size_t group;
    const nn::Parameter* param;
    Tensor grad;
  };
  std::vector<Pending> pending_;  // one step's checked work; kept to reuse its capacity
};

// The typed half of an optimizer: one Options struct per group. Options has
// `template <class F> void visit(F&& f)` calling f("name", field) for every
// double, integer or bool field, and `void validate(const char* op) const`.
template <class Options>
class OptimizerWith : public Optimizer {
 public:
  // The resolved options of a group.
  const Options& options(size_t group = 0) const { return options_.at(group); }

 protected:
  OptimizerWith(std::string name, std::vector<ParamGroup> groups, const Options& defaults, bool allow_empty = false)
      : Optimizer(std::move(name), groups, allow_empty) {
    defaults.validate(this->name().c_str());
    for (size_t g = 0; g < groups.size(); ++g)
      options_.push_back(resolve(g, defaults, groups[g].options));
  }

  std::vector<std::string> own_option_names() const override {
    std::vector<std::string> names;
    Options probe;
    probe.visit([&](const char* n, auto&) { names.emplace_back(n); });
    return names;
  }
  // Looks the option up without allocating: lr() is read every step.
  double get_own(size_t group, const std::string& option) const override {
    double out = 0;
    bool found = false;
    Options copy = options_.at(group);
    copy.visit([&](const char* n, auto& field) {
      if (option == n) out = double(field), found = true;
    });
    if (!found) this->unknown_option(group, option);
    return out;
  }
  void set_own(size_t group, const std::string& option, double value) override {
    Options o = options_.at(group);
    assign(o, group, option, value);
    o.validate(name().c_str());
    options_[group] = o;  // only once valid
  }

  std::vector<Options> options_;

 private:
  Options resolve(size_t group, Options base, const std::map<std::string, double>& overrides) const {
    for (const auto& [key, value] : overrides)
      if (key != "lr_scale") assign(base, group, key, value);  // lr_scale is the base class's
    base.validate(name().c_str());
    return base;
  }

  // One option by name into `o` (no allocation: schedulers call this every step).
  void assign(Options& o, size_t group, const std::string& key, double value) const {
    bool found = false;
    o.visit([&](const char* n, auto& field) {
      if (key != n) return;
      found = true;
      using T = std::remove_reference_t<decltype(field)>;
      if constexpr (std::is_same_v<T, bool>) {
        KILN_CHECK(value == 0.0 || value == 1.0, name().c_str(), "param group {}: option '{}' is a flag (0 or 1), got {}",
                   group, key, value);
        field = value != 0.0;
      } else if constexpr (std::is_integral_v<T>) {
        KILN_CHECK(value == double(T(value)), name().c_str(), "param group {}: option '{}' is an integer, got {}",
                   group, key, value);
        field = T(value);
      } else {
        field = value;
      }
    });
    if (!found) unknown_option(group, key);
  }
};

}  // namespace kiln::optim
