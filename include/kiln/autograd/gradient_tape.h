// GradientTape (spec 002): an RAII scope that records the autograd tape for
// its lifetime, even inside a NoGradGuard, and runs backward from it.
//
//   kiln::GradientTape tape;
//   Tensor loss = sum(mul(w, x));
//   auto grads = tape.gradient(loss, {w});   // returned, w.grad() untouched
//   // or: tape.backward(loss);              // accumulated into w.grad()
#pragma once

#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/core/tensor.h"

namespace kiln {

struct GradientTapeOptions {
  /// Keep the recorded graph after backward()/gradient() so that they may be
  /// called again (TensorFlow's persistent tape); otherwise the first call
  /// frees it and a second one is an error.
  bool persistent = false;
};

class GradientTape {
 public:
  explicit GradientTape(GradientTapeOptions opts = {}) : opts_(opts) {}
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  /// Marks a leaf as tracked: x.requires_grad_(true). Returns x.
  const Tensor& watch(const Tensor& x) const;

  /// Backpropagates from `loss` into the grad() of every leaf that requires
  /// grad (loss.backward(gradient)). A non-scalar loss needs `gradient`.
  void backward(const Tensor& loss, const Tensor& gradient = {});

  /// d loss / d sources, returned rather than accumulated
  /// (torch.autograd.grad). A source that loss does not depend on is an error
  /// unless allow_unused (then its entry is undefined). create_graph records
  /// the gradient computation for higher derivatives.
  std::vector<Tensor> gradient(const Tensor& loss, const std::vector<Tensor>& sources, const Tensor& gradient = {},
                               bool allow_unused = false, bool create_graph = false);

  bool persistent() const { return opts_.persistent; }

 private:
  void use(const char* what);

  GradientTapeOptions opts_;
  bool used_ = false;       // a non-persistent tape runs backward once
  EnableGradGuard enable_;  // restores the previous grad mode at scope exit
};

}  // namespace kiln
