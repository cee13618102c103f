// dropout: a Bernoulli keep-mask from the caller's Generator (Philox, so the
// mask depends only on the generator state, not on threads), scaled by
// 1 / (1 - p) and saved for the vjp.
#include "kiln/ops/dropout.h"

#include <cmath>

#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/random.h"
#include "kiln/ops/record.h"
#include "src/ops/checks.h"

namespace kiln {

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  check_defined("dropout", x);
  KILN_CHECK(is_floating(x.dtype()), "dropout", "expects a floating input (f32, f64, bf16), got {} {}",
             name(x.dtype()), to_string(x.shape()));
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout", "probability p must be in [0, 1], got {}", p);
  if (!training || p == 0.0) return x;
  Tensor scale_mask;  // keep / (1 - p): 0 or 1 / (1 - p), x's dtype and shape
  Tensor out;
  {
    NoGradGuard no_grad;
    if (p == 1.0) {
      scale_mask = zeros(x.shape(), {.dtype = x.dtype(), .device = x.device()});  // drops everything; draws nothing
    } else {
      scale_mask = bernoulli(x.shape(), 1.0 - p, gen, {.dtype = x.dtype(), .device = x.device()});
      mul_(scale_mask, 1.0 / (1.0 - p));
    }
    out = mul(x, scale_mask);
  }
  if (needs_grad(x))
    record("dropout", {x}, {out}, {scale_mask}, [](const VjpArgs& a) -> Grads { return {a.grad() * a.saved[0]}; });
  return out;
}

}  // namespace kiln
