#include "kiln/optim/optimizer.h"

#include "kiln/core/replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <unordered_set>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/shape.h"
#include "src/optim/dispatch.h"

namespace kiln::optim {

namespace {

bool is_integral_key(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Optimizer::~Optimizer() = default;

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups, bool allow_empty)
    : name_(std::move(name)), groups_(std::move(groups)) {
  const char* op = name_.c_str();
  std::unordered_set<const void*> seen;
  std::map<std::string, int> name_count;
  size_t total = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const nn::Parameter& p = groups_[g].params[i];
      KILN_CHECK(p.defined(), op, "param group {}: parameter {} ('{}') is undefined", g, i, groups_[g].params.names()[i]);
      KILN_CHECK(seen.insert(p.id()).second, op,
                 "param group {}: parameter '{}' appears twice (in one group or in two); each parameter may be "
                 "optimized once",
                 g, groups_[g].params.names()[i]);
      KILN_CHECK(p.dtype() == kF32 || p.dtype() == kF64, op,
                 "parameter '{}' is {}: optimizers update f32 and f64 parameters", groups_[g].params.names()[i],
                 kiln::name(p.dtype()));
      ++name_count[groups_[g].params.names()[i]];
      ++total;
    }
    double scale = 1.0;
    if (auto it = groups_[g].options.find("lr_scale"); it != groups_[g].options.end()) scale = it->second;
    check_non_negative(op, "lr_scale", scale);
    lr_scale_.push_back(scale);
  }
  KILN_CHECK(allow_empty || total > 0, op, "got no parameters to optimize");
  // state_dict keys are parameter names; the rare name two groups share (lists
  // taken from two submodules) is qualified by its group.
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const std::string& n : groups_[g].params.names())
      keys_.push_back(name_count[n] > 1 ? fmt::format("{}/{}", g, n) : n);
  // A new optimizer starts from fresh state, as in PyTorch; state left by an
  // earlier optimizer on these parameters would otherwise be picked up.
  for (const ParamGroup& group : groups_)
    for (const nn::Parameter& p : group.params) p.clear_state();
  pending_.reserve(total);
}

const nn::ParameterList& Optimizer::params(size_t group) const {
  KILN_CHECK(group < groups_.size(), name_.c_str(), "param group {} out of range ({} groups)", group, groups_.size());
  return groups_[group].params;
}

std::vector<std::string> Optimizer::option_names() const {
  std::vector<std::string> names = own_option_names();
  names.emplace_back("lr_scale");
  return names;
}

bool Optimizer::has_option(const std::string& option) const {
  std::vector<std::string> names = option_names();
  return std::find(names.begin(), names.end(), option) != names.end();
}

void Optimizer::unknown_option(size_t group, const std::string& option) const {
  KILN_FAIL(name_.c_str(), "param group {}: unknown option '{}' (options: {})", group, option,
            fmt::join(option_names(), ", "));
}

void Optimizer::check_option(const std::string& option) const {
  if (!has_option(option)) unknown_option(0, option);
}

double Optimizer::get(const std::string& option, size_t group) const {
  params(group);  // range check
  return option == "lr_scale" ? lr_scale_[group] : get_own(group, option);  // get_own rejects unknown names
}

void Optimizer::set(size_t group, const std::string& option, double value) {
  params(group);
  check_option(option);
  if (option == "lr_scale") {
    check_non_negative(name_.c_str(), "lr_scale", value);
    lr_scale_[group] = value;
  } else {
    set_own(group, option, value);
  }
}

void Optimizer::set(const std::string& option, double value) {
  check_option(option);
  // All groups or none: a value one group rejects (nesterov without momentum)
  // restores the groups already set.
  std::vector<double> old;
  for (size_t g = 0; g < groups_.size(); ++g) old.push_back(get(option, g));
  size_t done = 0;
  try {
    for (; done < groups_.size(); ++done) set(done, option, value);
  } catch (const Error&) {
    while (done-- > 0) set(done, option, old[done]);
    throw;
  }
}

void Optimizer::apply_lr(double lr) {
  check_non_negative(name_.c_str(), "learning rate", lr);
  for (size_t g = 0; g < groups_.size(); ++g) set_own(g, "lr", lr * lr_scale_[g]);
}

// A recorded step (NOTE [Recorded launches] in kiln/core/replay.h) is one
// launch that runs this update again at replay: the learning rate, betas and
// step count are read from the live optimizer then (scheduler and live-control
// changes take effect at the next replay), and step_count() advances with
// every replay, as eager's (spec 002: the logical step stays aligned).
void Optimizer::step() {
  if (replay::active()) [[unlikely]] {
    replay::launch("optimizer.step", [this] { run_step(nullptr); });
    return;
  }
  run_step(nullptr);
}

void Optimizer::step(const nn::Gradients& grads) {
  if (replay::active()) [[unlikely]] {
    replay::launch("optimizer.step", [this, grads] { run_step(&grads); });
    return;
  }
  run_step(&grads);
}

void Optimizer::run_step(const nn::Gradients* grads) {
  const char* op = name_.c_str();
  // Check everything first: a bad gradient must not leave half the model updated.
  pending_.clear();
  size_t flat = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const nn::ParameterList& list = groups_[g].params;
    list.check(op);  // M9: the module was not edited under us
    for (size_t i = 0; i < list.size(); ++i, ++flat) {
      const nn::Parameter& p = list[i];
      if (!p.requires_grad()) continue;  // frozen
      Tensor grad;
      if (grads) {
        // By identity. Usually the gradients list the parameters in this
        // optimizer's order (both from model.parameters()): check there first.
        const nn::ParameterList& gp = grads->params();
        size_t j = flat < gp.size() && gp[flat].is_same(p) ? flat : 0;
        while (j < gp.size() && !gp[j].is_same(p)) ++j;
        KILN_CHECK(j < gp.size(), op,
                   "the gradients do not include parameter '{}' {}: they were taken for another model or another "
                   "part of it",
                   keys_[flat], to_string(p.shape()));
        grad = (*grads)[j];
      } else {
        grad = p.grad();
      }
      if (!grad.defined()) continue;
      KILN_CHECK(grad.shape() == p.shape() && grad.dtype() == p.dtype(), op,
                 "gradient for parameter '{}' is {} {} but the parameter is {} {}", keys_[flat],
                 to_string(grad.shape()), kiln::name(grad.dtype()), to_string(p.shape()), kiln::name(p.dtype()));
      KILN_CHECK(p.value().is_contiguous(), op, "parameter '{}' is not contiguous", keys_[flat]);
      if (grad.is_same_storage(p.value()))
        grad = clone(grad);  // the update writes the parameter it reads the gradient from
      else if (!grad.is_contiguous())
        grad = contiguous(grad);
      pending_.push_back({g, &p, std::move(grad)});
    }
  }
  NoGradGuard no_grad;
  for (Pending& w : pending_) {
    update(w.group, *w.param, w.grad);
    w.param->value().storage()->bump_version();  // an in-place write, as PyTorch's add_
  }
  pending_.clear();  // do not keep gradients alive between steps (the capacity stays)
  ++step_count_;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const ParamGroup& group : groups_)
    for (const nn::Parameter& p : group.params) {
      if (set_to_none) {
        p.value().set_grad(Tensor());
      } else if (Tensor g = p.grad(); g.defined()) {
        NoGradGuard no_grad;
        fill_(g, 0.0);
      }
    }
}

// ---------------------------------------------------------------- state

nn::StateDict Optimizer::state_dict() const {
  nn::StateDict out;
  out.insert("step", scalar_tensor(step_count_, {.dtype = kI64}));
  std::vector<std::string> options = option_names();
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const std::string& o : options)
      out.insert(fmt::format("param_groups.{}.{}", g, o), scalar_tensor(get(o, g), {.dtype = kF64}));
  size_t flat = 0;
  for (const ParamGroup& group : groups_)
    for (const nn::Parameter& p : group.params) {
      for (const auto& [state, value] : p.states())
        if (value.defined()) out.insert(keys_[flat] + "." + state, clone(value));
      ++flat;
    }
  return out;
}

void Optimizer::check_state_dict(const nn::StateDict& state) { load_state_dict(state, false); }

void Optimizer::load_state_dict(const nn::StateDict& state) { load_state_dict(state, true); }

void Optimizer::load_state_dict(const nn::StateDict& state, bool commit) {
  const char* op = name_.c_str();
  auto scalar = [&](const std::string& key, DType dtype) -> const Tensor& {
    const Tensor* t = state.find(key);
    KILN_CHECK(t, op, "load_state_dict: missing '{}'", key);
    KILN_CHECK(t->numel() == 1 && t->dim() == 0 && t->dtype() == dtype, op,
               "load_state_dict: '{}' must be a {} scalar, got {}", key, kiln::name(dtype), describe(*t));
    return *t;
  };
  // 1. Check everything.
  int64_t steps = scalar("step", kI64).item<int64_t>();
  KILN_CHECK(steps >= 0, op, "load_state_dict: 'step' is negative ({})", steps);
  std::set<std::string> used = {"step"};
  std::vector<std::string> options = option_names();
  std::vector<std::vector<double>> values(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const std::string& o : options) {
      std::string key = fmt::format("param_groups.{}.{}", g, o);
      values[g].push_back(scalar(key, kF64).item<double>());
      used.insert(key);
    }
  std::vector<std::string> names = state_names();
  struct Entry {
    const nn::Parameter* param;
    std::string state;
    const Tensor* value;
  };
  std::vector<Entry> entries;
  size_t flat = 0;
  for (const ParamGroup& group : groups_)
    for (const nn::Parameter& p : group.params) {
      for (const std::string& s : names) {
        std::string key = keys_[flat] + "." + s;
        const Tensor* t = state.find(key);
        if (!t) continue;  // state is allocated lazily: absent is valid
        if (s == "step")
          KILN_CHECK(t->dim() == 0 && t->dtype() == kI64, op, "load_state_dict: '{}' must be an i64 scalar, got {}",
                     key, describe(*t));
        else
          KILN_CHECK(t->shape() == p.shape() && t->dtype() == p.dtype(), op,
                     "load_state_dict: '{}' is {} but parameter '{}' is {} {}", key, describe(*t), keys_[flat],
                     to_string(p.shape()), kiln::name(p.dtype()));
        entries.push_back({&p, s, t});
        used.insert(key);
      }
      ++flat;
    }
  for (const auto& [key, value] : state) {
    if (used.count(key)) continue;
    // Name the likely cause: a group this optimizer does not have, or a state
    // this kind of optimizer does not keep.
    std::string why = "not a parameter state of this optimizer";
    if (key.rfind("param_groups.", 0) == 0) {
      std::string rest = key.substr(13);
      std::string g = rest.substr(0, rest.find('.'));
      why = is_integral_key(g) && std::stoul(g) >= groups_.size()
                ? fmt::format("this optimizer has {} param groups", groups_.size())
                : "unknown option";
    }
    KILN_FAIL(op, "load_state_dict: unexpected key '{}' ({}; states it keeps: {})", key, why, fmt::join(names, ", "));
  }
  // Option values go through the same validation as set(); try them on a copy
  // of the current values first by setting and restoring on failure.
  std::vector<std::vector<double>> old(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const std::string& o : options) old[g].push_back(get(o, g));
  try {
    for (size_t g = 0; g < groups_.size(); ++g)
      for (size_t k = 0; k < options.size(); ++k) set(g, options[k], values[g][k]);
  } catch (const Error& e) {
    for (size_t g = 0; g < groups_.size(); ++g)
      for (size_t k = 0; k < options.size(); ++k) set(g, options[k], old[g][k]);
    KILN_FAIL(op, "load_state_dict: invalid option value: {}", e.what());
  }
  if (!commit) {
    for (size_t g = 0; g < groups_.size(); ++g)
      for (size_t k = 0; k < options.size(); ++k) set(g, options[k], old[g][k]);
    return;
  }
  // 2. Commit.
  for (const ParamGroup& group : groups_)
    for (const nn::Parameter& p : group.params) p.clear_state();
  for (const Entry& e : entries) e.param->state(e.state) = contiguous(clone(*e.value));
  step_count_ = steps;
}

}  // namespace kiln::optim
