// Random tensors from an explicit Generator (kiln keeps no global RNG): the
// values depend only on the generator's state, never on the thread count.
#pragma once

#include "kiln/core/generator.h"
#include "kiln/ops/creation.h"

namespace kiln {

/// Uniform on [0, 1).
Tensor rand(const Shape& shape, Generator& gen, TensorOptions opts = {});
/// Standard normal.
Tensor randn(const Shape& shape, Generator& gen, TensorOptions opts = {});
/// Integers uniform on [low, high); i64 unless opts say otherwise.
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen, TensorOptions opts = {.dtype = kI64});
/// 1 with probability p (elementwise tensor of probabilities in [0, 1]), else 0;
/// same dtype as p.
Tensor bernoulli(const Tensor& p, Generator& gen);
Tensor bernoulli(const Shape& shape, double p, Generator& gen, TensorOptions opts = {});
/// A random permutation of 0..n-1 (i64).
Tensor randperm(int64_t n, Generator& gen);
/// In place: uniform on [low, high) / normal(mean, std).
Tensor uniform_(const Tensor& x, double low, double high, Generator& gen);
Tensor normal_(const Tensor& x, double mean, double std, Generator& gen);

}  // namespace kiln
