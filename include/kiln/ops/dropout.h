// Dropout with an explicit Generator (kiln keeps no global RNG).
#pragma once

#include "kiln/core/generator.h"
#include "kiln/core/tensor.h"

namespace kiln {

/// Inverted dropout: each element is kept with probability 1 - p and scaled
/// by 1 / (1 - p), else zeroed. Identity when !training or p == 0; all zeros
/// when p == 1. The mask is drawn from `gen` (one Philox word per element),
/// so it is the same for any thread count and replays from a saved state.
/// x floating; p in [0, 1].
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

}  // namespace kiln
