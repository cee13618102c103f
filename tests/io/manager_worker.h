// What the CheckpointManager kill test and its worker (manager_worker.cpp) agree on.
#pragma once

#include <cmath>
#include <cstdint>

#include "kiln/io/checkpoint_manager.h"

namespace kiln::testing {

inline io::CheckpointManagerOptions manager_worker_options() { return {.keep_last = 2, .keep_best = true}; }

/// The metric saved with `step`: the fractional part of step * 0.618..., so a
/// new lowest value (a new best) comes now and then, ever more rarely.
inline double manager_metric(int64_t step) { return std::fmod(double(step) * 0.6180339887498949, 1.0); }

}  // namespace kiln::testing
