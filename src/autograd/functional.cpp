// Functional grad / value_and_grad over tensors.
#include "kiln/autograd/functional.h"

#include "kiln/autograd/engine.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/shape.h"

namespace kiln {

namespace detail {

FunctionalScope begin_functional(const char* op, const std::vector<Tensor>& inputs) {
  FunctionalScope scope;
  const bool outer_grad = GradMode::is_enabled();
  scope.inputs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    KILN_CHECK(x.defined(), op, "input {} is undefined", i);
    KILN_CHECK(is_floating(x.dtype()), op,
               "input {} of shape {} has dtype {}; only floating-point inputs can be differentiated", i,
               to_string(x.shape()), name(x.dtype()));
    if (outer_grad && x.requires_grad()) {
      // Nested in an outer differentiation: keep the link to x.
      scope.nested = true;
      scope.inputs.push_back(view(x, x.shape()));
    } else {
      Tensor a = x.detach();
      a.requires_grad_(true);
      scope.inputs.push_back(std::move(a));
    }
  }
  return scope;
}

std::vector<Tensor> finish_functional(const char* op, const FunctionalScope& scope, Tensor& value) {
  KILN_CHECK(value.defined(), op, "the function returned an undefined tensor");
  KILN_CHECK(value.numel() == 1 && is_floating(value.dtype()), op,
             "the function must return a floating-point scalar, got shape {} dtype {}", to_string(value.shape()),
             name(value.dtype()));
  std::vector<Tensor> grads(scope.inputs.size());
  if (value.requires_grad() && !scope.inputs.empty())
    grads = kiln::grad({value}, scope.inputs, {}, /*retain_graph=*/scope.nested, /*create_graph=*/scope.nested,
                       /*allow_unused=*/true);
  // An input the value does not depend on has a zero gradient (as in JAX).
  for (size_t i = 0; i < grads.size(); ++i)
    if (!grads[i].defined()) grads[i] = zeros_like(scope.inputs[i]);
  if (!scope.nested) value = value.detach();
  return grads;
}

}  // namespace detail

std::pair<Tensor, std::vector<Tensor>> value_and_grad(const TensorFn& fn, const std::vector<Tensor>& inputs) {
  KILN_CHECK(bool(fn), "value_and_grad", "empty function");
  detail::FunctionalScope scope = detail::begin_functional("value_and_grad", inputs);
  EnableGradGuard enable;
  Tensor value = fn(scope.inputs);
  std::vector<Tensor> grads = detail::finish_functional("value_and_grad", scope, value);
  return {value, std::move(grads)};
}

std::vector<Tensor> grad(const TensorFn& fn, const std::vector<Tensor>& inputs) {
  KILN_CHECK(bool(fn), "grad", "empty function");
  detail::FunctionalScope scope = detail::begin_functional("grad", inputs);
  EnableGradGuard enable;
  Tensor value = fn(scope.inputs);
  return detail::finish_functional("grad", scope, value);
}

}  // namespace kiln
