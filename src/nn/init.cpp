#include "kiln/nn/init.h"

#include <cmath>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/random.h"

namespace kiln::nn {

namespace init {
namespace {

Tensor uniform_tensor(const Shape& shape, double bound, Generator& gen, DType dtype) {
  return sub(mul(rand(shape, gen, {.dtype = dtype}), 2 * bound), bound);
}

Tensor normal_tensor(const Shape& shape, double mean, double std, Generator& gen, DType dtype) {
  return add(mul(randn(shape, gen, {.dtype = dtype}), std), mean);
}

// The Q factor [m, n] of a = QR (a [m, n] row-major, m >= n) with R's diagonal
// made positive: Householder reflections H_k = I - 2 v v^T (|v| = 1) reduce a
// to R (R_kk = alpha_k), then Q = H_0 ... H_{n-1} I[:, :n] with column k
// scaled by sign(alpha_k). That Q is unique for a full-rank a, so it equals
// torch.linalg.qr's Q after orthogonal_'s sign correction.
std::vector<double> positive_qr_q(std::vector<double> a, int64_t m, int64_t n) {
  std::vector<std::vector<double>> vs(size_t(n), std::vector<double>(size_t(m), 0.0));
  std::vector<double> sign(size_t(n), 1.0);
  for (int64_t k = 0; k < n; ++k) {
    double norm = 0;
    for (int64_t i = k; i < m; ++i) norm += a[i * n + k] * a[i * n + k];
    norm = std::sqrt(norm);
    const double x0 = a[k * n + k];
    const double alpha = x0 > 0 ? -norm : norm;  // away from x0: no cancellation in v = x - alpha e1
    std::vector<double>& v = vs[size_t(k)];
    for (int64_t i = k; i < m; ++i) v[i] = a[i * n + k];
    v[k] -= alpha;
    double vnorm = 0;
    for (int64_t i = k; i < m; ++i) vnorm += v[i] * v[i];
    vnorm = std::sqrt(vnorm);
    if (vnorm > 0)
      for (int64_t i = k; i < m; ++i) v[i] /= vnorm;
    for (int64_t j = k; j < n; ++j) {  // a[k:, k:] -= 2 v (v^T a[k:, k:])
      double d = 0;
      for (int64_t i = k; i < m; ++i) d += v[i] * a[i * n + j];
      for (int64_t i = k; i < m; ++i) a[i * n + j] -= 2 * v[i] * d;
    }
    sign[size_t(k)] = a[k * n + k] < 0 ? -1.0 : 1.0;
  }
  std::vector<double> q(size_t(m * n), 0.0);
  for (int64_t i = 0; i < n; ++i) q[i * n + i] = 1.0;
  for (int64_t k = n - 1; k >= 0; --k) {  // q[k:, :] -= 2 v (v^T q[k:, :])
    const std::vector<double>& v = vs[size_t(k)];
    for (int64_t j = 0; j < n; ++j) {
      double d = 0;
      for (int64_t i = k; i < m; ++i) d += v[i] * q[i * n + j];
      for (int64_t i = k; i < m; ++i) q[i * n + j] -= 2 * v[i] * d;
    }
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) q[i * n + j] *= sign[size_t(j)];
  return q;
}

void check_fan(const char* op, Fan fan) {
  KILN_CHECK(fan.in > 0 && fan.out > 0, op, "fan_in {} and fan_out {} must be positive", fan.in, fan.out);
}

}  // namespace

Initializer fan_in_uniform() {
  return [](const Shape& s, Fan fan, Generator& g, DType dt) {
    check_fan("init.fan_in_uniform", fan);
    return uniform_tensor(s, 1.0 / std::sqrt(double(fan.in)), g, dt);
  };
}

Initializer kaiming_uniform(double a) {
  return [a](const Shape& s, Fan fan, Generator& g, DType dt) {
    check_fan("init.kaiming_uniform", fan);
    return uniform_tensor(s, std::sqrt(6.0 / ((1 + a * a) * double(fan.in))), g, dt);
  };
}

Initializer kaiming_normal(double a) {
  return [a](const Shape& s, Fan fan, Generator& g, DType dt) {
    check_fan("init.kaiming_normal", fan);
    return normal_tensor(s, 0.0, std::sqrt(2.0 / ((1 + a * a) * double(fan.in))), g, dt);
  };
}

Initializer xavier_uniform(double gain) {
  return [gain](const Shape& s, Fan fan, Generator& g, DType dt) {
    check_fan("init.xavier_uniform", fan);
    return uniform_tensor(s, gain * std::sqrt(6.0 / double(fan.in + fan.out)), g, dt);
  };
}

Initializer xavier_normal(double gain) {
  return [gain](const Shape& s, Fan fan, Generator& g, DType dt) {
    check_fan("init.xavier_normal", fan);
    return normal_tensor(s, 0.0, gain * std::sqrt(2.0 / double(fan.in + fan.out)), g, dt);
  };
}

Initializer lecun_normal() {
  return [](const Shape& s, Fan fan, Generator& g, DType dt) {
    check_fan("init.lecun_normal", fan);
    return normal_tensor(s, 0.0, 1.0 / std::sqrt(double(fan.in)), g, dt);
  };
}

Initializer orthogonal(double gain) {
  KILN_CHECK(std::isfinite(gain), "init.orthogonal", "gain must be finite, got {}", gain);
  return [gain](const Shape& s, Fan, Generator& g, DType dt) {
    KILN_CHECK(s.size() >= 2, "init.orthogonal", "needs a weight of 2 or more dims, got shape {}", to_string(s));
    const int64_t rows = s[0];
    int64_t cols = 1;
    for (size_t i = 1; i < s.size(); ++i) cols *= s[i];
    if (rows == 0 || cols == 0) return kiln::zeros(s, {.dtype = dt});
    std::vector<double> a = randn({rows, cols}, g, {.dtype = kF64}).to_vector<double>();
    const bool wide = rows < cols;  // factor the transpose: Q gets min(rows, cols) orthonormal columns
    const int64_t m = wide ? cols : rows, n = wide ? rows : cols;
    if (wide) {
      std::vector<double> t(a.size());
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = a[i * cols + j];
      a = std::move(t);
    }
    std::vector<double> q = positive_qr_q(std::move(a), m, n);
    std::vector<double> w(size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) w[i * cols + j] = gain * (wide ? q[j * n + i] : q[i * n + j]);
    return tensor(w, s).to(dt);
  };
}

Initializer uniform(double low, double high) {
  KILN_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high, "init.uniform",
             "needs finite low <= high, got [{}, {}]", low, high);
  return [low, high](const Shape& s, Fan, Generator& g, DType dt) {
    return add(mul(rand(s, g, {.dtype = dt}), high - low), low);
  };
}

Initializer normal(double mean, double std) {
  KILN_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0, "init.normal",
             "needs finite mean and std >= 0, got mean {} std {}", mean, std);
  return [mean, std](const Shape& s, Fan, Generator& g, DType dt) { return normal_tensor(s, mean, std, g, dt); };
}

Initializer constant(double value) {
  return [value](const Shape& s, Fan, Generator&, DType dt) { return full(s, value, {.dtype = dt}); };
}

Initializer zeros() { return constant(0.0); }
Initializer ones() { return constant(1.0); }

}  // namespace init

Parameter Init::make(const Initializer& fn, const Shape& shape, Fan fan, bool decay) const {
  KILN_CHECK(rngs != nullptr, "Init", "no Rngs to draw parameters from");
  KILN_CHECK(bool(fn), "Init", "empty initializer for a parameter of shape {}", to_string(shape));
  KILN_CHECK(is_floating(dtype), "Init", "parameters are floating point, got dtype {}", name(dtype));
  Generator gen = rngs->next("params");
  Tensor value = fn(shape, fan, gen, dtype);
  KILN_CHECK(value.defined() && value.shape() == shape && value.dtype() == dtype, "Init",
             "initializer returned {} for a parameter of shape {} {}",
             describe(value),
             to_string(shape), name(dtype));
  return Parameter(value, decay);
}

}  // namespace kiln::nn
