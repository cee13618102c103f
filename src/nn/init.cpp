#include "kiln/nn/init.h"

#include <cmath>

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
