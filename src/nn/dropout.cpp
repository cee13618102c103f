// Dropout: the layer's mode and generator around ops/dropout.
#include "kiln/nn/dropout.h"

#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/ops/dropout.h"
#include "src/nn/layer_error.h"

namespace kiln::nn {

namespace {
void check_input(const Tensor& x) {
  KILN_CHECK(x.defined(), "Dropout", "input is undefined");
  KILN_CHECK(is_floating(x.dtype()), "Dropout", "input {} has dtype {}, expected a floating dtype",
             to_string(x.shape()), name(x.dtype()));
}
}  // namespace

Dropout::Dropout(double p_, uint64_t seed) : p(p_), gen_(seed) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "Dropout", "p must be in [0, 1], got {}", p);
}

Dropout::Dropout(double p_, const Init& init) : Dropout(p_) {
  KILN_CHECK(init.rngs != nullptr, "Dropout", "no Rngs to draw the dropout generator from");
  gen_ = init.rngs->has("dropout") ? init.rngs->next("dropout") : init.rngs->next("params");
}

Tensor Dropout::forward(const Tensor& x) const {
  check_input(x);
  return in_layer("Dropout", [&] { return dropout(x, p, is_training(), gen_); });
}

Tensor Dropout::forward(const Tensor& x, Rngs& rngs) const {
  check_input(x);
  // Eval draws nothing, so the stream advances only when a mask is drawn.
  if (!is_training() || p == 0.0) return x;
  Generator gen = rngs.next("dropout");
  return in_layer("Dropout", [&] { return dropout(x, p, true, gen); });
}

std::string Dropout::extra_repr() const { return fmt::format("p={}", p); }

}  // namespace kiln::nn
