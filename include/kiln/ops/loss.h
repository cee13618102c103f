// Losses as fused ops (SPECS F1-F4): cross-entropy, masked cross-entropy,
// binary cross-entropy on logits and on probabilities, mse, l1, smooth l1.
// Prediction and target shapes must match exactly (PyTorch broadcasts some
// with a warning; kiln refuses, naming both shapes).
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln {

/// How per-element losses are combined, as PyTorch's reduction='none'|'sum'|'mean'.
enum class Reduction { None, Sum, Mean };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;
  /// The class axis of logits: last by default (spec 000); 1 for PyTorch's [N, C, d1, ...].
  int64_t class_dim = -1;
  /// Targets equal to this are skipped (zero loss and gradient; mean divides
  /// by the count of the others). PyTorch's default -100.
  int64_t ignore_index = -100;
  /// PyTorch's label_smoothing in [0, 1]: the target distribution becomes
  /// (1 - s) * onehot + s / C.
  double label_smoothing = 0.0;
  /// PyTorch's per-class weight [C] (logits' dtype): row r counts w[t_r]
  /// times, and mean divides by the sum of w[t_r] over counted rows. Not
  /// combinable with label_smoothing; no gradient flows to it (as in PyTorch).
  Tensor weight = Tensor();
};

/// Cross-entropy of raw logits [..., C, ...] against integer class targets
/// (i32/i64, logits' shape without the class dim). Fused: one pass per row
/// for logsumexp and the picked logit; the backward is softmax - onehot.
/// A target outside [0, C) (other than ignore_index) is an error.
///   Tensor loss = cross_entropy(logits, targets);             // logits [B, C], targets [B]
///   Tensor l = cross_entropy(x, t, {.reduction = Reduction::Sum, .class_dim = 1});
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& opts = {});

/// Masked cross-entropy (SPECS F2): cross_entropy with `mask` (bool or
/// floating, targets' shape) weighing each position; mean divides by the sum of
/// the mask over non-ignored positions. An all-masked batch gives loss 0 and
/// gradient 0. Its own name, not a cross_entropy overload: PyTorch's third
/// argument of cross_entropy is the per-class weight, and `cross_entropy(x, t, {})`
/// would not say which one is meant.
///   Tensor loss = masked_cross_entropy(logits, targets, valid);  // logits [B, T, V], targets / valid [B, T]
Tensor masked_cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& mask,
                            const CrossEntropyOptions& opts = {});

/// Stable BCE on logits: max(x, 0) - x * y + log1p(exp(-|x|)), with PyTorch's
/// pos_weight p (loss = (1 - y) x + (1 + (p - 1) y) softplus(-x)). weight and
/// pos_weight broadcast to logits' shape (pos_weight usually [C], the last
/// dim). Targets are differentiable too, as in PyTorch.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets, const Tensor& weight = {},
                                        const Tensor& pos_weight = {}, Reduction reduction = Reduction::Mean);

/// BCE on probabilities in [0, 1]: -(y log p + (1 - y) log(1 - p)) with each
/// log clamped to >= -100 (PyTorch), times the optional weight.
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& targets, const Tensor& weight = {},
                            Reduction reduction = Reduction::Mean);

/// (x - y)^2, |x - y|, and smooth l1 (0.5 d^2 / beta where |d| < beta, else
/// |d| - 0.5 beta; beta 0 is l1), reduced.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);

}  // namespace kiln
