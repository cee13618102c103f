// softmax and log_softmax along a dim: checks, the fused CPU row kernel, and
// vjps that reuse the output.
#include "kiln/ops/binary.h"
#include "kiln/ops/record.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/unary.h"
#include "src/backend/cpu/reduce/reduce.h"
#include "src/ops/checks.h"

namespace kiln {

namespace {

Tensor softmax_impl(const char* op, const Tensor& x, int64_t dim, bool log) {
  check_defined(op, x);
  KILN_CHECK(is_floating(x.dtype()), op, "expects a floating input, got {} {}", name(x.dtype()),
             to_string(x.shape()));
  int64_t d = wrap_dim(op, dim, x.dim());
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  KILN_LAUNCH("softmax", backend::cpu::softmax(x, d, out, log));
  if (needs_grad(x)) {
    if (log)
      // d log_softmax: g - softmax * sum(g), with softmax = exp(out).
      record(op, {x}, {out}, {out}, [d](const VjpArgs& a) -> Grads {
        const Tensor& g = a.grad();
        return {g - exp(a.saved[0]) * sum(g, {d}, /*keepdim=*/true)};
      });
    else
      // d softmax: out * (g - sum(g * out)).
      record(op, {x}, {out}, {out}, [d](const VjpArgs& a) -> Grads {
        const Tensor& g = a.grad();
        const Tensor& y = a.saved[0];
        return {y * (g - sum(g * y, {d}, /*keepdim=*/true))};
      });
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl("log_softmax", x, dim, true); }

}  // namespace kiln
