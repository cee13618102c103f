#include "kiln/nn/linear.h"

#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/nn/quantized.h"
#include "kiln/ops/linalg.h"

namespace kiln::nn {

Linear::Linear(int64_t in, int64_t out, const Init& init, bool with_bias) : in_features(in), out_features(out) {
  KILN_CHECK(in > 0 && out > 0, "Linear", "in_features {} and out_features {} must be positive", in, out);
  weight = register_parameter("weight", init.make_weight({out, in}, {in, out}));
  if (with_bias) bias = register_parameter("bias", init.make_bias({out}, {in, out}));
}

Tensor Linear::forward(const Tensor& x) const {
  if (quantized && !GradMode::is_enabled()) return to_compute(quantized_linear(x, *quantized, bias));
  KILN_CHECK(!is_released(weight), "Linear",
             "weight [{}, {}] was released for quantized inference (QuantizeOptions::release_float_weights): a "
             "forward needs grad mode off", out_features, in_features);
  // Mixed precision (docs/mixed_precision.md): input and parameters in the compute dtype.
  return linear(to_compute(x), to_compute(weight), to_compute(bias));
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features, out_features, bias.defined());
}

}  // namespace kiln::nn
