#include "kiln/optim/muon.h"

#include <algorithm>
#include <cmath>

#include "kiln/ops/binary.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/optim/fused_updates.h"
#include "src/optim/dispatch.h"

namespace kiln::optim {

void MuonOptions::validate(const char* op) const {
  check_non_negative(op, "lr", lr);
  check_unit_interval(op, "momentum", momentum);
  check_non_negative(op, "weight_decay", weight_decay);
  check_non_negative(op, "eps", eps);
  KILN_CHECK(ns_steps >= 1 && ns_steps <= 100, op, "ns_steps must be in [1, 100], got {}", ns_steps);
}

Muon::Muon(nn::ParameterList params, const MuonOptions& options)
    : Muon(std::vector<ParamGroup>{{std::move(params)}}, options) {}
Muon::Muon(std::vector<ParamGroup> groups, const MuonOptions& defaults)
    : OptimizerWith("Muon", std::move(groups), defaults) {}

Tensor newton_schulz5(const Tensor& u, int64_t steps, double eps) {
  KILN_CHECK(u.defined() && u.dim() == 2, "newton_schulz5", "expects a rank-2 tensor, got {}",
             u.defined() ? to_string(u.shape()) : "undefined");
  KILN_CHECK(is_floating(u.dtype()), "newton_schulz5", "expects a floating tensor, got {}", name(u.dtype()));
  constexpr double a = 3.4445, b = -4.7750, c = 2.0315;
  // Iterate on the wide orientation: X X^T is then the smaller Gram matrix.
  const bool tall = u.size(0) > u.size(1);
  Tensor x = tall ? transpose(u, 0, 1) : u;
  x = div(x, add(norm(x), eps));
  for (int64_t k = 0; k < steps; ++k) {
    Tensor A = matmul(x, transpose(x, 0, 1));  // [r, r], r = min(rows, cols)
    Tensor B = add(mul(A, b), mul(matmul(A, A), c));
    x = add(mul(x, a), matmul(B, x));
  }
  return contiguous(tall ? transpose(x, 0, 1) : x);
}

void Muon::update(size_t group, const nn::Parameter& param, const Tensor& grad) {
  const MuonOptions& o = options_[group];
  Tensor& buf = zeros_state(param, "momentum_buffer");
  Tensor u = Tensor::empty(param.shape(), param.dtype(), param.value().device());
  const double decay = param.decay() ? o.weight_decay : 0.0;
  double scale = 1.0;
  backend::cpu::dispatch_only<float, double>(param.dtype(), [&]<class T>(type_tag<T>) {
    backend::cpu::muon_momentum<T>(grad.data<T>(), buf.data<T>(), u.data<T>(), param.numel(), o.momentum, o.nesterov);
  });
  if (param.value().dim() == 2) {
    u = newton_schulz5(u, o.ns_steps, o.eps);
    const double rows = double(param.shape()[0]), cols = double(param.shape()[1]);
    scale = o.match_adamw_rms ? 0.2 * std::sqrt(std::max(rows, cols)) : std::sqrt(std::max(1.0, rows / cols));
  }
  backend::cpu::dispatch_only<float, double>(param.dtype(), [&]<class T>(type_tag<T>) {
    backend::cpu::scaled_update<T>(param.value().data<T>(), u.data<T>(), param.numel(), 1.0 - o.lr * decay, o.lr * scale);
  });
}

}  // namespace kiln::optim
