// Linear (L1): [..., I] -> [..., O], weight [O, I] (PyTorch's layout), bias [O].
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/nn/init.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct QuantizedTensor;  // kiln/nn/quantized.h

class Linear : public Module {
 public:
  // Weight from init.weight with fan_in = in_features (L18), bias from init.bias
  // (zeros by default) and excluded from weight decay (M11).
  Linear(int64_t in_features, int64_t out_features, const Init& init, bool bias = true);

  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;

  int64_t in_features;
  int64_t out_features;
  Parameter weight;  // [out_features, in_features]
  Parameter bias;    // [out_features], undefined without bias
  // Set by nn::quantize(module, ...) (kiln/nn/quantized.h): with grad mode off,
  // forward multiplies by this quantized copy of `weight` instead.
  std::shared_ptr<const QuantizedTensor> quantized;
};

}  // namespace kiln::nn
