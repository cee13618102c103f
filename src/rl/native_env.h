// What kiln's native environments (CartPole, Pendulum) share: the checks a
// step makes before it touches any state, the uniform draws of a reset, and
// the step's output tensors. Letters: E environments.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "kiln/core/generator.h"
#include "kiln/rl/env.h"

namespace kiln::rl::detail {

/// n values uniform on [lo[k], hi[k]) from `gen`, drawn as uniform_ draws an
/// [n] f64 tensor: value k from the 53 high bits of stream words (2k, 2k + 1),
/// lo + (hi - lo) * u, kept below hi. Advances gen by ceil(n / 2) blocks.
inline void draw_uniform(Generator& gen, int n, const double* lo, const double* hi, double* out) {
  const uint64_t first = gen.advance(uint64_t(n + 1) / 2);
  for (int k = 0; k < n; ++k) {
    const auto w = gen.block(first + uint64_t(k) / 2);
    const int j = 2 * (k % 2);
    const double u = double(((uint64_t(w[j + 1]) << 32) | w[j]) >> 11) * 0x1p-53;
    const double v = lo[k] + (hi[k] - lo[k]) * u;
    out[k] = v < hi[k] ? v : std::nextafter(hi[k], lo[k]);
  }
}

/// Throws "[op] ..." unless reset() has run and `actions` is [E, *A] with
/// the action space's dtype. Value checks are the environment's own.
void check_actions(const char* op, const EnvSpec& spec, int64_t num_envs, bool was_reset, const Tensor& actions);

/// Throws "[op] ..." unless reset() has run and `state` is [E, width] f64;
/// `fields` names the columns ("x, x_dot, theta, theta_dot").
void check_state(const char* op, int64_t num_envs, bool was_reset, const Tensor& state, int64_t width,
                 const char* fields);

/// A step's outputs, uninitialised: obs and final_obs [E, *O] f32, reward
/// [E] f32, terminated and truncated [E] bool.
Transition empty_transition(const EnvSpec& spec, int64_t num_envs);

}  // namespace kiln::rl::detail
