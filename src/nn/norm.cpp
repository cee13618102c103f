// BatchNorm1d/2d, LayerNorm, RMSNorm: parameters, buffers, checks; the fused
// kernels are in ops/norm.
#include "kiln/nn/norm.h"

#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/norm.h"
#include "src/nn/layer_error.h"

namespace kiln::nn {

namespace {

std::string shape_tuple(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

void check_normalized_shape(const char* layer, const Shape& shape, double eps) {
  KILN_CHECK(!shape.empty(), layer, "normalized_shape must have at least one dim");
  for (int64_t s : shape) KILN_CHECK(s > 0, layer, "normalized_shape {} must be positive", to_string(shape));
  KILN_CHECK(eps >= 0, layer, "eps must be non-negative, got {}", eps);
}

// x [..., *shape]: its trailing dims must equal `shape`.
void check_trailing(const char* layer, const Tensor& x, const Shape& shape) {
  KILN_CHECK(x.defined(), layer, "input is undefined");
  bool ok = x.dim() >= int64_t(shape.size());
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = x.shape()[x.shape().size() - shape.size() + i] == shape[i];
  KILN_CHECK(ok, layer, "input {} does not end in normalized_shape {}", to_string(x.shape()), to_string(shape));
}

// Mixed precision: the dtype a norm computes in, its parameters' (or buffers')
// when it has them; without them f32 at least (bf16 statistics would lose
// precision; an f64 input stays f64).
DType norm_dtype(const Tensor& param, const Tensor& x) {
  return param.defined() ? param.dtype() : promote_types(x.dtype(), kF32);
}

}  // namespace

// ---- BatchNorm ----

BatchNormBase::BatchNormBase(const char* layer, int64_t c, BatchNormOptions o)
    : num_features(c), options(o), layer_(layer) {
  KILN_CHECK(c > 0, layer, "num_features must be positive, got {}", c);
  KILN_CHECK(o.eps >= 0, layer, "eps must be non-negative, got {}", o.eps);
  KILN_CHECK(!o.momentum || (*o.momentum >= 0 && *o.momentum <= 1), layer, "momentum must be in [0, 1], got {}",
             o.momentum.value_or(0));
  if (o.affine) {
    weight = register_parameter("weight", ones({c}), /*decay=*/false);
    bias = register_parameter("bias", zeros({c}), /*decay=*/false);
  }
  if (o.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = kI64}));
  }
}

Tensor BatchNormBase::forward(const Tensor& x_in) const {
  check_input(x_in);
  // Mixed precision: statistics in f32, output in the compute dtype (docs/mixed_precision.md).
  const Tensor x = to_precise(x_in, norm_dtype(weight.defined() ? weight : running_mean, x_in));
  KILN_CHECK(is_floating(x.dtype()), layer_, "input {} has dtype {}, expected a floating dtype", to_string(x.shape()),
             name(x.dtype()));
  const bool use_batch_stats = is_training() || !options.track_running_stats;
  if (use_batch_stats)
    KILN_CHECK(x.numel() / num_features > 1, layer_,
               "input {} has 1 value per channel; training needs more than one", to_string(x.shape()));
  double momentum = options.momentum.value_or(0.0);
  const bool update = is_training() && options.track_running_stats;
  if (update) {
    // The registered counter buffer, never differentiated: incremented in
    // place like the running stats (which batch_norm updates below).
    NoGradGuard no_grad;
    add_(num_batches_tracked, Scalar(int64_t{1}));
    if (!options.momentum) momentum = 1.0 / double(num_batches_tracked.item<int64_t>());
  }
  ::kiln::BatchNormOptions op{.momentum = momentum, .eps = options.eps,
                              .unbiased_running_var = options.unbiased_running_var};
  return to_compute(in_layer(layer_, [&] {
    if (use_batch_stats)
      return batch_norm(x, update ? running_mean : Tensor(), update ? running_var : Tensor(), weight, bias, true, op);
    return batch_norm(x, running_mean, running_var, weight, bias, false, op);
  }));
}

std::string BatchNormBase::extra_repr() const {
  std::string s = fmt::format("{}, eps={}, momentum=", num_features, options.eps);
  s += options.momentum ? fmt::format("{}", *options.momentum) : "none";
  s += fmt::format(", affine={}, track_running_stats={}", options.affine, options.track_running_stats);
  if (options.unbiased_running_var) s += ", unbiased_running_var=true";
  return s;
}

BatchNorm1d::BatchNorm1d(int64_t c, BatchNormOptions o) : BatchNormBase("BatchNorm1d", c, o) {}

void BatchNorm1d::check_input(const Tensor& x) const {
  KILN_CHECK(x.defined(), "BatchNorm1d", "input is undefined");
  KILN_CHECK(x.dim() == 2 || x.dim() == 3, "BatchNorm1d", "input {} must be [B, C] or [B, C, L]",
             to_string(x.shape()));
  KILN_CHECK(x.shape()[1] == num_features, "BatchNorm1d", "input {} has {} channels, expected {} (num_features)",
             to_string(x.shape()), x.shape()[1], num_features);
}

BatchNorm2d::BatchNorm2d(int64_t c, BatchNormOptions o) : BatchNormBase("BatchNorm2d", c, o) {}

void BatchNorm2d::check_input(const Tensor& x) const {
  KILN_CHECK(x.defined(), "BatchNorm2d", "input is undefined");
  KILN_CHECK(x.dim() == 4, "BatchNorm2d", "input {} must be [B, C, H, W]", to_string(x.shape()));
  KILN_CHECK(x.shape()[1] == num_features, "BatchNorm2d", "input {} has {} channels, expected {} (num_features)",
             to_string(x.shape()), x.shape()[1], num_features);
}

// ---- LayerNorm ----

LayerNorm::LayerNorm(Shape shape, double e, bool affine)
    : LayerNorm(std::move(shape), LayerNormOptions{.eps = e, .elementwise_affine = affine}) {}

LayerNorm::LayerNorm(Shape shape, const LayerNormOptions& o)
    : normalized_shape(std::move(shape)), eps(o.eps), elementwise_affine(o.elementwise_affine) {
  check_normalized_shape("LayerNorm", normalized_shape, eps);
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape), /*decay=*/false);
    if (o.bias) bias = register_parameter("bias", zeros(normalized_shape), /*decay=*/false);
  }
}

Tensor LayerNorm::forward(const Tensor& x) const {
  check_trailing("LayerNorm", x, normalized_shape);
  // Mixed precision: statistics and affine in f32, output in the compute dtype.
  return to_compute(in_layer(
      "LayerNorm", [&] { return layer_norm(to_precise(x, norm_dtype(weight, x)), normalized_shape, weight, bias, eps); }));
}

std::string LayerNorm::extra_repr() const {
  std::string s = fmt::format("{}, eps={}, elementwise_affine={}", shape_tuple(normalized_shape), eps, elementwise_affine);
  if (elementwise_affine && !bias.defined()) s += ", bias=false";
  return s;
}

// ---- RMSNorm ----

RMSNorm::RMSNorm(Shape shape, double e, bool affine) : normalized_shape(std::move(shape)), eps(e), elementwise_affine(affine) {
  check_normalized_shape("RMSNorm", normalized_shape, eps);
  if (affine) weight = register_parameter("weight", ones(normalized_shape), /*decay=*/false);
}

Tensor RMSNorm::forward(const Tensor& x) const {
  check_trailing("RMSNorm", x, normalized_shape);
  return to_compute(
      in_layer("RMSNorm", [&] { return rms_norm(to_precise(x, norm_dtype(weight, x)), normalized_shape, weight, eps); }));
}

std::string RMSNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", shape_tuple(normalized_shape), eps, elementwise_affine);
}

// ---- the same in init.dtype ----

BatchNorm1d::BatchNorm1d(int64_t c, const Init& init, BatchNormOptions o) : BatchNorm1d(c, o) { to(init.dtype); }
BatchNorm2d::BatchNorm2d(int64_t c, const Init& init, BatchNormOptions o) : BatchNorm2d(c, o) { to(init.dtype); }
LayerNorm::LayerNorm(Shape shape, const Init& init, double e, bool affine) : LayerNorm(std::move(shape), e, affine) {
  to(init.dtype);
}
LayerNorm::LayerNorm(Shape shape, const Init& init, const LayerNormOptions& o) : LayerNorm(std::move(shape), o) {
  to(init.dtype);
}
RMSNorm::RMSNorm(Shape shape, const Init& init, double e, bool affine) : RMSNorm(std::move(shape), e, affine) {
  to(init.dtype);
}

}  // namespace kiln::nn
