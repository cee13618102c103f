// grad / value_and_grad over a module's parameters (A2, spec 000 "Randomness and
// compilation"; DESIGN.md §3 "functional"):
//
//   auto [loss, grads] = kiln::value_and_grad(model, [&](Net& m) {
//     return cross_entropy(m.forward(x), y);
//   });
//   auto [loss_logits, grads] = kiln::value_and_grad(model, [&](Net& m) {
//     Tensor logits = m.forward(x);
//     return std::pair{cross_entropy(logits, y), logits};
//   }, kiln::has_aux);
//
// The gradients are keyed by parameter (and by path), for exactly the module's
// parameters() in order, so an optimizer can take them (opt.step(grads)) and can
// reject gradients that come from another model's structure (check_matches).
// Parameters' own grad() is not touched. A frozen parameter gets an undefined
// gradient; one the loss does not depend on gets zeros (as in JAX).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/autograd/functional.h"
#include "kiln/core/grad_mode.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

class Gradients {
 public:
  Gradients() = default;
  Gradients(ParameterList params, std::vector<Tensor> grads);

  size_t size() const { return grads_.size(); }
  const Tensor& operator[](size_t i) const { return grads_[i]; }
  const Tensor& at(const Parameter& param) const;  // kiln::Error if not one of these parameters
  const Tensor& at(const std::string& path) const;
  const ParameterList& params() const { return params_; }
  const std::vector<std::string>& names() const { return params_.names(); }
  const std::vector<Tensor>& tensors() const { return grads_; }

  // kiln::Error from `op` unless these are gradients for exactly `params`: the
  // same parameter objects in the same order.
  void check_matches(const ParameterList& params, const char* op) const;

 private:
  ParameterList params_;
  std::vector<Tensor> grads_;
};

namespace detail {
ParameterList begin_module_grad(const char* op, const Module& model);
Gradients finish_module_grad(const char* op, const ParameterList& params, Tensor& loss);
}  // namespace detail

template <ModuleType M, class F>
std::pair<Tensor, Gradients> value_and_grad(M& model, F&& fn) {
  ParameterList params = detail::begin_module_grad("value_and_grad", model);
  EnableGradGuard enable;
  Tensor loss = fn(model);
  Gradients grads = detail::finish_module_grad("value_and_grad", params, loss);
  return {std::move(loss), std::move(grads)};
}

// has_aux: fn returns (loss, aux); gives ((loss, aux), grads).
template <ModuleType M, class F>
auto value_and_grad(M& model, F&& fn, HasAux) {
  ParameterList params = detail::begin_module_grad("value_and_grad", model);
  EnableGradGuard enable;
  auto [value, aux] = fn(model);
  Tensor loss = value;
  Gradients grads = detail::finish_module_grad("value_and_grad", params, loss);
  using Aux = std::decay_t<decltype(aux)>;
  return std::pair<std::pair<Tensor, Aux>, Gradients>{{std::move(loss), std::move(aux)}, std::move(grads)};
}

template <ModuleType M, class F>
Gradients grad(M& model, F&& fn) {
  return value_and_grad(model, std::forward<F>(fn)).second;
}

// has_aux form of grad: (grads, aux).
template <ModuleType M, class F>
auto grad(M& model, F&& fn, HasAux) {
  auto [value_aux, grads] = value_and_grad(model, std::forward<F>(fn), has_aux);
  using Aux = std::decay_t<decltype(value_aux.second)>;
  return std::pair<Gradients, Aux>{std::move(grads), std::move(value_aux.second)};
}

// The same over a Shared<M> (fn still takes M&).
template <ModuleType M, class F, class... Tag>
auto value_and_grad(const Shared<M>& model, F&& fn, Tag... tag) {
  return value_and_grad(*model, std::forward<F>(fn), tag...);
}
template <ModuleType M, class F, class... Tag>
auto grad(const Shared<M>& model, F&& fn, Tag... tag) {
  return grad(*model, std::forward<F>(fn), tag...);
}

}  // namespace kiln::nn

namespace kiln {
using nn::grad;
using nn::value_and_grad;
}  // namespace kiln
