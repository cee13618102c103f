// Initialisers, and Init: the one construction context threaded down a model.
//
// Spec 001 make[target, INIT]: the initializer is chosen once at the top and
// combinators pass it to their children; parameters are drawn at construction,
// with no separate re-initialisation pass. In kiln every layer constructor takes
// `const nn::Init&`, which converts implicitly from `Rngs&`, so
//
//   nn::Linear(784, 256, rngs)                       // defaults (L18)
//   nn::Init init(rngs);  init.weight = nn::init::xavier_uniform();
//   Mlp model(init);                                 // every layer below uses xavier
//
// Each parameter draws one generator from the "params" stream (spec 000:
// constructors consume Rngs(params=seed)).
#pragma once

#include <cstdint>
#include <functional>

#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/generator.h"
#include "kiln/core/rngs.h"
#include "kiln/core/shape.h"
#include "kiln/core/tensor.h"
#include "kiln/nn/parameter.h"

namespace kiln::nn {

// Fan of a weight: in = input features x receptive field (the layer's own rule,
// e.g. Linear [O, I] -> I; Conv2d [O, I/g, kH, kW] -> I/g * kH * kW).
struct Fan {
  int64_t in = 1;
  int64_t out = 1;
};

// Fills a new tensor of `shape`; gets the fan and a generator of its own.
using Initializer = std::function<Tensor(const Shape& shape, Fan fan, Generator& gen, DType dtype)>;

namespace init {
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)): spec 000's "fan-in-scaled uniform", and
// PyTorch's default for Linear/Conv weights (kaiming_uniform with a = sqrt(5)).
Initializer fan_in_uniform();
Initializer kaiming_uniform(double a = 0.0);  // bound sqrt(6 / ((1 + a^2) fan_in))
Initializer kaiming_normal(double a = 0.0);   // std sqrt(2 / ((1 + a^2) fan_in))
Initializer xavier_uniform(double gain = 1.0);
Initializer xavier_normal(double gain = 1.0);
Initializer lecun_normal();                    // std 1/sqrt(fan_in) (Flax's default)
// torch.nn.init.orthogonal_: a weight of rows = shape[0] and cols = the other
// dims' product (2+ dims) becomes gain * Q, with Q from the QR decomposition
// A = QR (R's diagonal made positive) of a [rows, cols] standard-normal A
// drawn in f64 (transposed first when rows < cols): orthonormal rows or
// columns, whichever are fewer, Haar-distributed. CleanRL's RL layers use it.
Initializer orthogonal(double gain = 1.0);
Initializer uniform(double low, double high);
Initializer normal(double mean = 0.0, double std = 1.0);
Initializer constant(double value);
Initializer zeros();
Initializer ones();
}  // namespace init

struct Init {
  Init(Rngs& rngs) : rngs(&rngs) {}  // NOLINT(google-explicit-constructor): threading reads naturally

  Rngs* rngs;
  Initializer weight = init::fan_in_uniform();  // linear / conv / recurrent weights
  Initializer bias = init::zeros();             // their biases
  Initializer embedding = init::normal(0.0, 1.0);  // embedding tables (PyTorch: N(0, 1))
  DType dtype = kF32;
  Device device = kCPU;

  // A parameter drawn by `fn` (or the weight/bias initializer) from the next "params" generator.
  Parameter make(const Initializer& fn, const Shape& shape, Fan fan, bool decay = true) const;
  Parameter make_weight(const Shape& shape, Fan fan) const { return make(weight, shape, fan, true); }
  Parameter make_bias(const Shape& shape, Fan fan) const { return make(bias, shape, fan, false); }
};

}  // namespace kiln::nn
