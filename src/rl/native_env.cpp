// The checks and output tensors shared by kiln's native environments.
#include "src/rl/native_env.h"

#include "kiln/core/error.h"

namespace kiln::rl::detail {

namespace {

/// [E, *shape]
Shape batch_shape(int64_t num_envs, const Shape& shape) {
  Shape out{num_envs};
  for (int64_t d : shape) out.push_back(d);
  return out;
}

}  // namespace

void check_actions(const char* op, const EnvSpec& spec, int64_t num_envs, bool was_reset, const Tensor& actions) {
  KILN_CHECK(was_reset, op, "{} was stepped before reset(): call reset(seed) first", spec.name);
  const std::string expected =
      fmt::format("{} {}", kiln::to_string(batch_shape(num_envs, spec.action.shape)), name(spec.action.dtype));
  KILN_CHECK(actions.defined(), op, "actions is an undefined tensor; expected {} ({}'s action space {})", expected,
             spec.name, spec.action.to_string());
  KILN_CHECK(spec.action.batch_matches(actions) && actions.size(0) == num_envs, op,
             "actions {} do not match {}'s action space {} for {} copies: expected {}", describe(actions), spec.name,
             spec.action.to_string(), num_envs, expected);
}

void check_state(const char* op, int64_t num_envs, bool was_reset, const Tensor& state, int64_t width,
                 const char* fields) {
  KILN_CHECK(was_reset, op, "called before reset(): call reset(seed) first");
  KILN_CHECK(state.defined() && state.dtype() == kF64 && state.shape() == Shape({num_envs, width}), op,
             "state must be [{}, {}] f64 ({} per copy), got {}", num_envs, width, fields, describe(state));
}

Transition empty_transition(const EnvSpec& spec, int64_t num_envs) {
  const Shape obs_shape = batch_shape(num_envs, spec.observation.shape);
  return Transition{.obs = Tensor::empty(obs_shape, kF32),
                    .reward = Tensor::empty({num_envs}, kF32),
                    .terminated = Tensor::empty({num_envs}, kBool),
                    .truncated = Tensor::empty({num_envs}, kBool),
                    .final_obs = Tensor::empty(obs_shape, kF32)};
}

}  // namespace kiln::rl::detail
