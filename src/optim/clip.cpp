#include "kiln/optim/clip.h"

#include <cmath>
#include <memory>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/core/replay.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"

namespace kiln::optim {

namespace {

// sum |x|^p over a contiguous gradient (max |x| for p = inf), in f64.
template <class T>
double accumulate(const T* x, int64_t n, double p) {
  double acc = 0.0;
  if (std::isinf(p)) {
    for (int64_t i = 0; i < n; ++i) acc = std::max(acc, std::abs(double(x[i])));
  } else if (p == 2.0) {
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; ++i) acc += double(x[i]) * double(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) acc += std::pow(std::abs(double(x[i])), p);
  }
  return acc;
}

double total_norm(const char* op, const std::vector<Tensor>& grads, const ClipOptions& o) {
  KILN_CHECK(o.norm_type >= 1.0 || std::isinf(o.norm_type), op, "norm_type must be >= 1 or inf, got {}", o.norm_type);
  const bool inf = std::isinf(o.norm_type);
  double acc = 0.0;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    KILN_CHECK(g.dtype() == kF32 || g.dtype() == kF64, op, "gradients must be f32 or f64, got {}", name(g.dtype()));
    Tensor c = contiguous(g);
    double part = g.dtype() == kF64 ? accumulate(c.data<double>(), c.numel(), o.norm_type)
                                    : accumulate(c.data<float>(), c.numel(), o.norm_type);
    acc = inf ? std::max(acc, part) : acc + part;
  }
  double norm = inf ? acc : std::pow(acc, 1.0 / o.norm_type);
  KILN_CHECK(!o.error_if_nonfinite || std::isfinite(norm), op,
             "the total {}-norm of the gradients is {}: clipping would make them nan (error_if_nonfinite)",
             o.norm_type, norm);
  return norm;
}

// The factor the gradients are scaled by: PyTorch's clamp(max_norm / (norm + 1e-6), max=1).
double clip_coefficient(const char* op, double max_norm, double norm) {
  KILN_CHECK(max_norm >= 0.0 && std::isfinite(max_norm), op, "max_norm must be finite and >= 0, got {}", max_norm);
  return std::min(1.0, max_norm / (norm + 1e-6));
}

std::vector<Tensor> live_grads(const nn::ParameterList& params) {
  std::vector<Tensor> out;
  for (const nn::Parameter& p : params) out.push_back(p.grad());
  return out;
}

}  // namespace

std::pair<nn::Gradients, double> clip_grad_norm(const nn::Gradients& grads, double max_norm, const ClipOptions& o) {
  double norm = total_norm("clip_grad_norm", grads.tensors(), o);
  double coef = clip_coefficient("clip_grad_norm", max_norm, norm);
  if (coef >= 1.0) return {grads, norm};  // nan falls through to scaling, as in PyTorch
  NoGradGuard no_grad;
  std::vector<Tensor> out;
  for (const Tensor& g : grads.tensors()) out.push_back(g.defined() ? mul(g, coef) : g);
  return {nn::Gradients(grads.params(), std::move(out)), norm};
}

double clip_grad_norm_(const nn::ParameterList& params, double max_norm, const ClipOptions& o) {
  // Recorded (NOTE [Recorded launches] in kiln/core/replay.h) as one launch
  // that clips again at replay: the norm, and whether to scale, depend on
  // that step's gradients, read from the live parameters.
  if (replay::active()) [[unlikely]] {
    auto norm = std::make_shared<double>(0.0);
    replay::launch("clip_grad_norm_", [params, max_norm, o, norm] { *norm = clip_grad_norm_(params, max_norm, o); });
    return *norm;
  }
  std::vector<Tensor> grads = live_grads(params);
  double norm = total_norm("clip_grad_norm_", grads, o);
  double coef = clip_coefficient("clip_grad_norm_", max_norm, norm);
  if (coef < 1.0 || std::isnan(coef)) {
    NoGradGuard no_grad;
    for (const Tensor& g : grads)
      if (g.defined()) mul_(g, coef);
  }
  return norm;
}

nn::Gradients clip_grad_value(const nn::Gradients& grads, double clip_value) {
  KILN_CHECK(clip_value >= 0.0, "clip_grad_value", "clip_value must be >= 0, got {}", clip_value);
  NoGradGuard no_grad;
  std::vector<Tensor> out;
  for (const Tensor& g : grads.tensors()) out.push_back(g.defined() ? clamp(g, -clip_value, clip_value) : g);
  return nn::Gradients(grads.params(), std::move(out));
}

void clip_grad_value_(const nn::ParameterList& params, double clip_value) {
  KILN_CHECK(clip_value >= 0.0, "clip_grad_value_", "clip_value must be >= 0, got {}", clip_value);
  NoGradGuard no_grad;
  for (const Tensor& g : live_grads(params))
    if (g.defined()) clamp_(g, -clip_value, clip_value);
}

}  // namespace kiln::optim
