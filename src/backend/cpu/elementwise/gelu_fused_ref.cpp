// Reference of the fused GELU kernels (gelu_fused.h): plain loops in f64.
#include <cmath>
#include <vector>

#include "kiln/core/dtype.h"
#include "src/backend/cpu/elementwise/gelu_fused.h"

namespace kiln::backend::cpu::ref {

namespace {

double load(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case kF32: return double(static_cast<const float*>(t.data_ptr())[i]);
    case kF64: return static_cast<const double*>(t.data_ptr())[i];
    default: return double(float(static_cast<const bfloat16*>(t.data_ptr())[i]));
  }
}

void store(const Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case kF32: static_cast<float*>(t.data_ptr())[i] = float(v); break;
    case kF64: static_cast<double*>(t.data_ptr())[i] = v; break;
    default: static_cast<bfloat16*>(t.data_ptr())[i] = bfloat16(float(v)); break;
  }
}

}  // namespace

// 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), and its
// derivative 0.5 (1 + t) + 0.5 x (1 - t^2) u', from the textbook form (the
// kernels use the equivalent x sigmoid(2u)).
void gelu_tanh_with_grad(const Tensor& u, const Tensor& y, const Tensor& d) {
  const double k = 0.79788456080286535588, c = 0.044715;
  for (int64_t i = 0; i < u.numel(); ++i) {
    const double x = load(u, i), t = std::tanh(k * (x + c * x * x * x));
    const double dx = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
    store(y, i, 0.5 * x * (1 + t));
    if (d.defined()) store(d, i, dx);
  }
}

void gelu_grad_bias(const Tensor& g, const Tensor& d, const Tensor& gu, const Tensor& gb) {
  const int64_t O = gu.size(gu.dim() - 1), R = O == 0 ? 0 : gu.numel() / O;
  std::vector<double> sum(size_t(O), 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t o = 0; o < O; ++o) {
      const double v = load(g, r * O + o) * load(d, r * O + o);
      store(gu, r * O + o, v);
      sum[size_t(o)] += v;
    }
  if (gb.defined())
    for (int64_t o = 0; o < O; ++o) store(gb, o, sum[size_t(o)]);
}

}  // namespace kiln::backend::cpu::ref
