#include "kiln/nn/transforms.h"

#include "kiln/autograd/engine.h"
#include "kiln/core/error.h"
#include "kiln/ops/creation.h"

namespace kiln::nn {

Gradients::Gradients(ParameterList params, std::vector<Tensor> grads)
    : params_(std::move(params)), grads_(std::move(grads)) {
  KILN_CHECK(params_.size() == grads_.size(), "Gradients", "{} parameters but {} gradients", params_.size(),
             grads_.size());
  for (size_t i = 0; i < grads_.size(); ++i)
    if (grads_[i].defined())
      KILN_CHECK(grads_[i].shape() == params_[i].shape(), "Gradients",
                 "gradient {} for '{}' does not match the parameter {}", to_string(grads_[i].shape()),
                 params_.names()[i], to_string(params_[i].shape()));
}

const Tensor& Gradients::at(const Parameter& param) const {
  for (size_t i = 0; i < grads_.size(); ++i)
    if (params_[i].is_same(param)) return grads_[i];
  KILN_FAIL("Gradients", "no gradient for this parameter ({} {}): it is not one of the {} parameters they were "
            "taken for", to_string(param.shape()), name(param.dtype()), grads_.size());
}

const Tensor& Gradients::at(const std::string& path) const {
  for (size_t i = 0; i < grads_.size(); ++i)
    if (params_.names()[i] == path) return grads_[i];
  KILN_FAIL("Gradients", "no gradient named '{}'", path);
}

void Gradients::check_matches(const ParameterList& params, const char* op) const {
  KILN_CHECK(params.size() == size(), op,
             "the gradients are for another model structure: {} gradients for {} parameters", size(),
             params.size());
  for (size_t i = 0; i < size(); ++i)
    KILN_CHECK(params_[i].is_same(params[i]), op,
               "the gradients are for another model: gradient {} is for '{}' {} of a different model, "
               "expected '{}' {}",
               i, params_.names()[i], to_string(params_[i].shape()), params.names()[i],
               to_string(params[i].shape()));
}

namespace detail {

ParameterList begin_module_grad(const char* op, const Module& model) {
  ParameterList params = model.parameters();
  KILN_CHECK(!params.empty(), op, "{} has no parameters to differentiate", model.type_name());
  return params;
}

Gradients finish_module_grad(const char* op, const ParameterList& params, Tensor& loss) {
  KILN_CHECK(loss.defined(), op, "the function returned an undefined tensor");
  KILN_CHECK(loss.numel() == 1 && is_floating(loss.dtype()), op,
             "the function must return a floating-point scalar loss, got shape {} dtype {}",
             to_string(loss.shape()), name(loss.dtype()));
  std::vector<Tensor> wrt;
  std::vector<size_t> where;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].requires_grad()) {
      wrt.push_back(params[i].value());
      where.push_back(i);
    }
  std::vector<Tensor> grads(params.size());
  if (loss.requires_grad() && !wrt.empty()) {
    std::vector<Tensor> g = kiln::grad({loss}, wrt, {}, false, false, /*allow_unused=*/true);
    for (size_t j = 0; j < g.size(); ++j) grads[where[j]] = g[j];
  }
  for (size_t j : where)
    if (!grads[j].defined()) grads[j] = zeros_like(params[j].value());
  loss = loss.detach();
  return Gradients(params, std::move(grads));
}

}  // namespace detail

}  // namespace kiln::nn
