// Dropout (SPECS L10): inverted dropout in training, identity in eval.
//
// Two sources of randomness:
//   y = drop(x, rngs);   // spec 000: draws a generator from rngs.next("dropout")
//   y = drop(x);         // for Sequential: the module's own generator, seeded at
//                        // construction; save/restore it with generator().state()
// Construct with the model's Init (Dropout(p, init)) so each Dropout gets its
// own generator from the Rngs: two Dropouts built with the same seed draw the
// same masks.
// Masks differ from PyTorch's (another RNG), so there is no PyTorch parity.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/core/generator.h"
#include "kiln/core/rngs.h"
#include "kiln/nn/init.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

class Dropout : public Module {
 public:
  // p in [0, 1]: the probability of zeroing an element; kept ones scale by 1 / (1 - p).
  explicit Dropout(double p = 0.5, uint64_t seed = 0);
  // The own generator drawn from init.rngs: its "dropout" stream if it has one,
  // else "params".
  Dropout(double p, const Init& init);

  // const like every forward: drawing a mask advances the module's own
  // generator, which is state (like a buffer), not structure.
  Tensor forward(const Tensor& x) const;
  Tensor forward(const Tensor& x, Rngs& rngs) const;
  std::string extra_repr() const override;
  std::vector<std::pair<std::string, Generator*>> own_generators() override { return {{"generator", &gen_}}; }

  Generator& generator() { return gen_; }
  const Generator& generator() const { return gen_; }

  double p;

 private:
  // mutable: the mask stream a const forward advances (saved by checkpoints
  // through own_generators, so resumed training draws the same masks).
  mutable Generator gen_;
};

}  // namespace kiln::nn
