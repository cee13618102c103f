// Functional transforms over plain tensors (spec 000 style): grad and
// value_and_grad of a function of tensors, with has_aux, and stop_gradient.
//
//   auto f = [](const std::vector<Tensor>& xs) { return sum(mul(xs[0], xs[1])); };
//   auto [value, grads] = kiln::value_and_grad(f, {x, y});   // grads[0] == y
//
// The function sees detached aliases of the inputs that require grad, so the
// callers' tensors (their requires_grad and grad()) are never modified. When
// grad mode is on and a caller's input already requires grad, that input is
// passed through a recorded alias instead and the gradients are built with
// create_graph, so transforms nest: grad of a function that calls grad gives
// second derivatives.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/core/tensor.h"

namespace kiln {

/// x cut from the graph (spec 000's name for detach()).
inline Tensor stop_gradient(const Tensor& x) { return x.detach(); }

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// Tag selecting the has_aux forms: fn returns std::pair<Tensor, Aux>.
struct HasAux {};
inline constexpr HasAux has_aux{};

/// (fn(inputs), d fn / d inputs). fn must return a scalar (one element).
std::pair<Tensor, std::vector<Tensor>> value_and_grad(const TensorFn& fn, const std::vector<Tensor>& inputs);
/// d fn / d inputs.
std::vector<Tensor> grad(const TensorFn& fn, const std::vector<Tensor>& inputs);

namespace detail {

/// The state of one functional differentiation: the inputs fn sees, and
/// whether the result must stay differentiable (nested transform).
struct FunctionalScope {
  std::vector<Tensor> inputs;
  bool nested = false;
};
FunctionalScope begin_functional(const char* op, const std::vector<Tensor>& inputs);
/// Gradients of `value` (checked to be a scalar) w.r.t. scope.inputs; detaches
/// `value` unless nested.
std::vector<Tensor> finish_functional(const char* op, const FunctionalScope& scope, Tensor& value);

}  // namespace detail

/// has_aux form: fn returns (loss, aux); gives ((loss, aux), grads). aux is
/// returned as fn made it (tensors in it keep their graph; detach() them to
/// drop it).
template <class F>
auto value_and_grad(F&& fn, const std::vector<Tensor>& inputs, HasAux) {
  detail::FunctionalScope scope = detail::begin_functional("value_and_grad", inputs);
  EnableGradGuard enable;
  auto [value, aux] = fn(static_cast<const std::vector<Tensor>&>(scope.inputs));
  Tensor loss = value;
  std::vector<Tensor> grads = detail::finish_functional("value_and_grad", scope, loss);
  using Aux = std::decay_t<decltype(aux)>;
  return std::pair<std::pair<Tensor, Aux>, std::vector<Tensor>>{{loss, std::move(aux)}, std::move(grads)};
}

/// has_aux form of grad: (grads, aux), like jax.grad(has_aux=True).
template <class F>
auto grad(F&& fn, const std::vector<Tensor>& inputs, HasAux) {
  auto [value_aux, grads] = value_and_grad(std::forward<F>(fn), inputs, has_aux);
  using Aux = std::decay_t<decltype(value_aux.second)>;
  return std::pair<std::vector<Tensor>, Aux>{std::move(grads), std::move(value_aux.second)};
}

}  // namespace kiln
