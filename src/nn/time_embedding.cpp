#include "kiln/nn/time_embedding.h"

#include <cmath>

#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/linear.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/shape.h"

namespace kiln::nn {

namespace {
constexpr const char* kSin = "SinusoidalTimeEmbedding";
}

SinusoidalTimeEmbedding::SinusoidalTimeEmbedding(int64_t dim_, double max_period_, double time_scale_, DType dtype_)
    : dim(dim_), max_period(max_period_), time_scale(time_scale_), dtype(dtype_) {
  KILN_CHECK(dim >= 2, kSin, "dim must be at least 2, got {}", dim);
  KILN_CHECK(max_period > 0 && std::isfinite(max_period), kSin, "max_period must be positive, got {}", max_period);
  KILN_CHECK(std::isfinite(time_scale) && time_scale > 0, kSin, "time_scale must be positive, got {}", time_scale);
  KILN_CHECK(is_floating(dtype), kSin, "dtype must be floating, got {}", name(dtype));
  const int64_t half = dim / 2;
  freqs.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) freqs[size_t(i)] = std::exp(-std::log(max_period) * double(i) / double(half));
}

Tensor SinusoidalTimeEmbedding::forward(const Tensor& t) const {
  KILN_CHECK(t.defined() && t.dim() == 1 && is_floating(t.dtype()), kSin, "t {} {} must be a floating [B]",
             t.defined() ? to_string(t.shape()) : "undefined", t.defined() ? name(t.dtype()) : "");
  const std::vector<double> tv = t.to_vector<double>();
  const int64_t B = t.size(0), half = dim / 2;
  std::vector<double> out(static_cast<size_t>(B * dim), 0.0);  // the odd column stays 0
  for (int64_t b = 0; b < B; ++b) {
    const double s = time_scale * tv[size_t(b)];
    double* row = out.data() + b * dim;
    for (int64_t i = 0; i < half; ++i) {
      const double a = s * freqs[size_t(i)];
      row[i] = std::cos(a);
      row[half + i] = std::sin(a);
    }
  }
  return kiln::to(tensor(out, {B, dim}), dtype);
}

std::string SinusoidalTimeEmbedding::extra_repr() const {
  return fmt::format("dim={}, max_period={}, time_scale={}", dim, max_period, time_scale);
}

TimestepEmbedding::TimestepEmbedding(int64_t hidden, const Init& init, int64_t frequency_dim, double max_period,
                                     double time_scale)
    : hidden_size(hidden), sinusoid(frequency_dim, max_period, time_scale, init.dtype) {
  KILN_CHECK(hidden > 0, "TimestepEmbedding", "hidden_size must be positive, got {}", hidden);
  mlp = register_module("mlp", Sequential(Linear(frequency_dim, hidden, init), SiLU(), Linear(hidden, hidden, init)));
}

Tensor TimestepEmbedding::forward(const Tensor& t) const { return mlp->forward(to_compute(sinusoid.forward(t))); }

std::string TimestepEmbedding::extra_repr() const {
  return fmt::format("hidden_size={}, frequency_dim={}, time_scale={}", hidden_size, sinusoid.dim,
                     sinusoid.time_scale);
}

}  // namespace kiln::nn
