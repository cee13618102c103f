// GradientTape: a grad-mode scope with backward and gradient entry points.
#include "kiln/autograd/gradient_tape.h"

#include "kiln/autograd/engine.h"

namespace kiln {

const Tensor& GradientTape::watch(const Tensor& x) const {
  KILN_CHECK(x.defined(), "GradientTape", "watch() of an undefined tensor");
  if (!x.requires_grad()) Tensor(x).requires_grad_(true);
  return x;
}

void GradientTape::use(const char* what) {
  KILN_CHECK(!used_ || opts_.persistent, "GradientTape",
             "{}() called on a non-persistent tape that already ran backward; use "
             "GradientTape({{.persistent = true}}) to differentiate more than once",
             what);
  used_ = true;
}

void GradientTape::backward(const Tensor& loss, const Tensor& gradient) {
  KILN_CHECK(loss.defined(), "GradientTape", "backward() of an undefined tensor");
  use("backward");
  kiln::backward({loss}, {gradient}, /*retain_graph=*/opts_.persistent);
}

std::vector<Tensor> GradientTape::gradient(const Tensor& loss, const std::vector<Tensor>& sources,
                                           const Tensor& gradient, bool allow_unused, bool create_graph) {
  KILN_CHECK(loss.defined(), "GradientTape", "gradient() of an undefined tensor");
  use("gradient");
  return kiln::grad({loss}, sources, {gradient}, /*retain_graph=*/opts_.persistent, create_graph, allow_unused);
}

}  // namespace kiln
