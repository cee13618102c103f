// Normalisation layers (SPECS L8-L9): BatchNorm1d, BatchNorm2d, LayerNorm, RMSNorm.
// Letters: B = batch, C = channels (num_features), L = length, H/W = spatial.
// Scales and shifts start at ones and zeros and are excluded from weight decay
// (M11). The layers hold f32 tensors; model.to(kF64) casts them.
//
//   nn::BatchNorm2d bn(16);                 // [B, 16, H, W]; model.eval() -> running stats
//   nn::LayerNorm ln({768});                // [B, T, 768]
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/nn/init.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  // running = (1 - momentum) * running + momentum * batch; nullopt: the
  // cumulative average (momentum 1 / num_batches_tracked), as PyTorch's None.
  std::optional<double> momentum = 0.1;
  bool affine = true;               // weight [C] (ones) and bias [C] (zeros)
  bool track_running_stats = true;  // false: no buffers, batch statistics in eval too
  // Spec 000 (L8): the running variance is updated with the population (biased)
  // batch variance, the one used to normalise. true: PyTorch's unbiased
  // n / (n - 1) update (needed to reproduce PyTorch's running_var).
  bool unbiased_running_var = false;
};

// The norms start as f32 ones and zeros; the constructors taking an Init make
// them in init.dtype instead, so a model threading one Init down (M10) is in
// one dtype throughout.

// Shared by BatchNorm1d and BatchNorm2d: parameters weight, bias; buffers
// running_mean [C] (zeros), running_var [C] (ones), num_batches_tracked (i64
// scalar, as PyTorch, so its state dicts load). Training (the default mode)
// normalises with the batch's statistics over every dim but C and updates the
// buffers; eval() uses the buffers.
//
// forward is const: the three members are the registered buffers themselves
// (tensor handles, so state_dict, load_state_dict and to() see and keep the
// same tensors), and training updates their values in place, never the
// module's structure. A shared BatchNorm updates one set of statistics.
class BatchNormBase : public Module {
 public:
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;

  int64_t num_features;
  BatchNormOptions options;
  Parameter weight;  // [C], undefined unless affine
  Parameter bias;    // [C]
  Tensor running_mean, running_var, num_batches_tracked;  // undefined unless track_running_stats

 protected:
  BatchNormBase(const char* layer, int64_t num_features, BatchNormOptions options);
  virtual void check_input(const Tensor& x) const = 0;
  const char* layer_;
};

// [B, C] or [B, C, L].
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {});
  // In init.dtype (the values are fixed: ones, zeros; nothing is drawn).
  BatchNorm1d(int64_t num_features, const Init& init, BatchNormOptions options = {});

 protected:
  void check_input(const Tensor& x) const override;
};

// [B, C, H, W].
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {});
  BatchNorm2d(int64_t num_features, const Init& init, BatchNormOptions options = {});

 protected:
  void check_input(const Tensor& x) const override;
};

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;  // weight (ones) and, with bias, bias (zeros)
  // false: weight only, no bias parameter and no "bias" state-dict key
  // (PyTorch >= 2.1's LayerNorm(bias=False); nanoGPT's bias=False).
  bool bias = true;
};

// [..., *normalized_shape] normalised over the trailing dims (biased variance):
// (x - mean) / sqrt(var + eps) * weight + bias; weight/bias of shape
// normalized_shape when elementwise_affine (bias only with options.bias).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  LayerNorm(Shape normalized_shape, const Init& init, double eps = 1e-5, bool elementwise_affine = true);
  LayerNorm(Shape normalized_shape, const LayerNormOptions& options);
  LayerNorm(Shape normalized_shape, const Init& init, const LayerNormOptions& options);
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;

  Shape normalized_shape;
  double eps;
  bool elementwise_affine;
  Parameter weight, bias;  // bias undefined without options.bias
};

// x / sqrt(mean(x^2 over the trailing dims) + eps) * weight. eps 1e-6 (the
// LLaMA/T5 convention; PyTorch >= 2.4's nn.RMSNorm defaults to finfo.eps).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, double eps = 1e-6, bool elementwise_affine = true);
  RMSNorm(Shape normalized_shape, const Init& init, double eps = 1e-6, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;

  Shape normalized_shape;
  double eps;
  bool elementwise_affine;
  Parameter weight;
};

}  // namespace kiln::nn
