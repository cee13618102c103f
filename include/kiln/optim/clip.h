// Gradient clipping (O3, spec 000 "Losses and optimization").
//
//   auto [clipped, norm] = optim::clip_grad_norm(grads, 1.0);   // functional: grads untouched
//   double norm = optim::clip_grad_norm_(model.parameters(), 1.0);  // in place on each grad(), as PyTorch's
//
// The total norm is the p-norm of all gradients together (p = 2 by default;
// p = inf for the largest magnitude), computed in f64. When it exceeds
// max_norm every gradient is scaled by max_norm / (norm + 1e-6), as in
// torch.nn.utils.clip_grad_norm_; otherwise they are left as they are. The
// returned norm is the one before clipping.
#pragma once

#include <limits>
#include <utility>

#include "kiln/nn/transforms.h"

namespace kiln::optim {

struct ClipOptions {
  double norm_type = 2.0;           // p >= 1, or infinity
  bool error_if_nonfinite = false;  // kiln::Error when the norm is nan or inf (else the grads become nan)
};

std::pair<nn::Gradients, double> clip_grad_norm(const nn::Gradients& grads, double max_norm,
                                                const ClipOptions& options = {});
double clip_grad_norm_(const nn::ParameterList& params, double max_norm, const ClipOptions& options = {});

// Clamps every gradient element to [-clip_value, clip_value].
nn::Gradients clip_grad_value(const nn::Gradients& grads, double clip_value);
void clip_grad_value_(const nn::ParameterList& params, double clip_value);

}  // namespace kiln::optim
