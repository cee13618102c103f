// The language-model jobs' tests (GPT, MoE GPT, Mamba-3) start from one tiny
// run: a model of a few thousand parameters whose steps take a millisecond.
#pragma once

#include <ostream>
#include <string>

#include "apps/kiln/lm.h"

namespace kiln::app {

/// A 1-layer, width-32 GPT, 20 iterations of batch 8 x block 16, evaluated at 10 and 20.
inline LmOptions tiny_lm(const std::string& data, const std::string& out, std::ostream* log) {
  return {.data = data,
          .n_layer = 1,
          .n_head = 2,
          .n_embd = 32,
          .block_size = 16,
          .iters = 20,
          .batch_size = 8,
          .lr = 1e-2,
          .min_lr = 1e-3,
          .warmup = 2,
          .eval_interval = 10,
          .eval_iters = 4,
          .seed = 3,
          .out = out,
          .log = log,
          .tty = false};
}

}  // namespace kiln::app
