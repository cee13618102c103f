// Finite-difference gradient checks.
#include "kiln/autograd/gradcheck.h"

#include <cmath>

#include "kiln/autograd/engine.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/shape.h"

namespace kiln {

namespace {

// Flat view of one element of a (possibly non-contiguous) f64 tensor.
double& element(const Tensor& t, int64_t flat) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (flat % t.shape()[d]) * t.strides()[d];
    flat /= t.shape()[d];
  }
  return t.data<double>()[off];
}

}  // namespace

GradcheckResult gradcheck(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  std::vector<Tensor> wrt;
  std::vector<size_t> which;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    KILN_CHECK(inputs[i].dtype() == kF64, "gradcheck", "input {} has dtype {}; gradcheck needs f64 inputs", i,
               name(inputs[i].dtype()));
    wrt.push_back(inputs[i]);
    which.push_back(i);
  }
  std::vector<Tensor> outs = fn(inputs);
  auto eval = [&] {
    NoGradGuard no_grad;
    std::vector<std::vector<double>> flat;
    for (const Tensor& t : fn(inputs)) flat.push_back(t.to_vector<double>());
    return flat;
  };
  for (size_t w = 0; w < wrt.size(); ++w) {
    const Tensor& x = wrt[w];
    // Numeric Jacobian columns for input w: numeric[j][o][k] = d out_o[k] / d x[j].
    std::vector<std::vector<std::vector<double>>> numeric(size_t(x.numel()));
    for (int64_t j = 0; j < x.numel(); ++j) {
      double& xj = element(x, j);
      double saved = xj;
      xj = saved + opts.eps;
      auto plus = eval();
      xj = saved - opts.eps;
      auto minus = eval();
      xj = saved;
      numeric[j].resize(plus.size());
      for (size_t o = 0; o < plus.size(); ++o) {
        numeric[j][o].resize(plus[o].size());
        for (size_t k = 0; k < plus[o].size(); ++k) numeric[j][o][k] = (plus[o][k] - minus[o][k]) / (2 * opts.eps);
      }
    }
    // Analytic rows: one backward per output element.
    for (size_t o = 0; o < outs.size(); ++o) {
      const Tensor& out = outs[o];
      bool differentiable = out.requires_grad() && is_floating(out.dtype());
      for (int64_t k = 0; k < out.numel(); ++k) {
        std::vector<double> row(size_t(x.numel()), 0.0);
        if (differentiable) {
          Tensor seed = zeros(out.shape(), {.dtype = out.dtype()});
          element(seed, k) = 1.0;
          Tensor g = grad({out}, {x}, {seed}, /*retain_graph=*/true, false, /*allow_unused=*/true)[0];
          if (g.defined()) row = g.to_vector<double>();
        }
        for (int64_t j = 0; j < x.numel(); ++j) {
          double a = row[size_t(j)], n = numeric[j][o][size_t(k)];
          if (!(std::abs(a - n) <= opts.atol + opts.rtol * std::abs(n)))
            return {false, fmt::format("d output {}[{}] / d input {}[{}]: analytic {} vs numeric {}", o, k, which[w],
                                       j, a, n)};
        }
      }
    }
  }
  return {};
}

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  return gradcheck([&](const std::vector<Tensor>& xs) { return std::vector<Tensor>{fn(xs)}; }, inputs, opts);
}

}  // namespace kiln
